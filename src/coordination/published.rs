//! The values the members of a group publish for a source-wide stop (one per split: its
//! watermark, its reader's first held record, the stop its member knew), and how the values read
//! are merged.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::core::event_time::Peers;
use crate::core::SplitId;

/// One split's published value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Published {
    /// A lower bound of every timestamp the split may still evaluate (`i64::MAX`: finished).
    pub(super) watermark: i64,
    /// The first record its reader holds.
    pub(super) front: Option<i64>,
    /// The earliest end-of-stream record the member knew of.
    pub(super) stop: Option<i64>,
    /// Which job wrote it: its name and a hash of its source settings (another deployment of
    /// the same name on a shared state topic has another); absent in values of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stamp: Option<String>,
}

/// What every member of this job published, merged per split: the largest watermark and the
/// earliest stop read since the split's last tombstone, and the last front.
#[derive(Debug, Default)]
pub(super) struct Merged {
    pub(super) splits: HashMap<SplitId, Published>,
    /// This job's stamp: values stamped otherwise are another job's, and left out.
    pub(super) stamp: Option<String>,
}

impl Merged {
    /// The values of the job stamped `stamp`.
    pub(super) fn of(stamp: String) -> Self {
        Merged {
            splits: HashMap::new(),
            stamp: Some(stamp),
        }
    }

    pub(super) fn apply(&mut self, split: SplitId, value: Option<Published>) {
        let Some(v) = value else {
            // a tombstone: `--reset-state` started the job over
            self.splits.remove(&split);
            return;
        };
        if v.stamp.is_some() && self.stamp.is_some() && v.stamp != self.stamp {
            // another job's (a deployment of the same name with other settings)
            return;
        }
        let merged = self.splits.entry(split).or_insert_with(|| v.clone());
        merged.watermark = merged.watermark.max(v.watermark);
        merged.front = v.front;
        merged.stop = match (merged.stop, v.stop) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// What the clock needs, with `splits` the source's every split: only their values count
    /// (another job's splits on a shared state topic are not this source's).
    pub(super) fn peers(&self, splits: &HashSet<SplitId>) -> Peers {
        let ours = || self.splits.iter().filter(|(id, _)| splits.contains(*id));
        Peers {
            splits: splits.clone(),
            watermarks: ours().map(|(id, v)| (id.clone(), v.watermark)).collect(),
            fronts: ours().filter_map(|(id, v)| Some((id.clone(), v.front?))).collect(),
            stop: ours().filter_map(|(_, v)| v.stop).min(),
        }
    }
}
