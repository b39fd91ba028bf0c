//! The event-time clock's view of other processes that read the same source (group
//! coordination, `eof_scope = "source"`): what they published, how it holds this process's
//! records back, and what this process publishes to them (see `crate::coordination`'s
//! `event_time` for how it travels).

use std::collections::{HashMap, HashSet};

use tracing::info;

use super::{format_millis, EventTimeClock, State};
use crate::split::SplitId;

/// What other processes reading the same source published (group coordination).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Peers {
    /// Every split of the source: one this process does not read holds every record back
    /// until its watermark is past it.
    pub splits: HashSet<SplitId>,
    /// The largest watermark published for each split (`i64::MAX`: finished).
    pub watermarks: HashMap<SplitId, i64>,
    /// The timestamp of the first record each split's reader holds, as last published.
    pub fronts: HashMap<SplitId, i64>,
    /// The earliest end-of-stream record any of them found.
    pub stop: Option<i64>,
}

/// One split as this process publishes it to the others.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedSplit {
    /// The split.
    pub id: SplitId,
    /// A lower bound of every timestamp it may still evaluate (`i64::MAX`: finished).
    pub watermark: i64,
    /// The first record its reader holds.
    pub front: Option<i64>,
}

impl EventTimeClock {
    /// Whether every split read by another process is past `timestamp`: its published
    /// watermark is (this process's own splits are judged by their local watermarks; a split it
    /// read before, from a position another process has since gone past, by its own too).
    pub(super) fn peers_past(&self, state: &State, timestamp: i64) -> bool {
        let Some(peers) = &state.peers else {
            return false;
        };
        peers
            .splits
            .iter()
            .filter(|id| !state.splits.contains_key(*id) && !state.finished.contains(*id))
            .all(|id| peers.watermarks.get(id).is_some_and(|w| *w > timestamp))
    }

    /// A split this process will not read, finished before (its state says so): it holds no
    /// one back, and the other processes learn so.
    pub fn finished_before(&self, id: &SplitId) {
        let mut state = self.lock();
        if !state.splits.contains_key(id) && state.finished.insert(id.clone()) {
            drop(state);
            self.changed();
        }
    }

    /// What the other processes reading the source published (group coordination); their
    /// stop moves this one's like a marker found here.
    pub fn set_peers(&self, peers: Peers) {
        let mut state = self.lock();
        if state.peers.as_ref() == Some(&peers) {
            return;
        }
        // the stop under the same lock as the watermarks that came with it: no release may see
        // a peer's watermark past its stop without the stop
        if let Some(t) = peers.stop.filter(|_| self.options.source_wide_stop) {
            if state.stop_at.is_none_or(|s| t < s) {
                let was = state.stop_at.replace(t);
                info!(timestamp = t, at = %format_millis(t), was, "an end-of-stream record found by another process: every partition is read up to it");
            }
        }
        state.peers = Some(peers);
        self.settle_stop(&mut state);
        drop(state);
        self.changed();
    }

    /// The job whose readers used it ended: [`Self::local_view`] shows no fronts any more (its
    /// watermarks stay true).
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Whether the job whose readers used it ended.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// This process's splits as the others need them: each one's watermark and front (finished
    /// ones at `i64::MAX`), and the stop, taken at one instant, so that a watermark past an
    /// end-of-stream record never goes out without the stop it found.
    pub fn local_view(&self) -> (Vec<PublishedSplit>, Option<i64>) {
        let state = self.lock();
        let closed = state.closed;
        let mut splits: Vec<PublishedSplit> = state
            .splits
            .iter()
            .map(|(id, split)| PublishedSplit {
                id: id.clone(),
                watermark: self.watermark(split),
                front: state.fronts.get(id).copied().filter(|_| !closed),
            })
            .collect();
        splits.extend(state.finished.iter().map(|id| PublishedSplit {
            id: id.clone(),
            watermark: i64::MAX,
            front: None,
        }));
        (splits, state.stop_at)
    }
}
