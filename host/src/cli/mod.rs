//! The `nicpolicy` commands, one module each, and what they share: the output format and the
//! error type that carries an exit code.

pub mod allocator;
pub mod audit;
pub mod bench;
pub mod common;
pub mod controller;
pub mod copy;
pub mod eval;
pub mod export;
pub mod inspect;
pub mod inventory;
pub mod log_writer;
pub mod machine;
pub mod new;
pub mod out;
pub mod playground;
pub mod policy_args;
pub mod pull;
pub mod push;
pub mod registry_args;
pub mod render;
pub mod render_plan;
pub mod review;
pub mod serve;
pub mod sign;
pub mod test;
pub mod verify;

use clap::ValueEnum;

use crate::exit;

/// Output format of `eval` and `inspect`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable, like kubectl.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// An error with the exit code it ends the process with.
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// What went wrong.
    pub error: anyhow::Error,
}

/// A failure caused by the command line or the input (exit code 2).
pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: exit::USAGE,
        error: error.into(),
    }
}

/// A failure at run time, not caused by the input (exit code 3).
pub fn runtime(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: exit::RUNTIME,
        error: error.into(),
    }
}
