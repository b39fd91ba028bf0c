"""scripts/bench's `rebalance` part: a group-coordinated live tail scaled 1 -> 2 -> 3 -> 2 -> 1
members, its state topic holding `other` records of other jobs, and how long each rebalance
stopped it, under Kafka's consumer group protocol (KIP-848) and, but for --smoke, the classic one
beside it.

A data generator writes the 12-partition input at a steady rate; each member replays it into an
exactly-once Kafka sink, its checkpoints in the shared state topic. From every member's log:
each run's restore-and-start time (from its assignment to its first record written, which a
restore's read of the state topic is part of), and each rebalance's pause (from a member's
revocation to its first record on the next assignment). A member's first run reads the state
topic from its start; its later runs continue where its last read ended, so their pause must not
grow with the topic.

And from the output's own write times (the sink keeps each record's partition; the output topic
stamps LogAppendTime): for each rebalance, each partition's longest gap between two records
written in the seconds around it, how many partitions went without a record for longer than
two checkpoint intervals, and the group's lowest throughput in a second of it against its median.
"""

import datetime
import os
import re
import signal
import subprocess
import time


def _ts(line):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    if not m:
        return None
    return datetime.datetime.fromisoformat(m.group(1)[:26]).replace(tzinfo=datetime.timezone.utc).timestamp()


def fill_state_topic(kcat, bootstrap, topic, records, tmp, admin_create):
    """`records` records of other jobs (keys `other-<i>/split/…`, 100-byte values) into a new
    compacted topic, by kcat."""
    admin_create(None, bootstrap, topic, 1, ("cleanup.policy=compact", "min.compaction.lag.ms=3600000"))
    path = os.path.join(tmp, "state-fill.txt")
    value = '{"format":"other","payload":"' + "x" * 60 + '"}'
    with open(path, "w") as f:
        for i in range(records):
            f.write(f"other-job-{i % 997}#{i % 7}/split/trades-{i}|{value}\n")
    subprocess.run([kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", "|", "-z", "lz4",
                    "-X", "linger.ms=50", "-X", "batch.num.messages=10000", "-l", path], check=True)


def start(cmd, log_path, env=None):
    out = open(log_path, "w")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=out, start_new_session=True,
                            env=None if env is None else {**os.environ, **env}), out


def stop(proc, out, timeout=90):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    out.close()


def runs_of(log_text):
    """Each run of a member: its restore-and-start time (ms), and when it began (s)."""
    out = []
    for line in log_text.splitlines():
        m = re.search(r"first record written on this assignment after_ms=(\d+)", line)
        if m:
            out.append({"start_ms": int(m.group(1)), "at": _ts(line)})
    return out


def pauses_of(log_text):
    """Each rebalance's pause for a member: from its revocation to its next first record (s)."""
    pauses, revoked = [], None
    for line in log_text.splitlines():
        if "partitions revoked" in line:
            revoked = _ts(line)
        elif "first record written on this assignment" in line and revoked is not None:
            at = _ts(line)
            if at is not None:
                pauses.append(at - revoked)
            revoked = None
    return pauses


def write_times(kcat, bootstrap, topic):
    """Each partition's write times (s) of `topic`'s committed records, in order."""
    out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-f", "%p %T\\n",
                          "-X", "isolation.level=read_committed"],
                         check=True, capture_output=True, text=True).stdout
    times = {}
    for line in out.splitlines():
        p, t = line.split()
        times.setdefault(int(p), []).append(int(t) / 1000.0)
    return {p: sorted(ts) for p, ts in times.items()}


def per_second_of(times, actions):
    """The group's records written in each second of the run (from the first action's second on),
    and each action's time in seconds from there: the chart's series."""
    if not actions:
        return {"counts": [], "actions": []}
    origin = int(actions[0][1])
    counts = {}
    for ts in times.values():
        for t in ts:
            counts[int(t) - origin] = counts.get(int(t) - origin, 0) + 1
    last = max(counts, default=0)
    return {"counts": [counts.get(s, 0) for s in range(0, last + 1)],
            "actions": [[name, round(at - origin, 2)] for name, at in actions]}


def windows_of(times, actions, step, cadence):
    """For each action (its name, when it was taken): each partition's longest gap (s) between
    writes from 1 s before it to `step` s after, the partitions with a gap over twice `cadence`,
    and the lowest and median records/s over the run's seconds."""
    per_second = {}
    for ts in times.values():
        for t in ts:
            per_second[int(t)] = per_second.get(int(t), 0) + 1
    seconds = sorted(per_second)
    steady = sorted(per_second[s] for s in seconds[1:-1]) or [0]
    median = steady[len(steady) // 2]
    out = []
    for name, at in actions:
        lo, hi = at - 1.0, at + step
        gaps = []
        for p in sorted(times):
            inside = [lo] + [t for t in times[p] if lo <= t <= hi] + [hi]
            gaps.append(round(max(b - a for a, b in zip(inside, inside[1:])), 2))
        lowest = min((per_second.get(s, 0) for s in range(int(lo) + 1, int(hi))), default=0)
        out.append({"action": name, "gaps_s": gaps,
                    "partitions_stopped": sum(1 for g in gaps if g > 2 * cadence),
                    "lowest_per_s": lowest, "median_per_s": median})
    return out


def rebalance_runs(args, tidegate, kcat, bootstrap, tmp, run_id, admin_create, log):
    """The scenario under each protocol (the consumer one only with --smoke)."""
    protocols = ["consumer"] if args.smoke else ["consumer", "classic"]
    return {protocol: protocol_run(args, tidegate, kcat, bootstrap, tmp, f"{run_id}-{protocol}", protocol,
                                   admin_create, log)
            for protocol in protocols}


def protocol_run(args, tidegate, kcat, bootstrap, tmp, run_id, protocol, admin_create, log):
    other = 20_000 if args.smoke else 1_000_000
    step = 6 if args.smoke else 20
    rate = 500 if args.smoke else 2000
    state = f"bench-rebalance-state-{run_id}"
    source = f"bench-rebalance-in-{run_id}"
    sink = f"bench-rebalance-out-{run_id}"
    log(f"filling {state} with {other:,} records of other jobs")
    began = time.perf_counter()
    fill_state_topic(kcat, bootstrap, state, other, tmp, admin_create)
    log(f"filled in {time.perf_counter() - began:.1f} s")
    admin_create(None, bootstrap, source, 12)
    admin_create(None, bootstrap, sink, 12, ("message.timestamp.type=LogAppendTime",))
    cadence = 1.0
    gen = os.path.join(tmp, "rebalance-gen.toml")
    with open(gen, "w") as f:
        f.write(f"""
[job]
name = "bench-rebalance-gen-{run_id}"
parallelism = 2
[source]
type = "datagen"
rate = {rate}.0
[source.fields]
seq = {{ sequence = {{}} }}
[sink]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{source}"
""")
    # the classic members' session is theirs; the consumer protocol's, the broker's
    properties = ('properties = { "group.protocol" = "classic", "session.timeout.ms" = "10000" }'
                  if protocol == "classic" else "")
    job = os.path.join(tmp, f"rebalance-job-{protocol}.toml")
    with open(job, "w") as f:
        f.write(f"""
[job]
name = "bench-rebalance-{run_id}"
parallelism = 2
coordination = "group"
[source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topics = ["{source}"]
starting_offsets = "earliest"
{properties}
[sink]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{sink}"
delivery = "exactly_once"
preserve_partition = true
[checkpoint]
store = "kafka"
topic = "{state}"
interval = "1s"
""")
    procs = {}
    generator = start([tidegate, "run", "--config", gen, "--no-progress"], os.path.join(tmp, "gen.log"))
    try:
        members, actions = [], []
        plan = ["+m0", "+m1", "+m2", "-m2", "-m1"]
        for action in plan:
            actions.append((action, time.time()))
            name = action[1:]
            if action[0] == "+":
                logs = os.path.join(tmp, f"{name}-{protocol}.log")
                # named as on a host of that name: a dynamic member, whose partitions move as it
                # stops (job.member set would make it a static one, keeping them for its session)
                procs[name] = start([tidegate, "run", "--config", job, "--no-progress"], logs,
                                    env={"HOSTNAME": name}) + (logs,)
                members.append(name)
            else:
                proc, out, _ = procs[name]
                stop(proc, out)
            log(f"rebalance: {action}, {step} s")
            time.sleep(step)
        for name in list(procs):
            proc, out, _ = procs[name]
            stop(proc, out)
    finally:
        stop(*generator)
        for proc, out, _ in procs.values():
            if proc.poll() is None:
                stop(proc, out)
    report = {"protocol": protocol, "state_topic_other_records": other, "members": {}}
    for name, (_, _, path) in procs.items():
        text = open(path).read()
        runs = runs_of(text)
        report["members"][name] = {"runs_start_ms": [r["start_ms"] for r in runs], "pauses_s": pauses_of(text),
                                   "runs": text.count("running the job on its assignment"),
                                   # partitions handed over while the job ran on (its log says so
                                   # once per handover)
                                   "released_in_place": text.count("revoked partitions released at a checkpoint"),
                                   "taken_in_place": text.count("the job took the new partitions in and runs on")}
    # the first action starts the only member: its window is the job's start, not a rebalance
    times = write_times(kcat, bootstrap, sink)
    report["rebalances"] = windows_of(times, actions[1:], step, cadence)
    report["per_second"] = per_second_of(times, actions)
    firsts = [m["runs_start_ms"][0] for m in report["members"].values() if m["runs_start_ms"]]
    laters = [ms for m in report["members"].values() for ms in m["runs_start_ms"][1:]]
    report["first_run_start_ms"] = firsts
    report["later_runs_start_ms"] = laters
    report["pauses_s"] = [p for m in report["members"].values() for p in m["pauses_s"]]
    print(f"\nrebalance ({protocol} protocol): a live tail of 12 partitions at {rate}/s, 1 -> 2 -> 3 -> 2 -> 1 "
          f"members, the state topic holding {other:,} records of other jobs")
    for name, m in report["members"].items():
        print(f"  {name}: {m['runs']} runs, {m['released_in_place']} releases and {m['taken_in_place']} takes "
              f"in place, restore-and-start per run (ms) {m['runs_start_ms']}, "
              f"pauses (s) {[round(p, 2) for p in m['pauses_s']]}")
    for w in report["rebalances"]:
        print(f"  {w['action']}: {w['partitions_stopped']} of {len(w['gaps_s'])} partitions went over "
              f"{2 * cadence:.0f} s without a record (longest gaps {sorted(w['gaps_s'])[-3:]} s); "
              f"lowest {w['lowest_per_s']} records/s against a median {w['median_per_s']}")
    if firsts and laters:
        print(f"  a member's first run {max(firsts)} ms at most; its later runs {max(laters)} ms at most")
    # the scenario must have rebalanced: the classic protocol runs every member's job again; the
    # consumer one hands partitions over while the jobs run on
    in_place = sum(m["released_in_place"] + m["taken_in_place"] for m in report["members"].values())
    if protocol == "classic" and not laters:
        raise RuntimeError(f"no member ran twice: {report}")
    if protocol == "consumer" and not in_place and not laters:
        raise RuntimeError(f"no member handed partitions over or ran twice: {report}")
    return report
