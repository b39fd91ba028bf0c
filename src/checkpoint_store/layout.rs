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
/// A split is restored from the newest checkpoint that holds it, so a run never writes over the
/// checkpoints of the runs before it: the last one to hold a split keeps it until a newer run
/// holds it.
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
mod tests {
    use super::*;

    fn at(index: usize, count: usize) -> Instance {
        Instance { index, count }
    }

    fn member(generation: u64, index: usize, count: usize, base: Option<u64>) -> Member {
        Member {
            owner: owner_of("j", generation, at(index, count)),
            generation,
            instance: Some(at(index, count)),
            base,
            checkpointed: true,
            offset: 0,
        }
    }

    #[test]
    fn owner_names_parse_back_and_keep_the_first_generation_s() {
        assert_eq!(owner_of("j", 0, at(0, 1)), "j");
        assert_eq!(owner_of("j", 0, at(2, 3)), "j#2");
        assert_eq!(owner_of("j", 4, at(1, 2)), "j#1~4");
        assert_eq!(owner_of("j", 4, at(0, 1)), "j#0~4");
        for (g, i) in [(0, 0), (0, 2), (4, 1), (4, 0)] {
            let count = if g == 0 && i == 0 { 1 } else { 3 };
            assert_eq!(parse_owner("j", &owner_of("j", g, at(i, count))), Some((g, i)));
        }
        for other in ["jj", "j#", "j#x", "j#1~", "j#~2", "j#1~2~3", "k#1", "j#1~x"] {
            assert_eq!(parse_owner("j", other), None, "{other}");
        }
        assert_eq!(sink_transactional_id("j", 0, at(0, 1)), "tidegate-j");
        assert_eq!(sink_transactional_id("j", 0, at(1, 2)), "tidegate-j-1");
        assert_eq!(sink_transactional_id("j", 3, at(1, 2)), "tidegate-j-1~3");
    }

    #[test]
    fn a_job_without_checkpoints_and_siblings_of_the_same_count_stay_in_the_first_generation() {
        let fresh = resolve("j", at(1, 3), &[]).unwrap();
        assert_eq!(
            (fresh.generation, fresh.owner.as_str(), fresh.reshare.len()),
            (0, "j#1", 0)
        );
        let siblings = [member(0, 0, 3, None), member(0, 2, 3, None)];
        let started = resolve("j", at(1, 3), &siblings).unwrap();
        assert_eq!(
            (started.generation, started.owner.as_str(), started.reshare.len()),
            (0, "j#1", 0)
        );
        let own = resolve("j", at(0, 3), &siblings).unwrap();
        assert_eq!((own.generation, own.owner.as_str(), own.reshare.len()), (0, "j#0", 0));
    }

    #[test]
    fn a_changed_count_starts_the_next_generation_cut_from_the_whole_newest_one() {
        let three = [member(0, 0, 3, None), member(0, 1, 3, None), member(0, 2, 3, None)];
        let two = resolve("j", at(1, 2), &three).unwrap();
        assert_eq!((two.generation, two.owner.as_str(), two.base), (1, "j#1~1", Some(0)));
        assert_eq!(two.reshare, three.to_vec());
        // from one instance to several, and back
        let one = [member(0, 0, 1, None)];
        assert_eq!(resolve("j", at(0, 2), &one).unwrap().reshare, one.to_vec());
        let mut both = three.to_vec();
        both.extend([member(1, 0, 2, Some(0)), member(1, 1, 2, Some(0))]);
        let back = resolve("j", at(2, 3), &both).unwrap();
        assert_eq!((back.generation, back.owner.as_str(), back.base), (2, "j#2~2", Some(1)));
        assert_eq!(back.reshare, both[3..].to_vec());
    }

    #[test]
    fn an_instance_of_the_newest_generation_without_a_checkpoint_cuts_its_share_from_the_base() {
        let mut members = vec![member(0, 0, 3, None), member(0, 1, 3, None), member(0, 2, 3, None)];
        members.push(member(1, 0, 2, Some(0)));
        let late = resolve("j", at(1, 2), &members).unwrap();
        assert_eq!((late.generation, late.owner.as_str()), (1, "j#1~1"));
        assert_eq!(late.reshare, members[..3].to_vec());
        let own = resolve("j", at(0, 2), &members).unwrap();
        assert_eq!((own.generation, own.reshare.len()), (1, 0));
    }

    #[test]
    fn a_claimed_generation_turns_away_the_count_before_and_cuts_its_late_members_from_the_base() {
        let mut members = vec![member(0, 0, 2, None), member(0, 1, 2, None)];
        // instance 2 of 3 claimed generation 1 and has not checkpointed yet
        members.push(Member {
            checkpointed: false,
            ..member(1, 2, 3, Some(0))
        });
        let old = resolve("j", at(0, 2), &members).unwrap_err();
        assert!(old.contains("job.instance.count = 3"), "{old}");
        for index in 0..3 {
            let new = resolve("j", at(index, 3), &members).unwrap();
            assert_eq!((new.generation, new.base, new.reshare.len()), (1, Some(0), 2));
        }
    }

    #[test]
    fn the_first_generation_passes_over_the_leftovers_of_another_count() {
        // an older tidegate's --reset-state started instance 0 of 2 over beside a count-1 record:
        // the count of the latest record is the live one
        let at_offset = |m: Member, offset| Member { offset, ..m };
        let members = [
            at_offset(member(0, 0, 1, None), 5),
            at_offset(member(0, 0, 2, None), 9),
            at_offset(member(0, 1, 2, None), 7),
        ];
        let two = resolve("j", at(1, 2), &members).unwrap();
        assert_eq!((two.generation, two.owner.as_str(), two.reshare.len()), (0, "j#1", 0));
        // a count of 1 now is a change from the live 2, not a return to the leftover
        let one = resolve("j", at(0, 1), &members).unwrap();
        assert_eq!((one.generation, one.base), (1, Some(0)));
        assert_eq!(one.reshare, members[1..].to_vec());
        let three = resolve("j", at(0, 3), &members).unwrap();
        assert_eq!((three.generation, three.reshare.len()), (1, 2));
    }

    #[test]
    fn an_incomplete_or_mixed_generation_is_refused_naming_what_is_missing() {
        let partial = [member(0, 0, 3, None), member(0, 2, 3, None)];
        let e = resolve("j", at(0, 2), &partial).unwrap_err();
        assert!(
            e.contains("instance 1 of the 3") && e.contains("job.instance.count = 3"),
            "{e}"
        );
        // two counts in one generation after the first: two changes raced
        let mixed = [member(1, 0, 3, Some(0)), member(1, 1, 2, Some(0))];
        let e = resolve("j", at(0, 3), &mixed).unwrap_err();
        assert!(e.contains("different counts"), "{e}");
        let unknown = [Member {
            instance: None,
            ..member(0, 1, 2, None)
        }];
        assert!(resolve("j", at(0, 3), &unknown).unwrap_err().contains("does not say"));
    }

    /// A model of the store and of the datagen source's shares: each owner's last checkpoint
    /// (split positions), and the truth (each split's last committed position). Seeded schedules
    /// of runs, each of a random instance of a random count, each ending in a checkpoint or a
    /// crash before one: every restore must find each split it holds at its committed position
    /// (behind: repeated output; ahead: lost), no two instances of a generation hold one split,
    /// and running the newest generation's instances always finishes the job.
    #[test]
    fn seeded_schedules_of_count_changes_restore_every_split_at_its_committed_position() {
        use rand::{Rng, SeedableRng};
        use std::collections::BTreeSet;

        const SPLITS: usize = 8;
        const END: u64 = 6;
        #[derive(Clone)]
        struct Record {
            member: Member,
            splits: BTreeMap<String, u64>,
        }
        struct Model {
            records: BTreeMap<String, Record>,
            truth: BTreeMap<String, u64>,
        }
        impl Model {
            /// Run instance `at`; `None` when the layout refuses it.
            fn run(&mut self, at: Instance, rng: &mut impl Rng, crash: bool) -> Option<Result<(), String>> {
                let members: Vec<Member> = self.records.values().map(|r| r.member.clone()).collect();
                let layout = resolve("j", at, &members).ok()?;
                let owned = |id: &String| at.owns_key(id);
                let own = self.records.get(&layout.owner).filter(|r| r.member.checkpointed);
                if own.is_none() && !layout.reshare.is_empty() {
                    // the claim of the generation, before the instances of the base are read
                    self.records.entry(layout.owner.clone()).or_insert_with(|| Record {
                        member: Member {
                            owner: layout.owner.clone(),
                            generation: layout.generation,
                            instance: Some(at),
                            base: layout.base,
                            checkpointed: false,
                            offset: 0,
                        },
                        splits: BTreeMap::new(),
                    });
                }
                let own = self.records.get(&layout.owner).filter(|r| r.member.checkpointed);
                let state: BTreeMap<String, u64> = match own {
                    Some(own) => own.splits.clone(),
                    None if !layout.reshare.is_empty() => {
                        let mut cut = BTreeMap::new();
                        for m in &layout.reshare {
                            for (id, pos) in &self.records[&m.owner].splits {
                                if owned(id) && cut.insert(id.clone(), *pos).is_some() {
                                    return Some(Err(format!("split {id} in two checkpoints of the base")));
                                }
                            }
                        }
                        cut
                    }
                    // a fresh start deals the splits as the generator's cut does
                    None => (0..SPLITS)
                        .filter(|i| {
                            layout.generation == 0
                                && Instance {
                                    index: at.index,
                                    count: at.count,
                                }
                                .owns(*i as u64)
                        })
                        .map(|i| (i.to_string(), 0))
                        .collect(),
                };
                for (id, pos) in &state {
                    if *pos != self.truth[id] {
                        return Some(Err(format!(
                            "{at:?} in generation {} restores split {id} at {pos}, committed at {}",
                            layout.generation, self.truth[id]
                        )));
                    }
                }
                if crash {
                    return Some(Ok(()));
                }
                let mut next = state;
                for pos in next.values_mut() {
                    *pos = (*pos + rng.random_range(0..3)).min(END);
                }
                for (id, pos) in &next {
                    self.truth.insert(id.clone(), *pos);
                }
                self.records.insert(
                    layout.owner.clone(),
                    Record {
                        member: Member {
                            owner: layout.owner.clone(),
                            generation: layout.generation,
                            instance: Some(at),
                            base: layout.base,
                            checkpointed: true,
                            offset: 0,
                        },
                        splits: next,
                    },
                );
                Some(Ok(()))
            }

            /// No split is held by two members of the newest generation.
            fn disjoint(&self) -> Result<(), String> {
                let newest = self.records.values().map(|r| r.member.generation).max().unwrap_or(0);
                let mut held = BTreeSet::new();
                for r in self.records.values().filter(|r| r.member.generation == newest) {
                    for id in r.splits.keys() {
                        if !held.insert(id.clone()) {
                            return Err(format!("split {id} held twice in generation {newest}"));
                        }
                    }
                }
                Ok(())
            }
        }

        for seed in 0..2_000u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut model = Model {
                records: BTreeMap::new(),
                truth: (0..SPLITS).map(|i| (i.to_string(), 0)).collect(),
            };
            let mut trace = Vec::new();
            for _ in 0..rng.random_range(1..25) {
                let count = rng.random_range(1..=4usize);
                let at = Instance {
                    index: rng.random_range(0..count),
                    count,
                };
                let crash = rng.random_bool(0.2);
                trace.push(format!(
                    "{}/{}{}",
                    at.index,
                    at.count,
                    if crash { " crash" } else { "" }
                ));
                if let Some(Err(e)) = model.run(at, &mut rng, crash) {
                    panic!("seed {seed}: {e}; runs {trace:?}");
                }
                model
                    .disjoint()
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}; runs {trace:?}"));
            }
            // the newest generation's instances, run in turn, finish the job
            for round in 0.. {
                assert!(round < 50, "seed {seed}: the job does not finish; runs {trace:?}");
                if model.truth.values().all(|p| *p == END) {
                    break;
                }
                let newest = model.records.values().map(|r| r.member.generation).max().unwrap_or(0);
                let count = model
                    .records
                    .values()
                    .filter(|r| r.member.generation == newest)
                    .find_map(|r| r.member.instance)
                    .map_or(1, |i| i.count);
                for index in 0..count {
                    let run = model.run(Instance { index, count }, &mut rng, false);
                    match run {
                        Some(Ok(())) => {}
                        Some(Err(e)) => panic!("seed {seed}: {e}; runs {trace:?}"),
                        None => {
                            panic!("seed {seed}: instance {index} of the newest count {count} refused; runs {trace:?}")
                        }
                    }
                }
            }
        }
    }
}
