//! The end-of-run summary: the job's counts, then one line per split, in the order people count
//! (`trades:2` before `trades:10`), each named as `plan` names it.

use std::cmp::Ordering;

use crate::core::{JobReport, SourceSplit};

/// The totals a person reads, in the words of docs/operations.md's glossary.
pub struct Counts {
    /// Written + filtered out + dead-lettered + skipped, once the sink has taken what was
    /// emitted.
    pub read: u64,
    /// What a stopped run could have read ("up to"); `None` when it read it all.
    pub expected: Option<u64>,
}

impl Counts {
    pub fn of<S: SourceSplit>(report: &JobReport<S>) -> Counts {
        let read = report.records_emitted + report.records_filtered + report.records_skipped;
        let expected = (report.stopped && report.records_expected > read).then_some(report.records_expected);
        Counts { read, expected }
    }
}

/// The summary's lines.
pub fn lines<S: SourceSplit>(job: &str, report: &JobReport<S>) -> Vec<String> {
    let secs = report.elapsed.as_secs_f64().max(1e-6);
    let how = if report.stopped { "stopped" } else { "finished" };
    let Counts { read, expected } = Counts::of(report);
    let of = expected.map(|e| format!(" of up to {e}")).unwrap_or_default();
    let mut others = String::new();
    for (n, what) in [
        (report.records_filtered, "filtered out"),
        (report.records_diverted, "dead-lettered"),
        (report.records_skipped, "skipped as undecodable"),
    ] {
        if n > 0 {
            others.push_str(&format!(", {n} {what}"));
        }
    }
    let mut lines = vec![format!(
        "tidegate: job {job} {how} after {secs:.1}s: {read} records read{of}, {} written ({:.0}/s){others}, {} checkpoints",
        report.records_written,
        report.records_written as f64 / secs,
        report.checkpoints
    )];
    for (name, status, describe) in splits(report) {
        lines.push(format!("  split {name:<24} {status:<22} {describe}"));
    }
    lines
}

/// Each split as (name, how it ended, where it stands), in the order people count.
pub fn splits<S: SourceSplit>(report: &JobReport<S>) -> Vec<(String, String, String)> {
    let mut splits: Vec<_> = report.splits.iter().map(|s| (s.split.name(), s)).collect();
    splits.sort_by(|(a, _), (b, _)| natural_order(a, b));
    splits
        .into_iter()
        .map(|(name, s)| {
            let status = match s.finished {
                Some(f) => match f.at {
                    Some(at) => format!("{} at {at}", f.reason.as_str()),
                    None => f.reason.as_str().to_string(),
                },
                None => "unfinished".to_string(),
            };
            (name, status, s.split.describe())
        })
        .collect()
}

/// Text order, except that runs of digits compare as numbers: `p:2` < `p:10`.
pub fn natural_order(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        let (Some(ca), Some(cb)) = (a.chars().next(), b.chars().next()) else {
            return a.len().cmp(&b.len());
        };
        if ca.is_ascii_digit() && cb.is_ascii_digit() {
            let da = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
            let db = b.find(|c: char| !c.is_ascii_digit()).unwrap_or(b.len());
            let (na, nb) = (a[..da].trim_start_matches('0'), b[..db].trim_start_matches('0'));
            let by_number = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
            if by_number != Ordering::Equal {
                return by_number;
            }
            (a, b) = (&a[da..], &b[db..]);
        } else {
            if ca != cb {
                return ca.cmp(&cb);
            }
            (a, b) = (&a[ca.len_utf8()..], &b[cb.len_utf8()..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_names_sort_as_numbers() {
        let mut names = vec![
            "t:10",
            "t:2",
            "t:1",
            "s:3",
            "t:0",
            "t-x:1",
            "t:02",
            "datagen-11",
            "datagen-9",
        ];
        names.sort_by(|a, b| natural_order(a, b));
        assert_eq!(
            names,
            vec![
                "datagen-9",
                "datagen-11",
                "s:3",
                "t-x:1",
                "t:0",
                "t:1",
                "t:2",
                "t:02",
                "t:10"
            ]
        );
    }
}
