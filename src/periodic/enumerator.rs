//! The periodic source's enumerator: reads the supplier on the coordinator, first `initial_delay`
//! after every reader registered, then every discovery interval; assigns new events round-robin
//! (an event never moves once assigned), stops removed ones, reschedules changed ones, and keeps
//! the previous assignment when the supplier fails.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::settings::PeriodicSettings;
use super::split::PeriodicEventSplit;
use super::supplier::EventDef;
use crate::core::{EnumeratorContext, RemoveSplits, SourceEvent, SourceSplit, SplitEnumerator};
use crate::error::Result;
use crate::metrics::PeriodicMetrics;

/// An event and the reader that fires it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Assignment {
    pub reader: usize,
    pub event: EventDef,
}

/// The enumerator's checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeriodicEnumeratorState {
    pub assignments: Vec<Assignment>,
    pub next_reader: usize,
    /// Events assigned but not with a reader yet (its reader had not registered, or was
    /// stopped), with their progress: a restart hands them out (absent in older state files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PeriodicEventSplit>,
}

type Ctx = EnumeratorContext<PeriodicEventSplit, std::result::Result<Vec<EventDef>, String>>;

/// Assigns events to readers.
pub struct PeriodicEnumerator {
    settings: Arc<PeriodicSettings>,
    assignments: BTreeMap<String, Assignment>,
    next_reader: usize,
    /// Splits to (re)assign once their reader registers: restored progress, or new events.
    pending: BTreeMap<usize, Vec<PeriodicEventSplit>>,
    supplier_started: bool,
    no_more_splits: bool,
    parallelism: usize,
    metrics: PeriodicMetrics,
}

impl PeriodicEnumerator {
    pub fn new(
        settings: Arc<PeriodicSettings>,
        state: Option<PeriodicEnumeratorState>,
        metrics: PeriodicMetrics,
    ) -> Self {
        let state = state.unwrap_or_default();
        PeriodicEnumerator {
            settings,
            assignments: state.assignments.into_iter().map(|a| (a.event.id.clone(), a)).collect(),
            next_reader: state.next_reader,
            // sorted out in `start`, once the parallelism is known
            pending: if state.pending.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([(usize::MAX, state.pending)])
            },
            supplier_started: false,
            no_more_splits: false,
            parallelism: 1,
            metrics,
        }
    }

    fn flush_pending(&mut self, ctx: &mut Ctx) -> Result<()> {
        let registered: Vec<usize> = ctx.registered_readers().iter().copied().collect();
        for reader in registered {
            if let Some(splits) = self.pending.remove(&reader) {
                ctx.assign_splits(reader, splits)?;
            }
            if self.no_more_splits {
                ctx.signal_no_more_splits(reader)?;
            }
        }
        Ok(())
    }

    fn apply(&mut self, ctx: &mut Ctx, events: Vec<EventDef>) -> Result<()> {
        // with several instances, each fires the events whose id hashes to it
        let instance = self.settings.instance;
        let mut incoming: BTreeMap<String, EventDef> = events
            .into_iter()
            .filter(|e| instance.owns_key(&e.id))
            .map(|e| (e.id.clone(), e))
            .collect();
        // removed and changed events stop on their reader
        let mut stop: BTreeMap<usize, Vec<crate::core::SplitId>> = BTreeMap::new();
        let ids: Vec<String> = self.assignments.keys().cloned().collect();
        for id in ids {
            let current = &self.assignments[&id];
            match incoming.get(&id) {
                Some(new) if *new == current.event => {
                    incoming.remove(&id); // unchanged: keeps its phase
                }
                Some(_) => {
                    info!(event = %id, "event changed: rescheduling");
                    stop.entry(current.reader).or_default().push(Arc::from(id.as_str()));
                }
                None => {
                    info!(event = %id, "event removed");
                    stop.entry(current.reader).or_default().push(Arc::from(id.as_str()));
                    self.assignments.remove(&id);
                }
            }
        }
        for (reader, ids) in stop {
            for list in self.pending.values_mut() {
                list.retain(|s| !ids.contains(&s.split_id()));
            }
            ctx.send_event_to_reader(reader, SourceEvent(Box::new(RemoveSplits(ids))))?;
        }
        // new and changed events: a changed one stays on its reader, a new one goes round-robin
        for (id, event) in incoming {
            let reader = match self.assignments.get(&id) {
                Some(a) => a.reader,
                None => {
                    let r = self.next_reader % self.parallelism;
                    self.next_reader = (self.next_reader + 1) % self.parallelism;
                    r
                }
            };
            info!(event = %id, reader, "event assigned");
            self.assignments.insert(
                id,
                Assignment {
                    reader,
                    event: event.clone(),
                },
            );
            self.pending.entry(reader).or_default().push(PeriodicEventSplit {
                event,
                fired: 0,
                last_fire_ms: None,
            });
        }
        self.metrics.events.set(self.assignments.len() as f64);
        if self.settings.supplier.is_static() && self.assignments.values().all(|a| a.event.count.is_some()) {
            self.no_more_splits = true;
        }
        self.flush_pending(ctx)
    }

    fn start_supplier(&mut self, ctx: &mut Ctx) {
        self.supplier_started = true;
        let supplier = self.settings.supplier.clone();
        let period = (!supplier.is_static()).then_some(self.settings.discover_interval);
        ctx.call_async(move || Ok(supplier.events()), self.settings.initial_delay, period);
    }
}

impl SplitEnumerator for PeriodicEnumerator {
    type Split = PeriodicEventSplit;
    type State = PeriodicEnumeratorState;
    type CallResult = std::result::Result<Vec<EventDef>, String>;

    fn start(&mut self, ctx: &mut Ctx) -> Result<()> {
        self.parallelism = ctx.current_parallelism().max(1);
        // restored splits whose reader no longer exists go round-robin
        let restored: Vec<PeriodicEventSplit> = std::mem::take(&mut self.pending).into_values().flatten().collect();
        for split in restored {
            let id = split.event.id.clone();
            let reader = match self.assignments.get(&id) {
                Some(a) if a.reader < self.parallelism => a.reader,
                _ => {
                    let r = self.next_reader % self.parallelism;
                    self.next_reader = (self.next_reader + 1) % self.parallelism;
                    r
                }
            };
            if let Some(a) = self.assignments.get_mut(&id) {
                a.reader = reader;
            }
            self.pending.entry(reader).or_default().push(split);
        }
        Ok(())
    }

    fn add_splits_back(&mut self, _ctx: &mut Ctx, splits: Vec<PeriodicEventSplit>) -> Result<()> {
        // sorted out in `start`, once the parallelism is known
        self.pending.entry(usize::MAX).or_default().extend(splits);
        Ok(())
    }

    fn add_reader(&mut self, ctx: &mut Ctx, _reader: usize) -> Result<()> {
        self.flush_pending(ctx)?;
        // the supplier is first read once every reader is there, as in the original
        if !self.supplier_started && ctx.registered_readers().len() == self.parallelism {
            self.start_supplier(ctx);
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<PeriodicEnumeratorState> {
        Ok(PeriodicEnumeratorState {
            assignments: self.assignments.values().cloned().collect(),
            next_reader: self.next_reader,
            pending: self.pending.values().flatten().cloned().collect(),
        })
    }

    fn handle_call_result(&mut self, ctx: &mut Ctx, result: Result<Self::CallResult>) -> Result<()> {
        match result {
            Ok(Ok(events)) => self.apply(ctx, events),
            Ok(Err(message)) | Err(crate::Error::Runtime { message, .. }) => {
                warn!(error = %message, "the event supplier failed; the current events keep firing");
                self.metrics.supplier_failures.increment(1);
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "the event supplier failed; the current events keep firing");
                self.metrics.supplier_failures.increment(1);
                Ok(())
            }
        }
    }
}
