//! The periodic source's split reader: fires the events of one reader at their instants (missed
//! fires first after a restart), rendering each value, on a fetcher thread.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::settings::PeriodicSettings;
use super::split::PeriodicEventSplit;
use super::supplier::EventDef;
use crate::core::split_reader::{WakeUpHandle, WakeableSleep};
use crate::core::{FinishReason, RecordsWithSplitIds, SourceSplit, SplitId, SplitReader, SplitsChange};
use crate::error::Result;
use crate::record::{Header, Record, ValueFormat};

/// The header that carries the event id on every record.
pub const EVENT_ID_HEADER: &str = "tidegate-event-id";
/// The header with the wall-clock time (ms) the record was fired at, to see how punctual it was.
pub const FIRED_AT_HEADER: &str = "tidegate-fired-at";

struct LiveEvent {
    split: PeriodicEventSplit,
    /// Missed fires a restart replays first.
    catch_up: VecDeque<i64>,
    next_due: i64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Replace `{id}`, `{seq}`, `{scheduled}`, `{scheduled_ms}` in the text of a value.
fn render(value: &Value, id: &str, seq: u64, scheduled: i64) -> Value {
    match value {
        Value::String(s) if s.contains('{') => {
            let when = chrono::DateTime::from_timestamp_millis(scheduled)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                .unwrap_or_default();
            Value::String(
                s.replace("{id}", id)
                    .replace("{seq}", &seq.to_string())
                    .replace("{scheduled_ms}", &scheduled.to_string())
                    .replace("{scheduled}", &when),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| render(v, id, seq, scheduled)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render(v, id, seq, scheduled)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Fires the events of one reader at their instants; sleeps in between, woken by split changes.
pub struct PeriodicSplitReader {
    settings: Arc<PeriodicSettings>,
    events: BTreeMap<SplitId, LiveEvent>,
    sleep: WakeableSleep,
    /// `tidegate_periodic_fires_total`.
    fires: metrics::Counter,
}

impl PeriodicSplitReader {
    pub(super) fn new(settings: Arc<PeriodicSettings>, fires: metrics::Counter) -> Self {
        PeriodicSplitReader {
            settings,
            events: BTreeMap::new(),
            sleep: WakeableSleep::new(),
            fires,
        }
    }

    fn fire(&self, e: &EventDef, seq: u64, scheduled: i64) -> Result<Record> {
        let value = render(&e.value, &e.id, seq, scheduled);
        let bytes = match (&value, self.settings.format, &self.settings.encoder) {
            (Value::String(s), ValueFormat::String, _) => s.clone().into_bytes(),
            (v, format, Some(encoder)) if format.prints_decoded() => encoder
                .0
                .encode(v)
                .map_err(|m| crate::Error::runtime(format!("firing event {}", e.id), m))?,
            (other, _, _) => serde_json::to_vec(other).unwrap_or_default(),
        };
        let mut headers = vec![
            Header {
                key: EVENT_ID_HEADER.into(),
                value: Some(e.id.clone().into_bytes()),
            },
            Header {
                key: FIRED_AT_HEADER.into(),
                value: Some(now_ms().to_string().into_bytes()),
            },
        ];
        headers.extend(e.headers.iter().map(|(k, v)| Header {
            key: k.clone(),
            value: Some(v.clone().into_bytes()),
        }));
        let key = e
            .key
            .as_ref()
            .map(|k| match render(&Value::String(k.clone()), &e.id, seq, scheduled) {
                Value::String(s) => s.into_bytes(),
                other => other.to_string().into_bytes(),
            });
        let structured = self.settings.format.is_structured();
        Ok(Record {
            offset: Some(seq as i64),
            timestamp: Some(scheduled),
            key: key.map(Into::into),
            value: Some(bytes.into()),
            decoded: (self.settings.keep_decoded && structured).then_some(value),
            format: self.settings.format,
            headers,
            ..Record::default()
        })
    }

    /// Wait until `due` (ms since the epoch); false if woken by a split change first.
    fn sleep_until(&self, due: Option<i64>) -> bool {
        let Some(due) = due else {
            // no events: wait for a change (the fetcher only calls fetch with splits assigned)
            self.sleep.sleep(Duration::from_millis(200));
            return false;
        };
        loop {
            let left = due - now_ms();
            if left <= 0 {
                return true;
            }
            if !self.sleep.sleep(Duration::from_millis(left as u64)) {
                return false;
            }
        }
    }
}

impl SplitReader for PeriodicSplitReader {
    type Element = Record;
    type Split = PeriodicEventSplit;

    fn fetch(&mut self) -> Result<RecordsWithSplitIds<Record>> {
        let mut batch = RecordsWithSplitIds::default();
        let has_catch_up = self.events.values().any(|e| !e.catch_up.is_empty());
        if !has_catch_up {
            let due = self.events.values().map(|e| e.next_due).min();
            if !self.sleep_until(due) {
                return Ok(batch);
            }
        }
        let now = now_ms();
        let mut finished = Vec::new();
        let ids: Vec<SplitId> = self.events.keys().cloned().collect();
        for id in ids {
            let mut records = Vec::new();
            let Some(live) = self.events.get_mut(&id) else { continue };
            let period = live.split.event.schedule.period_ms;
            let count = live.split.event.count.unwrap_or(u64::MAX);
            let mut fired = live.split.fired;
            let mut instants: Vec<i64> = live.catch_up.drain(..).collect();
            while live.next_due <= now {
                instants.push(live.next_due);
                live.next_due += period;
            }
            let event = live.split.event.clone();
            for at in instants {
                if fired >= count {
                    break;
                }
                records.push((fired, at));
                fired += 1;
            }
            live.split.fired = fired;
            let done = fired >= count;
            let records: Vec<Record> = records
                .into_iter()
                .map(|(seq, at)| self.fire(&event, seq, at))
                .collect::<Result<_>>()?;
            if !records.is_empty() {
                self.fires.increment(records.len() as u64);
                batch.records.push((id.clone(), records));
            }
            if done {
                finished.push(id.clone());
            }
        }
        for id in finished {
            self.events.remove(&id);
            batch.finished.push((id, FinishReason::StoppingOffset));
        }
        Ok(batch)
    }

    fn handle_splits_changes(&mut self, change: SplitsChange<PeriodicEventSplit>) -> Result<()> {
        match change {
            SplitsChange::Add(splits) => {
                let now = now_ms();
                for split in splits {
                    let s = split.event.schedule;
                    let (catch_up, next_due) = match split.last_fire_ms {
                        None => (Vec::new(), s.first(now)),
                        Some(last) => {
                            let left = split
                                .event
                                .count
                                .map(|c| c.saturating_sub(split.fired))
                                .unwrap_or(100_000);
                            s.resume(last, now, self.settings.catch_up, left.min(100_000))
                        }
                    };
                    tracing::info!(event = %split.event.id, next_due, missed = catch_up.len(), "event scheduled");
                    self.events.insert(
                        split.split_id(),
                        LiveEvent {
                            split,
                            catch_up: catch_up.into(),
                            next_due,
                        },
                    );
                }
            }
            SplitsChange::Remove(ids) => {
                for id in ids {
                    self.events.remove(&id);
                }
            }
        }
        Ok(())
    }

    fn wake_up_handle(&self) -> Option<WakeUpHandle> {
        Some(self.sleep.handle())
    }
}
