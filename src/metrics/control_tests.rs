//! Unit tests of `POST /control` (`control`).

use super::*;
use crate::core::event_time::{EventTimeClock, EventTimeOptions, Release};
use std::sync::atomic::AtomicBool;

fn paced_board(speed: f64) -> (StatusBoard, Arc<EventTimeClock>) {
    let stats = Arc::new(JobStats::default());
    let clock = Arc::new(EventTimeClock::new(EventTimeOptions {
        speed: Some(speed),
        source_wide_stop: false,
        idle_grace: Duration::from_secs(2),
        max_out_of_orderness: Duration::ZERO,
        rate_limited: false,
        peers: false,
    }));
    assert!(stats.event_time.set(clock.clone()).is_none());
    (StatusBoard::new("job".into(), stats), clock)
}

/// A reader that sees the pause switch open must find the pacing clock already restarted: one
/// that still counts from before the pause releases at once everything "due" while it was paused
/// (the burst `control::replay_speed_changes_and_resumes_without_a_burst_or_a_stall` once saw).
/// The reader here spins on the switch, so it acts within the window a wrong order leaves.
#[test]
fn a_resumed_reader_never_sees_the_clock_from_before_the_pause() {
    for round in 0..20 {
        let (board, clock) = paced_board(1.0);
        let split: crate::core::SplitId = Arc::from("t-0");
        clock.register(&split);
        clock.observe(&split, 0, 0, 0);
        assert_eq!(clock.release(0, tokio::time::Instant::now(), false), Release::Now);
        clock.emitted(0, false);
        apply_control(&board, br#"{"paused": true}"#).expect("pause");
        // paused for 150 ms: a record 100 ms of event time after the last one was due during it
        std::thread::sleep(Duration::from_millis(150));
        let seen = Arc::new(Mutex::new(None));
        let started = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stats, clock, seen, started) = (board.stats.clone(), clock.clone(), seen.clone(), started.clone());
            std::thread::spawn(move || {
                started.store(true, Ordering::SeqCst);
                while stats.throttle.is_paused() {
                    std::hint::spin_loop();
                }
                *seen.lock().expect("seen") = Some(clock.release(100, tokio::time::Instant::now(), false));
            })
        };
        while !started.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        let resumed = Instant::now();
        apply_control(&board, br#"{"paused": false}"#).expect("resume");
        reader.join().expect("reader");
        let seen = seen.lock().expect("seen").take().expect("a release");
        // due 100 ms after the resume (unless the reader slept that long between the two)
        assert!(
            matches!(seen, Release::At(_)) || resumed.elapsed() >= Duration::from_millis(100),
            "round {round}: released {seen:?} at the resume, not paced from it"
        );
    }
}

/// `/status` after the job's end, while the endpoint lingers: how it ended, never "running"; a
/// job that ended well with no split of its own (a group member whose last assignment was
/// empty) finished.
#[test]
fn the_status_of_an_ended_job_says_how_it_ended() {
    let state = |ended: Option<JobEnd>| {
        let stats = Arc::new(JobStats::default());
        if let Some(ended) = ended {
            stats.ended.set(ended).expect("set once");
        }
        let status = StatusBoard::new("job".into(), stats).status();
        (status["state"].clone(), status["error"].clone())
    };
    assert_eq!(state(None), ("running".into(), Value::Null));
    assert_eq!(
        state(Some(JobEnd::Finished)),
        ("finished".into(), Value::Null),
        "no splits"
    );
    assert_eq!(
        state(Some(JobEnd::Stopped)),
        ("stopped".into(), Value::Null),
        "ended short of its input"
    );
    assert_eq!(
        state(Some(JobEnd::Failed("kafka: producing: broker down".into()))),
        ("failed".into(), "kafka: producing: broker down".into())
    );
}
