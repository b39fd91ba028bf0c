//! The sink contract, a two-phase commit (Flink's `TwoPhaseCommittingSink`): records are written,
//! a checkpoint barrier *prepares* them (durable, or ready to commit), the coordinator writes the
//! state file, and then a transactional sink *commits*. After a crash, [`Sink::recover`] decides
//! whether the last checkpoint's records were committed.

use crate::error::Result;

/// What a checkpoint remembers of the sink (a file's length, a transaction's token), as JSON.
pub type SinkState = serde_json::Value;

/// A destination for records. Runs on its own thread; calls may block.
pub trait Sink<T>: Send + 'static {
    /// Take a batch of records, in order.
    fn write(&mut self, records: Vec<T>) -> Result<()>;

    /// Phase one of checkpoint `checkpoint_id`: make everything written so far durable (a file:
    /// flush and fsync; Kafka: every send acknowledged) or, for a transactional sink, ready to
    /// commit, and return what the checkpoint must remember of the sink. The state file is
    /// written after this returns.
    fn prepare_commit(&mut self, checkpoint_id: u64) -> Result<Option<SinkState>>;

    /// Whether records become visible only at [`Sink::commit`] (Kafka transactions). The sink then
    /// waits after each `prepare_commit` until the checkpoint is in the state file, and the state
    /// file also keeps the checkpoint before it, in case the commit never happened.
    fn is_transactional(&self) -> bool {
        false
    }

    /// Phase two: checkpoint `checkpoint_id` is in the state file; make its records visible.
    fn commit(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    /// Before the job starts, with the state file's last checkpoint (its id and the sink's state
    /// in it), or `None` for a fresh job: bring the sink in line with it (a file is cut back to
    /// the length the checkpoint recorded) and say whether that checkpoint's records are
    /// committed. A transactional sink that finds them not committed returns `false`, and the
    /// job resumes from the checkpoint before.
    fn recover(&mut self, _last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        Ok(true)
    }

    /// What this sink is, as far as a checkpoint of it depends on it (its kind, destination,
    /// delivery, transactional id): stored with every checkpoint, and a state file is resumed
    /// only by a sink with the same (only the sink that wrote a checkpoint can recover it: cut
    /// a file back to its length, settle a transaction by its id). `None`: nothing to check.
    fn fingerprint(&self) -> Option<SinkState> {
        None
    }

    /// Records written somewhere else than the sink's destination so far (dead letters): the job
    /// counts them apart from the written ones.
    fn diverted(&self) -> u64 {
        0
    }

    /// Every split reached its end (not a stop): called once, before the final barrier, and never
    /// again for a job whose state says it already ended. The data generator's end markers are
    /// written here.
    fn end_of_input(&mut self) -> Result<()> {
        Ok(())
    }

    /// The job ends, after its final checkpoint: release resources.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// What travels on the channel from the readers (and the coordinator) to the sink.
#[derive(Debug)]
pub enum SinkMessage<T> {
    /// Records of one reader, in its order.
    Records {
        /// The reader they come from.
        reader: usize,
        /// The records.
        records: Vec<T>,
    },
    /// A reader took its snapshot for `checkpoint`: its records before this belong to the
    /// checkpoint, those after it to the next one.
    ReaderBarrier {
        /// The reader that took its snapshot.
        reader: usize,
        /// The checkpoint.
        checkpoint: u64,
    },
    /// Every reader's barrier for this checkpoint is ahead of this one: the sink prepares it.
    Barrier(u64),
    /// The input is complete (sent before the final barrier).
    EndOfInput,
    /// Nothing more comes: the sink closes.
    End,
}

/// A sink that keeps every record in memory (tests and library users).
#[derive(Debug)]
pub struct CollectSink<T> {
    records: std::sync::Arc<std::sync::Mutex<Vec<T>>>,
}

impl<T> CollectSink<T> {
    /// The sink, and the list its records go to.
    pub fn new() -> (Self, std::sync::Arc<std::sync::Mutex<Vec<T>>>) {
        let records = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        (
            CollectSink {
                records: std::sync::Arc::clone(&records),
            },
            records,
        )
    }
}

impl<T: Send + 'static> Sink<T> for CollectSink<T> {
    fn write(&mut self, mut records: Vec<T>) -> Result<()> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&mut records);
        Ok(())
    }

    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        Ok(None)
    }
}
