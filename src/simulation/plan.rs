//! A schedule of the simulation across processes, drawn from one seed (or written out by hand, a
//! named schedule that stays the same whatever the drawing does): the input, the job's
//! settings, the members, and what happens to them when.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::kafka::{Broker, Faults};
use super::{INPUT, OUTPUT, SERVERS};
use crate::client::cluster::GroupProtocol;
use crate::config::Config;
use crate::core::sim::{Schedule, SplitMix64};

/// Something that happens to a member at a moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// A process of this member starts (first, or again under the same name), killed at its own
    /// step `crash_at` if it gets there.
    Start { name: String, crash_at: Option<u64> },
    /// Its process is killed (`kill -9`).
    Kill(String),
    /// Its process stops for this long (`SIGSTOP`, `SIGCONT`).
    Pause(String, Duration),
    /// It is asked to stop (`SIGTERM`): a final checkpoint, then exit 0.
    Stop(String),
    /// A topic is deleted (an operator's mistake).
    DeleteTopic(&'static str),
}

/// An action at a moment (virtual, from the schedule's start).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) at: Duration,
    pub(crate) action: Action,
}

/// One schedule.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) seed: u64,
    /// Records in each partition of the input (its partition count is the length).
    pub(crate) records: Vec<u64>,
    /// The input topic's name (long names make large state records).
    pub(crate) input: String,
    /// The input's records are written in transactions, some of them aborted (their records
    /// must never be read), with the markers' offsets between them.
    pub(crate) transactional_input: bool,
    /// The members started at once.
    pub(crate) members: Vec<String>,
    /// Each initial member's process is killed at this step of its own.
    pub(crate) crash_steps: Vec<Option<u64>>,
    /// Each initial member's process is stopped at this step of its own, for this long (in the
    /// middle of a checkpoint, say, past its session timeout).
    pub(crate) pause_steps: Vec<Option<(u64, Duration)>>,
    /// Each initial member's process is killed (`None`) or stopped for a while the n-th time it
    /// reaches a point of the checkpoint protocol.
    pub(crate) point_disruptions: Vec<Option<(&'static str, u64, Option<Duration>)>>,
    pub(crate) parallelism: usize,
    pub(crate) checkpoint_interval: Duration,
    pub(crate) session_timeout: Duration,
    /// The group protocol the members speak (the session timeout is then the broker's, under
    /// the consumer protocol, or the members' own, under the classic one).
    pub(crate) protocol: GroupProtocol,
    /// `source.max_rate` (records/s), which stretches a replay over virtual time.
    pub(crate) max_rate: Option<u64>,
    /// An end-of-stream record: `(partition, index)`, ending its partition there, or with
    /// `eof_scope = "source"` (`true`) every partition at its timestamp (the members then publish
    /// their partitions' event time to each other).
    pub(crate) eof: Option<(usize, u64, bool)>,
    pub(crate) events: Vec<Event>,
    /// A live tail (no stopping offsets, no end-of-stream record): the job never ends by itself,
    /// and every member still running is asked to stop once the output holds the whole input.
    /// Members take dealt partitions in while their jobs run on only in such a job (a bounded
    /// one's readers may have ended).
    pub(crate) live: bool,
    pub(crate) compaction_every: Option<Duration>,
    pub(crate) faults: Faults,
    pub(crate) schedule: Schedule,
}

impl Plan {
    /// Everything from the seed.
    pub(crate) fn of(seed: u64) -> Plan {
        let mut rng = SplitMix64(seed);
        let partitions = rng.range(1, 5) as usize;
        let records: Vec<u64> = (0..partitions).map(|_| rng.range(0, 120)).collect();
        let records_of = |p: usize| records[p];
        let transactional_input = rng.chance(300);
        let count = rng.range(1, 3) as usize;
        let members: Vec<String> = (0..count).map(|i| format!("m{i}")).collect();
        let crash_steps = (0..count)
            .map(|_| rng.chance(150).then(|| rng.range(1, 4000)))
            .collect();
        let pause_steps = (0..count)
            .map(|_| {
                rng.chance(250)
                    .then(|| (rng.range(1, 4000), Duration::from_millis(rng.range(1_000, 40_000))))
            })
            .collect();
        // the checkpoint protocol's steps: after the sink prepared, around the state's write (its
        // records and the group's offsets in the sink's transaction), before and after the commit
        const POINTS: [&str; 5] = [
            "checkpoint.after_prepare",
            "checkpoint.before_state",
            "checkpoint.after_state",
            "sink.commit",
            "checkpoint.after_commit",
        ];
        let point_disruptions = (0..count)
            .map(|_| {
                rng.chance(300).then(|| {
                    let point = POINTS[rng.range(0, POINTS.len() as u64 - 1) as usize];
                    let pause = rng.chance(600).then(|| Duration::from_millis(rng.range(1_000, 50_000)));
                    (point, rng.range(1, 20), pause)
                })
            })
            .collect();
        let session_timeout = Duration::from_millis(rng.range(3_000, 20_000));
        let mut max_rate = rng.chance(500).then(|| rng.range(20, 400));
        let eof = {
            let with_records: Vec<usize> = (0..partitions).filter(|p| records_of(*p) > 0).collect();
            (rng.chance(300) && !with_records.is_empty()).then(|| {
                let p = with_records[rng.range(0, with_records.len() as u64 - 1) as usize];
                (p, rng.range(0, records_of(p) - 1), rng.chance(500))
            })
        };
        let mut events = Vec::new();
        let mut joined = count;
        for _ in 0..rng.range(0, 4) {
            let at = Duration::from_millis(if rng.chance(700) {
                rng.range(0, 3_000)
            } else {
                rng.range(0, 30_000)
            });
            let name = format!("m{}", rng.range(0, joined as u64 - 1));
            match rng.range(0, 9) {
                // killed, started again after a while (under the same name), or never
                0..=3 => {
                    events.push(Event {
                        at,
                        action: Action::Kill(name.clone()),
                    });
                    if rng.chance(500) {
                        events.push(Event {
                            at: at + Duration::from_millis(rng.range(1, 30_000)),
                            action: Action::Start {
                                name,
                                crash_at: rng.chance(200).then(|| rng.range(1, 4000)),
                            },
                        });
                    }
                }
                // paused, maybe past its session timeout
                4 | 5 => events.push(Event {
                    at,
                    action: Action::Pause(name, Duration::from_millis(rng.range(100, 60_000))),
                }),
                // stopped, and started again later (or not)
                6 => {
                    events.push(Event {
                        at,
                        action: Action::Stop(name.clone()),
                    });
                    if rng.chance(600) {
                        events.push(Event {
                            at: at + Duration::from_millis(rng.range(1_000, 30_000)),
                            action: Action::Start { name, crash_at: None },
                        });
                    }
                }
                // a new member joins
                _ => {
                    events.push(Event {
                        at,
                        action: Action::Start {
                            name: format!("m{joined}"),
                            crash_at: None,
                        },
                    });
                    joined += 1;
                }
            }
        }
        events.sort_by_key(|e| e.at);
        let compaction_every = rng.chance(500).then(|| Duration::from_millis(rng.range(500, 10_000)));
        let faults = if rng.chance(300) {
            Faults {
                lookups: rng.range(0, 10),
                commits: rng.range(0, 30),
                offsets: rng.range(0, 10),
            }
        } else {
            Faults::default()
        };
        let schedule = Schedule {
            seed: rng.next_u64(),
            yield_per_mille: rng.range(0, 300) as u32,
            delay_per_mille: rng.range(0, 100) as u32,
            max_delay: Duration::from_micros(rng.range(1, 5_000)),
            crash_at: None,
            stop_at: None,
            fail_at: None,
            max_steps: 5_000_000,
        };
        // drawn last: the other draws of a seed are what they were before there was a choice
        let protocol = if rng.chance(333) {
            GroupProtocol::Classic
        } else {
            GroupProtocol::Consumer
        };
        let live = rng.chance(333);
        // drawn last too: a member that joins while the others read, so that running jobs hand
        // partitions over (the joins drawn above mostly come after short inputs are done)
        if rng.chance(500) {
            // the input read over 6 to 15 s: the join (and the leave) come while it is read
            let total: u64 = records.iter().sum();
            max_rate = Some((total / rng.range(6, 15)).max(5));
            let at = Duration::from_millis(rng.range(200, 4_000));
            let name = format!("m{joined}");
            events.push(Event {
                at,
                action: Action::Start {
                    name: name.clone(),
                    crash_at: None,
                },
            });
            // and leaves again (killed, or stopped), dealing back what it took over
            if rng.chance(500) {
                let later = at + Duration::from_millis(rng.range(1_000, 8_000));
                let action = if rng.chance(500) {
                    Action::Kill(name)
                } else {
                    Action::Stop(name)
                };
                events.push(Event { at: later, action });
            }
            events.sort_by_key(|e| e.at);
        }
        Plan {
            live,
            protocol,
            seed,
            records,
            input: INPUT.to_string(),
            transactional_input,
            members,
            crash_steps,
            pause_steps,
            point_disruptions,
            parallelism: rng.range(1, 2) as usize,
            checkpoint_interval: Duration::from_millis(rng.range(50, 1_000)),
            session_timeout,
            max_rate,
            eof: eof.filter(|_| !live),
            events,
            compaction_every,
            faults,
            schedule,
        }
    }

    /// The job as every member runs it (its name set per member).
    fn text(&self) -> String {
        let rate = self.max_rate.map(|r| format!("max_rate = {r}")).unwrap_or_default();
        let eof = match self.eof {
            Some((p, i, source_wide)) => format!(
                "eof = 'value == \"{p}:{i}\"'\neof_scope = \"{}\"",
                if source_wide { "source" } else { "partition" }
            ),
            None => String::new(),
        };
        format!(
            r#"
[job]
name = "sim"
parallelism = {parallelism}
coordination = "group"

[source]
type = "kafka"
bootstrap_servers = "{SERVERS}"
topics = ["{input}"]
format = "string"
{bounds}
{rate}
{eof}
{properties}

[sink]
type = "kafka"
bootstrap_servers = "{SERVERS}"
topic = "{OUTPUT}"
delivery = "exactly_once"
preserve_partition = true

[checkpoint]
interval = "{interval}ms"
store = "kafka"
"#,
            parallelism = self.parallelism,
            input = self.input,
            bounds = if self.live {
                "starting_offsets = \"earliest\""
            } else {
                "stopping_offsets = \"latest\""
            },
            // the consumer protocol's session timeout is the broker's (seed_input)
            properties = match self.protocol {
                GroupProtocol::Consumer => String::new(),
                GroupProtocol::Classic => format!(
                    "properties = {{ \"group.protocol\" = \"classic\", \"session.timeout.ms\" = \"{}\" }}",
                    self.session_timeout.as_millis()
                ),
            },
            interval = self.checkpoint_interval.as_millis(),
        )
    }

    /// Every member's config, loaded before the simulation starts (loading checks librdkafka
    /// properties with clients of its own).
    pub(crate) fn configs(&self) -> Result<Configs, String> {
        let text = self.text();
        let mut names: Vec<&String> = self.members.iter().collect();
        for e in &self.events {
            if let Action::Start { name, .. } = &e.action {
                names.push(name);
            }
        }
        let mut configs = BTreeMap::new();
        for name in names {
            if configs.contains_key(name) {
                continue;
            }
            let set = format!("job.member={name}");
            let mut config = crate::config::load_text(Path::new("simulation.toml"), &text, &[set])
                .map_err(|e| format!("the simulated job's config: {e:#}"))?;
            // named as on hosts of these names: dynamic members (the simulated coordinator has
            // no static membership)
            config.job.static_member = false;
            configs.insert(name.clone(), config);
        }
        Ok(Configs(configs))
    }

    /// The input: partition `p`'s records are `"p:i"` for `i` from 0, with timestamps in
    /// order; in transactions (some aborted, their records `"p:aborted"`) when the plan says so.
    /// And the output topic, with as many partitions.
    pub(crate) fn seed_input(&self, broker: &mut Broker) -> Vec<u64> {
        let partitions = self.records.len() as i32;
        broker.group_session_timeout = self.session_timeout;
        broker.create_topic(&self.input, partitions, BTreeMap::new());
        broker.create_topic(OUTPUT, partitions, BTreeMap::new());
        let mut rng = SplitMix64(self.seed ^ 0x1a2b);
        // each committed record's timestamp, per partition (the input's clock ticks per record)
        let mut stamps: Vec<Vec<i64>> = vec![Vec::new(); self.records.len()];
        for (p, count) in self.records.iter().enumerate() {
            let p = p as i32;
            let mut i = 0;
            while i < *count {
                let chunk = if self.transactional_input {
                    rng.range(1, 8).min(count - i)
                } else {
                    count - i
                };
                let aborted = self.transactional_input && rng.chance(200);
                let values = (0..chunk)
                    .map(|k| match aborted {
                        true => format!("{p}:aborted").into_bytes(),
                        false => format!("{p}:{}", i + k).into_bytes(),
                    })
                    .collect();
                let written = broker.write_input(&self.input, p, values, self.transactional_input, !aborted);
                if !aborted {
                    stamps[p as usize].extend(written);
                    i += chunk;
                }
            }
        }
        self.expected(&stamps)
    }

    /// How many records of each partition the output must end with: all, or up to the
    /// end-of-stream record (not emitted): in its partition, or with a source-wide stop in every
    /// partition, those stamped before it.
    fn expected(&self, stamps: &[Vec<i64>]) -> Vec<u64> {
        let mut expected = self.records.clone();
        match self.eof {
            Some((p, i, false)) => expected[p] = i,
            Some((p, i, true)) => {
                let stop = stamps[p][i as usize];
                for (q, ts) in stamps.iter().enumerate() {
                    expected[q] = ts.iter().filter(|t| **t < stop).count() as u64;
                }
            }
            None => {}
        }
        expected
    }
}

/// Each member's config.
pub(crate) struct Configs(BTreeMap<String, Config>);

impl Configs {
    /// Member `name`'s.
    pub(crate) fn of(&self, name: &str) -> Config {
        self.0
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no config for member {name}"))
    }
}
