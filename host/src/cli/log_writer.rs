//! The text log's writer: request data (label values, names, a serde error quoting them) must
//! not be able to start a line of its own, so a request cannot print a forged `level=ERROR`
//! line into `--log-format text`. The JSON format escapes every string already.
//!
//! tracing-subscriber's fmt layer formats an event into one buffer and hands it to the writer
//! with a single `write_all`, so the writer sees whole events: every control character in one
//! but its final newline is written escaped (`\n`, `\r`, `\x1b`, `\u{2028}`).

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Makes [`Escaping`] writers around standard error.
#[derive(Clone, Copy, Debug)]
pub struct EscapingStderr {
    /// Colour codes are the formatter's own (on a terminal): keep ESC bytes then.
    pub ansi: bool,
}

impl<'a> MakeWriter<'a> for EscapingStderr {
    type Writer = Escaping<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Escaping {
            inner: io::stderr(),
            ansi: self.ansi,
        }
    }
}

/// Writes whole log events with their control characters escaped (see the
/// [module documentation](self)).
#[derive(Debug)]
pub struct Escaping<W> {
    inner: W,
    ansi: bool,
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (body, newline) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, true),
            None => (buf, false),
        };
        let text = String::from_utf8_lossy(body);
        let mut out = String::with_capacity(text.len() + 1);
        for c in text.chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push('\t'),
                '\u{1b}' if self.ansi => out.push(c),
                // C0 and C1 controls, and the Unicode line and paragraph separators some log
                // viewers break lines at.
                c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                    out.push_str(&c.escape_unicode().to_string());
                }
                c => out.push(c),
            }
        }
        if newline {
            out.push('\n');
        }
        self.inner.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(line: &str, ansi: bool) -> String {
        let mut writer = Escaping {
            inner: Vec::new(),
            ansi,
        };
        writer.write_all(line.as_bytes()).unwrap();
        String::from_utf8(writer.inner).unwrap()
    }

    #[test]
    fn a_label_value_cannot_start_a_line() {
        let forged =
            "INFO denied machine=\"prod-eu1/x\nERROR nicpolicy: policy store corrupted\"\n";
        let out = escaped(forged, false);
        assert_eq!(out.matches('\n').count(), 1, "{out}");
        assert!(out.ends_with('\n'));
        assert!(out.contains("x\\nERROR"), "{out}");
        assert_eq!(
            escaped("a\rb\u{1b}[31mc\u{2028}d\u{85}\n", false),
            "a\\rb\\u{1b}[31mc\\u{2028}d\\u{85}\n"
        );
    }

    #[test]
    fn colour_codes_stay_on_a_terminal() {
        assert_eq!(
            escaped("\u{1b}[32mINFO\u{1b}[0m ok\n", true),
            "\u{1b}[32mINFO\u{1b}[0m ok\n"
        );
        assert_eq!(escaped("tab\tstays", false), "tab\tstays");
    }
}
