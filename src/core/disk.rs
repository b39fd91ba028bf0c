//! The state file's disk operations: create and write a file, fsync it, rename it, fsync its
//! directory, read it back. On a real disk they are the file system's; under a simulation that
//! entered a [`SimulatedDisk`] on this thread they go to a model of a disk that keeps only what
//! was synced through a crash: a file's data written but not fsynced may be lost or torn, and a
//! rename or removal whose directory was not fsynced may be undone. So a missing fsync in the
//! checkpoint protocol is caught by the simulation, where a real disk's page cache would hide it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::sim::SplitMix64;

thread_local! {
    static SIMULATED: RefCell<Option<Rc<RefCell<SimulatedDisk>>>> = const { RefCell::new(None) };
}

/// Run `simulated` on the model if one is entered on this thread, else `real`.
fn on<R>(simulated: impl FnOnce(&mut SimulatedDisk) -> R, real: impl FnOnce() -> R) -> R {
    let model = SIMULATED.with(|s| s.borrow().clone());
    match model {
        Some(model) => simulated(&mut model.borrow_mut()),
        None => real(),
    }
}

/// Create (or replace) `path` holding `bytes`, not synced.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    on(
        |d| {
            d.write(path, bytes);
            Ok(())
        },
        || File::create(path)?.write_all(bytes),
    )
}

/// fsync `path`'s data.
pub(crate) fn sync_file(path: &Path) -> std::io::Result<()> {
    on(|d| d.sync_file(path), || File::open(path)?.sync_all())
}

/// Rename `from` to `to` (replacing it), not synced.
pub(crate) fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    on(|d| d.rename(from, to), || fs::rename(from, to))
}

/// fsync directory `dir`: its entries' renames and removals are durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    on(
        |d| {
            d.sync_dir(dir);
            Ok(())
        },
        || File::open(dir)?.sync_all(),
    )
}

/// Remove `path`, not synced.
pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    on(|d| d.remove(path), || fs::remove_file(path))
}

/// Whether `path` exists.
pub(crate) fn exists(path: &Path) -> bool {
    on(|d| d.entries.contains_key(path), || path.exists())
}

/// `path`'s bytes.
pub(crate) fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    on(|d| d.read(path), || fs::read(path))
}

fn not_found(path: &Path) -> std::io::Error {
    std::io::Error::new(ErrorKind::NotFound, format!("{} (simulated disk)", path.display()))
}

/// A disk that keeps what was synced (see the module docs).
#[derive(Debug, Default)]
pub struct SimulatedDisk {
    /// Each name's file, as the directories hold them now.
    entries: BTreeMap<PathBuf, u64>,
    /// ... and as they were when their directory was last synced.
    durable_entries: BTreeMap<PathBuf, u64>,
    /// Each file's data now, and as it was last synced.
    files: BTreeMap<u64, (Vec<u8>, Vec<u8>)>,
    next: u64,
    /// Crashes that lost or tore something not synced.
    pub lost: u64,
}

impl SimulatedDisk {
    /// Enter a model disk on this thread (an empty one, or what a driver kept between its
    /// simulated processes); it stays until the guard is dropped.
    pub fn enter(model: Rc<RefCell<SimulatedDisk>>) -> DiskGuard {
        SIMULATED.with(|s| *s.borrow_mut() = Some(model));
        DiskGuard
    }

    fn write(&mut self, path: &Path, bytes: &[u8]) {
        self.next += 1;
        self.files.insert(self.next, (bytes.to_vec(), Vec::new()));
        self.entries.insert(path.to_path_buf(), self.next);
    }

    fn sync_file(&mut self, path: &Path) -> std::io::Result<()> {
        let id = *self.entries.get(path).ok_or_else(|| not_found(path))?;
        if let Some((now, synced)) = self.files.get_mut(&id) {
            *synced = now.clone();
        }
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        let id = self.entries.remove(from).ok_or_else(|| not_found(from))?;
        self.entries.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn remove(&mut self, path: &Path) -> std::io::Result<()> {
        self.entries.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }

    fn sync_dir(&mut self, dir: &Path) {
        self.durable_entries.retain(|p, _| p.parent() != Some(dir));
        self.durable_entries.extend(
            self.entries
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir))
                .map(|(p, id)| (p.clone(), *id)),
        );
    }

    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        let id = self.entries.get(path).ok_or_else(|| not_found(path))?;
        Ok(self.files.get(id).map(|(now, _)| now.clone()).unwrap_or_default())
    }

    /// A crash: each change not synced reached the disk, or not, or (a file's data) in part,
    /// by draws from `rng`.
    pub fn crash(&mut self, rng: &mut SplitMix64) {
        let mut lost = false;
        let names: Vec<PathBuf> = self
            .entries
            .keys()
            .chain(self.durable_entries.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut entries = BTreeMap::new();
        for name in names {
            let (now, synced) = (
                self.entries.get(&name).copied(),
                self.durable_entries.get(&name).copied(),
            );
            let kept = if now == synced || rng.chance(500) { now } else { synced };
            lost |= kept != now;
            if let Some(id) = kept {
                entries.insert(name, id);
            }
        }
        for (now, synced) in self.files.values_mut() {
            if now == synced {
                continue;
            }
            // what was written after the last fsync: all of it, a part of it, or nothing
            let data = if now.starts_with(synced) {
                let cut = rng.range(synced.len() as u64, now.len() as u64) as usize;
                now[..cut].to_vec()
            } else if rng.chance(500) {
                now[..rng.range(0, now.len() as u64) as usize].to_vec()
            } else {
                synced.clone()
            };
            lost |= data != *now;
            *now = data.clone();
            *synced = data;
        }
        self.entries = entries.clone();
        self.durable_entries = entries;
        self.lost += u64::from(lost);
    }
}

/// Leaves the simulated disk when dropped.
pub struct DiskGuard;

impl Drop for DiskGuard {
    fn drop(&mut self) {
        SIMULATED.with(|s| *s.borrow_mut() = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_synced_is_sure_to_survive_a_crash() {
        let (dir, file, temp) = (Path::new("/d"), Path::new("/d/state"), Path::new("/d/.state.tmp"));
        let mut lost_the_rename = false;
        let mut tore_the_data = false;
        for seed in 0..200 {
            let mut disk = SimulatedDisk::default();
            disk.write(temp, b"first");
            disk.sync_file(temp).unwrap();
            disk.rename(temp, file).unwrap();
            disk.sync_dir(dir);
            // the second write fsyncs its data but not the directory
            disk.write(temp, b"second");
            disk.sync_file(temp).unwrap();
            disk.rename(temp, file).unwrap();
            // and a third file is not synced at all
            disk.write(Path::new("/d/other"), b"unsynced");
            disk.crash(&mut SplitMix64(seed));
            let state = disk.read(file).unwrap();
            assert!(state == b"first" || state == b"second", "{state:?}");
            lost_the_rename |= state == b"first";
            if let Ok(other) = disk.read(Path::new("/d/other")) {
                tore_the_data |= other.len() < 8;
                assert!(b"unsynced".starts_with(&other));
            }
        }
        assert!(
            lost_the_rename,
            "a rename without the directory's fsync is sometimes undone"
        );
        assert!(tore_the_data, "unsynced data is sometimes torn");
    }
}
