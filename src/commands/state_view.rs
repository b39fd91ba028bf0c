//! `tidegate state show` for people: a checkpoint as a table of its splits (position, stop,
//! finished and why), when it was taken and what was changed by hand; a group's job as its
//! member runs and what the next run restores. `--json` prints the raw form instead.

use serde_json::Value;

use crate::connector::registry::SourceConfig;

/// One checkpoint (a state file's, or a static job's in the Kafka store), stored at `location`.
pub fn checkpoint(state: &Value, location: &str) -> String {
    let mut out = format!("{}\nstored in {location}\n", headline(state));
    out.push_str(&body(state));
    out.push_str("\n(`--json` prints the whole state as stored.)\n");
    out
}

/// A group's job: each member run's last checkpoint, then what a restore makes of them.
pub fn group(group: &str, location: &str, runs: &[(String, Value)], merged: &Value) -> String {
    let mut out = format!(
        "consumer group {group}: {} run{} in {location}\n",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    for (run, checkpoint) in runs {
        let held = checkpoint["splits"].as_array().map_or(0, Vec::len);
        out.push_str(&format!(
            "  run {run}: checkpoint {}, completed {}, {held} split{}\n",
            checkpoint["checkpoint_id"],
            text(&checkpoint["completed_at"]),
            if held == 1 { "" } else { "s" }
        ));
    }
    // the input is done when every run says so, and a source-wide stop is the earliest any run
    // found (as a restore takes them), not the newest run's alone
    let mut merged = merged.clone();
    merged["end_of_input"] = Value::Bool(runs.iter().all(|(_, c)| c["end_of_input"] == true));
    if let Some(stop) = runs.iter().filter_map(|(_, c)| c["stop_timestamp"].as_i64()).min() {
        merged["stop_timestamp"] = stop.into();
    }
    out.push_str(&format!(
        "\nwhat the next run restores (each split from the run that restored it most often, then the newest):\n{}\n",
        headline(&merged)
    ));
    out.push_str(&body(&merged));
    out.push_str("\n(`--json` prints every run and the merged state as stored.)\n");
    out
}

/// "job J (kafka source): checkpoint N, completed T".
fn headline(state: &Value) -> String {
    format!(
        "job {} ({} source): checkpoint {}, completed {}",
        text(&state["job"]),
        text(&state["source"]),
        state["checkpoint_id"],
        text(&state["completed_at"])
    )
}

/// What a restart does with it, the splits' table and the changes by hand.
fn body(state: &Value) -> String {
    let mut out = String::new();
    if state["end_of_input"] == true {
        out.push_str("the input is done: a restart has nothing left to read\n");
    }
    if let Some(stop) = state["stop_timestamp"].as_i64() {
        out.push_str(&format!(
            "the source-wide stop: every split ends before {}\n",
            crate::core::event_time::format_millis(stop)
        ));
    }
    if let Some(instance) = state.get("instance").filter(|i| !i.is_null()) {
        out.push_str(&format!("written by instance {instance}\n"));
    }
    if let Some(previous) = state.get("previous").filter(|p| p.is_object()) {
        out.push_str(&format!(
            "kept before it, should its sink's transaction turn out not committed: checkpoint {}\n",
            previous["checkpoint_id"]
        ));
    }
    let kind = state["source"].as_str().unwrap_or_default();
    let mut rows: Vec<[String; 3]> = state["splits"]
        .as_array()
        .map(|splits| splits.iter().map(|s| row(kind, s)).collect())
        .unwrap_or_default();
    rows.sort_by(|a, b| crate::summary::natural_order(&a[0], &b[0]));
    out.push('\n');
    if rows.is_empty() {
        out.push_str("no splits yet\n");
    } else {
        let header = ["split".to_string(), "state".to_string(), "position".to_string()];
        let widths: Vec<usize> = (0..2)
            .map(|i| {
                rows.iter()
                    .chain([&header])
                    .map(|r| r[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for r in [&header].into_iter().chain(rows.iter()) {
            out.push_str(&format!(
                "{:<w0$}  {:<w1$}  {}\n",
                r[0],
                r[1],
                r[2],
                w0 = widths[0],
                w1 = widths[1]
            ));
        }
    }
    if let Some(history) = state["history"].as_array().filter(|h| !h.is_empty()) {
        out.push_str("\nchanged by hand:\n");
        for entry in history {
            let asked = entry["position"]
                .as_str()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {} {} {}: {} -> {}{asked}\n",
                text(&entry["at"]),
                text(&entry["by"]),
                text(&entry["partition"]),
                text(&entry["before"]),
                text(&entry["after"]),
            ));
        }
    }
    out
}

/// A split snapshot as (name, state, position).
fn row(kind: &str, snapshot: &Value) -> [String; 3] {
    let split = &snapshot["split"];
    let (name, position, left) = SourceConfig::split_view(kind, split).unwrap_or_else(|| {
        // a source kind or a split form this build does not know: its JSON as it is
        (text(&split["id"]), split.to_string(), None)
    });
    let state = match snapshot.get("finished").filter(|f| !f.is_null()) {
        Some(f) => match f["at"].as_i64() {
            Some(at) => format!("finished: {} at {at}", text(&f["reason"])),
            None => format!("finished: {}", text(&f["reason"])),
        },
        None => match left {
            Some(left) => format!("unfinished, up to {left} left"),
            None => "unfinished".to_string(),
        },
    };
    [name, state, position]
}

/// A JSON string's text, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "?".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kafka_state() -> Value {
        json!({
            "job": "replay", "source": "kafka", "checkpoint_id": 4,
            "completed_at": "2026-12-05T12:00:00.000Z",
            // the enumerator's splits hold where they started, not where they are
            "enumerator": {"splits": [{"split": {"topic": "trades", "partition": 0, "next_offset": 0}}]},
            "splits": [
                {"split": {"topic": "trades", "partition": 10, "next_offset": 50, "stop_offset": 80}},
                {"split": {"topic": "trades", "partition": 2, "next_offset": 6699, "stop_offset": 6700},
                 "finished": {"reason": "eof_record", "at": 6699}},
            ],
            "history": [{"at": "2026-12-05T11:00:00.000Z", "by": "tidegate state set", "partition": "trades:10",
                         "before": "next_offset 70", "after": "next_offset 50", "position": "--offset 50"}],
        })
    }

    #[test]
    fn a_checkpoint_reads_as_its_splits_positions_in_the_order_people_count() {
        let shown = checkpoint(&kafka_state(), "/tmp/replay.state");
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[0],
            "job replay (kafka source): checkpoint 4, completed 2026-12-05T12:00:00.000Z"
        );
        assert_eq!(lines[1], "stored in /tmp/replay.state");
        let table: Vec<&str> = lines.iter().copied().skip_while(|l| !l.starts_with("split")).collect();
        assert!(
            table[1].starts_with("trades:2 ") && table[1].contains("finished: eof_record at 6699"),
            "{shown}"
        );
        assert!(table[1].ends_with("next_offset 6699, stop_offset 6700"), "{shown}");
        assert!(
            table[2].starts_with("trades:10") && table[2].contains("unfinished, up to 30 left"),
            "{shown}"
        );
        assert!(table[2].ends_with("next_offset 50, stop_offset 80"), "{shown}");
        // the enumerator's starting positions are not shown as positions
        assert!(!shown.contains("next_offset 0"), "{shown}");
        assert!(
            shown.contains(
                "2026-12-05T11:00:00.000Z tidegate state set trades:10: next_offset 70 -> next_offset 50 (--offset 50)"
            ),
            "{shown}"
        );
    }

    #[test]
    fn a_done_input_and_an_unknown_split_are_said_so() {
        let mut state = kafka_state();
        state["end_of_input"] = json!(true);
        state["source"] = json!("elsewhere");
        let shown = checkpoint(&state, "x");
        assert!(shown.contains("the input is done"), "{shown}");
        // a split this build cannot read is shown as stored
        assert!(shown.contains(r#"{"next_offset":50,"partition":10,"#), "{shown}");
    }

    #[test]
    fn a_generators_split_reads_as_the_summary_says_it() {
        let state = json!({
            "job": "seed", "source": "datagen", "checkpoint_id": 1, "completed_at": "t",
            "splits": [{"split": {"id": "0", "next_offset": 10, "end": 100}}],
        });
        let shown = checkpoint(&state, "x");
        assert!(shown.contains("unfinished, up to 90 left"), "{shown}");
    }

    #[test]
    fn a_groups_runs_are_listed_before_what_the_next_run_restores() {
        let runs = vec![("replay@a~1".to_string(), kafka_state())];
        let shown = group("tidegate-replay", "kafka topic s", &runs, &kafka_state());
        assert!(
            shown.starts_with("consumer group tidegate-replay: 1 run in kafka topic s\n"),
            "{shown}"
        );
        assert!(
            shown.contains("  run replay@a~1: checkpoint 4, completed 2026-12-05T12:00:00.000Z, 2 splits"),
            "{shown}"
        );
        assert!(shown.contains("what the next run restores"), "{shown}");
        assert!(shown.contains("finished: eof_record at 6699"), "{shown}");
        // the newest run's own input done is not the job's
        let mut done = kafka_state();
        done["end_of_input"] = json!(true);
        let runs = vec![("a".to_string(), done.clone()), ("b".to_string(), kafka_state())];
        assert!(!group("g", "s", &runs, &done).contains("the input is done"));
        let runs = vec![("a".to_string(), done.clone()), ("b".to_string(), done.clone())];
        assert!(group("g", "s", &runs, &done).contains("the input is done"));
    }
}
