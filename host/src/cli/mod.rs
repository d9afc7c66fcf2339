//! Subcommands of the `nicpolicy` binary that live in their own files.

pub mod playground;
pub mod serve;
