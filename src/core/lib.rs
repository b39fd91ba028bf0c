#![deny(missing_docs)]
//! The generic FLIP-27 runtime: sources, enumerators, readers with split fetcher threads and a
//! bounded queue, end-of-stream evaluation, sinks, and aligned checkpoints to a crash-safe state
//! file. Nothing here knows about Kafka; connectors plug in through these traits.
//!
//! # The roles
//!
//! A job reads one [`Source`] with `parallelism` readers into one [`Sink`], as Flink's FLIP-27
//! divides the work:
//!
//! - A **split** ([`SourceSplit`]) is a unit of work: a Kafka partition, a range of numbers. Its
//!   value is also its progress (the next offset), so a checkpoint stores splits as they are.
//! - The **[`SplitEnumerator`]** runs once per job, on the coordinator task: it discovers splits
//!   and assigns them to readers (pushed as they are found, or pulled when a reader asks). Its own
//!   state (what it has found and assigned) is checkpointed too.
//! - A **[`SourceReader`]** runs per parallel reader, as an async task: it takes the splits it is
//!   assigned and emits their records. Most sources use [`SourceReaderBase`], which runs
//!   **[`SplitReader`]s** (blocking I/O, one per fetcher thread, [`SplitFetcherManager`]) that hand
//!   batches to the reader through the bounded **[`queue::ElementQueue`]** — a full queue stops
//!   the fetchers, which is the backpressure — and turns elements into records with a
//!   **[`RecordEmitter`]**, which also advances the split's position.
//! - An **[`EofOnRecordEvaluator`]** (FLIP-208) ends a split at the first record it matches; the
//!   record is not emitted (unless asked), nor anything after it in that split.
//! - The **[`Sink`]** receives every reader's records in order, with the checkpoint barriers
//!   between them.
//! - **Checkpoints** are aligned: on a trigger every reader snapshots its splits between two
//!   records and sends a barrier down the same channel as its records; once the sink has
//!   everything before every barrier, the enumerator's and the readers' snapshots are written
//!   atomically to the state file ([`StateStore`]) as a [`Checkpoint`], and a restart resumes
//!   from it.
//!
//! # A source of your own
//!
//! A source of the words of some sentences: each sentence is a split, its position the index of
//! the next word; the enumerator hands the sentences out on request, a split reader fetches two
//! words at a time, and the job runs them to completion into memory.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde::{Deserialize, Serialize};
//! use tidegate_core::number_sequence::IteratorEnumerator;
//! use tidegate_core::{
//!     Boundedness, CollectSink, FinishReason, Job, JobOptions, ReaderContext, ReaderOptions,
//!     ReaderOutput, RecordEmitter, RecordPosition, RecordsWithSplitIds, Result, Source,
//!     SourceReaderBase, SourceSplit, SplitId, SplitReader, SplitsChange,
//! };
//!
//! /// One sentence, and the index of its next word (its progress).
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! struct Sentence {
//!     id: String,
//!     words: Vec<String>,
//!     next: usize,
//! }
//!
//! impl SourceSplit for Sentence {
//!     fn split_id(&self) -> SplitId {
//!         Arc::from(self.id.as_str())
//!     }
//! }
//!
//! /// What the readers emit: a word and its place in its sentence.
//! #[derive(Debug)]
//! struct Word {
//!     text: String,
//!     at: usize,
//! }
//!
//! impl RecordPosition for Word {
//!     fn position(&self) -> Option<i64> {
//!         Some(self.at as i64)
//!     }
//! }
//!
//! /// Blocking I/O would go here: it runs on a fetcher thread.
//! #[derive(Default)]
//! struct SentenceReader {
//!     splits: Vec<Sentence>,
//! }
//!
//! impl SplitReader for SentenceReader {
//!     type Element = Word;
//!     type Split = Sentence;
//!
//!     fn fetch(&mut self) -> Result<RecordsWithSplitIds<Word>> {
//!         let mut batch = RecordsWithSplitIds::default();
//!         let Some(split) = self.splits.first_mut() else {
//!             return Ok(batch);
//!         };
//!         let end = (split.next + 2).min(split.words.len());
//!         let words = (split.next..end)
//!             .map(|at| Word { text: split.words[at].clone(), at })
//!             .collect();
//!         split.next = end;
//!         batch.records.push((split.split_id(), words));
//!         if end == split.words.len() {
//!             batch.finished.push((split.split_id(), FinishReason::StoppingOffset));
//!             self.splits.remove(0);
//!         }
//!         Ok(batch)
//!     }
//!
//!     fn handle_splits_changes(&mut self, change: SplitsChange<Sentence>) -> Result<()> {
//!         match change {
//!             SplitsChange::Add(splits) => self.splits.extend(splits),
//!             SplitsChange::Remove(ids) => self.splits.retain(|s| !ids.contains(&s.split_id())),
//!         }
//!         Ok(())
//!     }
//! }
//!
//! /// Emits each word and moves its split past it: what a checkpoint then stores.
//! struct WordEmitter;
//!
//! impl RecordEmitter<Word, Word, Sentence> for WordEmitter {
//!     fn emit_record(&mut self, word: Word, out: &mut ReaderOutput<Word>, split: &mut Sentence) -> Result<()> {
//!         split.next = word.at + 1;
//!         out.collect(word);
//!         Ok(())
//!     }
//! }
//!
//! struct SentenceSource {
//!     sentences: Vec<&'static str>,
//! }
//!
//! impl Source for SentenceSource {
//!     type Split = Sentence;
//!     type EnumeratorState = Vec<Sentence>;
//!     type Enumerator = IteratorEnumerator<Sentence>;
//!     type Reader = SourceReaderBase<SentenceReader, Word, WordEmitter>;
//!     type Output = Word;
//!
//!     fn kind(&self) -> &'static str {
//!         "sentences"
//!     }
//!
//!     fn boundedness(&self) -> Boundedness {
//!         Boundedness::Bounded
//!     }
//!
//!     fn create_enumerator(&self) -> Result<Self::Enumerator> {
//!         let splits = self.sentences.iter().enumerate().map(|(i, s)| Sentence {
//!             id: i.to_string(),
//!             words: s.split_whitespace().map(String::from).collect(),
//!             next: 0,
//!         });
//!         Ok(IteratorEnumerator::new(splits))
//!     }
//!
//!     fn restore_enumerator(&self, unassigned: Vec<Sentence>) -> Result<Self::Enumerator> {
//!         Ok(IteratorEnumerator::new(unassigned))
//!     }
//!
//!     fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader> {
//!         let mut options = ReaderOptions::new(context.index);
//!         options.request_splits = true; // the enumerator hands splits out on request
//!         options.stats = context.fetch_stats;
//!         Ok(SourceReaderBase::new(
//!             Box::new(|_splits| Ok(SentenceReader::default())),
//!             WordEmitter,
//!             options,
//!         ))
//!     }
//! }
//!
//! let source = SentenceSource {
//!     sentences: vec!["the market opens", "trades flow all day long", "the market closes"],
//! };
//! let (sink, words) = CollectSink::new();
//! let report = Job::new(source, JobOptions::new("sentences", 2)).run_blocking(Box::new(sink))?;
//!
//! assert_eq!(report.records_written, 11);
//! assert!(report.splits.iter().all(|s| s.finished.is_some()));
//! let words = words.lock().unwrap();
//! let mut texts: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
//! texts.sort();
//! assert_eq!(texts[..3], ["all", "closes", "day"]);
//! # Ok::<(), tidegate_core::Error>(())
//! ```
//!
//! With [`Job::with_state`] the same job checkpoints to a state file and, run again, resumes
//! from its last checkpoint. [`number_sequence`] is a fuller example: the numbers `from..to`,
//! cut into ranges.
//!
//! # How the files depend on each other
//!
//! Bottom up, without circles (a file uses only files listed before it; the application's
//! module-graph test, which checks both crates against `docs/architecture.md`, keeps it so): [`split`],
//! [`error`], [`sim`], [`failpoint`]; [`queue`], [`split_reader`], [`event_time`], [`throttle`],
//! [`status`], [`sink`]; [`fetcher`]; [`stats`]; [`emitter`], [`enumerator`], [`reader`];
//! [`source`]; [`checkpoint`], [`state`], [`reader_base`]; [`number_sequence`]; and on top
//! [`job_options`] and [`job`], with the private coordinator, reader and sink drivers.

pub mod checkpoint;
mod coordinator;
pub mod disk;
pub mod emitter;
pub mod enumerator;
pub mod error;
pub mod event_time;
pub mod failpoint;
pub mod fetcher;
mod held;
pub mod job;
pub mod job_options;
pub mod number_sequence;
pub mod queue;
pub mod reader;
pub mod reader_base;
mod reader_driver;
mod restore;
mod rt;
pub mod sim;
pub mod sink;
mod sink_driver;
pub mod source;
pub mod split;
pub mod split_reader;
pub mod state;
pub mod stats;
pub mod status;
pub mod store;
pub mod throttle;

pub use checkpoint::{Checkpoint, JobReport};
pub use emitter::{EofOnRecordEvaluator, ReaderOutput, RecordEmitter, RecordPosition};
pub use enumerator::{
    EnumeratorContext, ReaderCommand, ReleaseSplits, RemoveSplits, SourceEvent, SplitEnumerator, SplitHandover,
};
pub use error::{Error, Result, StateError};
pub use event_time::{EventTimeClock, EventTimeOptions, Release};
pub use fetcher::{FetchStats, FetcherMode, SplitFetcherManager};
pub use job::{checkpoint_of, Job};
pub use job_options::JobOptions;
pub use queue::AvailabilityFuture;
pub use reader::{InputStatus, ReaderRequest, SourceReader};
pub use reader_base::{ReaderOptions, SourceReaderBase};
pub use rt::{block_on, unblock};
pub use sim::spawn;
pub use sink::{CollectSink, Sink, SinkMessage, SinkState};
pub use source::{Boundedness, Instance, ReaderContext, Share, Source};
pub use split::{FinishReason, Finished, SourceSplit, SplitId, SplitSnapshot};
pub use split_reader::{RecordsWithSplitIds, SplitReader, SplitsChange};
pub use state::StateStore;
pub use stats::{JobEnd, JobStats};
pub use status::SplitStatus;
pub use store::{CheckpointStore, StoredCheckpoint};
pub use throttle::{Admit, Throttle};

#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod two_phase_tests;
