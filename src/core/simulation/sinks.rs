//! The simulation's two sinks and the disk they share across simulated processes: one that
//! truncates on restore like the file sink, one two-phase like the transactional Kafka sink.

use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::error::{Error, Result};

/// The record both sinks write at the end of input (the data generator's end marker, the
/// market-close record): once in the output, last, and only when the input ended.
pub(crate) const END_MARKER: u64 = u64::MAX;
use crate::sim::{self, SplitMix64};
use crate::sink::{Sink, SinkState};

/// What survives a simulated process: the file's bytes and the "topic" of committed
/// transactions with its commit marker.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    /// The file's content made durable (fsynced) at a checkpoint.
    pub(crate) synced: Vec<u64>,
    /// Written since: a crash keeps some prefix of it, as a page cache would.
    pub(crate) unsynced: Vec<u64>,
    /// Records of committed transactions, in commit order.
    pub(crate) committed: Vec<u64>,
    /// The token of the last committed transaction (the Kafka sink's commit marker).
    pub(crate) marker: Option<String>,
    tokens: u64,
}

pub(crate) type SharedDisk = Arc<Mutex<Disk>>;

impl Disk {
    /// The process exited (failed): the page cache keeps all it wrote.
    pub(crate) fn exit(&mut self) {
        let mut unsynced = std::mem::take(&mut self.unsynced);
        self.synced.append(&mut unsynced);
    }

    /// The process died: the file keeps a random prefix of what was not synced, open
    /// transactions are gone with the process (their sink held them).
    pub(crate) fn crash(&mut self, rng: &mut SplitMix64) {
        let kept = rng.range(0, self.unsynced.len() as u64) as usize;
        let unsynced = std::mem::take(&mut self.unsynced);
        self.synced.extend_from_slice(&unsynced[..kept]);
    }
}

fn lock(disk: &SharedDisk) -> std::sync::MutexGuard<'_, Disk> {
    disk.lock().unwrap_or_else(|p| p.into_inner())
}

/// A durable operation of a simulated sink: it may not happen (a crash) or fail (an injected
/// I/O error).
fn durable(name: &'static str) -> Result<()> {
    match sim::sync_point(name) {
        None => Ok(()),
        Some(sim::Interrupt::Crashed) => Err(Error::runtime("simulated sink", "the process crashed")),
        Some(sim::Interrupt::Fault) => Err(Error::runtime("simulated sink", "simulated I/O error")),
    }
}

/// Like the file sink: appends, makes everything durable at prepare and records the length; a
/// restore cuts the file back to the checkpoint's length.
pub(crate) struct TruncatingSink {
    pub(crate) disk: SharedDisk,
}

impl Sink<u64> for TruncatingSink {
    fn write(&mut self, mut records: Vec<u64>) -> Result<()> {
        durable("sink.file.write")?;
        lock(&self.disk).unsynced.append(&mut records);
        Ok(())
    }

    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        durable("sink.file.prepare")?;
        let mut disk = lock(&self.disk);
        let mut unsynced = std::mem::take(&mut disk.unsynced);
        disk.synced.append(&mut unsynced);
        Ok(Some(json!({ "length": disk.synced.len() })))
    }

    fn end_of_input(&mut self) -> Result<()> {
        self.write(vec![END_MARKER])
    }

    fn recover(&mut self, last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        let length = last
            .and_then(|(_, state)| state)
            .and_then(|s| s["length"].as_u64())
            .unwrap_or(0) as usize;
        let mut disk = lock(&self.disk);
        if disk.synced.len() < length {
            return Err(Error::runtime(
                "simulated file sink",
                format!("the file holds {} records, the checkpoint {length}", disk.synced.len()),
            ));
        }
        disk.synced.truncate(length);
        disk.unsynced.clear();
        Ok(true)
    }
}

/// Like the exactly-once Kafka sink: records go into a transaction opened by the first write
/// after a commit; prepare returns its token (`null` when nothing was written); commit makes the
/// records visible and moves the commit marker; a restore aborts what is open and says whether
/// the last checkpoint's token is the marker.
pub(crate) struct TransactionalSink {
    pub(crate) disk: SharedDisk,
    pub(crate) open: Option<(String, Vec<u64>)>,
}

impl Sink<u64> for TransactionalSink {
    fn write(&mut self, mut records: Vec<u64>) -> Result<()> {
        durable("sink.txn.write")?;
        let (_, open) = self.open.get_or_insert_with(|| {
            let mut disk = lock(&self.disk);
            disk.tokens += 1;
            (format!("txn-{}", disk.tokens), Vec::new())
        });
        open.append(&mut records);
        Ok(())
    }

    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        durable("sink.txn.prepare")?;
        let token = self.open.as_ref().map(|(token, _)| token.clone());
        Ok(Some(json!({ "transaction": token })))
    }

    fn is_transactional(&self) -> bool {
        true
    }

    fn end_of_input(&mut self) -> Result<()> {
        self.write(vec![END_MARKER])
    }

    fn commit(&mut self, _checkpoint_id: u64) -> Result<()> {
        durable("sink.txn.commit")?;
        if let Some((token, mut records)) = self.open.take() {
            let mut disk = lock(&self.disk);
            disk.committed.append(&mut records);
            disk.marker = Some(token);
        }
        Ok(())
    }

    fn recover(&mut self, last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        self.open = None;
        let token = last
            .and_then(|(_, state)| state)
            .and_then(|s| s["transaction"].as_str());
        Ok(match token {
            None => true,
            Some(token) => lock(&self.disk).marker.as_deref() == Some(token),
        })
    }
}
