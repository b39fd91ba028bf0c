//! The deterministic simulation across processes (tests only): several members of a
//! group-coordinated job (`job.coordination = "group"`), each running tidegate's own code — the
//! group member loop (`coordination::run_member`), the Kafka checkpoint store, the exactly-once
//! Kafka sink with its recovery and the checkpoints in its transactions (KIP-618), KIP-447 fencing,
//! and the Kafka source's enumerator, restore and emitter — against a simulated Kafka
//! ([`kafka`]), on the runtime simulation's one seeded scheduler and virtual clock
//! ([`crate::core::sim`]). A seed draws the input, the job, and what happens to the members:
//! killed at any of their steps or at a moment, paused past their session timeout, stopped,
//! started again under the same name, or never again; the cluster compacts and fails requests.
//! After each schedule ([`check`]): every record of the bounded input is in the committed output
//! at most once and in order per partition, and all of it once when a member ended by itself
//! with success; no fenced writer's transaction committed; every member still alive ended.
//!
//! Not simulated: librdkafka itself (its retries, its fetch path: the source reads through a
//! split reader of the simulated cluster, `kafka::reader`), the network's timing beyond what a
//! schedule's delays give, and the static instances' Kafka store (`job.instance`).

mod check;
pub(crate) mod kafka;
mod plan;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::client::cluster;
use crate::core::sim::{Simulation, Trace};
pub(crate) use plan::{Action, Plan};

/// Where the simulated cluster answers.
pub(crate) const SERVERS: &str = "simulated-kafka:9092";
/// The topics.
pub(crate) const INPUT: &str = "input";
pub(crate) const OUTPUT: &str = "output";
pub(crate) const STATE: &str = "tidegate-state";
/// Virtual time a schedule may take before what is still running counts as hung.
const LIMIT: Duration = Duration::from_secs(3600);

/// How a member process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Still running when the schedule ended (a hang, unless it was killed or paused).
    Running,
    /// Its task panicked, saying this.
    Panicked(String),
    Killed,
    /// It returned: `Ok` with or without a stop signal, or its error.
    Returned {
        signalled: bool,
        result: Result<(), String>,
        /// What of the input was not in the committed output at that moment.
        unfinished: Vec<String>,
    },
}

/// One member process of a schedule.
#[derive(Debug, Clone)]
pub(crate) struct MemberRun {
    pub(crate) name: String,
    pub(crate) pid: usize,
    pub(crate) exit: Exit,
    /// How many times it ran the job (once per change of its own assignment).
    pub(crate) runs: u64,
    /// Partitions its running jobs gave up, and took in, without stopping.
    pub(crate) released: u64,
    pub(crate) taken: u64,
}

/// What one schedule went through.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    pub(crate) members: Vec<MemberRun>,
    pub(crate) trace: Trace,
    /// The committed output, per input partition, in order: the input index of each record.
    pub(crate) output: Vec<Vec<u64>>,
    /// How many records of each partition the output must end with.
    pub(crate) expected: Vec<u64>,
    /// The cluster's own account, for a failure's report.
    pub(crate) events: Vec<String>,
    /// The state topic's log at the end.
    pub(crate) state_log: Vec<String>,
    /// The largest record produced to the state topic.
    pub(crate) largest_state_record: usize,
}

/// How a member's process returned: its result, and what of the input was unfinished then.
type Ended = (Result<(), String>, Vec<String>);

/// A member process as the driver tracks it.
struct Running {
    name: String,
    pid: usize,
    stop: watch::Sender<bool>,
    signalled: bool,
    done: Arc<Mutex<Option<Ended>>>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<crate::core::JobStats>,
}

/// Run `plan`; `Err` says which invariant broke, with the schedule's account.
pub(crate) fn run(plan: &Plan) -> Result<Outcome, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let simulation = Simulation::enter(plan.schedule.clone(), None);
    let kafka = kafka::SimKafka::new(plan.seed, plan.faults);
    let guard = cluster::simulate(SERVERS, Arc::new(kafka::SimCluster(Arc::clone(&kafka))));
    // loaded on the simulated cluster: its clients are not librdkafka's to probe
    let configs = plan.configs()?;
    let readers = Arc::clone(&kafka);
    let _readers = crate::kafka::split_reader::simulate(
        SERVERS,
        Arc::new(move |settings| kafka::split_reader(&readers, settings)),
    );
    let expected = plan.seed_input(&mut kafka.broker());
    let local = tokio::task::LocalSet::new();
    let members = runtime.block_on(local.run_until(drive(plan, &expected, &configs, &simulation, &kafka)));
    drop(local);
    // every task goes, the killed processes' too, while the simulation still says who is dead
    drop(runtime);
    let trace = simulation.trace();
    drop(guard);
    drop(simulation);
    let broker = kafka.broker();
    let outcome = Outcome {
        output: check::output(&expected, &broker),
        expected: expected.clone(),
        members,
        trace,
        events: broker.events.clone(),
        state_log: broker.dump(STATE),
        largest_state_record: broker.largest.get(STATE).copied().unwrap_or(0),
    };
    drop(broker);
    check::invariants(plan, &outcome, &kafka).map_err(|e| outcome.report(plan, &e))?;
    Ok(outcome)
}

/// Start the members, apply the plan's events at their times, then wait for every member still
/// running to end (at most [`LIMIT`] of virtual time).
async fn drive(
    plan: &Plan,
    expected: &[u64],
    configs: &plan::Configs,
    simulation: &Simulation,
    kafka: &Arc<kafka::SimKafka>,
) -> Vec<MemberRun> {
    let began = tokio::time::Instant::now();
    let mut running: Vec<Running> = Vec::new();
    let start = |name: &str, crash_at: Option<u64>, running: &mut Vec<Running>| {
        let pid = simulation.add_process(crash_at);
        let (stop, stopped) = watch::channel(false);
        let done = Arc::new(Mutex::new(None));
        let config = configs.of(name);
        let result = Arc::clone(&done);
        let (kafka, records) = (Arc::clone(kafka), expected.to_vec());
        let session = crate::assembly::Session::simulated(stopped);
        let stats = Arc::clone(session.stats());
        let task = simulation.spawn_local_in(pid, async move {
            let outcome = crate::assembly::group::run_member(&config, &session, false, true, None).await;
            let unfinished = check::unfinished(&records, &check::output(&records, &kafka.broker()));
            *result.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((outcome.map_err(|e| with_causes(&e)), unfinished));
        });
        running.push(Running {
            name: name.to_string(),
            pid,
            stop,
            signalled: false,
            done,
            task,
            stats,
        });
    };
    for (i, name) in plan.members.iter().enumerate() {
        start(name, plan.crash_steps.get(i).copied().flatten(), &mut running);
        if let (Some(Some((step, pause))), Some(r)) = (plan.pause_steps.get(i), running.last()) {
            simulation.pause_at(r.pid, *step, *pause);
        }
        if let (Some(Some((point, nth, pause))), Some(r)) = (plan.point_disruptions.get(i), running.last()) {
            simulation.disrupt_at_point(r.pid, point, *nth, *pause);
        }
    }
    let mut compactions = plan
        .compaction_every
        .map(|every| tokio::time::interval_at(began + every, every));
    let mut events = plan.events.iter().peekable();
    let deadline = began + LIMIT;
    loop {
        let ended = running.iter().all(|r| {
            simulation.is_dead(r.pid)
                || r.task.is_finished()
                || r.done.lock().unwrap_or_else(|p| p.into_inner()).is_some()
        });
        if events.peek().is_none() && ended {
            break;
        }
        // a live tail whose output holds the whole input: every member still running is asked
        // to stop (one that never gets there hangs, and the check says so)
        if plan.live
            && events.peek().is_none()
            && check::unfinished(expected, &check::output(expected, &kafka.broker())).is_empty()
        {
            for r in running.iter_mut().filter(|r| !r.signalled) {
                r.signalled = true;
                let _ = r.stop.send(true);
            }
        }
        let next_event = events.peek().map(|e| began + e.at);
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(next_event.unwrap_or(deadline)), if next_event.is_some() => {
                let Some(event) = events.next() else { continue };
                let find = |name: &str, running: &[Running]| {
                    running.iter().rposition(|r| r.name == name)
                };
                match &event.action {
                    Action::Start { name, crash_at } => start(name, *crash_at, &mut running),
                    Action::Kill(name) => {
                        if let Some(i) = find(name, &running) {
                            simulation.kill(running[i].pid);
                        }
                    }
                    Action::Pause(name, pause) => {
                        if let Some(i) = find(name, &running) {
                            simulation.pause(running[i].pid, tokio::time::Instant::now() + *pause);
                        }
                    }
                    Action::DeleteTopic(topic) => kafka.broker().delete_topic(topic),
                    Action::Stop(name) => {
                        if let Some(i) = find(name, &running) {
                            running[i].signalled = true;
                            let _ = running[i].stop.send(true);
                        }
                    }
                }
            }
            _ = async {
                match compactions.as_mut() {
                    Some(c) => { c.tick().await; }
                    None => std::future::pending().await,
                }
            } => kafka.broker().compact(),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    let mut members = Vec::new();
    for r in running {
        let done = r.done.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let exit = match done {
            Some((result, unfinished)) => Exit::Returned {
                signalled: r.signalled,
                result,
                unfinished,
            },
            None if simulation.is_dead(r.pid) => Exit::Killed,
            None if r.task.is_finished() => match r.task.await {
                Err(e) if e.is_panic() => {
                    let panic = e.into_panic();
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Exit::Panicked(message)
                }
                _ => Exit::Panicked("its task ended without a result".into()),
            },
            None => Exit::Running,
        };
        members.push(MemberRun {
            name: r.name,
            pid: r.pid,
            exit,
            runs: r.stats.group_runs.load(std::sync::atomic::Ordering::Relaxed),
            released: r.stats.group_released.load(std::sync::atomic::Ordering::Relaxed),
            taken: r.stats.group_taken.load(std::sync::atomic::Ordering::Relaxed),
        });
    }
    members
}

/// An error as the command line prints it: its message, then each cause's (the client's own
/// error, which the check reads).
fn with_causes(e: &crate::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    message
}

impl Outcome {
    /// The failure `e`, with what the schedule was and what its members and the cluster did.
    fn report(&self, plan: &Plan, e: &str) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("  {} (process {}): {:?}", m.name, m.pid, m.exit))
            .collect();
        let tail = self.events.len().saturating_sub(40);
        let state_tail = self.state_log.len().saturating_sub(30);
        format!(
            "{e}\nplan: {plan:?}\noutput: {:?}\nmembers:\n{}\ncluster (last {} events):\n  {}\nstate topic (last {}):\n  {}\ntrace: {:?}",
            self.output,
            members.join("\n"),
            self.events.len() - tail,
            self.events[tail..].join("\n  "),
            self.state_log.len() - state_tail,
            self.state_log[state_tail..].join("\n  "),
            self.trace
        )
    }
}
