//! The one JUnit XML writer, for CI systems: `nicpolicy test --junit` ([`crate::cases::junit`])
//! and `nicpolicy audit --junit` build a [`Suites`] and write it here.

use std::fmt::Write as _;
use std::time::Duration;

/// A report: `<testsuites>` with its suites.
#[derive(Debug)]
pub struct Suites {
    /// `name` of `<testsuites>`, like `nicpolicy test`.
    pub name: String,
    /// Wall-clock time of the whole run.
    pub time: Duration,
    /// One `<testsuite>` each.
    pub suites: Vec<Suite>,
}

/// One `<testsuite>`.
#[derive(Debug)]
pub struct Suite {
    /// Its name.
    pub name: String,
    /// Its time, when known.
    pub time: Option<Duration>,
    /// One `<testcase>` each.
    pub cases: Vec<TestCase>,
}

/// One `<testcase>`.
#[derive(Debug)]
pub struct TestCase {
    /// `classname` (a directory, a cluster).
    pub classname: String,
    /// `name`.
    pub name: String,
    /// How long it took.
    pub time: Duration,
    /// How it ended.
    pub result: CaseResult,
}

/// How a test case ended.
#[derive(Debug)]
pub enum CaseResult {
    /// Passed: an empty `<testcase/>`.
    Passed,
    /// `<failure message="...">body</failure>`.
    Failure {
        /// The attribute: one line.
        message: String,
        /// The text.
        body: String,
    },
    /// `<error message="..."/>`: it could not be judged.
    Error {
        /// Why.
        message: String,
    },
    /// `<skipped message="..."/>`.
    Skipped {
        /// Why.
        message: String,
    },
}

impl Suite {
    fn count(&self, which: fn(&CaseResult) -> bool) -> usize {
        self.cases.iter().filter(|c| which(&c.result)).count()
    }
}

fn is_failure(result: &CaseResult) -> bool {
    matches!(result, CaseResult::Failure { .. })
}

fn is_error(result: &CaseResult) -> bool {
    matches!(result, CaseResult::Error { .. })
}

fn is_skipped(result: &CaseResult) -> bool {
    matches!(result, CaseResult::Skipped { .. })
}

impl Suites {
    /// The XML document.
    pub fn write(&self) -> String {
        let total = |which: fn(&CaseResult) -> bool| -> usize {
            self.suites.iter().map(|s| s.count(which)).sum()
        };
        let tests: usize = self.suites.iter().map(|s| s.cases.len()).sum();
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            xml,
            "<testsuites name=\"{}\" tests=\"{tests}\" failures=\"{}\" errors=\"{}\" time=\"{:.3}\">",
            xml_escape(&self.name, true),
            total(is_failure),
            total(is_error),
            self.time.as_secs_f64(),
        );
        for suite in &self.suites {
            let _ = write!(
                xml,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\"",
                xml_escape(&suite.name, true),
                suite.cases.len(),
                suite.count(is_failure),
                suite.count(is_error),
                suite.count(is_skipped),
            );
            if let Some(time) = suite.time {
                let _ = write!(xml, " time=\"{:.3}\"", time.as_secs_f64());
            }
            xml.push_str(">\n");
            for case in &suite.cases {
                let _ = write!(
                    xml,
                    "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                    xml_escape(&case.classname, true),
                    xml_escape(&case.name, true),
                    case.time.as_secs_f64(),
                );
                let _ = match &case.result {
                    CaseResult::Passed => writeln!(xml, "/>"),
                    CaseResult::Failure { message, body } => writeln!(
                        xml,
                        ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                        xml_escape(message, true),
                        xml_escape(body, false),
                    ),
                    CaseResult::Error { message } => writeln!(
                        xml,
                        ">\n      <error message=\"{}\"/>\n    </testcase>",
                        xml_escape(message, true),
                    ),
                    CaseResult::Skipped { message } => writeln!(
                        xml,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        xml_escape(message, true),
                    ),
                };
            }
            xml.push_str("  </testsuite>\n");
        }
        xml.push_str("</testsuites>\n");
        xml
    }
}

/// `text` made safe for XML 1.0. Markup characters become entities. In attribute values, line
/// breaks and tabs become character references, because a parser would turn the raw characters
/// into spaces; carriage returns always do, because parsers fold them into line feeds. Characters
/// XML 1.0 cannot hold even as references (other control characters, U+FFFE, U+FFFF) are
/// written as the text `\u0001`.
pub fn xml_escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' | '\t' => out.push(c),
            c if u32::from(c) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_quotes_become_entities() {
        assert_eq!(
            xml_escape(r#"<dmz & "edge" 'eu1'>"#, true),
            "&lt;dmz &amp; &quot;edge&quot; &apos;eu1&apos;&gt;"
        );
    }

    #[test]
    fn line_breaks_survive_in_attributes_and_text() {
        assert_eq!(xml_escape("a\nb\tc\rd", true), "a&#10;b&#9;c&#13;d");
        assert_eq!(xml_escape("a\nb\tc\rd", false), "a\nb\tc&#13;d");
    }

    #[test]
    fn characters_xml_cannot_hold_are_spelt_out() {
        assert_eq!(xml_escape("allowed\u{1}", false), "allowed\\u0001");
        assert_eq!(xml_escape("\u{fffe}", true), "\\ufffe");
        // Ordinary non-ASCII text passes through.
        assert_eq!(xml_escape("zone-ä", true), "zone-ä");
    }

    #[test]
    fn counts_add_up_per_suite_and_in_all() {
        let case = |result| TestCase {
            classname: "prod-eu1".into(),
            name: "VCDMachine prod-eu1/md-0".into(),
            time: Duration::from_millis(1),
            result,
        };
        let xml = Suites {
            name: "nicpolicy audit".into(),
            time: Duration::from_millis(7),
            suites: vec![Suite {
                name: "Cluster prod-eu1/prod-eu1".into(),
                time: None,
                cases: vec![
                    case(CaseResult::Passed),
                    case(CaseResult::Failure {
                        message: "m".into(),
                        body: "b".into(),
                    }),
                    case(CaseResult::Error {
                        message: "e".into(),
                    }),
                    case(CaseResult::Skipped {
                        message: "s".into(),
                    }),
                ],
            }],
        }
        .write();
        assert!(xml.contains(r#"<testsuites name="nicpolicy audit" tests="4" failures="1" errors="1" time="0.007">"#), "{xml}");
        assert!(xml.contains(r#"<testsuite name="Cluster prod-eu1/prod-eu1" tests="4" failures="1" errors="1" skipped="1">"#), "{xml}");
        assert!(xml.contains(r#"<failure message="m">b</failure>"#), "{xml}");
        assert!(xml.contains(r#"<skipped message="s"/>"#), "{xml}");
    }
}
