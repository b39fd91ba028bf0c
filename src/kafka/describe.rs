//! What `tidegate validate` prints of a Kafka source, one line each, in the config's own words.

use super::config::KafkaSourceConfig;
use crate::format::DecodeErrorPolicy;

/// A Kafka source without a stop (no `stopping_offsets`, no `eof`) follows its topics until a
/// signal or `job.max_duration` ends it, which a config's default leaves unsaid (`tidegate
/// replay` stops at `latest` by default).
pub fn unbounded_hint(c: &KafkaSourceConfig) -> Option<String> {
    (matches!(c.settings.stopping, super::offsets::StoppingOffsets::None) && c.eof.is_none()).then(|| {
        "unbounded: the job follows its topics until SIGTERM or job.max_duration; source.stopping_offsets = \"latest\" reads what is there at its start and exits (tidegate replay's default)".to_string()
    })
}

/// The lines of `c`.
pub fn lines(c: &KafkaSourceConfig) -> Vec<String> {
    let s = &c.settings;
    let mut lines = vec![
        format!("source kafka {}, {}", s.bootstrap_servers, s.subscription),
        format!("  starting_offsets {}; stopping_offsets {}", s.starting, s.stopping),
    ];
    let written = if c.eof_emit_marker {
        "written too"
    } else {
        "not written"
    };
    let eof = match &c.eof {
        Some(e) if c.event_time.source_wide_stop => {
            format!("; the first record where {e}, in any partition, ends every partition at its timestamp ({written})")
        }
        Some(e) => format!("; a partition ends at the record where {e} ({written})"),
        None => String::new(),
    };
    lines.push(format!("  format {}{eof}", c.format));
    for (key, expression) in [("eof", &c.eof), ("where", &c.filter)] {
        let Some(expression) = expression else { continue };
        // compiled already: one that does not is a config error before this
        if crate::expr::RecordExpression::compile(expression).is_ok_and(|e| e.is_condition_only_on_some_data()) {
            lines.push(format!(
                "  note: source.{key} `{expression}` is a condition only where it holds true or false; on other records its evaluation fails (logged once, counted, no match)"
            ));
        }
    }
    if let Some(filter) = &c.filter {
        // validated already: a filter that does not compile is a config error before this
        let before = crate::expr::RecordExpression::compile(filter).is_ok_and(|e| !e.reads_value());
        let when = if before {
            "evaluated before decoding"
        } else {
            "evaluated on the decoded value"
        };
        lines.push(format!(
            "  records where {filter} ({when}); the others are skipped, their position kept"
        ));
    }
    if let Some(speed) = c.event_time.speed {
        lines.push(format!(
            "  replayed at {speed}x event time, all partitions on one clock"
        ));
    }
    if let Some(k) = c.key_format {
        lines.push(format!("  keys decoded as {k}"));
    }
    if let Some(avro) = &c.avro {
        lines.push(format!("  avro {avro}"));
    }
    lines.extend(c.wire_schema.iter().map(|schema| format!("  {schema}")));
    let discovery = match s.discovery_interval {
        Some(d) => format!("partitions discovered every {}", humantime::format_duration(d)),
        None => "partitions discovered once, at start".to_string(),
    };
    let errors = match c.decode_errors {
        DecodeErrorPolicy::Fail => "an undecodable record fails the job".to_string(),
        DecodeErrorPolicy::Skip => "undecodable records are skipped".to_string(),
        DecodeErrorPolicy::DeadLetter => format!(
            "undecodable records go to {}",
            c.dead_letter_topic.as_deref().unwrap_or("the dead-letter topic")
        ),
    };
    lines.push(format!("  {discovery}; {errors}"));
    if let Some(group) = &s.group_id {
        lines.push(format!("  offsets committed to group {group} after each checkpoint"));
    }
    if !s.properties.is_empty() {
        let props: Vec<String> = crate::client::redacted(&s.properties)
            .into_iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        lines.push(format!("  properties {}", props.join(", ")));
    }
    lines
}
