//! The simulation across processes, run: seeds (CI's fixed regression range and a fresh range
//! each run), one seed replayed (`TIDEGATE_GROUP_SIM_SEED`), and the schedules it found bugs with,
//! written out.

use super::{run, Plan};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// What the schedules went through.
#[derive(Debug, Default)]
struct Totals {
    schedules: u64,
    members: u64,
    killed: u64,
    ended_well: u64,
    stopped: u64,
    failed: u64,
    /// The first words of each failure a member ended with, counted.
    errors: std::collections::BTreeMap<String, u64>,
    records: u64,
    /// Partitions handed over without stopping a job: released, taken in.
    released: u64,
    taken: u64,
    failures: Vec<(u64, String)>,
}

/// Run the seeds.
fn explore(seeds: impl Iterator<Item = u64>) -> Totals {
    let mut totals = Totals::default();
    for seed in seeds {
        totals.schedules += 1;
        match run(&Plan::of(seed)) {
            Ok(outcome) => {
                totals.records += outcome.output.iter().map(|p| p.len() as u64).sum::<u64>();
                for m in &outcome.members {
                    totals.members += 1;
                    totals.released += m.released;
                    totals.taken += m.taken;
                    match &m.exit {
                        super::Exit::Killed => totals.killed += 1,
                        super::Exit::Returned { signalled: true, .. } => totals.stopped += 1,
                        super::Exit::Returned { result: Ok(()), .. } => totals.ended_well += 1,
                        super::Exit::Returned { result: Err(e), .. } => {
                            totals.failed += 1;
                            let words: String = e.split_whitespace().take(6).collect::<Vec<_>>().join(" ");
                            *totals.errors.entry(words).or_default() += 1;
                        }
                        super::Exit::Running | super::Exit::Panicked(_) => {}
                    }
                }
            }
            Err(e) => totals.failures.push((seed, e)),
        }
    }
    totals
}

#[test]
fn group_members_explore_schedules() {
    if let Some(seed) = env_u64("TIDEGATE_GROUP_SIM_SEED") {
        test_logs();
        let plan = Plan::of(seed);
        eprintln!("group simulation: replaying seed {seed}: {plan:#?}");
        match run(&plan) {
            Ok(o) => eprintln!("group simulation: seed {seed} passed: {:?}", o.members),
            Err(e) => panic!("group simulation: seed {seed} failed: {e}"),
        }
        return;
    }
    // CI's share: the regression range, then a fresh range that differs from run to run (its
    // start printed, so that a failure there is replayed by its seed); a soak sets the counts
    let fixed = env_u64("TIDEGATE_GROUP_SIM_SCHEDULES").unwrap_or(300);
    let first = env_u64("TIDEGATE_GROUP_SIM_FIRST_SEED").unwrap_or(0);
    let fresh = env_u64("TIDEGATE_GROUP_SIM_FRESH").unwrap_or(100);
    let fresh_from = env_u64("TIDEGATE_GROUP_SIM_FRESH_FROM").unwrap_or_else(fresh_start);
    eprintln!(
        "group simulation: the regression range {first}..{}, and {fresh} fresh seeds from {fresh_from}",
        first + fixed
    );
    let seeds: Vec<u64> = (first..first + fixed).chain(fresh_from..fresh_from + fresh).collect();
    let mut totals = in_parallel(&seeds);
    eprintln!(
        "group simulation: {} schedules, {} member processes: {} ended by themselves, {} stopped, {} killed, {} failed; {} records written",
        totals.schedules,
        totals.members,
        totals.ended_well,
        totals.stopped,
        totals.killed,
        totals.failed,
        totals.records
    );
    eprintln!(
        "group simulation: partitions handed over while the jobs ran on: {} released, {} taken in",
        totals.released, totals.taken
    );
    for (words, n) in &totals.errors {
        eprintln!("group simulation:   {n} failed with: {words} …");
    }
    let mut failures = std::mem::take(&mut totals.failures);
    failures.sort_by_key(|(seed, _)| *seed);
    for (seed, e) in failures.iter().take(3) {
        eprintln!("group simulation: seed {seed} failed: {e}\n");
    }
    let failed: Vec<u64> = failures.iter().map(|(s, _)| *s).collect();
    assert!(
        failures.is_empty(),
        "group simulation: {} of {} schedules failed: {failed:?}\nreplay one: TIDEGATE_GROUP_SIM_SEED=<seed> cargo test --features failpoints --lib simulation::tests::group_members -- --nocapture",
        failures.len(),
        seeds.len()
    );
    // it explored: members killed, stopped and ended by themselves, records written
    assert!(totals.killed * 20 >= totals.schedules, "{totals:?}");
    assert!(totals.stopped * 20 >= totals.schedules, "{totals:?}");
    assert!(totals.ended_well >= totals.schedules, "{totals:?}");
}

/// Where a fresh range starts: from the clock, a different one each run.
fn fresh_start() -> u64 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    1_000_000 + (secs % 1_000_000) * 1_000
}

/// `seeds` on two threads (a simulation lives on one thread), their totals together.
fn in_parallel(seeds: &[u64]) -> Totals {
    let threads = 2;
    let parts: Vec<Totals> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || explore(seeds.iter().copied().skip(t).step_by(threads))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a simulation thread"))
            .collect()
    });
    let mut totals = Totals::default();
    for p in parts {
        totals.schedules += p.schedules;
        totals.members += p.members;
        totals.killed += p.killed;
        totals.ended_well += p.ended_well;
        totals.stopped += p.stopped;
        totals.failed += p.failed;
        totals.records += p.records;
        totals.released += p.released;
        totals.taken += p.taken;
        for (k, v) in p.errors {
            *totals.errors.entry(k).or_default() += v;
        }
        totals.failures.extend(p.failures);
    }
    totals
}

/// `plan` with one member, m0, neither crashed, paused nor disrupted (the others it starts come
/// from its events).
fn only_m0(plan: &mut Plan) {
    plan.members = vec!["m0".into()];
    plan.crash_steps = vec![None];
    plan.pause_steps = vec![None];
    plan.point_disruptions = vec![None];
}

/// Every member's runs of its job, and `name`'s (0 if it never ran).
fn runs_of(outcome: &super::Outcome, name: &str) -> (Vec<(String, u64)>, u64) {
    let runs: Vec<(String, u64)> = outcome.members.iter().map(|m| (m.name.clone(), m.runs)).collect();
    let of = runs.iter().find(|(n, _)| n == name).map_or(0, |(_, r)| *r);
    (runs, of)
}

/// The schedule of the survivor-exit loss (written out, so that a change of how seeds are drawn
/// does not lose it): a bounded replay of 4 partitions by two members, one killed mid-replay and
/// never started again. The survivor finished the two partitions it was dealt and exited 0, the
/// killed member's two left unread (as tried on a real broker: 120,000 of 240,000 records).
pub(super) fn survivor_of_a_killed_member() -> Plan {
    use std::time::Duration;
    Plan {
        seed: 1,
        records: vec![60, 60, 60, 60],
        input: super::INPUT.into(),
        transactional_input: false,
        members: vec!["m0".into(), "m1".into()],
        crash_steps: vec![None, None],
        pause_steps: vec![None, None],
        point_disruptions: vec![None, None],
        parallelism: 2,
        checkpoint_interval: Duration::from_millis(300),
        // (librdkafka's default): the survivor finishes its own partitions long before
        session_timeout: Duration::from_secs(45),
        protocol: crate::client::cluster::GroupProtocol::Classic,
        max_rate: Some(60),
        eof: None,
        events: vec![super::plan::Event {
            at: Duration::from_secs(1),
            action: super::Action::Kill("m1".into()),
        }],
        live: false,
        compaction_every: None,
        faults: Default::default(),
        schedule: crate::core::sim::Schedule {
            seed: 7,
            yield_per_mille: 50,
            delay_per_mille: 20,
            max_delay: Duration::from_millis(1),
            crash_at: None,
            stop_at: None,
            fail_at: None,
            max_steps: 5_000_000,
        },
    }
}

#[test]
fn a_survivor_does_not_exit_0_while_a_killed_member_s_partitions_are_unread() {
    let outcome = run(&survivor_of_a_killed_member()).unwrap_or_else(|e| panic!("{e}"));
    // the killed member's partitions went to the survivor once its session expired
    assert!(
        outcome.output.iter().all(|p| p.len() == 60),
        "every record written: {:?}",
        outcome.output.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// Two processes run as the same member (`job.member`, the host name by default, on two
/// machines): they share the member's transactional ids and would fence each other, one restart
/// after the other. The second refuses to start, naming `job.member`; the first reads the input
/// once.
#[test]
fn a_second_process_under_a_member_s_name_is_refused_naming_job_member() {
    use std::time::Duration;
    test_logs();
    let mut plan = survivor_of_a_killed_member();
    only_m0(&mut plan);
    plan.session_timeout = Duration::from_secs(10);
    // 24 s of input: the first is still at it when the second has waited out a session
    plan.max_rate = Some(10);
    plan.events = vec![super::plan::Event {
        at: Duration::from_millis(500),
        action: super::Action::Start {
            name: "m0".into(),
            crash_at: None,
        },
    }];
    let outcome = run(&plan).unwrap_or_else(|e| panic!("{e}"));
    let refused: Vec<&super::MemberRun> = outcome
        .members
        .iter()
        .filter(|m| matches!(&m.exit, super::Exit::Returned { result: Err(e), .. } if e.contains("job.member")))
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one of the twins refused, naming job.member: {:?}",
        outcome.members
    );
    assert!(outcome.output.iter().all(|p| p.len() == 60));
}

/// The state topic of a group job is deleted between two runs while the job's consumer group
/// still holds the positions its checkpoints committed (KIP-447). A new, empty topic would start
/// the job over and write everything again: the member refuses, naming the topic and the group.
#[test]
fn a_deleted_state_topic_is_not_recreated_empty_while_the_group_holds_positions() {
    use std::time::Duration;
    let mut plan = survivor_of_a_killed_member();
    only_m0(&mut plan);
    plan.max_rate = Some(40);
    let at = |ms| Duration::from_millis(ms);
    plan.events = vec![
        super::plan::Event {
            at: at(2_000),
            action: super::Action::Stop("m0".into()),
        },
        super::plan::Event {
            at: at(5_000),
            action: super::Action::DeleteTopic(super::STATE),
        },
        super::plan::Event {
            at: at(6_000),
            action: super::Action::Start {
                name: "m0".into(),
                crash_at: None,
            },
        },
    ];
    let outcome = run(&plan).unwrap_or_else(|e| panic!("{e}"));
    let second = &outcome.members[1].exit;
    let super::Exit::Returned { result: Err(e), .. } = second else {
        panic!("the second run went ahead: {second:?}");
    };
    assert!(e.contains(super::STATE) && e.contains("tidegate-sim"), "{e}");
}

/// A job of 5,000 partitions (of a topic with a long name, 100 characters): its enumerator's state
/// record grows past librdkafka's default message.max.bytes (1,000,000). It was refused at every
/// checkpoint, so the job failed, and failed again at every restart.
#[test]
fn the_state_of_5000_partitions_is_written_whatever_its_size() {
    let mut plan = survivor_of_a_killed_member();
    plan.input = format!(
        "market-data.equities.trades.2026-12-04.north-america-east.{}",
        "x".repeat(42)
    );
    assert_eq!(plan.input.len(), 100);
    plan.records = (0..5000).map(|p| u64::from(p % 3 == 0)).collect();
    only_m0(&mut plan);
    plan.max_rate = None;
    plan.events = Vec::new();
    let outcome = run(&plan).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&outcome.members[0].exit, super::Exit::Returned { result: Ok(()), .. }),
        "{:?}",
        outcome.members[0].exit
    );
    assert_eq!(outcome.output.iter().map(Vec::len).sum::<usize>(), 1667);
    let limit = crate::checkpoint_store::records::PART_BYTES + 1024;
    assert!(
        outcome.largest_state_record <= limit,
        "{}",
        outcome.largest_state_record
    );
}

/// One partition, read by the first member; a second and a third join, and are dealt nothing.
/// Under the consumer protocol the first runs on, one run, its checkpoints committed with the
/// member epochs the joins moved on; under the classic one the joins stop it.
#[test]
fn a_member_whose_assignment_stays_is_not_stopped_when_another_joins() {
    use crate::client::cluster::GroupProtocol;
    use std::time::Duration;
    test_logs();
    for protocol in [GroupProtocol::Consumer, GroupProtocol::Classic] {
        let mut plan = survivor_of_a_killed_member();
        plan.protocol = protocol;
        plan.records = vec![80];
        plan.max_rate = Some(20);
        plan.events = vec![super::plan::Event {
            at: Duration::from_secs(2),
            action: super::Action::Start {
                name: "m2".into(),
                crash_at: None,
            },
        }];
        let outcome = run(&plan).unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        let (runs, first) = runs_of(&outcome, "m0");
        match protocol {
            GroupProtocol::Consumer => assert_eq!(
                first, 1,
                "under the consumer protocol the member whose assignment stays runs once: {runs:?}"
            ),
            GroupProtocol::Classic => assert!(
                first >= 2,
                "under the classic protocol a join stops every member: {runs:?}"
            ),
        }
        assert!(
            outcome.output.iter().all(|p| p.len() == 80),
            "{protocol:?}: every record written"
        );
    }
}

/// Four partitions, read by one member; a second joins and is dealt two of them. Under the
/// consumer protocol the first releases those two at a checkpoint and runs on with the other
/// two, one run; under the classic one the join stops it. Every record once either way (the
/// simulation checks the order and the count of each partition's output).
#[test]
fn a_member_that_gives_partitions_up_runs_on_with_the_rest() {
    use crate::client::cluster::GroupProtocol;
    use std::time::Duration;
    test_logs();
    for protocol in [GroupProtocol::Consumer, GroupProtocol::Classic] {
        let mut plan = survivor_of_a_killed_member();
        plan.protocol = protocol;
        only_m0(&mut plan);
        // the partitions it keeps are the longer: the other member finishes first, and waits
        // in the group until they are done (leaving, it would deal its own back to the first)
        plan.records = vec![160, 160, 80, 80];
        plan.max_rate = Some(40);
        plan.events = vec![super::plan::Event {
            at: Duration::from_secs(2),
            action: super::Action::Start {
                name: "m1".into(),
                crash_at: None,
            },
        }];
        let outcome = run(&plan).unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        let (runs, first) = runs_of(&outcome, "m0");
        match protocol {
            GroupProtocol::Consumer => {
                assert_eq!(
                    first, 1,
                    "under the consumer protocol the member that gives partitions up runs on: {runs:?}"
                );
                let released: u64 = outcome
                    .members
                    .iter()
                    .filter(|m| m.name == "m0")
                    .map(|m| m.released)
                    .sum();
                assert_eq!(released, 2, "m0 released two partitions in place");
            }
            GroupProtocol::Classic => assert!(
                first >= 2,
                "under the classic protocol a join stops every member: {runs:?}"
            ),
        }
        assert_eq!(
            outcome.output.iter().map(Vec::len).collect::<Vec<_>>(),
            [160, 160, 80, 80],
            "{protocol:?}: every record written"
        );
    }
}

/// Four partitions, two members; one is killed, and once its session ends the survivor is
/// dealt its two partitions while it still reads its own. Under the consumer protocol it takes
/// them in where the killed member's last checkpoint left them and runs on, one run, as a live
/// tail and as a bounded replay (whose readers wait, their own partitions done, until every one
/// is); under the classic one the rebalance stops it. Every record once either way (a live tail's
/// survivor is then asked to stop).
#[test]
fn a_member_dealt_a_killed_member_s_partitions_takes_them_in_and_runs_on() {
    use crate::client::cluster::GroupProtocol;
    use std::time::Duration;
    test_logs();
    for (protocol, live) in [
        (GroupProtocol::Consumer, true),
        (GroupProtocol::Consumer, false),
        (GroupProtocol::Classic, true),
    ] {
        let mut plan = survivor_of_a_killed_member();
        plan.protocol = protocol;
        // m0 reads its own two partitions for longer than the dead member's session
        plan.records = vec![600; 4];
        plan.max_rate = Some(40);
        plan.session_timeout = Duration::from_secs(3);
        plan.live = live;
        let outcome = run(&plan).unwrap_or_else(|e| panic!("{protocol:?}, live {live}: {e}"));
        let (runs, survivor) = runs_of(&outcome, "m0");
        match protocol {
            GroupProtocol::Consumer => {
                assert_eq!(
                    survivor, 1,
                    "under the consumer protocol the survivor takes the partitions in and runs on (live {live}): {runs:?}"
                );
                let taken: u64 = outcome.members.iter().filter(|m| m.name == "m0").map(|m| m.taken).sum();
                assert_eq!(taken, 2, "m0 took two partitions in (live {live})");
            }
            GroupProtocol::Classic => assert!(
                survivor >= 2,
                "under the classic protocol the rebalance stops it: {runs:?}"
            ),
        }
        assert_eq!(
            outcome.output.iter().map(Vec::len).collect::<Vec<_>>(),
            [600; 4],
            "{protocol:?}, live {live}: every record written"
        );
    }
}

/// One member reads four partitions; a second joins and takes two of them, which the first
/// releases in place and checkpoints on as released, its checkpoints newer than the second's.
/// The second is killed; the first, dealt them back, runs its bounded job again. Its restore
/// must take the two from the killed member's checkpoint (one handover more), not from its own
/// newer run that released them: that would write again what the killed member wrote.
#[test]
fn a_partition_taken_over_is_restored_from_its_new_owner_not_from_the_newer_run_that_released_it() {
    use std::time::Duration;
    test_logs();
    let mut plan = survivor_of_a_killed_member();
    plan.protocol = crate::client::cluster::GroupProtocol::Consumer;
    only_m0(&mut plan);
    plan.records = vec![300; 4];
    plan.max_rate = Some(40);
    plan.session_timeout = Duration::from_secs(3);
    plan.events = vec![
        super::plan::Event {
            at: Duration::from_secs(2),
            action: super::Action::Start {
                name: "m1".into(),
                crash_at: None,
            },
        },
        super::plan::Event {
            at: Duration::from_secs(8),
            action: super::Action::Kill("m1".into()),
        },
    ];
    let outcome = run(&plan).unwrap_or_else(|e| panic!("{e}"));
    let released: u64 = outcome.members.iter().map(|m| m.released).sum();
    assert_eq!(released, 2, "m0 released two partitions in place");
    assert_eq!(
        outcome.output.iter().map(Vec::len).collect::<Vec<_>>(),
        [300; 4],
        "every record written once"
    );
}

#[test]
fn a_survivor_under_the_consumer_protocol_reads_a_killed_member_s_partitions_too() {
    let mut plan = survivor_of_a_killed_member();
    plan.protocol = crate::client::cluster::GroupProtocol::Consumer;
    let outcome = run(&plan).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        outcome.output.iter().all(|p| p.len() == 60),
        "every record written: {:?}",
        outcome.output.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// The tests' log lines, filtered by `RUST_LOG`, on the test's own output.
fn test_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .without_time()
        .with_ansi(false)
        .try_init();
}
