//! Unit tests of the Kafka store's layout: owners, generations, members and what an instance restores.

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
