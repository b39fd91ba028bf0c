//! The periodic source's record emitter: each fire it emits advances its event's progress.

use super::split::PeriodicEventSplit;
use crate::core::{ReaderOutput, RecordEmitter};
use crate::error::Result;
use crate::record::Record;

/// Advances an event's progress with each fire it emits.
pub struct FireEmitter;

impl RecordEmitter<Record, Record, PeriodicEventSplit> for FireEmitter {
    fn emit_record(
        &mut self,
        record: Record,
        output: &mut ReaderOutput<Record>,
        split: &mut PeriodicEventSplit,
    ) -> Result<()> {
        if let Some(seq) = record.offset {
            split.fired = seq as u64 + 1;
        }
        split.last_fire_ms = record.timestamp;
        output.collect(record);
        Ok(())
    }
}
