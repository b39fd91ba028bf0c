//! The process's logging: `tracing` on standard error, as text or JSON, written so that a reader
//! that went away never ends the job.

use std::io::Write;

use crate::config::LogFormat;

/// Standard error for the logs and the daemon's own lines, ignoring write errors: a reader that
/// went away (`tidegate run … 2>&1 | head -1`) must not end the job. (`eprintln!` panics on a
/// closed pipe, and tracing-subscriber reports a failed write with `eprintln!`.)
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // the line is lost where nobody reads it; the job goes on
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// `eprintln!` that never panics: writes through [`QuietStderr`].
#[macro_export]
#[doc(hidden)]
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = std::io::Write::write_fmt(&mut $crate::assembly::logging::QuietStderr, format_args!("{}\n", format_args!($($arg)*)));
    }};
}

/// Set up `tracing`: level from `RUST_LOG` (default `info`), text or JSON on stderr (write
/// errors ignored, see [`QuietStderr`]).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| QuietStderr)
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
