//! Where an instance of the Kafka store stands among the job's generations of instances (see
//! [`crate::checkpoint_store::layout`]): the layout read from the topic's checkpoint and claim
//! records, the claim and the fencing of the count before when this instance cuts its share,
//! the second read before its first checkpoint, and `--reset-state`'s fencing of every owner.

use tracing::{info, warn};

use super::super::config::KafkaStoreConfig;
use super::super::layout::{self, Layout, Member};
use super::super::records::{base_of, check, claim_key, claim_record, sink_to_recover, written_by};
use super::super::scan::{scan, Scan};
use super::producer::transactional_producer;
use super::store::{state_error, KafkaCheckpointStore};
use crate::error::{Error, Result};

impl KafkaCheckpointStore {
    /// Where this instance stands; the error the store's state gives when it cannot be placed.
    pub(super) fn layout(&self) -> Result<Layout> {
        if let Some(layout) = self.layout.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(layout);
        }
        let scanned = self.scanned()?;
        match scanned.as_ref() {
            Some(found) => layout_of(&self.config, found),
            None => Err(Error::runtime("kafka checkpoint store", "the topic was not read")),
        }
    }

    /// Before this instance reads the last checkpoints of the instances of the count before:
    /// claim its generation (an instance of the old count that starts again finds the claim and
    /// is refused), fence them (none commits another checkpoint, or its output, after they are
    /// read; a transaction one left open is aborted), and read the topic again, until the
    /// layout holds still. Where one of them left its sink something only it can recover, the
    /// job refuses the change: nobody is claimed or fenced then.
    pub(super) fn settle_reshare(&self) -> Result<()> {
        let mut fenced = std::collections::BTreeSet::new();
        for _ in 0..5 {
            let Some(layout) = self.layout.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
                return Ok(());
            };
            let (claimed, to_recover) = {
                let scanned = self.scanned()?;
                let found = scanned.as_ref().map(|s| &s.records);
                let claimed = found.is_some_and(|r| r.get(&claim_key(&layout.owner)).is_some_and(Option::is_some));
                (
                    claimed,
                    scanned
                        .as_ref()
                        .is_some_and(|s| sink_left_to_recover(&self.config, s, &layout)),
                )
            };
            if layout.reshare.is_empty() || to_recover {
                return Ok(());
            }
            if !claimed {
                let (key, value) = claim_record(
                    &layout.owner,
                    &self.config.job,
                    self.config.instance,
                    layout.generation,
                    layout.base,
                )
                .map_err(|e| state_error(&self.config, &claim_key(&layout.owner), e))?;
                self.transaction(&[(key, Some(value))])?;
            }
            for member in &layout.reshare {
                if fenced.insert(member.owner.clone()) {
                    fence(&self.config, member)?;
                }
            }
            let found = scan(&self.config)?;
            let again = Some(layout_of(&self.config, &found)?);
            *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = Some(found);
            if again.as_ref() == Some(&layout) {
                return Ok(());
            }
            // another instance wrote meanwhile (one of the count before finished a checkpoint
            // before it was fenced, a sibling checkpointed): go by the newer view, in the same
            // generation, or stop
            if again.as_ref().map(|l| (l.generation, &l.owner)) != Some((layout.generation, &layout.owner)) {
                return Err(Error::runtime(
                    format!(
                        "checkpoint topic {} at {}",
                        self.config.topic, self.config.bootstrap_servers
                    ),
                    "another instance of the job changed its instance count while this one started: start it again",
                ));
            }
            *self.layout.lock().unwrap_or_else(|p| p.into_inner()) = again;
        }
        Err(Error::runtime(
            format!(
                "checkpoint topic {} at {}",
                self.config.topic, self.config.bootstrap_servers
            ),
            "the checkpoints of the instances of the count before kept changing while this instance read them: \
             stop them, then start it again",
        ))
    }

    /// Before the first checkpoint: read the layout again, now that every transactional id this
    /// instance writes under is taken (the store's, and the sink's, which takes it when it
    /// starts). An instance of another count that claimed a newer generation before then may
    /// have read this instance's checkpoints without fencing these ids (it fenced the ones taken
    /// before): this instance stops rather than write what the other now holds. After this, a
    /// newer claim comes with a fencing that reaches it.
    pub(super) fn verify_layout(&self) -> Result<()> {
        if self.verified.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        let found = scan(&self.config)?;
        let now = layout_of(&self.config, &found)?;
        let was = self.layout()?;
        if (now.generation, &now.owner) != (was.generation, &was.owner) {
            return Err(Error::runtime(
                format!(
                    "checkpoint topic {} at {}",
                    self.config.topic, self.config.bootstrap_servers
                ),
                format!(
                    "an instance of the job with another job.instance.count claimed its state (generation {}) \
                     while this one started: this one stops, its share is the other's now",
                    now.generation.max(was.generation)
                ),
            ));
        }
        self.verified.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// Fence `member`, another instance of the job (of the count before, or any at `--reset-state`):
/// its store's transactional id, and its exactly-once sink's when the checkpoints travel in the
/// sink's transactions.
pub(super) fn fence(config: &KafkaStoreConfig, member: &Member) -> Result<()> {
    drop(transactional_producer(
        config,
        &format!("tidegate.state.{}", member.owner),
        &config.properties,
    )?);
    if let (Some(_), Some(instance)) = (&config.sink_transactional_id, member.instance) {
        let id = layout::sink_transactional_id(&config.job, member.generation, instance);
        drop(transactional_producer(config, &id, &config.sink_properties)?);
    }
    info!(owner = %member.owner, "another instance of the job fenced");
    Ok(())
}

/// Whether an instance `layout` cuts its share from left its sink something only it can recover
/// (the job then refuses the change of count, see [`crate::core::Job`]).
fn sink_left_to_recover(config: &KafkaStoreConfig, found: &Scan, layout: &Layout) -> bool {
    found.heads(&config.job).any(|h| {
        h.checkpointed
            && layout.reshare.iter().any(|m| m.owner == h.owner)
            && sink_to_recover(h.key, &config.job, h.bytes)
    })
}

/// Where this instance stands, from the checkpoint and claim records a scan found. A damaged one
/// stops the job (exit 3) naming its key.
pub(super) fn layout_of(config: &KafkaStoreConfig, found: &Scan) -> Result<Layout> {
    let mut members: Vec<Member> = Vec::new();
    for head in found.heads(&config.job) {
        let (owner, key, bytes) = (head.owner, head.key, head.bytes);
        if layout::parse_owner(&config.job, owner).is_none() {
            if head.checkpointed && layout::parse_member(&config.job, owner).is_some() {
                return Err(Error::config(
                    "job.coordination",
                    format!(
                        "is \"static\", but the checkpoint topic holds the checkpoints of members of the job's \
                         consumer group ({key}): run it with job.coordination = \"group\", or start it over with \
                         --reset-state"
                    ),
                ));
            }
            continue;
        }
        check(key, &config.job, bytes).map_err(|e| state_error(config, key, e))?;
        if let Some(m) = members.last_mut().filter(|m| m.owner == owner) {
            // a claim beside the checkpoint of the same owner adds nothing
            m.checkpointed |= head.checkpointed;
            m.offset = m.offset.max(head.offset);
            continue;
        }
        let Some((generation, _)) = layout::parse_owner(&config.job, owner) else {
            continue;
        };
        // the single instance of the first generation, whatever its record says
        let instance = match owner == config.job {
            true => Some(written_by(key, &config.job, bytes).unwrap_or_default()),
            false => written_by(key, &config.job, bytes),
        };
        members.push(Member {
            owner: owner.to_string(),
            generation,
            instance,
            base: base_of(key, &config.job, bytes),
            checkpointed: head.checkpointed,
            offset: head.offset,
        });
    }
    layout::resolve(&config.job, config.instance, &members).map_err(|m| Error::config("job.instance.count", m))
}

impl KafkaCheckpointStore {
    /// `--reset-state`: the job starts over. Every instance of it that holds state in the topic
    /// (every count's) is fenced, then each of the job's keys gets a tombstone, in one
    /// transaction (other jobs' records are untouched); this instance starts afresh where it
    /// stands, and the others start afresh when they start again. (Starting one instance over
    /// while its siblings keep theirs would overlap their generated ranges after a change of
    /// count.)
    pub fn reset(&self) -> Result<()> {
        self.reset.store(true, std::sync::atomic::Ordering::Relaxed);
        // fence every other owner the topic holds records of, until a scan after the fencing
        // finds no new one: none of them writes after the tombstones
        let mut fenced = std::collections::BTreeSet::new();
        let found = loop {
            let found = scan(&self.config)?;
            let owners: Vec<String> = found
                .records
                .keys()
                .filter_map(|k| k.split_once('/').map(|(owner, _)| owner.to_string()))
                .filter(|owner| *owner != self.config.owner && !fenced.contains(owner))
                .collect();
            if owners.is_empty() {
                break found;
            }
            for owner in owners {
                if let Some((generation, index)) = layout::parse_owner(&self.config.job, &owner) {
                    // the first generation's single instance is named by the job alone
                    let count = if owner == self.config.job { 1 } else { 2 };
                    let member = Member {
                        owner: owner.clone(),
                        generation,
                        instance: Some(crate::core::Instance { index, count }),
                        base: None,
                        checkpointed: true,
                        offset: -1,
                    };
                    fence(&self.config, &member)?;
                }
                fenced.insert(owner);
            }
        };
        // and the values a group's members published for a source-wide stop: the old job's
        // watermarks and stop are not the new one's
        let event_time: Vec<(String, Option<Vec<u8>>)> = found.event_time.iter().map(|k| (k.clone(), None)).collect();
        let mut live: Vec<(String, Option<Vec<u8>>)> = found
            .records
            .into_iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k)
            .chain(found.parts)
            .map(|k| (k, None))
            .chain(event_time)
            .collect();
        *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // this instance starts afresh in the generation it opened in (the first, when the state
        // could not be placed), cut from nothing; its claim says so at once, so a sibling that
        // starts before its first checkpoint joins that generation afresh too
        let generation = self
            .layout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(0, |l| l.generation);
        if generation > 0 {
            let (key, value) = claim_record(
                &self.config.owner,
                &self.config.job,
                self.config.instance,
                generation,
                None,
            )
            .map_err(|e| state_error(&self.config, &claim_key(&self.config.owner), e))?;
            live.retain(|(k, _)| *k != key);
            live.push((key, Some(value)));
        }
        *self.layout.lock().unwrap_or_else(|p| p.into_inner()) = Some(Layout {
            generation,
            owner: self.config.owner.clone(),
            base: None,
            reshare: Vec::new(),
        });
        if !live.is_empty() {
            self.transaction(&live)?;
            warn!(topic = %self.config.topic, job = %self.config.job, keys = live.len(), instances_fenced = fenced.len(), "--reset-state: the job's state records replaced by tombstones; the job starts from scratch");
        }
        // the ids this instance writes under were taken at the opening, before that scan
        self.verified.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}
