use serde_json::json;

use super::{alter, Alteration, Position, HISTORY_LIMIT};

/// A replay's checkpoint: t:0 finished at its stop, t:1 half read, t:2 not yet dealt to a reader.
fn checkpoint() -> serde_json::Value {
    let snapshot = |p: i32, next: i64, finished: bool| {
        let mut s = json!({ "split": { "topic": "t", "partition": p, "next_offset": next, "stop_offset": 100 } });
        if finished {
            s["finished"] = json!({ "reason": "stopping_offset" });
        }
        s
    };
    let mut cp = json!({
        "job": "j",
        "checkpoint_id": 7,
        "enumerator": {
            "initial_discovery_done": true,
            "splits": [
                { "split": { "topic": "t", "partition": 0, "next_offset": 0, "stop_offset": 100 }, "assigned": true },
                { "split": { "topic": "t", "partition": 1, "next_offset": 0, "stop_offset": 100 }, "assigned": true },
                { "split": { "topic": "t", "partition": 2, "next_offset": 0, "stop_offset": 100 }, "assigned": false },
            ],
        },
        "splits": [snapshot(0, 100, true), snapshot(1, 40, false)],
    });
    let mut previous = cp.clone();
    previous["checkpoint_id"] = json!(6);
    previous["splits"] = json!([snapshot(0, 90, false), snapshot(1, 30, false)]);
    cp["previous"] = previous;
    cp
}

fn to(partition: i32, offset: Option<i64>, finished: Option<bool>) -> Alteration {
    Alteration {
        topic: "t".into(),
        partition,
        offset: offset.map(|o| (o, Position::Offset(o))),
        finished,
    }
}

#[test]
fn a_new_position_unfinishes_a_finished_split_here_and_in_the_checkpoint_before() {
    let mut cp = checkpoint();
    let altered = alter(&mut cp, &to(0, Some(60), None), "2026-12-05T10:00:00Z").expect("altered");
    assert_eq!(
        altered.before,
        "next_offset 100, stop_offset 100, finished (stopping_offset)"
    );
    assert_eq!(altered.after, "next_offset 60, stop_offset 100, unfinished");
    assert_eq!(cp["splits"][0]["split"]["next_offset"], 60);
    assert!(cp["splits"][0].get("finished").is_none());
    // the fallback a transactional sink's recovery may take says the same
    assert_eq!(cp["previous"]["splits"][0]["split"]["next_offset"], 60);
    // the other partitions are untouched
    assert_eq!(cp["splits"][1]["split"]["next_offset"], 40);
    let history = cp["history"].as_array().expect("a history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["partition"], "t:0");
    assert_eq!(history[0]["position"], "--offset 60");
    assert_eq!(history[0]["at"], "2026-12-05T10:00:00Z");
    assert!(cp["previous"].get("history").is_none());
}

#[test]
fn finished_keeps_the_position_and_unfinished_keeps_it_too() {
    let mut cp = checkpoint();
    let altered = alter(&mut cp, &to(1, None, Some(true)), "a").expect("altered");
    assert_eq!(
        altered.after,
        "next_offset 40, stop_offset 100, finished (stopping_offset)"
    );
    assert_eq!(cp["splits"][1]["finished"]["reason"], "stopping_offset");
    let altered = alter(&mut cp, &to(1, None, Some(false)), "b").expect("altered");
    assert_eq!(altered.after, "next_offset 40, stop_offset 100, unfinished");
    // a position with --finished: moved, and finished there
    let altered = alter(&mut cp, &to(1, Some(70), Some(true)), "c").expect("altered");
    assert_eq!(
        altered.after,
        "next_offset 70, stop_offset 100, finished (stopping_offset)"
    );
    assert_eq!(cp["history"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_split_not_yet_dealt_moves_in_the_enumerator_or_is_finished_as_a_reader_would() {
    let mut cp = checkpoint();
    alter(&mut cp, &to(2, Some(25), None), "a").expect("altered");
    assert_eq!(cp["enumerator"]["splits"][2]["split"]["next_offset"], 25);
    assert_eq!(cp["splits"].as_array().map(Vec::len), Some(2));
    let altered = alter(&mut cp, &to(2, None, Some(true)), "b").expect("altered");
    assert_eq!(
        altered.after,
        "next_offset 25, stop_offset 100, finished (stopping_offset)"
    );
    assert_eq!(cp["enumerator"]["splits"][2]["assigned"], true);
    assert_eq!(cp["splits"][2]["split"]["partition"], 2);
    assert_eq!(cp["splits"][2]["finished"]["reason"], "stopping_offset");
}

#[test]
fn a_partition_the_state_does_not_hold_is_refused_naming_those_it_holds() {
    let mut cp = checkpoint();
    let before = cp.clone();
    let e = alter(&mut cp, &to(9, Some(1), None), "a").expect_err("refused");
    assert!(
        e.contains("t:9 is not in the job's state, which holds t:0, t:1, t:2"),
        "{e}"
    );
    assert_eq!(cp, before, "nothing changed");
}

#[test]
fn a_position_at_the_stop_says_nothing_is_left() {
    let mut cp = checkpoint();
    let altered = alter(&mut cp, &to(1, Some(100), None), "a").expect("altered");
    assert_eq!(
        altered.after,
        "next_offset 100, stop_offset 100, unfinished (nothing left before its stop)"
    );
}

#[test]
fn the_history_keeps_the_last_hundred_changes() {
    let mut cp = checkpoint();
    for i in 0..(HISTORY_LIMIT as i64 + 5) {
        alter(&mut cp, &to(1, Some(i % 100), None), &format!("{i:04}")).expect("altered");
    }
    let history = cp["history"].as_array().expect("a history");
    assert_eq!(history.len(), HISTORY_LIMIT);
    assert_eq!(history[0]["at"], "0005");
    assert_eq!(history[HISTORY_LIMIT - 1]["at"], format!("{:04}", HISTORY_LIMIT + 4));
}
