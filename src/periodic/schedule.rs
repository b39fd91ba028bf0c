//! When a periodic event fires: on the wall-clock grid (`(t - initial_delay) mod period == 0` on
//! the epoch clock: a 10 s period with a 1 s delay fires at xx:01, xx:11, …) or at a fixed rate
//! (`initial_delay` after assignment, then every `period`), and which fires a restart missed.

use serde::{Deserialize, Serialize};

/// An event's schedule, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Fire on the epoch-aligned grid rather than relative to assignment.
    pub wall_time: bool,
    pub initial_delay_ms: i64,
    pub period_ms: i64,
}

/// What a restart does with the fires it missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Resume at the next scheduled instant (default).
    #[default]
    Skip,
    /// Fire once for the latest missed instant, then resume.
    FireOnce,
    /// Fire every missed instant (at once), then resume.
    All,
}

/// As the config spells it.
impl std::fmt::Display for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CatchUp::Skip => "skip",
            CatchUp::FireOnce => "fire_once",
            CatchUp::All => "all",
        })
    }
}

fn div_ceil(a: i64, b: i64) -> i64 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q + 1
    }
}

impl Schedule {
    /// The first wall-grid instant at or after `t`.
    pub fn wall_at_or_after(&self, t: i64) -> i64 {
        self.initial_delay_ms + div_ceil(t - self.initial_delay_ms, self.period_ms) * self.period_ms
    }

    /// The first fire of a fresh event assigned at `now`.
    pub fn first(&self, now: i64) -> i64 {
        if self.wall_time {
            self.wall_at_or_after(now)
        } else {
            now + self.initial_delay_ms
        }
    }

    /// After a restart at `now`, given the last fire before it: the missed instants the policy
    /// replays (at most `limit`, the fires the event has left: the earliest), and the next
    /// regular instant (at or after `now`).
    pub fn resume(&self, last_fire: i64, now: i64, policy: CatchUp, limit: u64) -> (Vec<i64>, i64) {
        let next_regular = if self.wall_time {
            self.wall_at_or_after(now.max(last_fire + 1))
        } else {
            // the fixed-rate grid continues from the last fire
            let behind = now - last_fire;
            last_fire + div_ceil(behind.max(1), self.period_ms) * self.period_ms
        };
        let first_missed = if self.wall_time {
            self.wall_at_or_after(last_fire + 1)
        } else {
            last_fire + self.period_ms
        };
        let missed_count = if first_missed < next_regular {
            (next_regular - first_missed) / self.period_ms
        } else {
            0
        };
        let missed: Vec<i64> = match policy {
            CatchUp::Skip => Vec::new(),
            CatchUp::FireOnce if missed_count > 0 => vec![next_regular - self.period_ms],
            CatchUp::FireOnce => Vec::new(),
            // every missed instant in order, as many as the event has fires left: an event with a
            // count fires consecutive instants, however long the restart took
            CatchUp::All => {
                let n = (missed_count.max(0) as u64).min(limit);
                (0..n as i64).map(|k| first_missed + k * self.period_ms).collect()
            }
        };
        (missed, next_regular)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1000;

    #[test]
    fn wall_time_fires_on_the_offset_grid() {
        let s = Schedule {
            wall_time: true,
            initial_delay_ms: S,
            period_ms: 10 * S,
        };
        // 10 s period, 1 s delay: xx:01, xx:11, ...
        assert_eq!(s.first(60 * S), 61 * S);
        assert_eq!(s.first(61 * S), 61 * S);
        assert_eq!(s.first(61 * S + 1), 71 * S);
    }

    #[test]
    fn fixed_rate_starts_after_the_delay() {
        let s = Schedule {
            wall_time: false,
            initial_delay_ms: 250,
            period_ms: 300,
        };
        assert_eq!(s.first(10_000), 10_250);
    }

    #[test]
    fn catch_up_policies() {
        let s = Schedule {
            wall_time: true,
            initial_delay_ms: 0,
            period_ms: S,
        };
        // last fire at 10 s, restart at 14.5 s: 11, 12, 13, 14 were missed; next is 15
        assert_eq!(s.resume(10 * S, 14 * S + 500, CatchUp::Skip, 100), (vec![], 15 * S));
        assert_eq!(
            s.resume(10 * S, 14 * S + 500, CatchUp::FireOnce, 100),
            (vec![14 * S], 15 * S)
        );
        assert_eq!(
            s.resume(10 * S, 14 * S + 500, CatchUp::All, 100),
            (vec![11 * S, 12 * S, 13 * S, 14 * S], 15 * S)
        );
        // two fires left: the first two missed, so the event's instants stay consecutive
        assert_eq!(
            s.resume(10 * S, 14 * S + 500, CatchUp::All, 2),
            (vec![11 * S, 12 * S], 15 * S)
        );
        // nothing missed
        assert_eq!(s.resume(10 * S, 10 * S + 200, CatchUp::All, 100), (vec![], 11 * S));
        let f = Schedule {
            wall_time: false,
            initial_delay_ms: 0,
            period_ms: 300,
        };
        assert_eq!(
            f.resume(1_000, 2_000, CatchUp::All, 100),
            (vec![1_300, 1_600, 1_900], 2_200)
        );
    }
}
