//! Standard output of the commands. `print!` panics when stdout is a pipe its reader has closed
//! (`nicpolicy audit gitops/ | head`); writing through here drops the rest of the output instead
//! and lets the command finish, so its exit code still says allowed, denied or failed.

use std::io::{self, Write};

use super::{runtime, Failure};

/// Writes `text` to stdout as it is (no newline added).
pub fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() != io::ErrorKind::BrokenPipe => Err(runtime(
            anyhow::Error::new(err).context("cannot write to standard output"),
        )),
        _ => Ok(()),
    }
}

/// Writes `line` and a newline to stdout.
pub fn println(line: &str) -> Result<(), Failure> {
    print(&format!("{line}\n"))
}
