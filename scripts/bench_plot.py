"""scripts/bench --plot: SVG charts from results files (throughput, CPU per record and peak RSS per
tool and workload, scaling with partitions, and the README's summary). matplotlib rather than
hand-written SVG: the charts need axes, log scales, error bars and legends, which matplotlib draws
in a few lines each; it is installed once, on demand, into .cache/bench-venv (pip, about 15 s)."""
import json
import math
import os
import re
import subprocess
import sys

import bench_report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VENV = os.path.join(REPO, ".cache", "bench-venv")
MATPLOTLIB = "matplotlib>=3.8,<4"


def ensure_matplotlib():
    """Import matplotlib, or install it into .cache/bench-venv and run this command again there."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        sys.exit(f"bench: matplotlib is missing from {VENV}; remove the directory to reinstall it")
    if not os.path.exists(python):
        print(f"bench: installing {MATPLOTLIB} into {VENV} (once, from PyPI)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", MATPLOTLIB], check=True)
    os.execv(python, [python] + sys.argv)


COLOURS = {
    # tidegate blue, another build purple, kcat orange, Kafka's own tools green, the ceiling dark grey
    "tidegate-null": "#08306b", "tidegate-json-eof": "#2171b5", "tidegate-file": "#6baed6",
    "tidegate-trading-day": "#4292c6", "tidegate-datagen": "#08306b", "tidegate-datagen-exactly-once": "#4292c6",
    "baseline-null": "#54278f", "baseline-trading-day": "#9e9ac8",
    "kcat": "#a63603", "kcat-tuned": "#e6550d", "kcat-json": "#fd8d3c", "kcat-json-tuned": "#fdae6b",
    "kcat-produce": "#e6550d",
    "kafka-consumer-perf": "#006d2c", "kafka-producer-perf": "#006d2c", "kafka-producer-perf-matched": "#41ab5d",
    bench_report.CEILING: "#252525", bench_report.CEILING + "-tuned": "#737373",
}


def colour(name):
    return COLOURS.get(name, "#2171b5" if name.startswith("tidegate") else "#969696")


def human(x):
    if x == 0:
        return "0"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.0f}k"
    if x == int(x):
        return f"{x:.0f}"
    return f"{x:.2f}" if x < 10 else f"{x:.0f}"


def panels(report):
    out = [(f"consume: {k}, {bench_report.records_of(next(iter(s.values()))):,} records", s)
           for k, s in report.get("consumer", {}).items() if s]
    out += [(f"produce: {k}, {bench_report.records_of(next(iter(s.values()))):,} records", s)
            for k, s in report.get("producer", {}).items() if s]
    return out


def bar_panels(plt, report, source, metric, xlabel, title, path, bound=None, fmt=human):
    """One panel per workload, a horizontal bar per tool: the median, whiskers min..max."""
    ps = panels(report)
    if not ps:
        return None
    cols = 2 if len(ps) > 1 else 1
    rows = math.ceil(len(ps) / cols)
    tallest = max(len(s) for _, s in ps)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, rows * (0.32 * tallest + 1.1) + 0.8), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[len(ps):]:
        ax.set_visible(False)
    for ax, (label, summary) in zip(axes.flat, ps):
        names = list(summary)
        med = [summary[n][metric][0] for n in names]
        lo = [summary[n][metric][0] - summary[n][metric][1] for n in names]
        hi = [summary[n][metric][2] - summary[n][metric][0] for n in names]
        y = range(len(names))
        ax.barh(y, med, xerr=[lo, hi], color=[colour(n) for n in names], error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.set_yticks(list(y), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ends = [summary[n][metric][2] for n in names]  # the label goes past the whisker
        top = max(ends + ([bound] if bound else []))
        ax.set_xlim(0, top * 1.2)
        ax.xaxis.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(lambda x, _: human(x)))
        for i, (m, end) in enumerate(zip(med, ends)):
            ax.text(end + top * 0.01, i, fmt(m), va="center", fontsize=7)
        if bound:
            ax.axvline(bound, color="#cb181d", linewidth=0.8, linestyle="--")
    fig.suptitle(f"{title} — {source}", fontsize=10)
    save(fig, path)
    return path


def scaling_chart(plt, report, source, path):
    """The scaling part: records/s, CPU per record and peak RSS against the partition count."""
    series = {}
    for key, summary in report.get("scaling", {}).items():
        m = re.match(r"(\d+) partitions(?:, parallelism (\d+))?$", key)
        if not m:
            continue
        for name, s in summary.items():
            label = name + (f", parallelism {m.group(2)}" if m.group(2) else "")
            series.setdefault((name, label), []).append((int(m.group(1)), s))
    if not series:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), layout="constrained")
    for (name, label), points in sorted(series.items(), key=lambda kv: kv[0][1]):
        points.sort(key=lambda p: p[0])
        xs = [p for p, _ in points]
        style = "--" if label.endswith("parallelism 2") else "-"
        for ax, metric in zip(axes, ("records_per_s", "cpu_s_per_million", "peak_rss_mib")):
            ax.plot(xs, [s[metric][0] for _, s in points], style, marker="o", color=colour(name), label=label)
    for ax, ylabel in zip(axes, ("records/s (median)", "CPU µs / record", "peak RSS MiB")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({p for pts in series.values() for p, _ in pts}))
        ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("partitions")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(lambda y, _: human(y)))
        ax.grid(alpha=0.3)
    axes[2].axhline(bench_report.RSS_BOUND_MIB, color="#cb181d", linewidth=0.8, linestyle="--")
    axes[2].set_ylim(top=max(axes[2].get_ylim()[1], bench_report.RSS_BOUND_MIB * 1.1))
    axes[2].set_ylabel("peak RSS MiB (dashed: tidegate's 64 MiB bound)")
    axes[0].legend(fontsize=8)
    records = bench_report.records_of(next(iter(next(iter(report["scaling"].values())).values())))
    fig.suptitle(f"scaling: the trading-day replay, 100 B records, {records:,} per topic — {source}", fontsize=10)
    save(fig, path)
    return path


def summary_chart(plt, report, source, path):
    """The README's chart: tidegate's null and trading-day reads beside kcat, ConsumerPerformance
    and librdkafka's ceiling on the 4-partition 100 B workload, and the producers beside kcat and
    the ceiling; each bar says its records/s and its ratio to the ceiling (or, in files from before
    the ceiling, to Kafka's own tool)."""
    key = bench_report.headline_consumer_key(report)
    consume = report.get("consumer", {}).get(key, {}) if key else {}
    produce = report.get("producer", {}).get("100 B", {})
    parts = []
    if consume:
        rows = [n for n in ("tidegate-null", "tidegate-trading-day", "kcat", "kcat-json",
                            "kafka-consumer-perf", bench_report.CEILING) if n in consume]
        ref = bench_report.CEILING if bench_report.CEILING in consume else "kafka-consumer-perf"
        parts.append((f"reading {key}, {bench_report.records_of(consume[rows[0]]):,} records", consume, rows, ref))
    if produce:
        rows = [n for n in ("tidegate-datagen", "tidegate-datagen-exactly-once", "kcat-produce",
                            "kafka-producer-perf", bench_report.CEILING) if n in produce]
        ref = bench_report.CEILING if bench_report.CEILING in produce else "kcat-produce"
        parts.append((f"producing 100 B, {bench_report.records_of(produce[rows[0]]):,} records", produce, rows, ref))
    if not parts:
        return None
    labels = {"tidegate-null": "tidegate (null sink)", "tidegate-trading-day": "tidegate trading day",
              "kcat": "kcat", "kcat-json": "kcat -J", "kafka-consumer-perf": "Kafka ConsumerPerformance",
              bench_report.CEILING: "librdkafka rdkafka_performance (ceiling)",
              "tidegate-datagen": "tidegate datagen", "tidegate-datagen-exactly-once": "tidegate datagen, exactly once",
              "kcat-produce": "kcat -P", "kafka-producer-perf": "Kafka ProducerPerformance"}
    fig, axes = plt.subplots(len(parts), 1, figsize=(9, sum(0.42 * len(p[2]) + 1.0 for p in parts) + 0.6),
                             squeeze=False, gridspec_kw={"height_ratios": [len(p[2]) for p in parts]},
                             layout="constrained")
    for ax, (title, summary, rows, ref) in zip(axes.flat, parts):
        vals = [summary[n]["records_per_s"][0] for n in rows]
        ax.barh(range(len(rows)), vals, color=[colour(n) for n in rows])
        ax.set_yticks(range(len(rows)), [labels.get(n, n) for n in rows], fontsize=9)
        ax.invert_yaxis()
        ax.set_xlim(0, max(vals) * 1.45)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel("records/s (median)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(lambda x, _: human(x)))
        ref_name = "ceiling" if ref == bench_report.CEILING else labels.get(ref, ref)
        for i, (n, v) in enumerate(zip(rows, vals)):
            note = f"{human(v)}/s" + ("" if n == ref else f"  ({v / summary[ref]['records_per_s'][0]:.2f}× {ref_name})")
            ax.text(v + max(vals) * 0.01, i, note, va="center", fontsize=8)
    fig.suptitle(f"tidegate beside kcat, Kafka's tools and librdkafka's own ceiling\n{source}", fontsize=9)
    save(fig, path)
    return path


def rebalance_chart(plt, report, source, path):
    """The rebalance part: the group's records/s in each second under each protocol, the scaling
    actions marked."""
    runs = {p: r for p, r in report.get("rebalance", {}).items() if r.get("per_second", {}).get("counts")}
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(11, 4.4), layout="constrained")
    styles = {"consumer": ("#2171b5", "-"), "classic": ("#a63603", "--")}
    for protocol, r in sorted(runs.items()):
        counts = r["per_second"]["counts"]
        c, style = styles.get(protocol, ("#969696", ":"))
        ax.plot(range(len(counts)), counts, style, color=c, linewidth=1.2, label=f"{protocol} protocol")
    actions = next(iter(runs.values()))["per_second"]["actions"]
    for name, at in actions:
        ax.axvline(at, color="#737373", linewidth=0.8, linestyle=":")
        ax.annotate(name, (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="#525252")
    ax.set_xlabel("seconds from the first member's start")
    ax.set_ylabel("records written per second (the group)")
    # the steady rate, and a dip below it, are what the chart is for: a catch-up's burst after a
    # pause (the backlog written at once) runs off the top
    steady = sorted(c for r in runs.values() for c in r["per_second"]["counts"] if c)
    top = 2.0 * steady[len(steady) // 2] if steady else None
    ax.set_ylim(bottom=0, top=top)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    any_run = next(iter(runs.values()))
    fig.suptitle(f"rebalance: a live tail of 12 partitions scaled 1 → 2 → 3 → 2 → 1 members, the state topic holding "
                 f"{any_run.get('state_topic_other_records', 0):,} records of other jobs\n{source} "
                 f"(bursts after a pause, the backlog written at once, run off the top)", fontsize=9)
    save(fig, path)
    return path


def save(fig, path):
    # reproducible SVG: no date, fixed ids, text as text
    fig.savefig(path, format="svg", metadata={"Date": None})
    fig.clear()


def plot(paths, out_dir):
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("svg")
    matplotlib.rcParams["svg.hashsalt"] = "tidegate-bench"
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt
    plt.matplotlib = matplotlib
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        stem = os.path.splitext(os.path.basename(path))[0]
        where = out_dir or os.path.dirname(os.path.abspath(path))
        os.makedirs(where, exist_ok=True)
        source = f"bench/{os.path.basename(path)} ({report.get('build', '?')} build, {report.get('runs', '?')} runs, " \
                 f"{report.get('machine', {}).get('cpus', '?')} CPUs)"
        made = [
            bar_panels(plt, report, source, "records_per_s", "records/s (median, whiskers min..max)",
                       "throughput per tool", os.path.join(where, f"{stem}-throughput.svg")),
            bar_panels(plt, report, source, "cpu_s_per_million", "CPU µs / record (user + system)",
                       "CPU per record", os.path.join(where, f"{stem}-cpu.svg"), fmt=lambda x: f"{x:.2f}"),
            bar_panels(plt, report, source, "peak_rss_mib", "peak RSS MiB (dashed: tidegate's 64 MiB bound)",
                       "peak RSS", os.path.join(where, f"{stem}-rss.svg"), bound=bench_report.RSS_BOUND_MIB,
                       fmt=lambda x: f"{x:.0f}"),
            scaling_chart(plt, report, source, os.path.join(where, f"{stem}-scaling.svg")),
            summary_chart(plt, report, source, os.path.join(where, f"{stem}-summary.svg")),
            rebalance_chart(plt, report, source, os.path.join(where, f"{stem}-rebalance.svg")),
        ]
        plt.close("all")
        for m in made:
            if m:
                print(os.path.relpath(m, REPO) if m.startswith(REPO) else m)
        if not made[3]:
            print(f"bench: {path} has no scaling part: no scaling chart", file=sys.stderr)
    return 0
