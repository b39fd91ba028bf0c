//! The simulation's entry points: `explores_schedules` runs many seeds (CI's share; a soak with
//! `TIDEGATE_SIM_SCHEDULES`, a replay of one seed with `TIDEGATE_SIM_SEED`), and
//! `a_seed_replays_exactly` checks that a seed is a bug report.

use std::path::PathBuf;

use super::{run_seed, Outcome, Plan};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// A fresh directory for one schedule's state file: on tmpfs where there is one (a state write
/// fsyncs twice; thousands of schedules write hundreds of thousands of checkpoints).
fn scratch() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::Builder::new().prefix("tidegate-sim-").tempdir_in(&shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("a temp directory")
}

#[derive(Debug, Default)]
struct Totals {
    schedules: u64,
    runs: u64,
    crashes: u64,
    faults: u64,
    stops: u64,
    rescaled: u64,
    steps: u64,
    failures: Vec<(u64, String)>,
}

fn explore(seeds: impl Iterator<Item = u64>) -> Totals {
    let mut totals = Totals::default();
    for seed in seeds {
        let dir = scratch();
        totals.schedules += 1;
        match run_seed(seed, dir.path()) {
            Ok(Outcome {
                runs,
                crashes,
                faults,
                stops,
                rescaled,
                steps,
                ..
            }) => {
                totals.runs += runs as u64;
                totals.crashes += crashes as u64;
                totals.faults += faults as u64;
                totals.stops += stops as u64;
                totals.rescaled += rescaled as u64;
                totals.steps += steps;
            }
            Err(e) => totals.failures.push((seed, e)),
        }
    }
    totals
}

#[test]
fn explores_schedules() {
    if let Some(seed) = env_u64("TIDEGATE_SIM_SEED") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .without_time()
            .with_ansi(false)
            .try_init();
        eprintln!("simulation: replaying seed {seed}: {:#?}", Plan::of(seed));
        eprintln!(
            "simulation: seed {seed} as a named schedule: {}",
            Plan::of(seed).literal()
        );
        let dir = scratch();
        match run_seed(seed, dir.path()) {
            Ok(o) => eprintln!(
                "simulation: seed {seed} passed: {} runs, {} crashes, {} stops, {} steps",
                o.runs, o.crashes, o.stops, o.steps
            ),
            Err(e) => panic!("simulation: seed {seed} failed: {e}"),
        }
        return;
    }
    // CI's share: the regression range, then a fresh range that differs from run to run (its
    // start printed); `scripts/simulate --schedules N` soaks
    let fixed = env_u64("TIDEGATE_SIM_SCHEDULES").unwrap_or(10_000);
    let first = env_u64("TIDEGATE_SIM_FIRST_SEED").unwrap_or(0);
    let fresh = env_u64("TIDEGATE_SIM_FRESH").unwrap_or(2_000);
    let fresh_from = env_u64("TIDEGATE_SIM_FRESH_FROM").unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        1_000_000 + (secs % 1_000_000) * 10_000
    });
    eprintln!(
        "simulation: the regression range {first}..{}, and {fresh} fresh seeds from {fresh_from}",
        first + fixed
    );
    let seeds: Vec<u64> = (first..first + fixed).chain(fresh_from..fresh_from + fresh).collect();
    let schedules = seeds.len() as u64;
    let threads = 2usize;
    // each thread runs its own simulations (a simulation lives on one thread)
    let parts: Vec<Totals> = std::thread::scope(|scope| {
        let seeds = &seeds;
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
        totals.runs += p.runs;
        totals.crashes += p.crashes;
        totals.faults += p.faults;
        totals.stops += p.stops;
        totals.rescaled += p.rescaled;
        totals.steps += p.steps;
        totals.failures.extend(p.failures);
    }
    totals.failures.sort_by_key(|(seed, _)| *seed);
    eprintln!(
        "simulation: {} schedules, {} runs, {} crashes, {} I/O faults, {} stops, {} restores at another parallelism, {} steps, {} failed",
        totals.schedules,
        totals.runs,
        totals.crashes,
        totals.faults,
        totals.stops,
        totals.rescaled,
        totals.steps,
        totals.failures.len()
    );
    for (seed, e) in totals.failures.iter().take(20) {
        eprintln!("simulation: seed {seed} failed: {e}");
    }
    if let Some((seed, e)) = totals.failures.first() {
        panic!(
            "simulation: seed {seed} failed (first of {}): {e}\nreplay: TIDEGATE_SIM_SEED={seed} cargo test -p tidegate-core simulation -- --nocapture",
            totals.failures.len()
        );
    }
    // the exploration explored (the README quotes these bounds for CI's 10,000 schedules): at
    // least one crash per two schedules, a stop per four, a restore at another parallelism per
    // schedule, and every run checked
    assert_eq!(totals.schedules, schedules);
    assert!(
        totals.crashes * 2 >= schedules,
        "{} crashes in {schedules} schedules",
        totals.crashes
    );
    assert!(
        totals.stops * 4 >= schedules,
        "{} stops in {schedules} schedules",
        totals.stops
    );
    assert!(
        totals.faults * 20 >= schedules,
        "{} I/O faults in {schedules} schedules",
        totals.faults
    );
    assert!(totals.rescaled >= schedules, "{} rescaled restores", totals.rescaled);
    assert!(totals.runs >= 2 * schedules, "{} runs", totals.runs);
}

#[test]
fn a_seed_replays_exactly() {
    for seed in 0..30 {
        let (a, b) = (scratch(), scratch());
        let first = run_seed(seed, a.path());
        let second = run_seed(seed, b.path());
        assert_eq!(first, second, "seed {seed} ran two ways");
        if let Ok(o) = first {
            assert!(o.steps > 0, "seed {seed} reached no point");
        }
    }
}
