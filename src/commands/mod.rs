//! The subcommands, one file each: each parses its own flags (clap) and calls the job assembly
//! below it ([`crate::assembly`]); `crate::cli` puts them together.

pub mod oneliner;
pub mod plan;
pub mod replay;
pub mod run;
pub mod seed;
pub mod state;
mod state_view;
pub mod validate;
