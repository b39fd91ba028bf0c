//! The sink contract: where readers' records go, and how a checkpoint barrier makes them durable
//! before the state file may move past them.

use crate::error::Result;

/// A destination for records. Runs on its own thread; calls may block.
pub trait Sink<T>: Send + 'static {
    /// Take a batch of records, in order.
    fn write(&mut self, records: Vec<T>) -> Result<()>;

    /// Make everything written so far durable (Kafka: every send acknowledged; file: fsync).
    /// Called for each checkpoint barrier; the checkpoint completes only after this returns.
    fn flush(&mut self) -> Result<()>;

    /// Every split reached its end (not a stop): called once, before the final barrier, and never
    /// again for a job whose state says it already ended. The data generator's end markers are
    /// written here.
    fn end_of_input(&mut self) -> Result<()> {
        Ok(())
    }

    /// The job ends: flush and release resources.
    fn close(&mut self) -> Result<()> {
        self.flush()
    }
}

/// What travels on the channel from the readers (and the coordinator) to the sink.
#[derive(Debug)]
pub enum SinkMessage<T> {
    Records(Vec<T>),
    /// Every reader's records before its snapshot for this checkpoint are ahead of this barrier.
    Barrier(u64),
    /// The input is complete (sent before the final barrier).
    EndOfInput,
    End,
}

/// A sink that keeps every record in memory (tests and library users).
#[derive(Debug)]
pub struct CollectSink<T> {
    records: std::sync::Arc<std::sync::Mutex<Vec<T>>>,
}

impl<T> CollectSink<T> {
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

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}
