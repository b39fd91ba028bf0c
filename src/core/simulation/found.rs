//! Schedules the simulation found bugs with, written out: a change of how seeds are drawn (a new
//! knob in `Plan::of`) leaves them as they were. Each was seen failing with its bug put back
//! (`scripts/mutations`, docs/testing.md). Their inner seeds still drive the scheduling decisions,
//! so a change of the runtime's points may move where a schedule's crash lands: the mutation
//! check says whether they still find their bug.

use std::time::Duration;

use super::check::SinkKind;
use super::{run_seed_plan, Plan, RunPlan};
use crate::fetcher::FetcherMode;
use crate::sim::Schedule;

/// Run a named schedule; `seed` is the one it was found with (a crash's loss of unsynced data is
/// drawn from it).
fn replay(seed: u64, plan: Plan) {
    let dir = tempfile::tempdir().expect("a temp directory");
    if let Err(e) = run_seed_plan(&plan, seed, dir.path()) {
        panic!("{e}\nplan: {plan:?}");
    }
}

/// Finding 2.1 (seed 66 of the first mapping; seed 268 now): a checkpoint took a reader's final snapshot for a checkpoint
/// the reader had acked, covering records the sink held back for the next one; a crash lost them
/// (coordinator: the ack before the final snapshot).
#[test]
fn finding_2_1_a_reader_s_final_snapshot_for_a_checkpoint_it_had_acked() {
    replay(
        268,
        Plan {
            count: 443,
            splits: 6,
            batch_size: 5,
            queue_capacity: 2,
            fetcher_mode: FetcherMode::Single,
            sink: SinkKind::Truncating,
            sink_capacity: 3,
            markers: vec![],
            checkpoint_interval: Some(Duration::from_micros(1501)),
            resolving: Some(Duration::from_micros(30296)),
            runs: vec![
                RunPlan {
                    parallelism: 3,
                    schedule: Schedule {
                        seed: 9598911752623865842,
                        yield_per_mille: 165,
                        delay_per_mille: 183,
                        max_delay: Duration::from_micros(416),
                        crash_at: None,
                        stop_at: Some(499),
                        fail_at: None,
                        max_steps: 60000,
                    },
                },
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 10983414489894599330,
                        yield_per_mille: 72,
                        delay_per_mille: 73,
                        max_delay: Duration::from_micros(195),
                        crash_at: Some(424),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 60000,
                    },
                },
                RunPlan {
                    parallelism: 3,
                    schedule: Schedule {
                        seed: 6309032927630774897,
                        yield_per_mille: 53,
                        delay_per_mille: 158,
                        max_delay: Duration::from_micros(3574),
                        crash_at: Some(709),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 60000,
                    },
                },
                RunPlan {
                    parallelism: 2,
                    schedule: Schedule {
                        seed: 16417155323983786466,
                        yield_per_mille: 60,
                        delay_per_mille: 41,
                        max_delay: Duration::from_micros(4142),
                        crash_at: None,
                        stop_at: None,
                        fail_at: None,
                        max_steps: 60000,
                    },
                },
            ],
        },
    );
}

/// Seed 190: a split given back by a stopped reader and pushed again by the enumerator was lost
/// from the final checkpoint (a stopped reader no longer counts as registered).
#[test]
fn a_split_given_back_by_a_stopped_reader_is_not_lost() {
    replay(
        190,
        Plan {
            count: 473,
            splits: 4,
            batch_size: 42,
            queue_capacity: 1,
            fetcher_mode: FetcherMode::PerSplit,
            sink: SinkKind::Transactional,
            sink_capacity: 3,
            markers: vec![],
            checkpoint_interval: Some(Duration::from_micros(11742)),
            resolving: Some(Duration::from_micros(24557)),
            runs: vec![
                RunPlan {
                    parallelism: 3,
                    schedule: Schedule {
                        seed: 13590867358969746450,
                        yield_per_mille: 282,
                        delay_per_mille: 136,
                        max_delay: Duration::from_micros(3767),
                        crash_at: Some(124),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 28400,
                    },
                },
                RunPlan {
                    parallelism: 2,
                    schedule: Schedule {
                        seed: 9401454974493242064,
                        yield_per_mille: 79,
                        delay_per_mille: 153,
                        max_delay: Duration::from_micros(1156),
                        crash_at: None,
                        stop_at: Some(43),
                        fail_at: None,
                        max_steps: 28400,
                    },
                },
                RunPlan {
                    parallelism: 2,
                    schedule: Schedule {
                        seed: 11259977874608871955,
                        yield_per_mille: 297,
                        delay_per_mille: 115,
                        max_delay: Duration::from_micros(802),
                        crash_at: Some(93),
                        stop_at: Some(44),
                        fail_at: None,
                        max_steps: 28400,
                    },
                },
                RunPlan {
                    parallelism: 1,
                    schedule: Schedule {
                        seed: 16308524951765732811,
                        yield_per_mille: 63,
                        delay_per_mille: 171,
                        max_delay: Duration::from_micros(4454),
                        crash_at: None,
                        stop_at: None,
                        fail_at: None,
                        max_steps: 28400,
                    },
                },
            ],
        },
    );
}

/// Records a reader sends after its barrier are held back until the checkpoint is prepared;
/// written before it, a crash after the checkpoint leaves them uncovered (seed 22 now).
#[test]
fn records_sent_after_a_barrier_wait_for_the_next_checkpoint() {
    replay(
        22,
        Plan {
            count: 487,
            splits: 2,
            batch_size: 3,
            queue_capacity: 3,
            fetcher_mode: FetcherMode::PerSplit,
            sink: SinkKind::Transactional,
            sink_capacity: 2,
            markers: vec![14, 169, 211],
            checkpoint_interval: Some(Duration::from_micros(19373)),
            resolving: None,
            runs: vec![
                RunPlan {
                    parallelism: 1,
                    schedule: Schedule {
                        seed: 14279440796744002262,
                        yield_per_mille: 118,
                        delay_per_mille: 169,
                        max_delay: Duration::from_micros(4555),
                        crash_at: Some(300),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 88000,
                    },
                },
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 16236669640344706893,
                        yield_per_mille: 289,
                        delay_per_mille: 2,
                        max_delay: Duration::from_micros(3700),
                        crash_at: Some(1250),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 88000,
                    },
                },
                RunPlan {
                    parallelism: 2,
                    schedule: Schedule {
                        seed: 4565218607747355433,
                        yield_per_mille: 3,
                        delay_per_mille: 4,
                        max_delay: Duration::from_micros(2879),
                        crash_at: None,
                        stop_at: Some(428),
                        fail_at: None,
                        max_steps: 88000,
                    },
                },
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 14960997477478464839,
                        yield_per_mille: 31,
                        delay_per_mille: 108,
                        max_delay: Duration::from_micros(3103),
                        crash_at: Some(1251),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 88000,
                    },
                },
                RunPlan {
                    parallelism: 1,
                    schedule: Schedule {
                        seed: 2223366599225054163,
                        yield_per_mille: 74,
                        delay_per_mille: 55,
                        max_delay: Duration::from_micros(2929),
                        crash_at: None,
                        stop_at: None,
                        fail_at: None,
                        max_steps: 88000,
                    },
                },
            ],
        },
    );
}

/// A restored job whose input had ended keeps saying so: a periodic checkpoint that dropped it
/// let a crash after it signal the end again, a second end marker (seed 1445 now).
#[test]
fn a_restored_job_whose_input_ended_does_not_signal_the_end_again() {
    replay(
        1445,
        Plan {
            count: 279,
            splits: 2,
            batch_size: 48,
            queue_capacity: 1,
            fetcher_mode: FetcherMode::PerSplit,
            sink: SinkKind::Transactional,
            sink_capacity: 3,
            markers: vec![191, 203, 59],
            checkpoint_interval: Some(Duration::from_micros(213)),
            resolving: None,
            runs: vec![
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 18184556731825990945,
                        yield_per_mille: 149,
                        delay_per_mille: 38,
                        max_delay: Duration::from_micros(862),
                        crash_at: Some(122),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 25200,
                    },
                },
                RunPlan {
                    parallelism: 1,
                    schedule: Schedule {
                        seed: 2729799053202590182,
                        yield_per_mille: 225,
                        delay_per_mille: 168,
                        max_delay: Duration::from_micros(1134),
                        crash_at: Some(36),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 25200,
                    },
                },
                RunPlan {
                    parallelism: 1,
                    schedule: Schedule {
                        seed: 10543563650642076659,
                        yield_per_mille: 246,
                        delay_per_mille: 4,
                        max_delay: Duration::from_micros(2275),
                        crash_at: None,
                        stop_at: None,
                        fail_at: None,
                        max_steps: 25200,
                    },
                },
            ],
        },
    );
}

/// Seed 27 of the first mapping (seed 313 now): a transactional job whose state file write fails
/// waited for ever for its sink, which waited for the go to commit (the go channel now closes
/// with the job).
#[test]
fn a_failed_state_write_ends_the_job_instead_of_hanging_it() {
    replay(
        313,
        Plan {
            count: 153,
            splits: 2,
            batch_size: 44,
            queue_capacity: 2,
            fetcher_mode: FetcherMode::Single,
            sink: SinkKind::Transactional,
            sink_capacity: 2,
            markers: vec![],
            checkpoint_interval: None,
            resolving: Some(Duration::from_micros(24798)),
            runs: vec![
                RunPlan {
                    parallelism: 3,
                    schedule: Schedule {
                        seed: 1391544794917302644,
                        yield_per_mille: 0,
                        delay_per_mille: 83,
                        max_delay: Duration::from_micros(531),
                        crash_at: Some(1),
                        stop_at: None,
                        fail_at: None,
                        max_steps: 24400,
                    },
                },
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 7359432166316235977,
                        yield_per_mille: 214,
                        delay_per_mille: 11,
                        max_delay: Duration::from_micros(4472),
                        crash_at: Some(41),
                        stop_at: Some(18),
                        fail_at: None,
                        max_steps: 24400,
                    },
                },
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 6907608523946001245,
                        yield_per_mille: 254,
                        delay_per_mille: 155,
                        max_delay: Duration::from_micros(2116),
                        crash_at: None,
                        stop_at: None,
                        fail_at: Some(62),
                        max_steps: 24400,
                    },
                },
                RunPlan {
                    parallelism: 3,
                    schedule: Schedule {
                        seed: 17486895682508756656,
                        yield_per_mille: 38,
                        delay_per_mille: 132,
                        max_delay: Duration::from_micros(2320),
                        crash_at: Some(75),
                        stop_at: Some(50),
                        fail_at: None,
                        max_steps: 24400,
                    },
                },
                RunPlan {
                    parallelism: 4,
                    schedule: Schedule {
                        seed: 5847245236945445797,
                        yield_per_mille: 66,
                        delay_per_mille: 81,
                        max_delay: Duration::from_micros(1238),
                        crash_at: None,
                        stop_at: None,
                        fail_at: None,
                        max_steps: 24400,
                    },
                },
            ],
        },
    );
}
