#!/usr/bin/env python3
"""Peak RSS of tidegate on a topic of values that compress well, under allocator settings and
producer batch sizes (docs/performance.md, "Fetch sizes, and data that compresses well").

  scripts/bench_memory.py prefill TOPIC PARTITIONS RECORDS BATCH_SIZE
      1 KiB JSON values of one repeated letter (67:1 with lz4, scripts/bench's "z" payload),
      produced by Kafka's ProducerPerformance with lz4 and `batch.size` BATCH_SIZE
  scripts/bench_memory.py run BIN TOPIC PARALLELISM null|file [MALLOC_CONF ...]
      three runs of `BIN run` reading TOPIC to its end, per MALLOC_CONF ("default": none added);
      prints wall time, peak RSS (wait4, as scripts/bench measures it) and CPU time. PROPS in the
      environment: TOML lines for [source.properties].

Against the broker at KAFKA_BOOTSTRAP_SERVERS (default 127.0.0.1:9092; scripts/kafka start).
"""
import importlib.machinery
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
loader = importlib.machinery.SourceFileLoader("bench", os.path.join(HERE, "bench"))
spec = importlib.util.spec_from_loader("bench", loader)
bench = importlib.util.module_from_spec(spec)
loader.exec_module(bench)
BOOT = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
TMP = tempfile.mkdtemp(prefix="tidegate-memory-")


def prefill(topic, partitions, records, batch_size):
    bench.prefill(BOOT, topic, int(partitions), 1024, int(records), TMP, compressible=True,
                  batch_size=int(batch_size))


def run(binary, topic, parallelism, sink, confs):
    out = os.path.join(TMP, "out.jsonl")
    sinks = {"null": '[sink]\ntype = "null"\n', "file": f'[sink]\ntype = "file"\npath = "{out}"\n'}
    props = os.environ.get("PROPS")
    config = os.path.join(TMP, "job.toml")
    with open(config, "w") as f:
        f.write(f'[job]\nparallelism = {parallelism}\n[source]\ntype = "kafka"\nbootstrap_servers = "{BOOT}"\n'
                f'topics = ["{topic}"]\nstopping_offsets = "latest"\n'
                + (f"[source.properties]\n{props}\n" if props else "") + sinks[sink])
    for conf in confs or ["default"]:
        env = dict(os.environ, RUST_LOG="warn")
        if conf != "default":
            env["MALLOC_CONF"] = conf
        rows = []
        for _ in range(3):
            if os.path.exists(out):
                os.remove(out)
            wall, cpu, rss, _, _ = bench.measure([binary, "run", "--no-progress", "--config", config], env=env)
            rows.append(f"{wall:.2f} s {rss:.1f} MiB cpu {cpu:.2f} s")
        print(f"{topic}, parallelism {parallelism}, {sink} sink, {conf}: " + "; ".join(rows), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "prefill":
        prefill(*sys.argv[2:6])
    elif len(sys.argv) >= 6 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:])
    else:
        sys.exit(__doc__)
