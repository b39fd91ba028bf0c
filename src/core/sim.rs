//! Deterministic simulation hooks (in the spirit of FoundationDB's simulator and TigerBeetle's
//! VOPR): the runtime calls [`point`] at every hand-over and await (a queue put, a channel send,
//! a checkpoint step). Normally that is a no-op. Under a [`Simulation`] entered on this thread,
//! where the whole job runs as tasks of one single-threaded tokio runtime with paused (virtual)
//! time, each point draws from one seeded generator: go on, yield to the other tasks, sleep a
//! random virtual while, or crash. A crash freezes everything durable from that step on, as
//! `kill -9` would; the simulation's driver then drops the runtime and restarts the job. At a
//! [`sync_point`] (a durable operation: a state file write, a simulated sink's write) the
//! schedule may also inject a fault (an I/O error), which the job must survive by failing
//! cleanly. The same seed replays the same schedule, so a seed is a bug report.
//!
//! Why this and not a simulation crate: turmoil simulates networks (tidegate's runtime has none
//! inside one process), madsim replaces tokio wholesale, and loom/shuttle explore thread
//! interleavings of small models, not a whole job with its disk. One paused current-thread
//! runtime plus seeded points at the runtime's own hand-overs runs the real code unchanged.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;

/// How a simulated schedule perturbs the run.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The seed of the one generator every decision comes from.
    pub seed: u64,
    /// Out of 1,000 points, how many yield to the other tasks.
    pub yield_per_mille: u32,
    /// Out of 1,000 points, how many sleep a random virtual time up to `max_delay`.
    pub delay_per_mille: u32,
    /// The longest random delay.
    pub max_delay: Duration,
    /// Crash at this step (the n-th point reached), if the run gets there.
    pub crash_at: Option<u64>,
    /// Send the stop signal (a first SIGTERM) at this step.
    pub stop_at: Option<u64>,
    /// Fail the durable operation at the first [`sync_point`] at or after this step.
    pub fail_at: Option<u64>,
    /// Points a run may reach: beyond, it counts as hung (a livelock that keeps checkpointing).
    pub max_steps: u64,
}

/// What a simulated run went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Points reached.
    pub steps: u64,
    /// A hash of the points' names in the order they were reached: two runs of one seed agree.
    pub hash: u64,
    /// The point the crash happened at.
    pub crashed_at: Option<&'static str>,
    /// The stop signal was sent.
    pub stopped: bool,
    /// The durable operation an I/O fault was injected into.
    pub failed_at: Option<&'static str>,
    /// The run reached [`Schedule::max_steps`] (it was then halted like a crash).
    pub hung: bool,
}

struct State {
    schedule: Schedule,
    rng: SplitMix64,
    trace: Trace,
    stop: Option<watch::Sender<bool>>,
    crashed: Rc<tokio::sync::Notify>,
}

/// A simulation entered on the current thread (see the module docs).
pub struct Simulation {
    state: Rc<RefCell<State>>,
    crashed: Rc<tokio::sync::Notify>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
}

impl Simulation {
    /// Enter a simulation on this thread; `stop` is the job's stop signal, sent at
    /// [`Schedule::stop_at`]. The simulation ends when this value is dropped.
    pub fn enter(schedule: Schedule, stop: Option<watch::Sender<bool>>) -> Self {
        let crashed = Rc::new(tokio::sync::Notify::new());
        let state = Rc::new(RefCell::new(State {
            rng: SplitMix64(schedule.seed),
            schedule,
            trace: Trace {
                hash: FNV_OFFSET,
                ..Trace::default()
            },
            stop,
            crashed: Rc::clone(&crashed),
        }));
        CURRENT.with(|c| *c.borrow_mut() = Some(Rc::clone(&state)));
        Simulation { state, crashed }
    }

    /// Completes when the simulated process crashed.
    pub async fn crashed(&self) {
        if self.state.borrow().trace.crashed_at.is_some() {
            return;
        }
        self.crashed.notified().await
    }

    /// What the simulation did so far, to replay or print a failing seed.
    pub fn trace(&self) -> Trace {
        self.state.borrow().trace.clone()
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// Whether a simulation runs on this thread (the runtime then runs its fetchers and its sink as
/// tasks, not threads).
pub fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Whether the simulated process has crashed: nothing durable may change any more.
pub fn crashed() -> bool {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|s| s.borrow().trace.crashed_at.is_some())
    })
}

enum Decision {
    Go,
    Yield,
    Sleep(Duration),
    /// Crashed (now or before): this task never goes on.
    Halt,
    /// (Sync points only) the operation fails with an I/O error.
    Fail,
}

fn decide(name: &'static str, durable: bool) -> Decision {
    CURRENT.with(|c| {
        let current = c.borrow();
        let Some(state) = current.as_ref() else {
            return Decision::Go;
        };
        let mut s = state.borrow_mut();
        if s.trace.crashed_at.is_some() {
            return Decision::Halt;
        }
        s.trace.steps += 1;
        let step = s.trace.steps;
        s.trace.hash = name
            .bytes()
            .fold(s.trace.hash ^ step, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME));
        if s.schedule.stop_at == Some(step) {
            s.trace.stopped = true;
            if let Some(stop) = s.stop.take() {
                let _ = stop.send(true);
            }
        }
        if s.schedule.crash_at == Some(step) || step > s.schedule.max_steps {
            s.trace.hung = step > s.schedule.max_steps;
            s.trace.crashed_at = Some(name);
            s.crashed.notify_one();
            return Decision::Halt;
        }
        if durable && s.trace.failed_at.is_none() && s.schedule.fail_at.is_some_and(|at| step >= at) {
            s.trace.failed_at = Some(name);
            return Decision::Fail;
        }
        let roll = (s.rng.next_u64() % 1000) as u32;
        if roll < s.schedule.delay_per_mille {
            let max = s.schedule.max_delay.as_micros().max(1) as u64;
            Decision::Sleep(Duration::from_micros(s.rng.next_u64() % max))
        } else if roll < s.schedule.delay_per_mille + s.schedule.yield_per_mille {
            Decision::Yield
        } else {
            Decision::Go
        }
    })
}

/// A hand-over or await of the runtime: under a simulation, a seeded delay or a crash (after
/// which this task never goes on); otherwise nothing.
pub async fn point(name: &'static str) {
    match decide(name, false) {
        Decision::Go | Decision::Fail => {}
        Decision::Yield => tokio::task::yield_now().await,
        Decision::Sleep(d) => tokio::time::sleep(d).await,
        Decision::Halt => std::future::pending().await,
    }
}

/// Why a durable operation must not happen (see [`sync_point`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// The simulated process crashed here or before: stop as if it had died.
    Crashed,
    /// An injected I/O error: fail the operation, as a full disk would.
    Fault,
}

/// A durable operation (a state file write, a simulated sink's write) about to happen, in code
/// that cannot await: `Some` when it must not, under a simulation; otherwise `None`.
pub fn sync_point(name: &'static str) -> Option<Interrupt> {
    match decide(name, true) {
        Decision::Halt => Some(Interrupt::Crashed),
        Decision::Fail => Some(Interrupt::Fault),
        _ => None,
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// SplitMix64 (Steele, Lea, Flood): one seeded generator, small and reproducible everywhere.
/// Hand-rolled: the core has no `rand`, and a simulation needs nothing more than this.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    /// True `per_mille` times out of 1,000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next_u64() % 1000 < per_mille
    }
}
