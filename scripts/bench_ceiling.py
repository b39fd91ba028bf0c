"""The ceiling row of scripts/bench: librdkafka's own `rdkafka_performance`, built from the very
librdkafka sources rdkafka-sys vendors (so the same librdkafka tidegate links), configured as
rdkafka-sys configures it for tidegate's features, and its command lines and output parsing.

rdkafka-sys (build.rs, features "ssl" and "zstd" in Cargo.toml, default "libz") runs
`./configure --enable-ssl --disable-gssapi --disable-curl --enable-zstd --disable-lz4-ext` (zlib on
by default) and `make libs` with configure's default CFLAGS (-O2 -g). The only difference here:
rdkafka-sys links zstd from zstd-sys (built from source), this build the system's libzstd
(libzstd-dev); no benchmark here compresses with zstd (lz4 throughout). Where rdkafka-sys has
already built that tree under target/, the example is linked against its librdkafka.a instead, zstd
from zstd-sys included.
"""
import filecmp
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIGURE_FLAGS = ["--enable-ssl", "--disable-gssapi", "--disable-curl", "--enable-zstd", "--disable-lz4-ext"]
# Debian packages the configure flags above need (headers and static/shared libraries)
BUILD_PACKAGES = ["build-essential", "libssl-dev", "libzstd-dev", "zlib1g-dev"]
NAME = "librdkafka-ceiling"
TUNED = "librdkafka-ceiling-tuned"


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def rdkafka_sys_source():
    """(rdkafka-sys version, path of its vendored librdkafka) as cargo resolved them for this lockfile."""
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"], cwd=REPO,
                                     check=True, capture_output=True, text=True).stdout)
    for pkg in meta["packages"]:
        if pkg["name"] == "rdkafka-sys":
            return pkg["version"], os.path.join(os.path.dirname(pkg["manifest_path"]), "librdkafka")
    raise RuntimeError("rdkafka-sys is not in cargo metadata's package list (is rdkafka still a dependency?)")


def missing_packages():
    """The BUILD_PACKAGES not installed; a compiler and make found on PATH count as build-essential."""
    have_toolchain = shutil.which("cc") and shutil.which("make")
    return [p for p in BUILD_PACKAGES if not (p == "build-essential" and have_toolchain)
            and subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]


def ensure_rdkafka_performance():
    """The path of rdkafka_performance under .cache/rdkafka-perf/<rdkafka-sys version>/, built
    once and reused; and a description for the results file."""
    version, src = rdkafka_sys_source()
    home = os.path.join(REPO, ".cache", "rdkafka-perf", version)
    binary = os.path.join(home, "rdkafka_performance")
    info_path = os.path.join(home, "build.json")
    if not (os.path.exists(binary) and os.path.exists(info_path)):
        build_rdkafka_performance(src, home, binary, info_path)
    with open(info_path) as f:
        info = json.load(f)
    return binary, info


def built_by_rdkafka_sys(src):
    """A librdkafka tree rdkafka-sys has already configured and built from these very sources (its
    OUT_DIR under the target directory, any profile: the same `./configure` flags, -O2), or None.
    Only the example is then compiled against its librdkafka.a: seconds, where a build of its own
    takes a couple of minutes of two cores."""
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    header = os.path.join(src, "src", "rdkafka.h")
    outs = glob.glob(os.path.join(target, "*", "build", "rdkafka-sys-*", "out"))
    for out in sorted(outs, key=os.path.getmtime, reverse=True):
        built = os.path.join(out, "src", "librdkafka.a")
        same = os.path.join(out, "src", "rdkafka.h")
        if os.path.exists(built) and os.path.exists(same) and filecmp.cmp(header, same, shallow=False):
            return out
    return None


def build_rdkafka_performance(src, home, binary, info_path):
    if shutil.which("dpkg") and missing_packages():
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            sys.exit(f"bench: building rdkafka_performance needs {' '.join(missing_packages())} (apt-get install)")
        log("installing", *missing_packages())
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing_packages(),
                       check=True, capture_output=True)
    # mklove builds only in-tree (rdkafka-sys copies the sources into OUT_DIR for the same reason)
    tree = home + ".build"
    shutil.rmtree(tree, ignore_errors=True)
    built = built_by_rdkafka_sys(src)
    shutil.copytree(built or src, tree, symlinks=True)
    os.makedirs(home, exist_ok=True)
    build_log = os.path.join(home, "build.log")
    jobs = str(os.cpu_count() or 1)
    steps = [["make", "-C", "examples", "rdkafka_performance"]]
    if built:
        log(f"building rdkafka_performance against rdkafka-sys's librdkafka.a in {built} (log in {build_log})")
    else:
        steps[:0] = [["./configure"] + CONFIGURE_FLAGS, ["make", "-j", jobs, "-C", "src", "librdkafka.a"]]
        log(f"building rdkafka_performance from {src} into {home} (once; a few minutes; log in {build_log})")
    start = time.monotonic()
    with open(build_log, "w") as out:
        for cmd in steps:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            if subprocess.run(cmd, cwd=tree, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                with open(build_log) as f:
                    tail = f.read()[-3000:]
                raise RuntimeError(f"building rdkafka_performance: `{' '.join(cmd)}` failed in {tree}:\n{tail}")
    seconds = time.monotonic() - start
    version = subprocess.run([os.path.join(tree, "examples", "rdkafka_performance")], capture_output=True,
                             text=True).stderr
    m = re.search(r"librdkafka version (\S+)", version)
    os.replace(os.path.join(tree, "examples", "rdkafka_performance"), binary)
    shutil.rmtree(tree, ignore_errors=True)
    info = {"tool": "rdkafka_performance", "source": src, "librdkafka": m.group(1) if m else "unknown",
            "configure": CONFIGURE_FLAGS, "build_s": round(seconds, 1)}
    if built:
        info["librdkafka_a"] = "rdkafka-sys's build, " + os.path.relpath(built, REPO)
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    log(f"rdkafka_performance built in {seconds:.0f} s (librdkafka {info['librdkafka']})")


def consumer_command(perf, bootstrap, topic, partitions, records):
    """Reads every partition from the beginning with its own settings (queued.min.messages 1M: the
    largest prefetch queue; librdkafka's best case), into its callback, counting only. It stops at
    the expected count (-c) or, should records be missing, once every partition is at its end (-e),
    which the count check then reports."""
    cmd = [perf, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-c", str(records), "-e"]
    for p in range(partitions):
        cmd += ["-p", str(p)]
    return cmd


def producer_command(perf, bootstrap, topic, records, size, value):
    """Produces `records` copies of `value` (the datagen record with seq 0, cut or repeated to
    `size`) to partition 0 with tidegate's producer settings: acks=all, idempotence, lz4, linger 5 ms;
    librdkafka's defaults otherwise, as in tidegate's producer (rdkafka_performance sets
    message.send.max.retries 3 and retry.backoff.ms 500 itself: no retry happens in a clean run)."""
    return [perf, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-s", str(size), "-m", value,
            "-c", str(records), "-a", "-1", "-z", "lz4", "-X", "enable.idempotence=true", "-X", "linger.ms=5"]


def consumed(out_path):
    """Messages its final summary reports consumed ("% N messages (B bytes) consumed in ..."), or -1."""
    with open(out_path, errors="replace") as f:
        found = re.findall(r"% (\d+) messages \(\d+ bytes\) consumed in", f.read())
    return int(found[-1]) if found else -1


def delivered(out_path):
    """Messages its final summary reports delivered without failure ("N delivered (offset O, F
    failed)"), or -1 when any failed or the summary is missing."""
    with open(out_path, errors="replace") as f:
        found = re.findall(r"(\d+) delivered \(offset -?\d+, (\d+) failed\)", f.read())
    if not found or int(found[-1][1]) != 0:
        return -1
    return int(found[-1][0])


def own_rate(out_path):
    """The rate it reports itself: from its first message (consumer) or its start (producer) to
    the last, so without connecting and shutting down, which the bench's wall time includes
    (about 0.5 s to the first message on the local broker). For the record beside the wall-time
    figure, which is the one compared."""
    with open(out_path, errors="replace") as f:
        found = re.findall(r"(?:consumed|failed\)) in (\d+)ms: (\d+) msgs/s", f.read())
    return {"own_elapsed_ms": int(found[-1][0]), "own_records_per_s": int(found[-1][1])} if found else {}
