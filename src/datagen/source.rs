//! The data generator source (FLIP-238 `DataGeneratorSource`): indices `0..count` cut into
//! number-sequence splits (or one split per target partition), shared between instances, each
//! split generated in order by a [`GeneratorSplitReader`] at the source's one rate.

use std::sync::Arc;

use serde_json::Value;

use super::generator::GeneratorFactory;
use super::rate::RateLimiter;
use super::split_reader::{GeneratorSplitReader, IndexEmitter};
use crate::core::number_sequence::{split_range, IteratorEnumerator, NumberSequenceSplit};
use crate::core::{Boundedness, Instance, ReaderContext, ReaderOptions, Share, Source, SourceReaderBase};
use crate::error::{Error, Result};
use crate::record::Record;

/// Settings of a [`DataGeneratorSource`].
#[derive(Clone)]
pub struct DatagenSettings {
    /// Records to generate; `None` for an unbounded stream.
    pub count: Option<u64>,
    /// Records per second for the whole source; `None` for as fast as possible.
    pub rate: Option<f64>,
    /// Number of splits (the job's parallelism), unless `partitions` is set.
    pub splits: usize,
    /// The target topic's partition count: one split per partition, each scanning the whole
    /// index range in order and keeping the records whose key falls in its partition (stamped
    /// with it), so each partition is written by one reader in index order. `None`: contiguous
    /// index ranges, which interleave in a partition when several readers write it.
    pub partitions: Option<u32>,
    /// Records generated per fetch (and per batch).
    pub batch_size: usize,
    /// This process's share when the job runs as several instances: the index range is cut into
    /// `splits × count` ranges, and this instance generates those dealt to it.
    pub instance: Instance,
    /// What the generated records are (count, seed, format, template), which a state fits only
    /// unchanged; stored with each checkpoint.
    pub fingerprint: Option<serde_json::Value>,
}

/// The data generator source.
pub struct DataGeneratorSource {
    settings: DatagenSettings,
    generator: GeneratorFactory,
    limiter: Option<Arc<RateLimiter>>,
}

impl DataGeneratorSource {
    pub fn new(settings: DatagenSettings, generator: GeneratorFactory) -> Self {
        // the rate is the whole job's: each instance generates its share of it
        let share = settings.instance.count.max(1) as f64;
        let limiter = settings
            .rate
            .map(|r| Arc::new(RateLimiter::new(r / share, settings.batch_size)));
        DataGeneratorSource {
            settings,
            generator,
            limiter,
        }
    }
}

impl Source for DataGeneratorSource {
    type Split = NumberSequenceSplit;
    type EnumeratorState = Vec<NumberSequenceSplit>;
    type Enumerator = IteratorEnumerator<NumberSequenceSplit>;
    type Reader = SourceReaderBase<GeneratorSplitReader, Record, IndexEmitter>;
    type Output = Record;

    fn kind(&self) -> &'static str {
        "datagen"
    }

    fn boundedness(&self) -> Boundedness {
        match self.settings.count {
            Some(_) => Boundedness::Bounded,
            None => Boundedness::ContinuousUnbounded,
        }
    }

    fn create_enumerator(&self) -> Result<Self::Enumerator> {
        let end = self.settings.count.unwrap_or(u64::MAX);
        let instance = self.settings.instance;
        if let Some(partitions) = self.settings.partitions {
            return Ok(IteratorEnumerator::new(
                (0..partitions)
                    .filter(|p| instance.owns(u64::from(*p)))
                    .map(|p| NumberSequenceSplit {
                        id: format!("p{p}"),
                        next_offset: 0,
                        end,
                        partition: Some(p),
                        partitions: Some(partitions),
                    })
                    .filter(|s| s.left() > 0),
            ));
        }
        let ranges = split_range(0, end, self.settings.splits * instance.count.max(1));
        Ok(IteratorEnumerator::new(
            ranges
                .into_iter()
                .enumerate()
                .filter(|(i, _)| instance.owns(*i as u64))
                .map(|(_, s)| s),
        ))
    }

    fn restore_enumerator(&self, state: Vec<NumberSequenceSplit>) -> Result<Self::Enumerator> {
        Ok(IteratorEnumerator::new(state))
    }

    fn settings_fingerprint(&self) -> Option<Value> {
        self.settings.fingerprint.clone()
    }

    /// The state's index ranges and positions belong to the records as they were: a changed
    /// count, seed, format or template is refused rather than resumed into a mixture.
    fn check_restore(&self, stored: &Value) -> Result<()> {
        let Some(now) = &self.settings.fingerprint else {
            return Ok(());
        };
        for key in ["count", "seed", "format", "fields", "partitions"] {
            let (was, is) = (&stored[key], &now[key]);
            if was != is {
                let what = |v: &Value| match v {
                    Value::Null => "none".to_string(),
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                return Err(Error::config(
                    format!("source.{key}"),
                    format!(
                        "changed since the last checkpoint was written (was {}, now {}): its records would not \
                         match those already written; restore it, or start over with --reset-state",
                        what(was),
                        what(is)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The ranges (or partitions) keep the cut of the run that first generated them, and move
    /// whole with their positions: an instance takes those whose id hashes to it.
    fn reshare(&self, parts: Vec<Share<Self>>, _parallelism: usize) -> Result<Share<Self>> {
        let instance = self.settings.instance;
        let mut seen = std::collections::HashSet::new();
        let (mut pending, mut splits) = (Vec::new(), Vec::new());
        for (unassigned, snapshots) in parts {
            for split in unassigned.iter().chain(snapshots.iter().map(|s| &s.split)) {
                if !seen.insert(split.id.clone()) {
                    return Err(Error::runtime(
                        "datagen",
                        format!("split {} is in the state of two instances", split.id),
                    ));
                }
            }
            pending.extend(unassigned.into_iter().filter(|s| instance.owns_key(&s.id)));
            splits.extend(snapshots.into_iter().filter(|s| instance.owns_key(&s.split.id)));
        }
        Ok((pending, splits))
    }

    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader> {
        let mut options = ReaderOptions::new(context.index);
        options.request_splits = true;
        options.stats = context.fetch_stats;
        let generator = Arc::clone(&self.generator);
        let limiter = self.limiter.clone();
        let batch = self.settings.batch_size.max(1);
        let partitions = self.settings.partitions;
        let index = context.index;
        let factory = Box::new(move |_| {
            let mut g = generator();
            g.open(index)?;
            Ok(GeneratorSplitReader::new(g, limiter.clone(), batch, partitions))
        });
        Ok(SourceReaderBase::new(factory, IndexEmitter, options))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::{FinishReason, Finished, SplitSnapshot};

    fn source(instance: Instance) -> DataGeneratorSource {
        let settings = DatagenSettings {
            count: Some(10_000),
            rate: None,
            splits: 3,
            partitions: None,
            batch_size: 100,
            instance,
            fingerprint: None,
        };
        DataGeneratorSource::new(settings, Arc::new(|| unreachable!("no records are generated here")))
    }

    /// The state of instance `index` of `count` part of the way: its first range finished, its
    /// second in progress, the rest not handed out yet.
    fn part(index: usize, count: usize) -> Share<DataGeneratorSource> {
        let mut ranges: Vec<NumberSequenceSplit> = split_range(0, 10_000, 3 * count)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| Instance { index, count }.owns(*i as u64))
            .map(|(_, s)| s)
            .collect();
        let mut snapshots = Vec::new();
        for (n, mut split) in ranges.drain(..2.min(ranges.len())).enumerate() {
            let finished = n == 0;
            split.next_offset = if finished { split.end } else { split.next_offset + 7 };
            snapshots.push(SplitSnapshot {
                split,
                finished: finished.then_some(Finished {
                    reason: FinishReason::StoppingOffset,
                    at: None,
                }),
            });
        }
        (ranges, snapshots)
    }

    #[test]
    fn every_range_moves_to_exactly_one_instance_of_the_new_count_with_its_position() {
        for was in 1..=4 {
            let parts: Vec<_> = (0..was).map(|i| part(i, was)).collect();
            let all: BTreeMap<String, (u64, bool)> = parts
                .iter()
                .flat_map(|(pending, snapshots)| {
                    let pending = pending.iter().map(|s| (s.id.clone(), (s.next_offset, false)));
                    let held = snapshots
                        .iter()
                        .map(|s| (s.split.id.clone(), (s.split.next_offset, s.finished.is_some())));
                    pending.chain(held).collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(all.len(), 3 * was);
            for now in 1..=4 {
                let mut dealt = BTreeMap::new();
                for index in 0..now {
                    let (pending, snapshots) = source(Instance { index, count: now })
                        .reshare(parts.clone(), 2)
                        .expect("a share");
                    let got = pending.iter().map(|s| (s.id.clone(), (s.next_offset, false))).chain(
                        snapshots
                            .iter()
                            .map(|s| (s.split.id.clone(), (s.split.next_offset, s.finished.is_some()))),
                    );
                    for (id, at) in got {
                        assert!(
                            dealt.insert(id.clone(), at).is_none(),
                            "{was} → {now}: range {id} dealt twice"
                        );
                    }
                }
                assert_eq!(dealt, all, "{was} → {now}: every range once, where it was");
            }
        }
        // a range in two instances' states is refused, not generated twice
        let (pending, _) = part(0, 1);
        let twice = vec![(pending.clone(), Vec::new()), (pending, Vec::new())];
        assert!(source(Instance::default()).reshare(twice, 1).is_err());
    }
}
