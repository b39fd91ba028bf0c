//! A simulated partition's log: records with offsets and timestamps, transactional records
//! pending until their transaction ends, commit and abort markers that take an offset each (as
//! Kafka's control records do), the last stable offset, reads at either isolation level, and
//! compaction.

use crate::record::Header;

/// What an entry of the log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A record outside transactions.
    Plain,
    /// A record of producer `pid`'s transaction, until it ends.
    Pending {
        pid: i64,
    },
    Committed,
    Aborted,
    /// A transaction's end (a control record): read by nobody, but it takes an offset.
    Marker,
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) offset: i64,
    pub(super) timestamp: i64,
    pub(super) key: Option<Vec<u8>>,
    pub(super) value: Option<Vec<u8>>,
    pub(super) headers: Vec<Header>,
    pub(super) kind: Kind,
}

impl Entry {
    /// Whether a consumer at `committed` isolation (or not) reads it.
    fn visible(&self, committed: bool) -> bool {
        match self.kind {
            Kind::Plain | Kind::Committed => true,
            Kind::Pending { .. } | Kind::Aborted => !committed,
            Kind::Marker => false,
        }
    }
}

/// One partition's log.
#[derive(Debug, Clone, Default)]
pub(super) struct Log {
    /// In offset order; compaction leaves gaps.
    pub(super) entries: Vec<Entry>,
    /// The next offset.
    pub(super) end: i64,
    /// The first offset still in the log.
    pub(super) start: i64,
}

impl Log {
    /// Append a record; its offset.
    pub(super) fn append(
        &mut self,
        timestamp: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<Header>,
        kind: Kind,
    ) -> i64 {
        let offset = self.end;
        self.entries.push(Entry {
            offset,
            timestamp,
            key,
            value,
            headers,
            kind,
        });
        self.end += 1;
        offset
    }

    /// End producer `pid`'s transaction here: its records committed or aborted, and a marker.
    pub(super) fn end_transaction(&mut self, pid: i64, commit: bool, timestamp: i64) {
        let mut touched = false;
        for e in &mut self.entries {
            if e.kind == (Kind::Pending { pid }) {
                e.kind = if commit { Kind::Committed } else { Kind::Aborted };
                touched = true;
            }
        }
        if touched {
            self.append(timestamp, None, None, Vec::new(), Kind::Marker);
        }
    }

    /// The last stable offset: the first record of a transaction still open, else the end.
    pub(super) fn stable(&self) -> i64 {
        self.entries
            .iter()
            .find(|e| matches!(e.kind, Kind::Pending { .. }))
            .map_or(self.end, |e| e.offset)
    }

    /// Where a consumer at `committed` isolation reads up to.
    pub(super) fn readable_end(&self, committed: bool) -> i64 {
        if committed {
            self.stable()
        } else {
            self.end
        }
    }

    /// The first entry a consumer at `position` reads, and where it stands after it (past the
    /// entries it skips); `None`, with where it stands then (the end it can read: whatever is
    /// left before it is invisible to it, or compacted away), when there is none.
    pub(super) fn next(&self, position: i64, committed: bool) -> (Option<&Entry>, i64) {
        let end = self.readable_end(committed);
        let mut at = position.max(self.start);
        let first = self.entries.partition_point(|e| e.offset < at);
        for e in &self.entries[first..] {
            if e.offset >= end {
                break;
            }
            if e.visible(committed) {
                return (Some(e), e.offset + 1);
            }
            at = e.offset + 1;
        }
        (None, end.max(at))
    }

    /// Its committed records and those outside transactions, whatever is still open before them.
    pub(super) fn committed(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::Plain | Kind::Committed))
    }

    /// The first offset whose record's timestamp is at least `ts` (ListOffsets by time).
    pub(super) fn offset_for_time(&self, ts: i64, committed: bool) -> Option<i64> {
        let end = self.readable_end(committed);
        self.entries
            .iter()
            .filter(|e| e.offset < end && e.kind != Kind::Marker)
            .find(|e| e.timestamp >= ts)
            .map(|e| e.offset)
    }

    /// Compact up to `below` (exclusive, at most the last stable offset): of each key only the
    /// latest value stays, and aborted records and markers go. Tombstones stay (a reader must
    /// still see a key deleted).
    pub(super) fn compact(&mut self, below: i64) {
        let below = below.min(self.stable());
        let mut latest: std::collections::HashMap<Vec<u8>, i64> = std::collections::HashMap::new();
        for e in &self.entries {
            if e.visible(true) {
                if let Some(k) = &e.key {
                    latest.insert(k.clone(), e.offset);
                }
            }
        }
        self.entries.retain(|e| {
            if e.offset >= below {
                return true;
            }
            match e.kind {
                Kind::Aborted | Kind::Marker => false,
                Kind::Pending { .. } => true,
                Kind::Plain | Kind::Committed => match &e.key {
                    Some(k) => latest.get(k) == Some(&e.offset),
                    None => true,
                },
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(kinds: &[Kind]) -> Log {
        let mut log = Log::default();
        for (i, k) in kinds.iter().enumerate() {
            log.append(i as i64, Some(vec![i as u8 % 2]), Some(vec![i as u8]), Vec::new(), *k);
        }
        log
    }

    #[test]
    fn committed_reads_stop_at_the_first_open_transaction_and_skip_aborted_records_and_markers() {
        let mut log = log_of(&[
            Kind::Plain,
            Kind::Pending { pid: 1 },
            Kind::Pending { pid: 2 },
            Kind::Plain,
        ]);
        assert_eq!(log.stable(), 1);
        assert_eq!(log.next(1, true).0.map(|e| e.offset), None);
        assert_eq!(log.next(1, false).0.map(|e| e.offset), Some(1));
        log.end_transaction(1, false, 9);
        // pid 2 still holds the stable offset at 2
        assert_eq!(log.stable(), 2);
        assert_eq!((log.next(1, true).0.is_none(), log.next(1, true).1), (true, 2));
        log.end_transaction(2, true, 9);
        assert_eq!(log.stable(), log.end);
        assert_eq!(log.end, 6, "two markers took an offset each");
        let (mut read, mut at) = (Vec::new(), 0);
        while let (Some(e), next) = log.next(at, true) {
            read.push(e.offset);
            at = next;
        }
        assert_eq!(read, [0, 2, 3], "the aborted record 1 and the markers are skipped");
        assert_eq!(
            (log.next(4, true).0.is_none(), log.next(4, true).1),
            (true, 6),
            "a reader at the markers moves past them"
        );
    }

    #[test]
    fn compaction_keeps_the_latest_value_of_each_key_below_the_stable_offset() {
        let mut log = log_of(&[
            Kind::Plain,
            Kind::Plain,
            Kind::Plain,
            Kind::Pending { pid: 1 },
            Kind::Plain,
        ]);
        log.compact(i64::MAX);
        let offsets: Vec<i64> = log.entries.iter().map(|e| e.offset).collect();
        // keys alternate 0,1,0,1,0: below the stable offset 3, key 0's latest is 4 (above it),
        // so 0 and 2 go; key 1's latest committed is 1 (3 is pending)
        assert_eq!(offsets, [1, 3, 4]);
    }
}
