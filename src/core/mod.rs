//! The generic FLIP-27 runtime: sources, enumerators, readers with split fetcher threads and a
//! bounded queue, end-of-stream evaluation, sinks, and aligned checkpoints to a crash-safe state
//! file. Nothing here knows about Kafka; connectors plug in through these traits.

pub mod emitter;
pub mod enumerator;
pub mod fetcher;
pub mod job;
pub mod number_sequence;
pub mod queue;
pub mod reader;
pub mod reader_base;
pub mod sink;
pub mod source;
pub mod split_reader;
pub mod state;

pub use emitter::{EofOnRecordEvaluator, ReaderOutput, RecordEmitter, RecordPosition};
pub use enumerator::{EnumeratorContext, ReaderCommand, RemoveSplits, SourceEvent, SplitEnumerator};
pub use fetcher::{FetchStats, FetcherMode, SplitFetcherManager};
pub use job::{Checkpoint, Job, JobOptions, JobReport, JobStats};
pub use reader::{AvailabilityFuture, InputStatus, ReaderRequest, SourceReader};
pub use reader_base::{ReaderOptions, SourceReaderBase};
pub use sink::{CollectSink, Sink, SinkMessage};
pub use source::{Boundedness, FinishReason, Finished, ReaderContext, Source, SourceSplit, SplitId, SplitSnapshot};
pub use split_reader::{RecordsWithSplitIds, SplitReader, SplitsChange};
pub use state::StateStore;

#[cfg(test)]
mod tests;
