//! The periodic source (the seed's Flink `PeriodicSource`): a supplier of events read on the
//! coordinator every discovery interval, events assigned round-robin to readers, and each reader
//! firing its events on their wall-time or fixed-rate schedules, on a fetcher thread.

pub mod config;
pub mod emitter;
pub mod enumerator;
pub mod schedule;
pub mod settings;
pub mod source;
pub mod split;
pub mod split_reader;
pub mod supplier;
#[cfg(test)]
mod tests;
