//! The values the members of a group publish for a source-wide stop (one per split: its
//! watermark, its reader's first held record, the stop its member knew), and how the values read
//! are merged.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::core::event_time::Peers;
use crate::core::SplitId;

/// One split's published value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct Published {
    /// A lower bound of every timestamp the split may still evaluate (`i64::MAX`: finished).
    pub(super) watermark: i64,
    /// The first record its reader holds.
    pub(super) front: Option<i64>,
    /// The earliest end-of-stream record the member knew of.
    pub(super) stop: Option<i64>,
}

/// What every member published, merged per split: the largest watermark and the earliest stop
/// read since the split's last tombstone, and the last front.
#[derive(Debug, Default)]
pub(super) struct Merged {
    pub(super) splits: HashMap<SplitId, Published>,
}

impl Merged {
    pub(super) fn apply(&mut self, split: SplitId, value: Option<Published>) {
        let Some(v) = value else {
            // a tombstone: `--reset-state` started the job over
            self.splits.remove(&split);
            return;
        };
        let merged = self.splits.entry(split).or_insert(v);
        merged.watermark = merged.watermark.max(v.watermark);
        merged.front = v.front;
        merged.stop = match (merged.stop, v.stop) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// What the clock needs, with `splits` the source's every split.
    pub(super) fn peers(&self, splits: &HashSet<SplitId>) -> Peers {
        Peers {
            splits: splits.clone(),
            watermarks: self.splits.iter().map(|(id, v)| (id.clone(), v.watermark)).collect(),
            fronts: self
                .splits
                .iter()
                .filter_map(|(id, v)| Some((id.clone(), v.front?)))
                .collect(),
            stop: self.splits.values().filter_map(|v| v.stop).min(),
        }
    }
}
