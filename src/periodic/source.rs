//! The periodic source (the seed's Flink `PeriodicSource`): its boundedness, how its events move
//! between instances, and the enumerator and readers it creates.

use std::sync::Arc;

use super::emitter::FireEmitter;
use super::enumerator::{PeriodicEnumerator, PeriodicEnumeratorState};
use super::settings::PeriodicSettings;
use super::split::PeriodicEventSplit;
use super::split_reader::PeriodicSplitReader;
use super::supplier::{EventDef, Supplier};
use crate::core::{Boundedness, ReaderContext, ReaderOptions, Source, SourceReaderBase};
use crate::error::Result;
use crate::metrics::PeriodicMetrics;
use crate::record::Record;

/// The periodic source.
pub struct PeriodicSource {
    pub settings: Arc<PeriodicSettings>,
    pub metrics: PeriodicMetrics,
}

impl Source for PeriodicSource {
    type Split = PeriodicEventSplit;
    type EnumeratorState = PeriodicEnumeratorState;
    type Enumerator = PeriodicEnumerator;
    type Reader = SourceReaderBase<PeriodicSplitReader, Record, FireEmitter>;
    type Output = Record;

    fn kind(&self) -> &'static str {
        "periodic"
    }

    /// Inline events that all have a `count` make a bounded job; anything else runs until stopped.
    fn boundedness(&self) -> Boundedness {
        match &self.settings.supplier {
            Supplier::Inline(events) if events.iter().all(|e| e.count.is_some()) => Boundedness::Bounded,
            _ => Boundedness::ContinuousUnbounded,
        }
    }

    /// Each event moves with its progress to the instance its id hashes to (as a new event is
    /// dealt).
    fn reshare(&self, parts: Vec<crate::core::Share<Self>>, _parallelism: usize) -> Result<crate::core::Share<Self>> {
        let instance = self.settings.instance;
        let mut state = PeriodicEnumeratorState::default();
        let mut splits = Vec::new();
        for (part, snapshots) in parts {
            let owned = |e: &EventDef| instance.owns_key(&e.id);
            state
                .assignments
                .extend(part.assignments.into_iter().filter(|a| owned(&a.event)));
            state
                .pending
                .extend(part.pending.into_iter().filter(|p| owned(&p.event)));
            splits.extend(snapshots.into_iter().filter(|s| owned(&s.split.event)));
        }
        Ok((state, splits))
    }

    fn create_enumerator(&self) -> Result<PeriodicEnumerator> {
        Ok(PeriodicEnumerator::new(
            Arc::clone(&self.settings),
            None,
            self.metrics.clone(),
        ))
    }

    fn restore_enumerator(&self, state: PeriodicEnumeratorState) -> Result<PeriodicEnumerator> {
        Ok(PeriodicEnumerator::new(
            Arc::clone(&self.settings),
            Some(state),
            self.metrics.clone(),
        ))
    }

    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader> {
        let mut options = ReaderOptions::new(context.index);
        options.stats = context.fetch_stats;
        let settings = Arc::clone(&self.settings);
        let fires = self.metrics.fires.clone();
        let factory = Box::new(move |_| Ok(PeriodicSplitReader::new(Arc::clone(&settings), fires.clone())));
        Ok(
            SourceReaderBase::new(factory, FireEmitter, options).with_event_handler(Box::new(|event| {
                match event.0.downcast::<crate::core::RemoveSplits>() {
                    Ok(remove) => remove.0,
                    Err(_) => Vec::new(),
                }
            })),
        )
    }
}
