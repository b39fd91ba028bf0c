"""scripts/bench's verdicts on a results file: `--check` (the targets of issue 45, and what a smoke
run can show) and the helpers both it and `--plot` (scripts/bench_plot.py) share. Pure functions of
the results dict, so scripts/bench_check_test.py can feed them synthetic runs."""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CEILING = "librdkafka-ceiling"
RSS_BOUND_MIB = 64.0
# the compressible 1 KiB topic on 4 partitions (the matrix's 4x1024z): librdkafka decompresses whole
# batches, so it is the memory target's hard case
COMPRESSIBLE_RSS_BOUND_MIB = 48.0
# the targets are medians of this many rounds in one run
ROUNDS = 3
# the rows every run has (keep in step with consumer_runs, producer_runs and scaling_runs in
# scripts/bench): a row missing from a smoke run is a broken tool, not a choice
CONSUMER_ROWS = ["tidegate-null", "tidegate-json-eof", "tidegate-file", "tidegate-trading-day", "kcat",
                 "kcat-tuned", "kcat-json", "kcat-json-tuned", "kafka-consumer-perf", CEILING, CEILING + "-tuned"]
PRODUCER_ROWS = ["tidegate-datagen", "tidegate-datagen-exactly-once", "kafka-producer-perf",
                 "kafka-producer-perf-matched", "kcat-produce", CEILING]


def newest_results(smoke):
    """The newest bench/results-<time>.json (or -smoke.json): their names sort by time."""
    paths = sorted(p for p in glob.glob(os.path.join(REPO, "bench", "results-*.json"))
                   if p.endswith("-smoke.json") == smoke)
    if not paths:
        sys.exit(f"bench: no {'smoke ' if smoke else ''}results file in {os.path.join(REPO, 'bench')}")
    return paths[-1]


def workload(key):
    """(partitions, record bytes) of a consumer key such as "4 partitions, 100 B"."""
    m = re.match(r"(\d+) partitions, (\d+) B$", key)
    return (int(m.group(1)), int(m.group(2))) if m else None


def records_of(s):
    """The records a row's runs each handled: stored since the ceiling rows came; before, the fastest
    run's rate times its wall time."""
    if "records" in s:
        return s["records"]
    return round(s["records_per_s"][2] * min(r["wall_s"] for r in s["runs"]))


def ours(name):
    return name.startswith("tidegate")


def headline_consumer_key(report):
    """The 4-partition 100 B workload (the issue's 10M × 4 partitions), else None."""
    keys = [k for k in report.get("consumer", {}) if workload(k) == (4, 100)]
    return keys[0] if keys else None


class Verdicts:
    """The lines --check prints: ok, MISS (target, measured value, threshold, run file) or NOT
    MEASURED (the rows a target needs are absent: not a pass)."""

    def __init__(self, path):
        self.path = os.path.relpath(path, REPO) if os.path.isabs(path) else path
        self.lines = []  # (status, text)

    def add(self, status, target, measured, threshold, where):
        self.lines.append((status, f"{status}: {target}: measured {measured}, threshold {threshold}"
                                   f" ({where}); {self.path}"))

    def absent(self, target, why):
        self.lines.append(("NOT MEASURED", f"NOT MEASURED: {target}: {why}; {self.path}"))

    def failed(self):
        return [text for status, text in self.lines if status != "ok"]


def ratio_target(v, summary, where, target, mine, theirs, threshold):
    if not summary:
        return v.absent(target, f"no {where} workload in the run")
    if mine not in summary or theirs not in summary:
        missing = [n for n in (mine, theirs) if n not in summary]
        return v.absent(target, f"no {' or '.join(missing)} row in {where}")
    a, b = summary[mine]["records_per_s"][0], summary[theirs]["records_per_s"][0]
    ratio = a / b
    v.add("ok" if ratio >= threshold else "MISS", target, f"{ratio:.2f}× ({mine} {a:,.0f}/s, {theirs} {b:,.0f}/s)",
          f"≥ {threshold:.2f}×", f"{where}, {records_of(summary[mine]):,} records")


def rss_target(v, report):
    """Peak RSS ≤ 64 MiB for every tidegate row (the largest of its runs), everywhere."""
    target = f"tidegate peak RSS ≤ {RSS_BOUND_MIB:.0f} MiB everywhere"
    rows = [(part, key, name, s) for part in ("consumer", "producer", "scaling")
            for key, summary in report.get(part, {}).items() for name, s in summary.items() if ours(name)]
    if not rows:
        return v.absent(target, "no tidegate rows")
    worst = 0.0
    for part, key, name, s in rows:
        peak = max(r["rss_mib"] for r in s["runs"]) if s.get("runs") else s["peak_rss_mib"][2]
        worst = max(worst, peak)
        if peak > RSS_BOUND_MIB:
            v.add("MISS", target, f"{peak:.1f} MiB", f"≤ {RSS_BOUND_MIB:.0f} MiB", f"{part}: {key}, {name}")
    if worst <= RSS_BOUND_MIB:
        v.add("ok", target, f"at most {worst:.1f} MiB over {len(rows)} rows", f"≤ {RSS_BOUND_MIB:.0f} MiB",
              "every tidegate row")


def compressible_rss_target(v, report):
    """Peak RSS ≤ 48 MiB for every tidegate row on the compressible 1 KiB topic of 4 partitions."""
    target = f"tidegate peak RSS ≤ {COMPRESSIBLE_RSS_BOUND_MIB:.0f} MiB on 4 partitions of compressible 1 KiB"
    rows = [(key, name, s) for key, summary in report.get("consumer", {}).items()
            if key == "4 partitions, 1024 B, compressible" for name, s in summary.items() if ours(name)]
    if not rows:
        return v.absent(target, "no 4 partitions, 1024 B, compressible workload (--matrix 4x1024z)")
    for key, name, s in rows:
        peak = max(r["rss_mib"] for r in s["runs"]) if s.get("runs") else s["peak_rss_mib"][2]
        v.add("ok" if peak <= COMPRESSIBLE_RSS_BOUND_MIB else "MISS", target, f"{peak:.1f} MiB",
              f"≤ {COMPRESSIBLE_RSS_BOUND_MIB:.0f} MiB", f"{key}, {name}")


def check(report, path):
    """The targets of issue 45 on one full run: each the median of three rounds."""
    v = Verdicts(path)
    rounds = report.get("runs", 0)
    if rounds < ROUNDS:
        v.absent(f"medians of {ROUNDS} rounds", f"the run has {rounds} round(s) per tool (--runs {ROUNDS})")
    key = headline_consumer_key(report)
    summary = report.get("consumer", {}).get(key) if key else None
    where = key or "4 partitions, 100 B"
    ratio_target(v, summary, where, "reading: null ≥ 1.0 × the librdkafka ceiling", "tidegate-null", CEILING, 1.0)
    ratio_target(v, summary, where, "reading: null ≥ 1.3 × ConsumerPerformance", "tidegate-null",
                 "kafka-consumer-perf", 1.3)
    # the trading-day path's user-space CPU per record, at every consumer workload of that record
    # size; the kernel's part (the file sink's page cache, which the machine's state moves) apart
    for size, bound in ((100, 0.6), (1024, 1.8)):
        target = f"trading-day user CPU ≤ {bound} µs/record at {size} B"
        rows = [(k, s["tidegate-trading-day"]) for k, s in report.get("consumer", {}).items()
                if workload(k) and workload(k)[1] == size and "tidegate-trading-day" in s]
        if not rows:
            v.absent(target, f"no tidegate-trading-day row at {size} B")
        for k, s in rows:
            cpu = s["cpu_s_per_million"][0]  # s per million records = µs per record
            user = s.get("user_cpu_s_per_million")
            if not user:
                v.absent(target, f"{k}: the row has no user-space CPU (a run from before it was kept)")
                continue
            measured = f"{user[0]:.2f} µs/record ({cpu - user[0]:.2f} more in the kernel)"
            v.add("ok" if user[0] <= bound else "MISS", target, measured, f"≤ {bound} µs/record",
                  f"{k}, {records_of(s):,} records")
    produce = report.get("producer", {}).get("100 B")
    ratio_target(v, produce, "produce: 100 B", "producing: datagen ≥ 1.2 × kcat -P", "tidegate-datagen",
                 "kcat-produce", 1.2)
    ratio_target(v, produce, "produce: 100 B", "producing: datagen ≥ 0.85 × rdkafka_performance -P",
                 "tidegate-datagen", CEILING, 0.85)
    ratio_target(v, produce, "produce: 100 B", "producing: exactly-once ≥ 0.9 × at-least-once",
                 "tidegate-datagen-exactly-once", "tidegate-datagen", 0.9)
    rss_target(v, report)
    compressible_rss_target(v, report)
    return v


def check_smoke(report, path):
    """What a smoke run can show: every row present (the ceiling's too), every row's count matched,
    tidegate's peak RSS within the bound. Speed is not judged on a smoke run."""
    v = Verdicts(path)
    expected = {"consumer": CONSUMER_ROWS, "producer": PRODUCER_ROWS}
    for part in ("consumer", "producer", "scaling"):
        if not report.get(part):
            v.absent(f"{part} rows", f"no {part} workloads in the run")
        for key, summary in report.get(part, {}).items():
            for name in expected.get(part, []):
                if name not in summary:
                    v.add("MISS", "every row present", f"no {name} row", "the row present", f"{part}: {key}")
            for name, s in summary.items():
                records = records_of(s)
                for run in s.get("runs", []):
                    counted = run.get("counted", run.get("read_back"))
                    if counted is None:
                        v.absent("every count matched", f"{part}: {key}, {name}: no count stored")
                    elif counted != records:
                        v.add("MISS", "every count matched", f"{counted:,} records", f"{records:,}",
                              f"{part}: {key}, {name}")
    scaling_rows = {name for summary in report.get("scaling", {}).values() for name in summary}
    for name in ("tidegate-trading-day", "kcat-json-tuned", CEILING):
        if report.get("scaling") and name not in scaling_rows:
            v.add("MISS", "every row present", f"no {name} row", "the row present", "scaling")
    for part in ("latency", "rate"):
        if not report.get(part):
            v.absent(f"{part} measured", f"no {part} part in the run")
    if not v.failed():
        rows = sum(len(summary) for part in ("consumer", "producer", "scaling") for summary in report[part].values())
        v.lines.append(("ok", f"ok: every row present and every count matched ({rows} rows in consumer, producer, "
                              f"scaling; latency and rate measured); {v.path}"))
    rss_target(v, report)
    return v


def check_main(path, smoke):
    with open(path) as f:
        report = json.load(f)
    verdicts = (check_smoke if smoke else check)(report, path)
    for _, text in verdicts.lines:
        print(text)
    failed = verdicts.failed()
    print(f"bench --check{' --smoke' if smoke else ''}: {len(failed)} of {len(verdicts.lines)} "
          f"{'targets missed or not measured' if failed else 'checks failed'} ({path})", file=sys.stderr)
    return 1 if failed else 0
