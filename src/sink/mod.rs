//! The sinks (`kafka`, `file`, `stdout`, `null`), each with its config, and the dead-letter wrapper.

pub mod dead_letter;
pub mod envelope;
pub mod file;
pub mod kafka;
