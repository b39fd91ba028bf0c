//! What processes that read the same source tell each other about event time (group
//! coordination, `eof_scope = "source"`): what the others published, and what this process
//! publishes to them (see `crate::coordination`'s `event_time` for how it travels).

use std::collections::{HashMap, HashSet};

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
