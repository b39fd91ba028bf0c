//! Unit tests of the event-time clock (`event_time`).

use super::*;
use std::sync::Arc;

fn id(s: &str) -> SplitId {
    Arc::from(s)
}

fn clock(speed: Option<f64>, source_wide_stop: bool) -> EventTimeClock {
    EventTimeClock::new(EventTimeOptions {
        speed,
        source_wide_stop,
        idle_grace: Duration::from_secs(2),
        max_out_of_orderness: Duration::ZERO,
        rate_limited: false,
        peers: false,
    })
}

/// A source-wide stop whose other splits another process reads.
fn group_clock() -> EventTimeClock {
    EventTimeClock::new(EventTimeOptions {
        source_wide_stop: true,
        peers: true,
        ..EventTimeOptions::default()
    })
}

fn peers(splits: &[&str], watermarks: &[(&str, i64)], stop: Option<i64>) -> Peers {
    Peers {
        splits: splits.iter().map(|s| id(s)).collect(),
        watermarks: watermarks.iter().map(|(s, w)| (id(s), *w)).collect(),
        fronts: HashMap::new(),
        stop,
    }
}

#[test]
fn pacing_starts_at_the_earliest_first_record_once_every_split_has_one() {
    let c = clock(Some(10.0), false);
    let (a, b) = (id("a"), id("b"));
    c.register(&a);
    c.register(&b);
    let now = Instant::now();
    c.observe(&a, 5_000, 6_000, 0);
    // b has shown nothing yet: its first record may be earlier
    assert_eq!(c.release(5_000, now, false), Release::Wait(None));
    c.observe(&b, 4_000, 4_000, 0);
    assert_eq!(c.release(4_000, now, false), Release::Now);
    // 1 s of event time at 10x is 100 ms
    assert_eq!(
        c.release(5_000, now, false),
        Release::At(now + Duration::from_millis(100))
    );
    assert_eq!(c.release(5_000, now + Duration::from_millis(100), false), Release::Now);
    // older than the anchor: at once
    assert_eq!(c.release(1_000, now, false), Release::Now);
}

#[test]
fn a_caught_up_split_does_not_hold_the_clock() {
    let c = clock(Some(1.0), false);
    let (a, b) = (id("a"), id("b"));
    c.register(&a);
    c.register(&b);
    c.observe(&a, 1_000, 1_000, 0);
    c.caught_up(&b);
    assert_eq!(c.release(1_000, Instant::now(), false), Release::Now);
}

#[test]
fn alignment_holds_a_record_until_every_other_split_is_past_it() {
    let c = clock(None, true);
    let (a, b) = (id("a"), id("b"));
    c.register(&a);
    c.register(&b);
    c.observe(&a, 100, 200, 0);
    let now = Instant::now();
    assert_eq!(c.release(100, now, false), Release::Wait(None), "b has shown nothing");
    c.observe(&b, 100, 150, 0);
    // b may still hold a marker at 150
    assert_eq!(c.release(150, now, false), Release::Wait(None));
    assert_eq!(c.release(149, now, false), Release::Now);
    // b's marker at 150: nothing at or after it goes out
    c.found_stop(150);
    assert_eq!(c.release(150, now, false), Release::Drop);
    assert_eq!(c.release(149, now, false), Release::Now);
    // b ends at its marker (its watermark is at the stop): the marker itself goes out
    assert!(c.is_past_stop(&b));
    c.remove(&b);
    assert_eq!(c.release(150, now, true), Release::Now, "the marker itself goes out");
    assert_eq!(c.release(151, now, true), Release::Drop, "a later marker does not");
    // an earlier marker wins, a later one does not
    c.found_stop(170);
    assert_eq!(c.stop_at(), Some(150));
    c.found_stop(120);
    assert_eq!(c.stop_at(), Some(120));
    assert_eq!(c.release(119, now, false), Release::Now);
}

#[test]
fn a_record_waits_for_its_own_split_while_a_marker_at_its_time_may_follow() {
    let c = clock(None, true);
    let a = id("a");
    c.register(&a);
    c.observe(&a, 100, 100, 0);
    let now = Instant::now();
    assert_eq!(c.release(100, now, false), Release::Wait(None));
    c.observe(&a, 101, 101, 0);
    assert_eq!(c.release(100, now, false), Release::Now);
}

#[test]
fn out_of_order_splits_hold_records_until_their_timestamps_are_past_by_the_bound() {
    let c = EventTimeClock::new(EventTimeOptions {
        speed: None,
        source_wide_stop: true,
        idle_grace: Duration::from_secs(2),
        max_out_of_orderness: Duration::from_millis(50),
        rate_limited: false,
        peers: false,
    });
    let a = id("a");
    c.register(&a);
    c.observe(&a, 100, 200, 0);
    let now = Instant::now();
    // a may still evaluate a marker stamped 150
    assert_eq!(c.release(150, now, false), Release::Wait(None));
    assert_eq!(c.release(149, now, false), Release::Now);
    c.found_stop(180);
    assert!(!c.is_past_stop(&a), "a record before the stop may still follow");
    c.observe(&a, 230, 230, 0);
    assert!(c.is_past_stop(&a));
    assert_eq!(c.disordered_records(), 0);
    c.observe(&a, 170, 170, 60);
    assert_eq!(
        c.disordered_records(),
        1,
        "further out of order than the bound: counted"
    );
}

#[test]
fn a_caught_up_split_holds_records_after_its_last_confirmation_less_the_grace() {
    let c = clock(None, true);
    let (a, b) = (id("a"), id("b"));
    c.register(&a);
    c.register(&b);
    let wall = wall_millis();
    c.observe(&a, 1_000, wall + 60_000, 0);
    let now = Instant::now();
    // b is at the end of its log, not confirmed (an open transaction, or no answer yet): the
    // wall clock alone does not move it
    c.caught_up(&b);
    assert_eq!(c.release(1_000, now, false), Release::Wait(None));
    // confirmed now: whatever b reads later is stamped no earlier than the grace before now
    c.confirmed_caught_up(&b, wall);
    assert_eq!(c.release(1_000, now, false), Release::Now);
    assert_eq!(c.release(wall - 2_000, now, false), Release::Wait(None));
    c.confirmed_caught_up(&b, wall + 10);
    assert_eq!(c.release(wall - 2_000, now, false), Release::Now);
    c.found_stop(wall - 1_000);
    assert!(
        !c.is_past_stop(&b),
        "the stop is after the last confirmation less the grace"
    );
    c.found_stop(wall - 10_000);
    assert!(c.is_past_stop(&b));
}

#[test]
fn a_split_keeps_fetching_while_the_earliest_held_record_waits_for_its_watermark() {
    let (a, b) = (id("a"), id("b"));
    for speed in [None, Some(1.0)] {
        let c = clock(speed, true);
        c.register(&a);
        c.register(&b);
        c.observe(&a, 100, 100, 0);
        c.observe(&b, 200, 200, 0);
        assert!(!c.holds_others_back(&a), "nothing held: nothing waits");
        c.set_front(&b, Some(150));
        assert!(c.holds_others_back(&a), "b's record at 150 waits for a");
        assert!(!c.holds_others_back(&b));
        c.set_front(&a, Some(100));
        assert!(c.holds_others_back(&a), "a's record at 100 waits for a itself");
    }
    // a finished split's held records still wait for the others
    let c = clock(None, true);
    c.register(&a);
    c.register(&b);
    c.observe(&b, 100, 100, 0);
    c.set_front(&a, Some(150));
    c.remove(&a);
    assert!(c.holds_others_back(&b));
    c.set_front(&a, None);
    assert!(!c.holds_others_back(&b));
    let unaligned = clock(Some(1.0), false);
    unaligned.register(&a);
    unaligned.set_front(&a, Some(100));
    assert!(!unaligned.holds_others_back(&a), "pacing alone: every split may pause");
}

#[test]
fn a_stop_is_ignored_unless_source_wide() {
    let c = clock(None, false);
    c.found_stop(10);
    assert_eq!(c.stop_at(), None);
    assert_eq!(c.release(20, Instant::now(), false), Release::Now);
}

#[test]
fn pacing_never_overflows_on_extreme_timestamps() {
    let c = clock(Some(1e-6), false);
    let a = id("a");
    c.register(&a);
    c.observe(&a, 0, 0, 0);
    let now = Instant::now();
    assert_eq!(c.release(0, now, false), Release::Now);
    assert_eq!(c.release(i64::MIN, now, false), Release::Now, "older than the anchor");
    // further than any instant: it waits (for a change of the clock), it does not panic
    assert_eq!(c.release(i64::MAX, now, false), Release::Wait(None));
    // the anchor at the far end of time, a record at the other
    let c = clock(Some(1000.0), false);
    c.register(&a);
    c.observe(&a, i64::MIN, i64::MIN, 0);
    assert_eq!(c.release(i64::MIN, now, false), Release::Now);
    // the whole range of milliseconds at 1000x: 292,000 years on
    match c.release(i64::MAX, now, false) {
        Release::At(due) => assert!(due > now + Duration::from_secs(3600 * 24 * 365 * 1000)),
        other => panic!("expected a due instant, got {other:?}"),
    }
}

#[test]
fn a_group_member_releases_nothing_before_it_knows_the_other_members_splits() {
    let c = group_clock();
    let a = id("a");
    c.register(&a);
    c.observe(&a, 100, 1_000, 0);
    let now = Instant::now();
    // its own split is past 500, but another member's may hold a marker before it
    assert_eq!(c.release(500, now, false), Release::Wait(None));
    // b, read by another member, has published nothing yet
    c.set_peers(peers(&["a", "b"], &[], None));
    assert_eq!(c.release(500, now, false), Release::Wait(None));
    c.set_peers(peers(&["a", "b"], &[("b", 500)], None));
    assert_eq!(c.release(500, now, false), Release::Wait(None));
    c.set_peers(peers(&["a", "b"], &[("b", 501)], None));
    assert_eq!(c.release(500, now, false), Release::Now);
    // a split of the source nobody has published yet (added, or not assigned) holds it again
    c.set_peers(peers(&["a", "b", "c"], &[("b", 501)], None));
    assert_eq!(c.release(500, now, false), Release::Wait(None));
}

#[test]
fn another_members_stop_ends_this_members_splits_and_drops_what_follows_it() {
    let c = group_clock();
    let a = id("a");
    c.register(&a);
    c.observe(&a, 100, 300, 0);
    c.set_peers(peers(&["a", "b"], &[("b", 400)], Some(250)));
    assert_eq!(c.stop_at(), Some(250));
    assert_eq!(c.release(260, Instant::now(), false), Release::Drop);
    assert_eq!(c.release(200, Instant::now(), false), Release::Now);
    // a's own watermark (300) is past the stop: it ends
    assert!(c.is_past_stop(&a));
}

#[test]
fn a_member_publishes_its_watermarks_with_its_stop_and_its_finished_splits_as_done() {
    let c = group_clock();
    let (a, b, d) = (id("a"), id("b"), id("d"));
    c.register(&a);
    c.register(&b);
    c.observe(&a, 100, 300, 0);
    c.found_stop(200);
    c.remove(&b);
    c.finished_before(&d);
    let (mut view, stop) = c.local_view();
    view.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(stop, Some(200));
    let got: Vec<(&str, i64)> = view.iter().map(|s| (&*s.id, s.watermark)).collect();
    assert_eq!(got, [("a", 300), ("b", i64::MAX), ("d", i64::MAX)]);
    // a split this member finished holds no one back here either
    c.set_peers(peers(&["a", "b", "d"], &[], None));
    assert_eq!(c.release(150, Instant::now(), false), Release::Now);
}

#[test]
fn a_split_another_member_reads_keeps_this_members_split_fetching_while_its_records_wait() {
    let c = group_clock();
    let a = id("a");
    c.register(&a);
    c.observe(&a, 100, 100, 0);
    let mut p = peers(&["a", "b"], &[("b", 50)], None);
    // b's reader holds a record at 120, waiting for a to pass it
    p.fronts.insert(id("b"), 120);
    c.set_peers(p);
    assert!(c.holds_others_back(&a));
    c.observe(&a, 130, 130, 0);
    assert!(!c.holds_others_back(&a));
}

#[test]
fn new_watermarks_from_other_members_wake_the_readers_once_the_stop_is_known() {
    let c = group_clock();
    let a = id("a");
    c.register(&a);
    c.observe(&a, 100, 300, 0);
    c.set_peers(peers(&["a", "b"], &[("b", 100)], Some(250)));
    let mut changes = c.subscribe();
    changes.borrow_and_update();
    // b moved on; the stop is the one already known: a reader holding a record at 200 must wake
    c.set_peers(peers(&["a", "b"], &[("b", 220)], Some(250)));
    assert!(changes.has_changed().unwrap(), "no reader was woken");
    assert_eq!(c.release(200, Instant::now(), false), Release::Now);
}
