//! The Kafka source's checks across keys: expressions against the value format, and the
//! event-time settings, speeds and rates against each other.

use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// `eof` and `where` compile, and read no field of a value that has none (over bytes or text
/// a field of the value fails on every record: nothing would match).
pub(super) fn expressions(eof: &Option<String>, filter: &Option<String>, format: ValueFormat) -> Result<()> {
    for (key, expr) in [("source.eof", eof), ("source.where", filter)] {
        let Some(expr) = expr else { continue };
        let compiled = crate::expr::RecordExpression::compile(expr).map_err(|e| Error::config(key, e))?;
        if let (Some([field, ..]), ValueFormat::Bytes | ValueFormat::String) = (compiled.value_fields(), format) {
            return Err(Error::config(
                key,
                format!("reads value.{field}, but source.format is {format}: a field needs json, avro, protobuf or json_schema"),
            ));
        }
    }
    Ok(())
}

/// `replay_speed`, `max_rate` and `max_bytes_rate` are numbers above 0, and the event-time
/// settings are set only where an event-time clock runs (pacing, or a source-wide stop).
pub(super) fn pacing(
    replay_speed: Option<f64>,
    (caught_up_grace, max_out_of_orderness): (&Option<String>, &Option<String>),
    (max_rate, max_bytes_rate): (Option<f64>, Option<f64>),
    source_wide_stop: bool,
) -> Result<()> {
    let above_zero = |key: &str, value: Option<f64>, unit: &str| match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(Error::config(
            key,
            format!("must be a number above 0 ({unit}), not {v}"),
        )),
        _ => Ok(()),
    };
    above_zero(
        "source.replay_speed",
        replay_speed,
        "1.0 is real time, 60.0 plays an hour in a minute",
    )?;
    if replay_speed.is_none() && !source_wide_stop {
        let set = [
            ("caught_up_grace", caught_up_grace),
            ("max_out_of_orderness", max_out_of_orderness),
        ];
        if let Some((key, _)) = set.iter().find(|(_, v)| v.is_some()) {
            return Err(Error::config(
                format!("source.{key}"),
                "applies only to an event-time replay: set source.replay_speed or eof_scope = \"source\", or remove it",
            ));
        }
    }
    above_zero("source.max_rate", max_rate, "per second")?;
    above_zero("source.max_bytes_rate", max_bytes_rate, "per second")
}
