//! Reading a file whole, never past a size bound: a manifest, a configuration or a policy
//! module named on the command line or in a configuration may be a pipe, a device or a file
//! that keeps growing, and none of them may take the host's memory.

use std::io::Read;
use std::path::Path;

/// Why a bounded read gave nothing.
#[derive(Debug)]
pub enum BoundedReadError {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// The file holds more than the bound.
    Over {
        /// Its size as far as known: its length when it is a regular file, else one byte over
        /// the bound (nothing past that was read).
        at_least: u64,
    },
}

impl std::fmt::Display for BoundedReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BoundedReadError::Io(err) => write!(f, "{err}"),
            BoundedReadError::Over { at_least } => {
                write!(f, "it holds {at_least} bytes or more, over the limit")
            }
        }
    }
}

impl std::error::Error for BoundedReadError {}

/// The bytes of `path`, when it holds at most `limit` of them; reads at most one byte more.
pub fn read_at_most(path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    let file = std::fs::File::open(path).map_err(BoundedReadError::Io)?;
    let length = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    if let Some(length) = length.filter(|&length| length > limit) {
        return Err(BoundedReadError::Over { at_least: length });
    }
    let mut bytes = Vec::with_capacity(length.unwrap_or(0).min(limit) as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(BoundedReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(BoundedReadError::Over {
            at_least: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_bound_is_refused_without_reading_it_all() {
        let dir = std::env::temp_dir().join(format!("nicpolicy-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ten.bin");
        std::fs::write(&path, [7u8; 10]).unwrap();
        assert_eq!(read_at_most(&path, 10).unwrap(), vec![7u8; 10]);
        assert!(matches!(
            read_at_most(&path, 9),
            Err(BoundedReadError::Over { at_least: 10 })
        ));
        // A device that never ends stops one byte past the bound.
        assert!(matches!(
            read_at_most(Path::new("/dev/zero"), 1 << 20),
            Err(BoundedReadError::Over { at_least }) if at_least == (1 << 20) + 1
        ));
        assert!(matches!(
            read_at_most(&dir.join("absent"), 9),
            Err(BoundedReadError::Io(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
