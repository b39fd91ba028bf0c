//! The data generator source (FLIP-238 `DataGeneratorSource`): indices `0..count` cut into
//! number-sequence splits, each generated in order on a fetcher thread by a
//! [`GeneratorFunction`], at one rate shared by every reader that has work.

pub mod compile;
pub mod config;
pub mod generator;
pub mod partition;
pub mod rate;
pub mod source;
pub mod split_reader;
pub mod template;
pub mod text;
