//! Subcommands of the `nicpolicy` binary that live in their own files.

pub mod audit;
pub mod controller;
pub mod serve;
