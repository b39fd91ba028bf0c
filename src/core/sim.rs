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
//!
//! Several processes can share one simulation (a consumer group's members against one simulated
//! Kafka): each runs as tasks started with [`Simulation::spawn_in`] (and, inside it, with
//! [`spawn`]), which know their process. A process can be killed at any of its own steps or by
//! the simulation's driver, and paused (as `SIGSTOP` would, past its session timeout): a killed
//! process's tasks are never polled again, and nothing of it runs, not even its drops, until the
//! whole simulation ends.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
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
    /// The processes of a simulation of several ([`Simulation::add_process`]); process 0 is the
    /// one of a single-process simulation, and the driver's.
    processes: Vec<Process>,
    /// When the simulation began (virtual), for its wall clock.
    began: Option<tokio::time::Instant>,
    /// The last number [`unique`] gave.
    unique: u64,
    /// This simulation among those of the test process ([`instance`]).
    instance: u64,
}

/// One simulated process's fate.
#[derive(Debug, Clone, Default)]
struct Process {
    /// Its points reached.
    steps: u64,
    /// Killed at this of its own steps.
    crash_at: Option<u64>,
    /// Stopped at this of its own steps, for this long.
    pause_at: Option<(u64, Duration)>,
    /// Killed (`None`) or stopped for a while at the n-th time it reaches a named point.
    at_point: Option<(&'static str, u64, Option<Duration>)>,
    /// How often it reached the point of `at_point`.
    reached: u64,
    /// Killed (at a step, or by the driver): its tasks never run again.
    dead: bool,
    /// Stopped until then.
    paused_until: Option<tokio::time::Instant>,
}

/// A simulation entered on the current thread (see the module docs).
pub struct Simulation {
    state: Rc<RefCell<State>>,
    crashed: Rc<tokio::sync::Notify>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
    /// The process whose task is being polled.
    static PROCESS: Cell<usize> = const { Cell::new(0) };
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
            processes: vec![Process::default()],
            began: None,
            unique: 0,
            instance: {
                static SIMULATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                SIMULATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
            },
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

    /// A new process (its id), alive; killed at its own step `crash_at`, if it gets there.
    pub fn add_process(&self, crash_at: Option<u64>) -> usize {
        let mut s = self.state.borrow_mut();
        s.processes.push(Process {
            crash_at,
            ..Process::default()
        });
        s.processes.len() - 1
    }

    /// Run `future` as a task of process `pid` (see the module docs).
    pub fn spawn_in<F>(&self, pid: usize, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(InProcess::new(pid, future))
    }

    /// Run `future` (which need not be `Send`) as a task of process `pid`, on the `LocalSet` the
    /// simulation's driver runs in.
    pub fn spawn_local_in<F>(&self, pid: usize, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        tokio::task::spawn_local(InProcess::new(pid, future))
    }

    /// Kill process `pid` now, as `kill -9` would.
    pub fn kill(&self, pid: usize) {
        if let Some(p) = self.state.borrow_mut().processes.get_mut(pid) {
            p.dead = true;
        }
    }

    /// Stop process `pid` at its own step `step`, for `duration`, as `SIGSTOP` and `SIGCONT` would.
    pub fn pause_at(&self, pid: usize, step: u64, duration: Duration) {
        if let Some(p) = self.state.borrow_mut().processes.get_mut(pid) {
            p.pause_at = Some((step, duration));
        }
    }

    /// Kill process `pid` (`pause` `None`), or stop it for `pause`, the `nth` time it reaches the
    /// point named `name` (between a checkpoint's state and its commit, say).
    pub fn disrupt_at_point(&self, pid: usize, name: &'static str, nth: u64, pause: Option<Duration>) {
        if let Some(p) = self.state.borrow_mut().processes.get_mut(pid) {
            p.at_point = Some((name, nth, pause));
        }
    }

    /// Stop process `pid` until `until` (virtual), as `SIGSTOP` and `SIGCONT` would.
    pub fn pause(&self, pid: usize, until: tokio::time::Instant) {
        if let Some(p) = self.state.borrow_mut().processes.get_mut(pid) {
            p.paused_until = Some(until);
        }
    }

    /// Whether process `pid` was killed.
    pub fn is_dead(&self, pid: usize) -> bool {
        self.state.borrow().processes.get(pid).is_none_or(|p| p.dead)
    }

    /// The points process `pid` reached.
    pub fn steps_of(&self, pid: usize) -> u64 {
        self.state.borrow().processes.get(pid).map_or(0, |p| p.steps)
    }

    /// A number from the simulation's one generator, in `low..=high`.
    pub fn range(&self, low: u64, high: u64) -> u64 {
        self.state.borrow_mut().rng.range(low, high)
    }
}

/// Milliseconds since the epoch, now: under a simulation, its virtual time since it began,
/// from 2026-01-01 (the same for every run of a seed); otherwise the system's clock.
pub fn wall_millis() -> i64 {
    const EPOCH: i64 = 1_767_225_600_000;
    let simulated = CURRENT.with(|c| {
        c.borrow().as_ref().map(|s| {
            let now = tokio::time::Instant::now();
            let began = *s.borrow_mut().began.get_or_insert(now);
            EPOCH + now.saturating_duration_since(began).as_millis() as i64
        })
    });
    simulated.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    })
}

/// Under a simulation, a number no earlier call of this simulation gave (1, 2, …): names that
/// must differ (a run's id) without depending on the system's clock. `None` otherwise.
pub fn unique() -> Option<u64> {
    CURRENT.with(|c| {
        c.borrow().as_ref().map(|s| {
            let mut s = s.borrow_mut();
            s.unique += 1;
            s.unique
        })
    })
}

/// Which simulation runs on this thread (a number no other simulation of this test process
/// has), 0 without one: what a process keeps in memory across its runs is keyed by it.
pub fn instance() -> u64 {
    CURRENT.with(|c| c.borrow().as_ref().map_or(0, |s| s.borrow().instance))
}

/// The process whose task runs now (0 outside a simulation of several).
pub fn current_process() -> usize {
    PROCESS.with(Cell::get)
}

/// Whether process `pid` of the simulation on this thread is alive (always, without one).
pub fn alive(pid: usize) -> bool {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .is_none_or(|s| s.borrow().processes.get(pid).is_some_and(|p| !p.dead))
    })
}

/// Start a task: under a simulation, of the process whose task starts it (so that it dies with
/// it); otherwise a plain tokio task.
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if active() {
        tokio::spawn(InProcess::new(current_process(), future))
    } else {
        tokio::spawn(future)
    }
}

/// A task of a simulated process: polled with its process current, never again once the
/// process is dead, and not while it is paused.
struct InProcess<F> {
    pid: usize,
    inner: Pin<Box<F>>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<F> InProcess<F> {
    fn new(pid: usize, future: F) -> Self {
        InProcess {
            pid,
            inner: Box::pin(future),
            pause: None,
        }
    }
}

impl<F: Future> Future for InProcess<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let (dead, paused_until) = CURRENT.with(|c| {
            c.borrow().as_ref().map_or((false, None), |s| {
                let s = s.borrow();
                s.processes
                    .get(self.pid)
                    .map_or((true, None), |p| (p.dead, p.paused_until))
            })
        });
        if dead {
            // never woken: the process is gone
            return Poll::Pending;
        }
        if let Some(until) = paused_until.filter(|u| *u > tokio::time::Instant::now()) {
            let sleep = self
                .pause
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
            if sleep.deadline() != until {
                sleep.as_mut().reset(until);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        self.pause = None;
        let previous = PROCESS.with(|p| p.replace(self.pid));
        let result = self.inner.as_mut().poll(cx);
        PROCESS.with(|p| p.set(previous));
        result
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// The time now: virtual under a simulation (tokio's paused clock), the monotonic clock
/// otherwise. Deadlines of code that a simulation runs are taken from it.
pub fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// Whether a simulation runs on this thread (the runtime then runs its fetchers and its sink as
/// tasks, not threads).
pub fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Whether the simulated process has crashed: nothing durable may change any more.
pub fn crashed() -> bool {
    CURRENT.with(|c| {
        c.borrow().as_ref().is_some_and(|s| {
            let s = s.borrow();
            s.trace.crashed_at.is_some() || s.processes.get(current_process()).is_none_or(|p| p.dead)
        })
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
        let pid = current_process();
        if s.trace.crashed_at.is_some() || s.processes.get(pid).is_none_or(|p| p.dead) {
            return Decision::Halt;
        }
        s.trace.steps += 1;
        let step = s.trace.steps;
        s.trace.hash = name
            .bytes()
            .fold(s.trace.hash ^ step, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME));
        let process = &mut s.processes[pid];
        process.steps += 1;
        if process.crash_at == Some(process.steps) {
            process.dead = true;
            return Decision::Halt;
        }
        if let Some((point, nth, pause)) = process.at_point.filter(|(point, _, _)| *point == name) {
            process.reached += 1;
            if process.reached == nth {
                match pause {
                    None => {
                        process.dead = true;
                        return Decision::Halt;
                    }
                    Some(pause) => {
                        process.paused_until = Some(tokio::time::Instant::now() + pause);
                        tracing::debug!(pid, point, "process stopped at the point");
                        return Decision::Sleep(pause);
                    }
                }
            }
        }
        if let Some((_, pause)) = process.pause_at.filter(|(at, _)| *at == process.steps) {
            // the whole process stops here: this task sleeps, the others are held
            process.paused_until = Some(tokio::time::Instant::now() + pause);
            return Decision::Sleep(pause);
        }
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
