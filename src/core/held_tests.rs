//! Unit tests of the held records (`held`).

use super::*;
use crate::event_time::EventTimeOptions;
use std::time::Duration;

/// A record that is its own timestamp and position.
#[derive(Debug)]
struct At(i64);

impl RecordPosition for At {
    fn position(&self) -> Option<i64> {
        Some(self.0)
    }
    fn timestamp(&self) -> Option<i64> {
        Some(self.0)
    }
}

/// A record at a position, with or without a timestamp.
#[derive(Debug, PartialEq)]
struct Rec(i64, Option<i64>);

impl RecordPosition for Rec {
    fn position(&self) -> Option<i64> {
        Some(self.0)
    }
    fn timestamp(&self) -> Option<i64> {
        self.1
    }
}

fn held(speed: Option<f64>, source_wide_stop: bool) -> HeldRecords<At> {
    held_of(speed, source_wide_stop)
}

fn held_of<T: RecordPosition>(speed: Option<f64>, source_wide_stop: bool) -> HeldRecords<T> {
    HeldRecords::new_unthrottled(Arc::new(EventTimeClock::new(EventTimeOptions {
        speed,
        source_wide_stop,
        idle_grace: Duration::from_secs(2),
        max_out_of_orderness: Duration::ZERO,
        rate_limited: false,
        peers: false,
    })))
}

#[test]
fn a_slow_paced_split_pauses_its_fetch_and_resumes_when_drained() {
    let mut h = held(Some(1.0), false);
    let id: SplitId = Arc::from("only");
    h.clock().register(&id);
    // an hour of records, one a second: at real time, only the first is due now
    h.hold(&id, (0..3600).map(|s| At(s * 1000)).collect(), &[], None, false);
    h.hold(&id, (3600..10_000).map(|s| At(s * 1000)).collect(), &[], None, false);
    let mut out = ReaderOutput::new(None, false);
    assert_eq!(h.release(&mut out).count, 1);
    assert_eq!(
        h.first_position(&id),
        Some(1000),
        "the checkpoint stands before the held"
    );
    let (pause, resume) = h.flow_control();
    assert_eq!(
        (pause, resume),
        (vec![id.clone()], vec![]),
        "alone and paced, it pauses"
    );
    // drained below half the limit: resumed
    h.held.get_mut(&id).unwrap().truncate(100);
    assert_eq!(h.flow_control(), (vec![], vec![id.clone()]));
}

#[test]
fn the_source_wide_stop_drops_records_at_or_after_it_and_keeps_those_before_it() {
    let mut h = held(None, true);
    let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
    h.clock().register(&a);
    h.clock().register(&b);
    h.hold(&a, vec![At(10), At(20), At(30), At(40)], &[], None, false);
    // b ends at its marker at 25 (the marker not kept)
    h.hold(&b, vec![At(5)], &[], Some(Some(25)), false);
    assert!(h.clock().is_past_stop(&b));
    h.clock().remove(&b);
    let mut out = ReaderOutput::new(None, false);
    let released = h.release(&mut out);
    let got: Vec<i64> = out.take_records().iter().map(|r| r.0).collect();
    assert_eq!(got, vec![5, 10, 20]);
    assert_eq!(released.dropped, 2);
    assert!(h.is_empty());
    // a's later records: one before the stop goes out, the others never
    h.hold(&a, vec![At(22), At(26), At(25)], &[], None, false);
    h.release(&mut out);
    assert_eq!(out.take_records().iter().map(|r| r.0).collect::<Vec<_>>(), vec![22]);
}

#[test]
fn a_marker_found_later_in_an_out_of_order_split_stops_the_source_before_anything_after_it_went_out() {
    let mut h = HeldRecords::new_unthrottled(Arc::new(EventTimeClock::new(EventTimeOptions {
        speed: None,
        source_wide_stop: true,
        idle_grace: Duration::from_secs(2),
        max_out_of_orderness: Duration::from_millis(50),
        rate_limited: false,
        peers: false,
    })));
    let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
    h.clock().register(&a);
    h.clock().register(&b);
    let mut out = ReaderOutput::new(None, false);
    let mut released = |h: &mut HeldRecords<At>| {
        h.release(&mut out);
        out.take_records().iter().map(|r| r.0).collect::<Vec<i64>>()
    };
    h.hold(&a, vec![At(100), At(130)], &[], None, false);
    h.hold(&b, vec![At(110), At(160)], &[], None, false);
    assert_eq!(released(&mut h), Vec::<i64>::new(), "a may run back to 80, b to 110");
    h.hold(&b, vec![At(200)], &[], None, false);
    h.hold(&a, vec![At(190)], &[], None, false);
    assert_eq!(
        released(&mut h),
        vec![100, 110, 130],
        "160 waits: a may still run back to 140"
    );
    // a's marker at 145, after its record at 190: the stop is there, 160 never goes out
    assert_eq!(h.hold(&a, vec![], &[], Some(Some(145)), false), Some(145));
    assert!(h.clock().is_past_stop(&b));
    assert!(!h.clock().is_past_stop(&a), "a may still hold records before 145");
    h.hold(&a, vec![At(141), At(260)], &[], None, false);
    assert!(h.clock().is_past_stop(&a));
    assert_eq!(released(&mut h), vec![141]);
    assert!(h.is_empty());
}

#[test]
fn records_without_a_timestamp_take_their_predecessors_time_and_leading_ones_go_at_once() {
    let mut h = held_of::<Rec>(Some(1.0), false);
    let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
    h.clock().register(&a);
    h.clock().register(&b);
    // a: two records without a timestamp before its first one; one after each timed record
    h.hold(
        &a,
        vec![
            Rec(0, None),
            Rec(1, None),
            Rec(2, Some(10_000)),
            Rec(3, None),
            Rec(4, Some(70_000)),
            Rec(5, None),
        ],
        &[],
        None,
        false,
    );
    h.hold(&b, vec![Rec(100, Some(10_000))], &[], None, false);
    let mut out = ReaderOutput::new(None, false);
    h.release(&mut out);
    // the leading ones at once, then everything at 10 s (the anchor); 70 s is a minute away
    let got: Vec<(i64, Option<i64>)> = out.take_records().into_iter().map(|r| (r.0, r.1)).collect();
    let of_a: Vec<_> = got.iter().filter(|r| r.0 < 100).copied().collect();
    assert_eq!(
        of_a,
        vec![(0, None), (1, None), (2, Some(10_000)), (3, None)],
        "records without a timestamp keep their place in the partition"
    );
    assert_eq!(got.len(), 5, "and b's record at 10 s: {got:?}");
    assert_eq!(h.first_position(&a), Some(4));
    assert_eq!(h.clock().replayed_to(), Some(10_000));
    // what a: 5 is due with: its predecessor's 70 s, a minute after the anchor
    assert!(h
        .wake_at
        .is_some_and(|at| at > Instant::now() + Duration::from_secs(59)));
}

#[test]
fn a_partition_without_timestamps_does_not_keep_the_pacing_clock_from_starting() {
    let mut h = held_of::<Rec>(Some(1.0), false);
    let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
    h.clock().register(&a);
    h.clock().register(&b);
    h.hold(&a, vec![Rec(0, None), Rec(1, None)], &[], None, false);
    h.hold(&b, vec![Rec(0, Some(5_000)), Rec(1, Some(5_000))], &[], None, false);
    let mut out = ReaderOutput::new(None, false);
    assert_eq!(h.release(&mut out).count, 2, "a's records go at once");
    // a has shown no timestamp and is not at the end of its log: b waits for a's first one
    assert_eq!(h.release(&mut out).count, 0);
    h.clock().caught_up(&a);
    assert_eq!(
        h.release(&mut out).count,
        2,
        "a at its end: b's records start the clock"
    );
}

#[test]
fn records_the_filter_rejected_move_their_splits_event_time() {
    // b holds a record at 5, then rejected ones up to 40: with the source-wide stop, a's records
    // go out once b is known past them, as they would unfiltered
    let released_with = |filtered: &[FilteredAt]| {
        let mut h = held(None, true);
        let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
        h.clock().register(&a);
        h.clock().register(&b);
        h.hold(&a, vec![At(10), At(20), At(30)], &[], None, false);
        h.hold(&b, vec![At(5)], filtered, None, false);
        let mut out = ReaderOutput::new(None, false);
        h.release(&mut out);
        out.take_records().iter().map(|r| r.0).collect::<Vec<i64>>()
    };
    let rejected = [
        FilteredAt {
            after: 1,
            timestamp: Some(25),
            position: Some(25),
        },
        FilteredAt {
            after: 1,
            timestamp: Some(40),
            position: Some(40),
        },
    ];
    assert_eq!(released_with(&[]), Vec::<i64>::new(), "b may still hold a marker at 5");
    assert_eq!(released_with(&rejected), vec![5, 10, 20], "30 waits for a itself");
}

#[test]
fn a_rejected_record_past_a_stop_found_later_is_where_its_split_stopped() {
    // a holds 10 and 20, and rejected records at 22 and 30, before b's marker at 21 is known:
    // the stop ends a at the rejected 22, as it would unfiltered, not past everything fetched
    let mut h = held(None, true);
    let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
    h.clock().register(&a);
    h.clock().register(&b);
    let rejected = [22, 30].map(|t| FilteredAt {
        after: 2,
        timestamp: Some(t),
        position: Some(t),
    });
    h.hold(&a, vec![At(10), At(20)], &rejected, None, false);
    h.hold(&b, vec![At(5)], &[], Some(Some(21)), false);
    h.clock().remove(&b);
    let mut out = ReaderOutput::new(None, false);
    h.release(&mut out);
    assert_eq!(
        out.take_records().iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![5, 10, 20]
    );
    assert_eq!(h.stopped_at.get(&a).copied(), Some(22));
    assert!(h.is_empty());
}

#[test]
fn pacing_starts_at_the_first_record_read_not_the_earliest_of_its_batch() {
    // a resumed split whose first batch runs back: the clock starts at the record read first,
    // so it goes out at once, whatever else the fetch happened to bring along
    let mut h = held(Some(1.0), false);
    let id: SplitId = Arc::from("resumed");
    h.clock().register(&id);
    h.hold(&id, vec![At(10_000), At(7_000), At(10_500)], &[], None, false);
    let mut out = ReaderOutput::new(None, false);
    assert_eq!(
        h.release(&mut out).count,
        2,
        "the first record and the older one go out at once; 10.5 s is due 0.5 s later"
    );
}
