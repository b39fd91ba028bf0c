//! Running the `tidegate` binary from tests: configs in a temp dir, output captured, waits with
//! timeouts, signals.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A job directory: config, state and output live here.
pub struct JobDir {
    pub dir: tempfile::TempDir,
}

impl JobDir {
    pub fn new() -> Self {
        JobDir {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Write `job.toml` (with `{dir}` replaced by this directory) and return its path.
    pub fn config(&self, text: &str) -> PathBuf {
        let path = self.path("job.toml");
        std::fs::write(&path, text.replace("{dir}", &self.dir.path().display().to_string())).expect("write config");
        path
    }
}

/// A replay of `topic` as strings at parallelism 2 into `sink`, checkpointed to `{dir}/job.state`
/// every `interval`; `extra_source` adds lines to `[source]`.
pub fn replay_config(
    kafka: &crate::common::TestKafka,
    topic: &str,
    sink: &str,
    extra_source: &str,
    interval: &str,
) -> String {
    format!(
        r#"
[job]
parallelism = 2

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
format = "string"
{extra_source}

{sink}

[checkpoint]
path = "{{dir}}/job.state"
interval = "{interval}"
"#,
        kafka.bootstrap
    )
}

/// A file sink writing `out.jsonl` in the job directory.
pub const FILE_SINK: &str = "[sink]\ntype = \"file\"\npath = \"{dir}/out.jsonl\"";

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_tidegate")
}

/// A running daemon, its stderr captured to a file.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(config: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_with_env(config, extra, &[])
    }

    /// [`Daemon::start`] with `env` set in the daemon's environment.
    pub fn start_with_env(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        // Logs go under the target directory, never beside the config: some tests run the examples in config/.
        let logs = Path::new(env!("CARGO_TARGET_TMPDIR")).join("daemon-logs");
        std::fs::create_dir_all(&logs).expect("log directory");
        let log = logs.join(format!(
            "daemon-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let stderr = std::fs::File::create(&log).expect("log file");
        let child = Command::new(binary())
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--no-progress")
            .args(extra)
            // TIDEGATE_TEST_DAEMON_LOG: a more detailed filter while chasing a failure
            .env(
                "RUST_LOG",
                std::env::var("TIDEGATE_TEST_DAEMON_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start tidegate");
        Daemon { child, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for the process to end (panics after `timeout`, killing it).
    pub fn wait(mut self, timeout: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, self.log_text());
            }
            if Instant::now() > deadline {
                self.fail(&format!("tidegate did not end within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for `condition` while the daemon runs: panics with its log if it ends first, and with
    /// its log and threads if `timeout` passes (a bare `wait_until` would say only "timed out").
    pub fn wait_until(&self, what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !condition() {
            if let Some(how) = self.ended() {
                // what the daemon did last may be what the test waits for
                if condition() {
                    return;
                }
                panic!(
                    "tidegate ended ({how}) while the test waited for {what}; its log:\n{}",
                    self.log_text()
                );
            }
            if Instant::now() > deadline {
                self.fail(&format!("timed out after {timeout:?} waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `value`, which the running daemon should have given (its `/status`, say): if it is
    /// missing, panics with the daemon's log, and with how it ended if it has.
    pub fn must<T>(&self, what: &str, value: Option<T>) -> T {
        if let Some(value) = value {
            return value;
        }
        match self.ended() {
            Some(how) => panic!("no {what}: tidegate ended ({how}); its log:\n{}", self.log_text()),
            None => self.fail(&format!("no {what} from the running daemon")),
        }
    }

    /// How a daemon that has ended ended, read without reaping it (a child that ended is a zombie
    /// until waited for, so `child` still owns its status): /proc/PID/stat's state `Z`, and its
    /// last field, the wait status as waitpid(2) reports it.
    fn ended(&self) -> Option<String> {
        // only `wait` reaps the child, and it takes the daemon: a missing entry is no process
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())) else {
            return Some("no /proc entry: reaped?".into());
        };
        // the command name, in parentheses, may hold spaces: the fields follow its last `)`
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if fields.first() != Some(&"Z") {
            return None;
        }
        Some(match fields.last().and_then(|s| s.parse::<i32>().ok()) {
            Some(status) if status & 0x7f == 0 => format!("exit code {}", status >> 8),
            Some(status) => format!("signal {}", status & 0x7f),
            None => "status unknown".into(),
        })
    }

    /// Panic with `why`, the end of the log and the threads' stacks, killing the daemon.
    fn fail(&self, why: &str) -> ! {
        let stacks = thread_stacks(self.child.id());
        self.signal(libc::SIGKILL);
        // a hung job's log is mostly its checkpoints: counted, not printed
        let log = self.log_text();
        let checkpoints = log.lines().filter(|l| l.contains("checkpoint complete")).count();
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("checkpoint complete")).collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        panic!(
            "{why}; tidegate's log, less {checkpoints} checkpoint lines (the last 80 lines):\n{tail}\n\
             its threads then:\n{stacks}\n(end of its threads)"
        );
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    pub fn kill9(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log_text()
    }
}

/// Fail unless the daemon exited 0: its log first, then, last (where an output cut to its tail
/// still shows it), the exit code and the lines that say why (`ERROR`, `tidegate: error:`).
pub fn assert_exit_0(status: ExitStatus, log: &str) {
    if status.code() == Some(0) {
        return;
    }
    let why: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" ERROR ") || l.starts_with("tidegate: error:"))
        .collect();
    panic!(
        "{log}\n--- tidegate exited {:?} (expected 0); why, from its log:\n{}",
        status.code(),
        why.join("\n")
    );
}

/// Run to completion and return (exit code, stderr).
pub fn run(config: &Path, extra: &[&str], timeout: Duration) -> (i32, String) {
    let (status, log) = Daemon::start(config, extra).wait(timeout);
    (status.code().unwrap_or(-1), log)
}

/// Lines of a JSON-lines file, parsed.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Count of complete lines of a file.
pub fn line_count(path: &Path) -> usize {
    std::fs::read(path)
        .map(|b| b.iter().filter(|c| **c == b'\n').count())
        .unwrap_or(0)
}

/// An HTTP GET on 127.0.0.1, returning the body.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of an unlabelled-except-job metric in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The records the running daemon's sink has taken, from its metrics endpoint on `port`.
pub fn records_written(port: u16) -> Option<u64> {
    let text = http_get(&format!("127.0.0.1:{port}"), "/metrics")?;
    metric(&text, "tidegate_records_written_total").map(|v| v as u64)
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every thread's stack of a process that hangs, by gdb (the machine's image has it), so that a
/// hang seen once in CI says where it waited; empty when gdb is missing or fails.
pub fn thread_stacks(pid: u32) -> String {
    let out = Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("Thread ") || l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("(gdb: {e})"),
    }
}
