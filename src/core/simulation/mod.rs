//! The deterministic simulation of the runtime (tests only): the whole job — enumerator,
//! readers, split fetchers, the queue, the coordinator, the sink driver and the state file — on
//! the number-sequence source (splits pulled by the readers) or a source that resolves its start
//! at a delayed asynchronous discovery and pushes its splits (`resolving`), under a schedule drawn from one seed: random delays and yields at
//! every hand-over, random checkpoint timing, a stop signal, a second one (which exits at once, a
//! crash), a crash at any step, an injected I/O error (the job must fail, not hang), and a
//! restore at a random parallelism. After every run the output
//! a restart would see must be exactly what the state file covers; at the end, exactly the input.
//! A failure names its seed, and the seed replays it (see `tests`).

mod check;
#[cfg(test)]
mod found;
mod resolving;
mod sinks;
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use self::check::{Range, SinkKind};
use self::resolving::{Log, ResolvingSource};
use self::sinks::{Disk, SharedDisk, TransactionalSink, TruncatingSink};
use crate::fetcher::FetcherMode;
use crate::job::Job;
use crate::job_options::JobOptions;
use crate::number_sequence::{split_range, NumberSequenceSource};
use crate::sim::{Schedule, Simulation, SplitMix64, Trace};
use crate::sink::Sink;
use crate::state::StateStore;
use crate::EofOnRecordEvaluator;

/// Virtual time a run may take before it counts as hung.
const RUN_LIMIT: Duration = Duration::from_secs(3600);

/// One seed's plan: the input, the job's settings, and how each run is disrupted.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) count: u64,
    pub(crate) splits: usize,
    pub(crate) batch_size: usize,
    pub(crate) queue_capacity: usize,
    pub(crate) fetcher_mode: FetcherMode,
    pub(crate) sink: SinkKind,
    pub(crate) sink_capacity: usize,
    pub(crate) markers: Vec<u64>,
    pub(crate) checkpoint_interval: Option<Duration>,
    /// The resolving source (a start found by a delayed discovery), after this virtual delay.
    pub(crate) resolving: Option<Duration>,
    pub(crate) runs: Vec<RunPlan>,
}

/// How one run (one simulated process) goes.
#[derive(Debug, Clone)]
pub(crate) struct RunPlan {
    pub(crate) parallelism: usize,
    pub(crate) schedule: Schedule,
}

impl Plan {
    /// Everything from the seed.
    pub(crate) fn of(seed: u64) -> Plan {
        let mut rng = SplitMix64(seed);
        let count = if rng.chance(30) { 0 } else { rng.range(1, 600) };
        let splits = rng.range(1, 6) as usize;
        let batch_size = rng.range(1, 64) as usize;
        let resolving = rng.chance(300).then(|| Duration::from_micros(rng.range(0, 40_000)));
        let markers = if resolving.is_none() && rng.chance(300) && count > 0 {
            (0..rng.range(1, 3)).map(|_| rng.range(0, count - 1)).collect()
        } else {
            Vec::new()
        };
        let checkpoint_interval = if rng.chance(100) {
            None
        } else {
            Some(Duration::from_micros(rng.range(200, 20_000)))
        };
        // about the steps one uninterrupted run takes, to place stops and crashes inside it
        let budget = 10 * (count / batch_size as u64 + splits as u64) + 60;
        let disrupted = rng.range(0, 4);
        let mut runs = Vec::new();
        for i in 0..=disrupted {
            let mut schedule = Schedule {
                seed: rng.next_u64(),
                yield_per_mille: rng.range(0, 300) as u32,
                delay_per_mille: rng.range(0, 200) as u32,
                max_delay: Duration::from_micros(rng.range(1, 5_000)),
                crash_at: None,
                stop_at: None,
                fail_at: None,
                max_steps: 40 * budget + 20_000,
            };
            if i < disrupted {
                match rng.range(0, 10) {
                    // an I/O error in a state file or sink write: the job must fail cleanly
                    10 => schedule.fail_at = Some(rng.range(1, budget)),
                    // a stop (a first SIGTERM): a final checkpoint, then the next run
                    0..=2 => schedule.stop_at = Some(rng.range(1, budget)),
                    // a second signal during the stop: an exit at once, a crash
                    3 => {
                        let stop = rng.range(1, budget);
                        schedule.stop_at = Some(stop);
                        schedule.crash_at = Some(stop + rng.range(1, budget / 4 + 1));
                    }
                    // a crash at any step
                    _ => schedule.crash_at = Some(rng.range(1, budget)),
                }
            }
            runs.push(RunPlan {
                parallelism: rng.range(1, 4) as usize,
                schedule,
            });
        }
        Plan {
            count,
            splits,
            batch_size,
            queue_capacity: rng.range(1, 3) as usize,
            fetcher_mode: if rng.chance(500) {
                FetcherMode::PerSplit
            } else {
                FetcherMode::Single
            },
            sink: if rng.chance(500) {
                SinkKind::Truncating
            } else {
                SinkKind::Transactional
            },
            sink_capacity: rng.range(1, 3) as usize,
            markers,
            checkpoint_interval,
            resolving,
            runs,
        }
    }

    /// The plan as Rust (a named schedule's literal, see `found`), so that a schedule that found
    /// a bug stays what it was whatever happens to how seeds are drawn.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn literal(&self) -> String {
        let us = |d: Duration| format!("Duration::from_micros({})", d.as_micros());
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                let s = &r.schedule;
                format!(
                    "RunPlan {{ parallelism: {}, schedule: Schedule {{ seed: {}, yield_per_mille: {}, delay_per_mille: {}, max_delay: {}, crash_at: {:?}, stop_at: {:?}, fail_at: {:?}, max_steps: {} }} }}",
                    r.parallelism, s.seed, s.yield_per_mille, s.delay_per_mille, us(s.max_delay), s.crash_at, s.stop_at, s.fail_at, s.max_steps
                )
            })
            .collect();
        format!(
            "Plan {{ count: {}, splits: {}, batch_size: {}, queue_capacity: {}, fetcher_mode: FetcherMode::{:?}, sink: SinkKind::{:?}, sink_capacity: {}, markers: vec!{:?}, checkpoint_interval: {}, resolving: {}, runs: vec![{}] }}",
            self.count,
            self.splits,
            self.batch_size,
            self.queue_capacity,
            self.fetcher_mode,
            self.sink,
            self.sink_capacity,
            self.markers,
            self.checkpoint_interval.map_or("None".to_string(), |d| format!("Some({})", us(d))),
            self.resolving.map_or("None".to_string(), |d| format!("Some({})", us(d))),
            runs.join(", ")
        )
    }

    /// The splits' ranges: from 0, or from where the resolving source resolved its start
    /// (`resolved`; none before it did).
    fn ranges(&self, resolved: Option<u64>) -> Vec<Range> {
        let from = match (self.resolving, resolved) {
            (None, _) => 0,
            (Some(_), Some(from)) => from,
            (Some(_), None) => return Vec::new(),
        };
        split_range(from, from + self.count, self.splits)
            .into_iter()
            .map(|s| {
                let first_marker = self
                    .markers
                    .iter()
                    .copied()
                    .filter(|m| *m >= s.next_offset && *m < s.end)
                    .min();
                Range {
                    id: s.id,
                    start: s.next_offset,
                    end: s.end,
                    expected_end: first_marker.unwrap_or(s.end),
                }
            })
            .collect()
    }

    fn resolving_source(&self, log: &Arc<Log>, delay: Duration) -> ResolvingSource {
        ResolvingSource {
            log: Arc::clone(log),
            count: self.count,
            splits: self.splits,
            discovery_delay: delay,
            // its markers are not drawn: the numbers it reads depend on where it resolved
            reading: self.source(),
        }
    }

    fn source(&self) -> NumberSequenceSource {
        let mut source = NumberSequenceSource::new(0, self.count, self.splits);
        source.batch_size = self.batch_size;
        source.queue_capacity = self.queue_capacity;
        source.fetcher_mode = self.fetcher_mode;
        if !self.markers.is_empty() {
            let markers = self.markers.clone();
            let eof: Arc<dyn EofOnRecordEvaluator<u64>> = Arc::new(move |v: &u64| markers.contains(v));
            source.eof = Some(eof);
        }
        source
    }
}

/// What one schedule went through.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) runs: usize,
    pub(crate) crashes: usize,
    /// Runs failed by an injected I/O error.
    pub(crate) faults: usize,
    pub(crate) stops: usize,
    /// Restores at another parallelism than the run before.
    pub(crate) rescaled: usize,
    pub(crate) steps: u64,
    /// The runs' trace hashes, combined: equal for two runs of one seed.
    pub(crate) hash: u64,
    /// The final output.
    pub(crate) output: Vec<u64>,
}

/// Run the schedule of `seed` in `dir` (a fresh directory); `Err` says what broke.
pub(crate) fn run_seed(seed: u64, dir: &Path) -> Result<Outcome, String> {
    run_seed_plan(&Plan::of(seed), seed, dir)
}

/// Run `plan` (seed `seed`'s, or a named schedule's) in `dir`; a crash's loss of unsynced data is
/// drawn from `seed`.
pub(crate) fn run_seed_plan(plan: &Plan, seed: u64, dir: &Path) -> Result<Outcome, String> {
    let plan = plan.clone();
    let log = Arc::new(Log::default());
    let path = dir.join("job.state");
    let disk: SharedDisk = Arc::new(Mutex::new(Disk::default()));
    // the state file on a disk that keeps only what was synced through a crash
    let state_disk = std::rc::Rc::new(std::cell::RefCell::new(crate::disk::SimulatedDisk::default()));
    let _on_disk = crate::disk::SimulatedDisk::enter(std::rc::Rc::clone(&state_disk));
    let mut crash_rng = SplitMix64(seed ^ 0x5eed);
    let mut outcome = Outcome::default();
    let mut previous_parallelism = None;
    let mut recorded = None;
    for (i, run) in plan.runs.iter().enumerate() {
        let last = i + 1 == plan.runs.len();
        // records arrive while the job is down
        log.end.fetch_add(3, std::sync::atomic::Ordering::SeqCst);
        let (ended, trace) = run_once(&plan, run, &path, &disk, &log)
            .map_err(|e| format!("run {i} (parallelism {}): {e}", run.parallelism))?;
        outcome.runs += 1;
        outcome.steps += trace.steps;
        outcome.hash = outcome.hash.rotate_left(7) ^ trace.hash;
        if previous_parallelism.is_some_and(|p| p != run.parallelism) {
            outcome.rescaled += 1;
        }
        previous_parallelism = Some(run.parallelism);
        let mut disk = disk.lock().unwrap_or_else(|p| p.into_inner());
        match ended {
            Ended::Crashed => {
                outcome.crashes += 1;
                disk.crash(&mut crash_rng);
                state_disk.borrow_mut().crash(&mut crash_rng);
            }
            Ended::Failed => {
                // the process exited: what it wrote is in the page cache, and stays
                outcome.faults += 1;
                disk.exit();
            }
            Ended::Stopped => outcome.stops += 1,
            Ended::Finished => {}
        }
        // what the next start resumes from, and the output it resumes with
        let state: Option<Value> = crate::state::read_state(&path).map_err(|e| format!("run {i}: {e}"))?;
        let checkpoint = check::resumed(state.as_ref(), plan.sink, &disk);
        // the resolving source: the first start a state file recorded is kept by every restart
        recorded = recorded.or_else(|| check::resolution(state.as_ref()));
        let resolved = check::resolution(checkpoint.as_ref());
        if recorded.is_some() && resolved != recorded {
            return Err(format!(
                "after run {i} ({ended:?}): the restart resumes with the start resolved at {resolved:?}, a state file recorded {recorded:?}"
            ));
        }
        let ranges = plan.ranges(resolved);
        let covered = check::coverage(checkpoint.as_ref(), &ranges).map_err(|e| format!("after run {i}: {e}"))?;
        // after a crash or a failure, what a restart resumes with; after a stop or the end, what
        // the process left (nothing beyond its final checkpoint)
        let whole = matches!(ended, Ended::Stopped | Ended::Finished);
        let output = check::durable_output(plan.sink, &disk, checkpoint.as_ref(), whole)
            .map_err(|e| format!("after run {i} ({ended:?}): {e}"))?;
        let ended_input = checkpoint.as_ref().is_some_and(|c| c["end_of_input"] == true);
        check::output_matches(&output, &covered, &ranges, ended_input)
            .map_err(|e| format!("after run {i} ({ended:?} at {:?}): {e}", trace.crashed_at))?;
        if last {
            if ended != Ended::Finished {
                return Err(format!("the last run did not finish: {ended:?}"));
            }
            check::complete(&covered, &ranges).map_err(|e| format!("at the end: {e}"))?;
            if !ended_input {
                return Err("the last state file does not say the input ended".into());
            }
            outcome.output = output;
        }
    }
    Ok(outcome)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Crashed,
    /// Failed by an injected I/O error, as it should.
    Failed,
    Stopped,
    Finished,
}

/// One simulated process: the job on a paused current-thread runtime until it ends or crashes.
fn run_once(
    plan: &Plan,
    run: &RunPlan,
    path: &PathBuf,
    disk: &SharedDisk,
    log: &Arc<Log>,
) -> Result<(Ended, Trace), String> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let simulation = Simulation::enter(run.schedule.clone(), Some(stop_tx));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let store = StateStore::open(path).map_err(|e| e.to_string())?;
    let mut options = JobOptions::new("simulation", run.parallelism);
    options.checkpoint_interval = plan.checkpoint_interval;
    options.sink_capacity = plan.sink_capacity;
    let sink: Box<dyn Sink<u64>> = match plan.sink {
        SinkKind::Truncating => Box::new(TruncatingSink { disk: Arc::clone(disk) }),
        SinkKind::Transactional => Box::new(TransactionalSink {
            disk: Arc::clone(disk),
            open: None,
        }),
    };
    let report = async {
        match plan.resolving {
            Some(delay) => {
                let job = Job::new(plan.resolving_source(log, delay), options);
                job.with_state(store)
                    .with_stop_signal(stop_rx)
                    .run(sink)
                    .await
                    .map(|r| r.stopped)
            }
            None => {
                let job = Job::new(plan.source(), options);
                job.with_state(store)
                    .with_stop_signal(stop_rx)
                    .run(sink)
                    .await
                    .map(|r| r.stopped)
            }
        }
    };
    let ended = runtime.block_on(async {
        tokio::select! {
            biased;
            _ = simulation.crashed() => Ok(Ended::Crashed),
            result = tokio::time::timeout(RUN_LIMIT, report) => match result {
                Err(_) => Err(format!("hung: no end after {RUN_LIMIT:?} of virtual time")),
                Ok(Err(_)) if simulation.trace().failed_at.is_some() => Ok(Ended::Failed),
                Ok(Err(e)) => Err(format!("the job failed: {e}")),
                Ok(Ok(_)) if simulation.trace().failed_at.is_some() => {
                    Err("an injected I/O error was swallowed: the job ended well".to_string())
                }
                Ok(Ok(true)) => Ok(Ended::Stopped),
                Ok(Ok(_)) => Ok(Ended::Finished),
            },
        }
    });
    // the process is gone: every task with it
    drop(runtime);
    let trace = simulation.trace();
    drop(simulation);
    let ended = ended.map_err(|e| format!("{e} (trace: {trace:?})"))?;
    if trace.hung {
        return Err(format!(
            "hung: no end after {} steps (trace: {trace:?})",
            run.schedule.max_steps
        ));
    }
    Ok((ended, trace))
}
