//! The runtime's error type, shared by the connectors built on it: every variant carries the
//! context a user needs to act on it, and says whether it is a config problem (exit 2), an
//! unusable state file (exit 3) or a runtime failure (exit 1). A connector's client errors
//! (Kafka, a schema registry, …) travel as [`Error::Client`], so this crate depends on none of them.

use std::path::PathBuf;

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a job, with its context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config value is missing, malformed or inconsistent. `key` is the dotted path.
    #[error("invalid config: {key}: {message}")]
    Config {
        /// The dotted path of the key (`source.topics`).
        key: String,
        /// What is wrong with it.
        message: String,
    },

    /// The job's state (a state file, or the Kafka store's records) cannot be used; it is left
    /// untouched.
    #[error("{}: {source}", state_location(path))]
    State {
        /// The state file.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: StateError,
    },

    /// A call of a connector's client library failed (a Kafka client, an HTTP client).
    #[error("{context}")]
    Client {
        /// What was being done (`kafka: fetching metadata from 127.0.0.1:9092`).
        context: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A file or socket operation failed.
    #[error("{context}")]
    Io {
        /// What was being done, naming the file or address.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A record could not be decoded and the decode-error policy is `fail`.
    #[error("cannot decode record at {topic}:{partition}@{offset}: {message}")]
    Decode {
        /// The record's topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// Why it cannot be decoded.
        message: String,
    },

    /// A source, sink or generator failed at run time.
    #[error("{context}: {message}")]
    Runtime {
        /// What was being done.
        context: String,
        /// What went wrong.
        message: String,
    },
}

/// Why a state file was rejected. Each case is its own variant so tests and users can tell
/// them apart; none of them is ever "fixed" by overwriting the file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file exists but holds nothing.
    #[error("the file is empty")]
    Empty,
    /// The file does not start with the state file's magic line (what it starts with instead).
    #[error("not a tidegate state file ({0})")]
    NotAStateFile(String),
    /// The file ends before its header says it should.
    #[error("truncated: {0}")]
    Truncated(String),
    /// A format version this build cannot read.
    #[error("unknown state format version {found} (this build reads version {supported})")]
    UnknownVersion {
        /// The file's version.
        found: u64,
        /// The version this build reads.
        supported: u64,
    },
    /// The payload's CRC32 differs from the header's: the file was damaged.
    #[error("checksum mismatch: header says {expected:08x}, payload hashes to {actual:08x}")]
    ChecksumMismatch {
        /// The checksum in the header.
        expected: u32,
        /// The checksum of the payload as read.
        actual: u32,
    },
    /// The payload is not a checkpoint of this job's source (the deserializer's message).
    #[error("payload is not valid state: {0}")]
    Malformed(String),
    /// Written by another kind of source ([`crate::Source::kind`]).
    #[error("written by a {found} source, but this job's source is {expected}")]
    SourceMismatch {
        /// This job's source kind.
        expected: String,
        /// The file's.
        found: String,
    },
    /// Written by another job (its `job.name`).
    #[error("written by job {found}, not by this job ({expected}): point --state at this job's file, or start over with --reset-state")]
    JobMismatch {
        /// This job's name.
        expected: String,
        /// The file's.
        found: String,
    },
    /// The file exists but cannot be read.
    #[error("cannot read: {0}")]
    Unreadable(#[source] std::io::Error),
    /// The state file's directory does not take new files (checked at start, not at the first
    /// checkpoint).
    #[error("directory is not writable: {0}")]
    NotWritable(#[source] std::io::Error),
    /// A path component that should be a directory is a file.
    #[error("{} is a file, not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Another process holds the file's lock.
    #[error("in use by another tidegate process (lock held on {0})")]
    Locked(PathBuf),
    /// The state is gone while something else says the job ran (what says so).
    #[error("missing: {0}")]
    Vanished(String),
}

/// Where the state is, in words: "state file <path>", or the Kafka store's location as given
/// ("kafka topic … at …, key …"), which is no file.
fn state_location(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    if text.starts_with("kafka topic ") {
        format!("checkpoint store: {text}")
    } else {
        format!("state file {text}")
    }
}

impl Error {
    /// A config error naming `key`.
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    /// A runtime error with what was being done.
    pub fn runtime(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Error::Runtime {
            context: context.into(),
            message: message.to_string(),
        }
    }

    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A client library's error with what was being done.
    pub fn client(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Client {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// A write to a pipe whose reader went away (`| head`).
    pub fn is_broken_pipe(&self) -> bool {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return true;
                }
            }
            source = e.source();
        }
        false
    }

    /// The error and its causes in one line, each cause once (`tidegate: error: …`, `/status`).
    pub fn chain_text(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            let text = s.to_string();
            if !message.contains(&text) {
                message.push_str(&format!(": {text}"));
            }
            source = s.source();
        }
        message
    }

    /// The process exit code this error maps to: 2 for config, 3 for state, 1 for the rest.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config { .. } => 2,
            Error::State { .. } => 3,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_recognised_through_the_context() {
        let e = Error::io(
            "writing to stdout",
            std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        );
        assert!(e.is_broken_pipe());
        assert!(!Error::runtime("x", "y").is_broken_pipe());
    }
}
