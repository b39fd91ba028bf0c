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
    Config { key: String, message: String },

    /// The state file cannot be used; it is left untouched.
    #[error("state file {}: {source}", path.display())]
    State {
        path: PathBuf,
        #[source]
        source: StateError,
    },

    /// A call of a connector's client library failed (a Kafka client, an HTTP client).
    #[error("{context}")]
    Client {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A file or socket operation failed.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// A record could not be decoded and the decode-error policy is `fail`.
    #[error("cannot decode record at {topic}:{partition}@{offset}: {message}")]
    Decode {
        topic: String,
        partition: i32,
        offset: i64,
        message: String,
    },

    /// A source, sink or generator failed at run time.
    #[error("{context}: {message}")]
    Runtime { context: String, message: String },
}

/// Why a state file was rejected. Each case is its own variant so tests and users can tell
/// them apart; none of them is ever "fixed" by overwriting the file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("the file is empty")]
    Empty,
    #[error("not a tidegate state file ({0})")]
    NotAStateFile(String),
    #[error("truncated: {0}")]
    Truncated(String),
    #[error("unknown state format version {found} (this build reads version {supported})")]
    UnknownVersion { found: u64, supported: u64 },
    #[error("checksum mismatch: header says {expected:08x}, payload hashes to {actual:08x}")]
    ChecksumMismatch { expected: u32, actual: u32 },
    #[error("payload is not valid state: {0}")]
    Malformed(String),
    #[error("written by a {found} source, but this job's source is {expected}")]
    SourceMismatch { expected: String, found: String },
    #[error("written by job {found}, not by this job ({expected}): point --state at this job's file, or start over with --reset-state")]
    JobMismatch { expected: String, found: String },
    #[error("cannot read: {0}")]
    Unreadable(#[source] std::io::Error),
    #[error("directory is not writable: {0}")]
    NotWritable(#[source] std::io::Error),
    #[error("{} is a file, not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("in use by another tidegate process (lock held on {0})")]
    Locked(PathBuf),
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
