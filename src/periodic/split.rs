//! One event as a split: its definition and how far it got (fires so far, the last instant).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::supplier::EventDef;
use crate::core::{SourceSplit, SplitId};

/// One event as a split: its definition and how far it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeriodicEventSplit {
    pub event: EventDef,
    /// Fires so far.
    pub fired: u64,
    /// The scheduled instant (ms) of the last fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire_ms: Option<i64>,
}

impl SourceSplit for PeriodicEventSplit {
    fn split_id(&self) -> SplitId {
        Arc::from(self.event.id.as_str())
    }

    fn remaining(&self) -> Option<u64> {
        self.event.count.map(|c| c.saturating_sub(self.fired))
    }

    fn describe(&self) -> String {
        match self.event.count {
            Some(count) => format!("fired {} of {count}", self.fired),
            None => format!("fired {}", self.fired),
        }
    }
}
