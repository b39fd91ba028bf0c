//! Whose records an instance of a job reads and writes in the Kafka store, across changes of
//! `job.instance.count`. Each run of a job with one count is a *generation* of owners: the first
//! keeps the names it always had (`<job>` alone, `<job>#<index>` for several instances); a count
//! change starts the next, `<job>#<index>~<generation>`, whose job records name the generation
//! they were cut from (`base`). An instance with no checkpoint of its own in the newest
//! generation claims it (a record that says the generation began, so an instance of the count
//! before that starts again is refused) and cuts its share from the last checkpoints of every
//! instance of the base (see [`crate::core::Source::reshare`]). Older generations' records stay
//! in the topic until `--reset-state`; only the base's are read, while the newest generation has
//! instances without a checkpoint. Each generation has its own transactional ids too, so an
//! instance of the new count never fences a sibling when it fences the instances of the old one.
//! Pure: no Kafka here.

use std::collections::BTreeMap;

use crate::core::Instance;

/// An owner of a job's records that holds a live checkpoint record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The key prefix of its records.
    pub owner: String,
    /// Its generation (0: the names the store always used).
    pub generation: u64,
    /// Its instance, as its job record says (`None`: a record that does not say).
    pub instance: Option<Instance>,
    /// The generation it was cut from (none in the first).
    pub base: Option<u64>,
    /// It has a checkpoint (not only a claim: an instance about to cut its share claims its
    /// generation first, so an instance of the count before that starts again finds it).
    pub checkpointed: bool,
    /// Where its latest record is in the topic (later records, higher offsets).
    pub offset: i64,
}

/// Where an instance stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The generation it writes in.
    pub generation: u64,
    /// Its owner name in that generation.
    pub owner: String,
    /// The generation its generation was cut from.
    pub base: Option<u64>,
    /// With no checkpoint of its own: the base's members (one per index, in order), whose last
    /// checkpoints its share is cut from. Empty: it restores its own, or starts afresh.
    pub reshare: Vec<Member>,
}

/// The owner name of `instance` in `generation`.
pub fn owner_of(job: &str, generation: u64, instance: Instance) -> String {
    match generation {
        0 if instance.count > 1 => format!("{job}#{}", instance.index),
        0 => job.to_string(),
        g => format!("{job}#{}~{g}", instance.index),
    }
}

/// The transactional id of the exactly-once Kafka sink of `instance` in `generation` (the first
/// generation's are the ids the sink always had).
pub fn sink_transactional_id(job: &str, generation: u64, instance: Instance) -> String {
    match generation {
        0 if instance.count > 1 => format!("tidegate-{job}-{}", instance.index),
        0 => format!("tidegate-{job}"),
        g => format!("tidegate-{job}-{}~{g}", instance.index),
    }
}

/// The owner name of member `member` of a group-coordinated job: `<job>@<member>`. Group members
/// have no generations: a member's checkpoints hold the splits it was last assigned.
pub fn member_owner(job: &str, member: &str) -> String {
    format!("{job}@{member}")
}

/// The owner name of one run of member `member` (its job on one assignment): `<job>@<member>~<run>`.
/// A split is restored from the newest checkpoint that holds it (of those that count the most
/// handovers of it), so a run never writes over the checkpoints of the runs before it: the last
/// one to hold a split keeps it until a newer run holds it.
pub fn member_run_owner(job: &str, member: &str, run: &str) -> String {
    format!("{job}@{member}~{run}")
}

/// The member an owner name of a group-coordinated `job` names (`<job>@<member>`, with the run
/// after a `~`).
pub fn parse_member<'o>(job: &str, owner: &'o str) -> Option<&'o str> {
    owner
        .strip_prefix(job)?
        .strip_prefix('@')
        .filter(|m| !m.is_empty() && !m.contains(['/', '@', '#']))
        .map(|m| m.split_once('~').map_or(m, |(member, _)| member))
}

/// The generation and index an owner name of `job` says (`<job>`: index 0 of the first), or
/// `None` when it is not one of `job`'s.
pub fn parse_owner(job: &str, owner: &str) -> Option<(u64, usize)> {
    let rest = owner.strip_prefix(job)?;
    if rest.is_empty() {
        return Some((0, 0));
    }
    let rest = rest.strip_prefix('#')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (index, generation) = match rest.split_once('~') {
        Some((i, g)) if digits(i) && digits(g) => (i, g.parse().ok()?),
        Some(_) => return None,
        None if digits(rest) => (rest, 0),
        None => return None,
    };
    Some((generation, index.parse().ok()?))
}

/// Where `instance` stands among the `members` holding a checkpoint. The newest generation
/// decides: with the same count, the instance is one of it (restoring its own checkpoint, or,
/// with none, cutting its share from the generation before, or starting afresh in the first);
/// with another count, it starts the next generation from the newest, which must then be
/// complete. An error is a message for `job.instance.count`.
pub fn resolve(job: &str, instance: Instance, members: &[Member]) -> Result<Layout, String> {
    let Some(newest) = members.iter().map(|m| m.generation).max() else {
        return Ok(Layout {
            generation: 0,
            owner: owner_of(job, 0, instance),
            base: None,
            reshare: Vec::new(),
        });
    };
    let (count, top) = generation(members, newest)?;
    let base = top.values().next().and_then(|m| m.base);
    if top.values().any(|m| m.base != base) {
        return Err(format!(
            "the checkpoints of the {count} instances of generation {newest} disagree on the generation they were \
             cut from: the state was not written by tidegate's runs of this job; start over with --reset-state"
        ));
    }
    if count == instance.count.max(1) {
        let reshare = match (top.get(&instance.index).is_some_and(|m| m.checkpointed), base) {
            (false, Some(b)) => complete(members, b, "")?,
            _ => Vec::new(),
        };
        return Ok(Layout {
            generation: newest,
            owner: owner_of(job, newest, instance),
            base,
            reshare,
        });
    }
    let next = newest + 1;
    let reshare = complete(members, newest, &format!(" (now {})", instance.count.max(1)))?;
    Ok(Layout {
        generation: next,
        owner: owner_of(job, next, instance),
        base: Some(newest),
        reshare,
    })
}

/// The members of `generation` by index, and their count (every record must say the same; in
/// the first generation, the records of other counts than that of its latest record are left
/// over from a `--reset-state` of an older tidegate, which started one instance over, and are
/// passed over).
fn generation(members: &[Member], generation: u64) -> Result<(usize, BTreeMap<usize, &Member>), String> {
    let of = |m: &&Member| m.generation == generation;
    let latest = members
        .iter()
        .filter(of)
        .max_by_key(|m| m.offset)
        .and_then(|m| m.instance);
    let current =
        |m: &&Member| generation > 0 || latest.is_none() || m.instance.map(|i| i.count) == latest.map(|i| i.count);
    let mut count = None;
    let mut top = BTreeMap::new();
    for m in members.iter().filter(of).filter(current) {
        let Some(i) = m.instance else {
            return Err(format!(
                "the job's checkpoint under {} does not say which instance wrote it (an older tidegate's): its share \
                 of the work is unknown; finish the job with the settings that wrote the state, or start over with \
                 --reset-state",
                m.owner
            ));
        };
        match count {
            Some(c) if c != i.count => {
                return Err(format!(
                    "the job's checkpoints of generation {generation} were written with different counts ({c} and {}): \
                     instances of two counts ran at once; start over with --reset-state",
                    i.count
                ))
            }
            _ => count = Some(i.count),
        }
        top.insert(i.index, m);
    }
    Ok((count.unwrap_or(1), top))
}

/// The members of `generation`, one per index, or the error naming those with no checkpoint.
fn complete(members: &[Member], generation: u64, now: &str) -> Result<Vec<Member>, String> {
    let (count, top) = self::generation(members, generation)?;
    let missing: Vec<String> = (0..count)
        .filter(|i| !top.get(i).is_some_and(|m| m.checkpointed))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "changed since the job's state was written{now}, but instance {} of the {count} that wrote it has no \
             checkpoint: its share of the work is known to nobody else; run it with job.instance.count = {count} until \
             it has checkpointed, then change the count, or start over with --reset-state",
            missing.join(", ")
        ));
    }
    Ok(top.into_values().cloned().collect())
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
