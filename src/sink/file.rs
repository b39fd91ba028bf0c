//! The `file` and `stdout` sinks: JSON lines, made durable at each checkpoint (flush, and fsync
//! for files).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tracing::warn;

use super::envelope::write_line;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::connector::{SinkConnector, SinkContext};
use crate::core::{Sink, SinkState};
use crate::error::{Error, Result};
use crate::record::Record;
use crate::sink::kafka::routing::{HeaderRules, RawHeaders};

/// Writes JSON lines to a file.
pub struct FileSink {
    path: PathBuf,
    out: BufWriter<File>,
    /// A regular file: truncated, repaired, fsynced and cut back to a checkpoint. Anything else
    /// (`/dev/null`, a FIFO, a terminal) is a stream: written and flushed, nothing more.
    regular: bool,
    end_marker: Option<Record>,
    /// `sink.headers`, applied before each line is written.
    headers: HeaderRules,
}

impl FileSink {
    /// Open `path`. A resumed job appends (dropping a torn last line a crash may have left, which
    /// the resumed job writes again); a fresh job starts the file anew.
    pub fn open(path: &Path, append: bool, end_marker: Option<Record>) -> Result<Self> {
        let ctx = |what: &str| format!("{what} {}", path.display());
        if is_stream(path) {
            // (a FIFO's open waits for its reader, as a shell's redirection does)
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io(ctx("opening"), e))?;
            return Ok(FileSink {
                path: path.to_path_buf(),
                out: BufWriter::with_capacity(1 << 16, file),
                regular: false,
                end_marker,
                headers: HeaderRules::default(),
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(ctx("creating the directory of"), e))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(ctx("opening"), e))?;
        // one writer per file, held while the sink lives: a second process (a second start on
        // this host) is refused before it truncates or repairs anything. The state file's lock
        // covers this only with the file store; a Kafka checkpoint store fences only at the next
        // checkpoint, after the first process's lines reached the file.
        // SAFETY: flock on a file descriptor we own; no memory is shared with the call.
        let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(Error::runtime(
                format!("opening {}", path.display()),
                "in use by another tidegate process (a second start of this job?)",
            ));
        }
        if !append {
            file.set_len(0).map_err(|e| Error::io(ctx("truncating"), e))?;
        }
        if append {
            drop_torn_line(&mut file).map_err(|e| Error::io(ctx("repairing the end of"), e))?;
            file.seek(SeekFrom::End(0))
                .map_err(|e| Error::io(ctx("seeking in"), e))?;
        }
        Ok(FileSink {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            regular: true,
            end_marker,
            headers: HeaderRules::default(),
        })
    }
}

/// `path` leads (a link followed: /dev/stdout is the process's standard output) to a FIFO or a
/// character device (`/dev/null`, a terminal), written as a stream. A block device is not one:
/// it is refused as before, when it cannot be truncated.
fn is_stream(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device())
}

/// Truncate a file that does not end with a newline back to its last newline.
fn drop_torn_line(file: &mut File) -> std::io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    // walk back in chunks to the last newline
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            let keep = start + i as u64 + 1;
            warn!(
                dropped_bytes = len - keep,
                "dropping a torn last line left by an interrupted run"
            );
            file.set_len(keep)?;
            return Ok(());
        }
        end = start;
    }
    warn!(dropped_bytes = len, "dropping a torn line left by an interrupted run");
    file.set_len(0)
}

impl FileSink {
    fn flush_and_sync(&mut self) -> Result<u64> {
        let ctx = |what: &str| format!("{what} {}", self.path.display());
        self.out.flush().map_err(|e| Error::io(ctx("flushing"), e))?;
        if !self.regular {
            return Ok(0);
        }
        let file = self.out.get_ref();
        file.sync_data().map_err(|e| Error::io(ctx("fsync of"), e))?;
        Ok(file
            .metadata()
            .map_err(|e| Error::io(ctx("reading the length of"), e))?
            .len())
    }
}

impl FileSink {
    /// Apply `rules` to each record's headers before it is written.
    pub fn with_headers(mut self, rules: HeaderRules) -> Self {
        self.headers = rules;
        self
    }
}

/// `records` with `rules` applied to their headers.
fn ruled(rules: &HeaderRules, mut records: Vec<Record>) -> Vec<Record> {
    if !rules.is_empty() {
        for r in &mut records {
            r.headers = rules.apply(&r.headers);
        }
    }
    records
}

impl Sink<Record> for FileSink {
    fn write(&mut self, records: Vec<Record>) -> Result<()> {
        let records = ruled(&self.headers, records);
        for r in &records {
            write_line(&mut self.out, r).map_err(|e| Error::io(format!("writing {}", self.path.display()), e))?;
        }
        Ok(())
    }

    /// The file it writes: a state file is resumed only into the same file.
    fn fingerprint(&self) -> Option<SinkState> {
        // `./out.jsonl` and `out.jsonl` are one file
        let path: PathBuf = self
            .path
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect();
        let mut fingerprint = serde_json::json!({ "type": "file", "path": path.display().to_string() });
        if !self.headers.is_empty() {
            fingerprint["headers"] = self.headers.to_json();
        }
        Some(fingerprint)
    }

    /// Flush and fsync; the checkpoint records the file's length (a stream's: nothing).
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        let length = self.flush_and_sync()?;
        Ok(self.regular.then(|| serde_json::json!({ "length": length })))
    }

    /// Cut the file back to the length the checkpoint recorded: whatever was written after it is
    /// written again by the resumed job, so every record is in the file once.
    fn recover(&mut self, last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        if !self.regular {
            // a stream cannot be cut back: what followed the last checkpoint is written again
            return Ok(true);
        }
        let Some(length) = last.and_then(|(_, state)| state?.get("length")?.as_u64()) else {
            // a fresh file, or a state file from before lengths were recorded (a torn last line
            // was dropped when the file was opened)
            return Ok(true);
        };
        let ctx = |what: &str| format!("{what} {}", self.path.display());
        self.out.flush().map_err(|e| Error::io(ctx("flushing"), e))?;
        let file = self.out.get_mut();
        let actual = file
            .metadata()
            .map_err(|e| Error::io(ctx("reading the length of"), e))?
            .len();
        if actual < length {
            return Err(Error::runtime(
                format!("resuming {}", self.path.display()),
                format!(
                    "the file has {actual} bytes but the last checkpoint wrote {length}: it was changed \
                     outside tidegate (start over with --reset-state)"
                ),
            ));
        }
        if actual > length {
            warn!(
                path = %self.path.display(),
                dropped_bytes = actual - length,
                "cutting the output back to the last checkpoint; the records after it are written again"
            );
            file.set_len(length).map_err(|e| Error::io(ctx("truncating"), e))?;
            file.sync_all().map_err(|e| Error::io(ctx("fsync of"), e))?;
        }
        file.seek(SeekFrom::Start(length))
            .map_err(|e| Error::io(ctx("seeking in"), e))?;
        Ok(true)
    }

    fn end_of_input(&mut self) -> Result<()> {
        if let Some(marker) = self.end_marker.take() {
            self.write(vec![marker])?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        self.flush_and_sync().map(|_| ())
    }
}

/// Writes JSON lines to standard output.
pub struct StdoutSink {
    out: BufWriter<std::io::Stdout>,
    end_marker: Option<Record>,
    /// `sink.headers`, applied before each line is written.
    pub headers: HeaderRules,
}

impl StdoutSink {
    pub fn new(end_marker: Option<Record>) -> Self {
        StdoutSink {
            out: BufWriter::with_capacity(1 << 16, std::io::stdout()),
            end_marker,
            headers: HeaderRules::default(),
        }
    }
}

impl Sink<Record> for StdoutSink {
    fn write(&mut self, records: Vec<Record>) -> Result<()> {
        let records = ruled(&self.headers, records);
        for r in &records {
            write_line(&mut self.out, r).map_err(|e| Error::io("writing to stdout", e))?;
        }
        // out with each batch, not at checkpoints: a reader sees records as they come (a slow
        // generator's too), and one that went away (`| head -3`) is noticed at the next batch
        self.out.flush().map_err(|e| Error::io("writing to stdout", e))
    }

    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        self.out.flush().map_err(|e| Error::io("flushing stdout", e))?;
        Ok(None)
    }

    fn fingerprint(&self) -> Option<SinkState> {
        Some(serde_json::json!({ "type": "stdout" }))
    }

    fn end_of_input(&mut self) -> Result<()> {
        if let Some(marker) = self.end_marker.take() {
            self.write(vec![marker])?;
        }
        Ok(())
    }
}

/// Discards records (benchmarks).
pub struct NullSink;

impl Sink<Record> for NullSink {
    fn write(&mut self, _records: Vec<Record>) -> Result<()> {
        Ok(())
    }
    fn fingerprint(&self) -> Option<SinkState> {
        Some(serde_json::json!({ "type": "null" }))
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        Ok(None)
    }
}

/// `[sink]` with `type = "file"`: JSON lines, fsynced at each checkpoint.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFileSink {
    /// The file. A fresh job starts it anew; a resumed job appends.
    pub path: String,
    /// Header rules, as for the Kafka sink: `drop`, then `rename`, then `set`.
    pub headers: Option<RawHeaders>,
}

/// The validated file sink.
#[derive(Debug, Clone)]
pub struct FileSinkConfig {
    pub path: PathBuf,
    pub headers: HeaderRules,
}

impl SinkConnector for FileSinkConfig {
    const TYPE: &'static str = "file";
    type Raw = RawFileSink;
    const PATH_KEYS: &'static [&'static str] = &["path"];

    fn validate(raw: RawFileSink) -> Result<Self> {
        if raw.path.trim().is_empty() {
            return Err(Error::config("sink.path", "must not be empty"));
        }
        Ok(FileSinkConfig {
            path: PathBuf::from(raw.path),
            headers: HeaderRules::validate(raw.headers.unwrap_or_default())?,
        })
    }

    fn describe(&self) -> Vec<String> {
        let mut lines = vec![if is_stream(&self.path) {
            format!(
                "sink file {}: JSON lines as a stream (not a regular file: on a restart, what followed the last checkpoint is written again)",
                self.path.display()
            )
        } else {
            format!(
                "sink file {}: JSON lines, cut back to the last checkpoint on a restart",
                self.path.display()
            )
        }];
        if !self.headers.is_empty() {
            lines.push(format!(
                "  headers: {} (drop, then rename, then set)",
                self.headers.to_json()
            ));
        }
        lines
    }

    fn prints_values(&self) -> bool {
        true
    }

    fn build(&self, ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>> {
        let sink = FileSink::open(&self.path, ctx.resuming, ctx.end_marker)?.with_headers(self.headers.clone());
        Ok(Box::new(sink))
    }
}

/// `[sink]` with `type = "stdout"`: JSON lines on standard output, written out with each batch.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStdoutSink {
    /// Header rules, as for the Kafka sink: `drop`, then `rename`, then `set`.
    pub headers: Option<RawHeaders>,
}

/// `[sink]` with `type = "null"`: discards every record (benchmarks).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNullSink {}

/// The stdout sink: JSON lines on standard output.
#[derive(Debug, Clone)]
pub struct StdoutSinkConfig {
    pub headers: HeaderRules,
}

impl SinkConnector for StdoutSinkConfig {
    const TYPE: &'static str = "stdout";
    type Raw = RawStdoutSink;

    fn validate(raw: RawStdoutSink) -> Result<Self> {
        Ok(StdoutSinkConfig {
            headers: HeaderRules::validate(raw.headers.unwrap_or_default())?,
        })
    }

    fn describe(&self) -> Vec<String> {
        vec!["sink stdout: JSON lines".into()]
    }

    fn prints_values(&self) -> bool {
        true
    }

    fn build(&self, ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>> {
        let mut sink = StdoutSink::new(ctx.end_marker);
        sink.headers = self.headers.clone();
        Ok(Box::new(sink))
    }
}

/// The null sink: discards (benchmarks).
#[derive(Debug, Clone)]
pub struct NullSinkConfig;

impl SinkConnector for NullSinkConfig {
    const TYPE: &'static str = "null";
    type Raw = RawNullSink;

    fn validate(_raw: RawNullSink) -> Result<Self> {
        Ok(NullSinkConfig)
    }

    fn describe(&self) -> Vec<String> {
        vec!["sink null: records are discarded".into()]
    }

    fn build(&self, _ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>> {
        Ok(Box::new(NullSink))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(n: i64) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                offset: Some(i),
                ..Record::default()
            })
            .collect()
    }

    /// `--out /dev/null` (timing a replay, discarding its output): written, committed and closed
    /// as a stream, never truncated or fsynced (both fail on a device). Resumed too.
    #[test]
    fn dev_null_takes_the_records_as_a_stream() {
        for append in [false, true] {
            let mut sink = FileSink::open(Path::new("/dev/null"), append, None).unwrap();
            sink.write(records(3)).unwrap();
            assert_eq!(
                sink.prepare_commit(1).unwrap(),
                None,
                "a stream has no length to cut back to"
            );
            assert!(sink.recover(Some((1, None))).unwrap());
            sink.close().unwrap();
        }
    }

    /// A FIFO (`--out >(gzip > out.gz)`, a named pipe): the reader gets every line.
    #[test]
    fn a_fifo_gets_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipe");
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let reader_path = path.clone();
        let reader = std::thread::spawn(move || std::fs::read_to_string(reader_path).unwrap());
        let mut sink = FileSink::open(&path, false, None).unwrap();
        sink.write(records(5)).unwrap();
        sink.prepare_commit(1).unwrap();
        sink.close().unwrap();
        drop(sink);
        let text = reader.join().unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.lines().last().unwrap().contains("\"offset\":4"), "{text}");
    }

    #[test]
    fn appending_drops_a_torn_last_line_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"{\"a\":1}\n{\"a\":2}\n{\"a\":").unwrap();
        let mut sink = FileSink::open(&path, true, None).unwrap();
        sink.write(vec![Record {
            offset: Some(3),
            ..Record::default()
        }])
        .unwrap();
        sink.prepare_commit(1).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[..2], ["{\"a\":1}", "{\"a\":2}"]);
        assert!(lines[2].contains("\"offset\":3"));
    }

    /// Two processes writing one file (a second start on the same host, with a state store that
    /// is not a locked local file) would interleave their lines: the second is refused, before it
    /// truncates anything.
    #[test]
    fn a_file_another_sink_writes_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut first = FileSink::open(&path, false, None).unwrap();
        first
            .write(vec![Record {
                offset: Some(1),
                ..Record::default()
            }])
            .unwrap();
        first.prepare_commit(1).unwrap();
        let written = std::fs::read(&path).unwrap();
        for append in [false, true] {
            let Err(e) = FileSink::open(&path, append, None) else {
                panic!("a second sink opened {} (append {append})", path.display());
            };
            assert!(e.to_string().contains("in use by another tidegate process"), "{e}");
            assert!(e.to_string().contains("out.jsonl"), "{e}");
            assert_eq!(std::fs::read(&path).unwrap(), written);
        }
        drop(first);
        FileSink::open(&path, true, None).expect("free once the first sink is gone");
    }

    #[test]
    fn a_fresh_job_starts_the_file_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/out.jsonl");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"old\n").unwrap();
        let mut sink = FileSink::open(&path, false, None).unwrap();
        sink.prepare_commit(1).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"");
    }

    #[test]
    fn header_rules_apply_to_the_envelope() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let raw: RawFileSink = serde_json::from_value(serde_json::json!({
            "path": path.display().to_string(),
            "headers": { "drop": ["x-*"], "rename": { "a": "b" }, "set": { "by": "tidegate" } },
        }))
        .unwrap();
        let config = FileSinkConfig::validate(raw).unwrap();
        let header = |k: &str, v: &str| crate::record::Header {
            key: k.into(),
            value: Some(v.as_bytes().to_vec()),
        };
        let mut sink = FileSink::open(&path, false, None)
            .unwrap()
            .with_headers(config.headers.clone());
        sink.write(vec![Record {
            headers: vec![header("x-hop", "1"), header("a", "kept"), header("by", "old")],
            ..Record::default()
        }])
        .unwrap();
        sink.prepare_commit(1).unwrap();
        let line: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        let text = line["headers"].to_string();
        assert!(!text.contains("x-hop") && !text.contains("old"), "{text}");
        assert!(
            text.contains("\"b\"") && text.contains("kept") && text.contains("tidegate"),
            "{text}"
        );
        assert!(sink.fingerprint().unwrap()["headers"]["set"]["by"] == "tidegate");
    }
}
