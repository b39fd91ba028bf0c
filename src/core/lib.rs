//! The generic FLIP-27 runtime: sources, enumerators, readers with split fetcher threads and a
//! bounded queue, end-of-stream evaluation, sinks, and aligned checkpoints to a crash-safe state
//! file. Nothing here knows about Kafka; connectors plug in through these traits.

pub mod checkpoint;
mod coordinator;
pub mod emitter;
pub mod enumerator;
pub mod error;
pub mod event_time;
pub mod failpoint;
pub mod fetcher;
mod held;
pub mod job;
pub mod number_sequence;
pub mod queue;
pub mod reader;
pub mod reader_base;
mod reader_driver;
mod rt;
pub mod sim;
pub mod sink;
mod sink_driver;
pub mod source;
pub mod split_reader;
pub mod state;
pub mod status;
pub mod throttle;

pub use checkpoint::{Checkpoint, JobReport, JobStats};
pub use emitter::{EofOnRecordEvaluator, ReaderOutput, RecordEmitter, RecordPosition};
pub use enumerator::{EnumeratorContext, ReaderCommand, RemoveSplits, SourceEvent, SplitEnumerator};
pub use error::{Error, Result, StateError};
pub use event_time::{EventTimeClock, EventTimeOptions, Release};
pub use fetcher::{FetchStats, FetcherMode, SplitFetcherManager};
pub use job::{checkpoint_of, Job, JobOptions};
pub use reader::{AvailabilityFuture, InputStatus, ReaderRequest, SourceReader};
pub use reader_base::{ReaderOptions, SourceReaderBase};
pub use rt::block_on;
pub use sink::{CollectSink, Sink, SinkMessage, SinkState};
pub use source::{
    Boundedness, FinishReason, Finished, Instance, ReaderContext, Source, SourceSplit, SplitId, SplitSnapshot,
};
pub use split_reader::{RecordsWithSplitIds, SplitReader, SplitsChange};
pub use state::StateStore;
pub use status::SplitStatus;
pub use throttle::{Admit, Throttle};

#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod two_phase_tests;
