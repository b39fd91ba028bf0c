//! The state file: a versioned, checksummed checkpoint written crash-safely (temp file in the
//! same directory, fsync, rename, fsync the directory), and read strictly: any damage is an
//! error that leaves the file untouched, never a silent reset.
//!
//! Layout: one header line, then the payload (pretty JSON):
//! `{"format":"tidegate-state","version":1,"length":N,"crc32":C}\n<N payload bytes>`.

use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::disk;
use crate::error::{Error, Result, StateError};

const FORMAT: &str = "tidegate-state";
/// The state format this build reads and writes.
pub const STATE_VERSION: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u64,
    length: usize,
    crc32: u32,
}

/// Where a simulated crash interrupts [`StateStore::write`] (tests of crash safety).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Half of the temp file written, nothing else.
    DuringTempWrite,
    /// The temp file complete and synced, not yet renamed.
    BeforeRename,
}

/// The state file of one job, locked against a second process for as long as this lives.
#[derive(Debug)]
pub struct StateStore {
    path: PathBuf,
    temp: PathBuf,
    _lock: File,
}

fn state_err(path: &Path, source: StateError) -> Error {
    Error::State {
        path: path.to_path_buf(),
        source,
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    path.with_file_name(format!(".{name}.{suffix}"))
}

impl StateStore {
    /// Prepare `path`: create its directory, take the lock, check the directory is writable
    /// and remove a temp file left by a crash (the state file itself is never touched here).
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let dir = parent_dir(&path);
        // a file where a directory should be: say which, rather than "File exists"
        if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
            return Err(state_err(&path, StateError::NotADirectory(file.to_path_buf())));
        }
        fs::create_dir_all(&dir).map_err(|e| state_err(&path, StateError::NotWritable(e)))?;
        let lock_path = sibling(&path, "lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| state_err(&path, StateError::NotWritable(e)))?;
        // SAFETY: flock on a file descriptor we own; no memory is shared with the call.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(state_err(&path, StateError::Locked(lock_path)));
        }
        let temp = sibling(&path, "tmp");
        if disk::exists(&temp) {
            warn!(temp = %temp.display(), "removing a temp state file left by an interrupted checkpoint");
            disk::remove(&temp).map_err(|e| state_err(&path, StateError::NotWritable(e)))?;
        }
        // a directory we cannot write would only fail at the first checkpoint: fail now instead
        let probe = sibling(&path, "probe");
        File::create(&probe)
            .and_then(|_| fs::remove_file(&probe))
            .map_err(|e| state_err(&path, StateError::NotWritable(e)))?;
        Ok(StateStore {
            path,
            temp,
            _lock: lock,
        })
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The payload, or `None` when there is no state file yet.
    pub fn load<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        read_state(&self.path)
    }

    /// Replace the state file with `payload`, crash-safely.
    pub fn write<T: Serialize>(&self, payload: &T) -> Result<()> {
        self.write_encoded(&encode(payload)?)
    }

    /// Replace the state file with bytes from [`encode`], crash-safely.
    pub fn write_encoded(&self, bytes: &[u8]) -> Result<()> {
        self.write_inner(bytes, None)
    }

    /// Like `write`, but stop as a crash would at `crash` (tests only).
    #[doc(hidden)]
    pub fn write_interrupted<T: Serialize>(&self, payload: &T, crash: CrashPoint) -> Result<()> {
        self.write_inner(&encode(payload)?, Some(crash))
    }

    fn write_inner(&self, bytes: &[u8], crash: Option<CrashPoint>) -> Result<()> {
        let ctx = |what: &str| format!("writing state file {}: {what}", self.path.display());
        // under a simulation: a crash, or an injected I/O error, at either step
        let interrupted = |i: crate::sim::Interrupt| match i {
            crate::sim::Interrupt::Crashed => Error::runtime(ctx("interrupted"), "the simulated process crashed"),
            crate::sim::Interrupt::Fault => Error::io(ctx("write"), std::io::Error::other("simulated I/O error")),
        };
        let result = (|| -> Result<()> {
            if let Some(i) = crate::sim::sync_point("state.write") {
                return Err(interrupted(i));
            }
            if crash == Some(CrashPoint::DuringTempWrite) {
                disk::write_file(&self.temp, &bytes[..bytes.len() / 2])
                    .map_err(|e| Error::io(ctx("write temp file"), e))?;
                return Ok(());
            }
            disk::write_file(&self.temp, bytes).map_err(|e| Error::io(ctx("write temp file"), e))?;
            disk::sync_file(&self.temp).map_err(|e| Error::io(ctx("fsync temp file"), e))?;
            crate::failpoint::hit("state.before_rename");
            if let Some(i) = crate::sim::sync_point("state.before_rename") {
                return Err(interrupted(i));
            }
            if crash == Some(CrashPoint::BeforeRename) {
                return Ok(());
            }
            disk::rename(&self.temp, &self.path).map_err(|e| Error::io(ctx("rename temp file"), e))?;
            disk::sync_dir(&parent_dir(&self.path)).map_err(|e| Error::io(ctx("fsync directory"), e))?;
            Ok(())
        })();
        if result.is_err() {
            // a partial temp file must not linger (a full disk, say); the old state is intact
            let _ = disk::remove(&self.temp);
        }
        result
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Serialize a payload with its header.
pub fn encode<T: Serialize>(payload: &T) -> Result<Vec<u8>> {
    let mut body = serde_json::to_vec_pretty(payload).map_err(|e| Error::runtime("serializing the checkpoint", e))?;
    body.push(b'\n');
    let header = Header {
        format: FORMAT.into(),
        version: STATE_VERSION,
        length: body.len(),
        crc32: crc32fast::hash(&body),
    };
    let mut bytes = serde_json::to_vec(&header).map_err(|e| Error::runtime("serializing the state header", e))?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// Check and decode state bytes. Each kind of damage is its own [`StateError`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StateError> {
    if bytes.is_empty() {
        return Err(StateError::Empty);
    }
    let Some(newline) = bytes.iter().position(|b| *b == b'\n') else {
        return Err(if bytes.starts_with(b"{\"format\":\"tidegate-state\"") {
            StateError::Truncated("the header line is incomplete".into())
        } else {
            StateError::NotAStateFile("no header line".into())
        });
    };
    let header: Header = serde_json::from_slice(&bytes[..newline])
        .map_err(|_| StateError::NotAStateFile("the first line is not a tidegate state header".into()))?;
    if header.format != FORMAT {
        return Err(StateError::NotAStateFile(format!("format is {:?}", header.format)));
    }
    if header.version != STATE_VERSION {
        return Err(StateError::UnknownVersion {
            found: header.version,
            supported: STATE_VERSION,
        });
    }
    let body = &bytes[newline + 1..];
    if body.len() < header.length {
        return Err(StateError::Truncated(format!(
            "the header announces {} payload bytes, the file has {}",
            header.length,
            body.len()
        )));
    }
    if body.len() > header.length {
        return Err(StateError::Malformed(format!(
            "{} unexpected bytes after the payload",
            body.len() - header.length
        )));
    }
    let actual = crc32fast::hash(body);
    if actual != header.crc32 {
        return Err(StateError::ChecksumMismatch {
            expected: header.crc32,
            actual,
        });
    }
    serde_json::from_slice(body).map_err(|e| StateError::Malformed(e.to_string()))
}

/// Read and check a state file; `None` if it does not exist.
pub fn read_state<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let bytes = match disk::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(state_err(path, StateError::Unreadable(e))),
    };
    decode(&bytes).map(Some).map_err(|e| state_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn store(dir: &tempfile::TempDir) -> StateStore {
        StateStore::open(dir.path().join("job.state")).unwrap()
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir);
        assert!(s.load::<Value>().unwrap().is_none());
        s.write(&json!({"a": 1})).unwrap();
        assert_eq!(s.load::<Value>().unwrap(), Some(json!({"a": 1})));
    }

    #[test]
    fn each_kind_of_damage_has_its_own_error() {
        let good = encode(&json!({"splits": [1, 2, 3]})).unwrap();
        let newline = good.iter().position(|b| *b == b'\n').unwrap();
        let text = String::from_utf8(good.clone()).unwrap();
        type Case = (Vec<u8>, fn(&StateError) -> bool);
        let cases: Vec<Case> = vec![
            (vec![], |e| matches!(e, StateError::Empty)),
            (good[..good.len() - 5].to_vec(), |e| {
                matches!(e, StateError::Truncated(_))
            }),
            (good[..newline / 2].to_vec(), |e| matches!(e, StateError::Truncated(_))),
            (vec![0x9f, 0x13, 0x00, 0xff, 0x42, b'\n', 0x01], |e| {
                matches!(e, StateError::NotAStateFile(_))
            }),
            (text.replacen("\"version\":1", "\"version\":9", 1).into_bytes(), |e| {
                matches!(e, StateError::UnknownVersion { found: 9, .. })
            }),
            (
                [&good[..=newline], text[newline + 1..].replacen('3', "4", 1).as_bytes()].concat(),
                |e| matches!(e, StateError::ChecksumMismatch { .. }),
            ),
        ];
        for (bytes, check) in cases {
            let err = decode::<Value>(&bytes).unwrap_err();
            assert!(
                check(&err),
                "unexpected error {err:?} for {:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn a_crash_before_the_rename_leaves_the_old_state() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir);
        s.write(&json!({"checkpoint": 1})).unwrap();
        for crash in [CrashPoint::DuringTempWrite, CrashPoint::BeforeRename] {
            s.write_interrupted(&json!({"checkpoint": 2}), crash).unwrap();
            assert_eq!(s.load::<Value>().unwrap(), Some(json!({"checkpoint": 1})), "{crash:?}");
        }
        // the next process finds the temp file, discards it, and still reads the old state
        drop(s);
        let s = store(&dir);
        assert!(!sibling(s.path(), "tmp").exists());
        assert_eq!(s.load::<Value>().unwrap(), Some(json!({"checkpoint": 1})));
        s.write(&json!({"checkpoint": 3})).unwrap();
        assert_eq!(s.load::<Value>().unwrap(), Some(json!({"checkpoint": 3})));
    }

    #[test]
    fn a_second_store_on_the_same_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = store(&dir);
        let err = StateStore::open(dir.path().join("job.state")).unwrap_err();
        assert!(
            matches!(
                err,
                Error::State {
                    source: StateError::Locked(_),
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.exit_code(), 3);
    }
}
