//! A source for the simulation that resolves where it starts the way the Kafka source resolves
//! `latest`: at a first discovery that runs off the coordinator (`call_async`) after a delay, and
//! reads a log end that keeps moving. Its splits are pushed to their owner readers (as Kafka's
//! are), not pulled. Once a state file recorded the resolved start, every restart must keep it:
//! resolving it again would read another range (the simulation's check compares each resumed
//! checkpoint's start with the first one a state file recorded).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::enumerator::{EnumeratorContext, SplitEnumerator};
use crate::error::Result;
use crate::number_sequence::{
    split_range, NumberEmitter, NumberSequenceSource, NumberSequenceSplit, NumberSequenceSplitReader,
};
use crate::reader_base::SourceReaderBase;
use crate::source::{Boundedness, ReaderContext, Source};
use crate::split::{SourceSplit, SplitId};

/// What outlives the simulated processes: the log's end, which every discovery moves (records
/// keep arriving).
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) end: AtomicU64,
}

/// The enumerator's checkpoint: the resolved start, if discovered, and every split with
/// whether it went to a reader (Kafka's `KnownSplit`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResolvedState {
    pub(crate) latest: Option<u64>,
    pub(crate) splits: Vec<(NumberSequenceSplit, bool)>,
}

pub(crate) struct ResolvingSource {
    pub(crate) log: Arc<Log>,
    pub(crate) count: u64,
    pub(crate) splits: usize,
    pub(crate) discovery_delay: Duration,
    /// How its readers read (batch size, queue, fetcher mode): as the number sequence's do.
    pub(crate) reading: NumberSequenceSource,
}

pub(crate) struct ResolvingEnumerator {
    log: Arc<Log>,
    count: u64,
    splits: usize,
    delay: Duration,
    latest: Option<u64>,
    known: BTreeMap<SplitId, (NumberSequenceSplit, bool)>,
}

impl ResolvingEnumerator {
    fn owner(id: &str, parallelism: usize) -> usize {
        id.parse::<usize>().unwrap_or(0) % parallelism.max(1)
    }

    /// Push every unassigned split to its owner, if registered; once discovered, the readers
    /// that have all theirs hear there will be no more.
    fn assign(&mut self, ctx: &mut EnumeratorContext<NumberSequenceSplit, u64>) -> Result<()> {
        if self.latest.is_none() {
            return Ok(());
        }
        let parallelism = ctx.current_parallelism();
        let registered = ctx.registered_readers().clone();
        for reader in registered {
            let mine: Vec<NumberSequenceSplit> = self
                .known
                .iter_mut()
                .filter(|(id, (_, assigned))| !assigned && Self::owner(id, parallelism) == reader)
                .map(|(_, (split, assigned))| {
                    *assigned = true;
                    split.clone()
                })
                .collect();
            ctx.assign_splits(reader, mine)?;
            ctx.signal_no_more_splits(reader)?;
        }
        Ok(())
    }
}

impl SplitEnumerator for ResolvingEnumerator {
    type Split = NumberSequenceSplit;
    type State = ResolvedState;
    type CallResult = u64;

    fn start(&mut self, ctx: &mut EnumeratorContext<NumberSequenceSplit, u64>) -> Result<()> {
        if self.latest.is_none() {
            let log = Arc::clone(&self.log);
            // a discovery reads the log's end now (and the log keeps growing)
            ctx.call_async(move || Ok(log.end.fetch_add(7, Ordering::SeqCst)), self.delay, None);
        }
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        ctx: &mut EnumeratorContext<NumberSequenceSplit, u64>,
        splits: Vec<NumberSequenceSplit>,
    ) -> Result<()> {
        for split in splits {
            self.known.insert(split.split_id(), (split, false));
        }
        self.assign(ctx)
    }

    fn add_reader(&mut self, ctx: &mut EnumeratorContext<NumberSequenceSplit, u64>, _reader: usize) -> Result<()> {
        self.assign(ctx)
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<ResolvedState> {
        Ok(ResolvedState {
            latest: self.latest,
            splits: self.known.values().cloned().collect(),
        })
    }

    fn handle_call_result(
        &mut self,
        ctx: &mut EnumeratorContext<NumberSequenceSplit, u64>,
        result: Result<u64>,
    ) -> Result<()> {
        let latest = result?;
        if self.latest.is_some() {
            return Ok(());
        }
        self.latest = Some(latest);
        for split in split_range(latest, latest + self.count, self.splits) {
            self.known.insert(split.split_id(), (split, false));
        }
        self.assign(ctx)
    }
}

impl Source for ResolvingSource {
    type Split = NumberSequenceSplit;
    type EnumeratorState = ResolvedState;
    type Enumerator = ResolvingEnumerator;
    type Reader = SourceReaderBase<NumberSequenceSplitReader, u64, NumberEmitter>;
    type Output = u64;

    fn kind(&self) -> &'static str {
        "resolving_sequence"
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn create_enumerator(&self) -> Result<ResolvingEnumerator> {
        self.restore_enumerator(ResolvedState {
            latest: None,
            splits: Vec::new(),
        })
    }

    fn restore_enumerator(&self, state: ResolvedState) -> Result<ResolvingEnumerator> {
        // a restored split that went to a reader is added back by the job, from the splits'
        // states; one that did not waits here for its owner
        let known = state
            .splits
            .into_iter()
            .filter(|(_, assigned)| !assigned)
            .map(|(split, _)| (split.split_id(), (split, false)))
            .collect();
        Ok(ResolvingEnumerator {
            log: Arc::clone(&self.log),
            count: self.count,
            splits: self.splits,
            delay: self.discovery_delay,
            latest: state.latest,
            known,
        })
    }

    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader> {
        self.reading.reader(context, false)
    }
}
