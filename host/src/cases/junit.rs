//! The JUnit XML report of `nicpolicy test --junit`, for CI systems.

use std::fmt::Write as _;

use super::suite::Report;
use super::Outcome;

/// A JUnit XML report: one testsuite (named after the chain) with one testcase per case file
/// (classname: its directory, name: its file name without extension).
pub fn report(report: &Report) -> String {
    let (suite, reports, elapsed) = (&report.suite, &report.cases, report.elapsed);
    let failures = report.failures().count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"nicpolicy test\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{time:.3}\">",
        tests = reports.len(),
        time = elapsed.as_secs_f64(),
    );
    let _ = writeln!(
        xml,
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\">",
        name = xml_escape(suite, true),
        tests = reports.len(),
        time = elapsed.as_secs_f64(),
    );
    for report in reports {
        let _ = write!(
            xml,
            "    <testcase classname=\"{classname}\" name=\"{name}\" time=\"{time:.3}\"",
            classname = xml_escape(&report.directory(), true),
            name = xml_escape(&report.name(), true),
            time = report.elapsed.as_secs_f64(),
        );
        match &report.outcome {
            Outcome::Passed => xml.push_str("/>\n"),
            Outcome::Failed { mismatches, actual } => {
                let mut body = String::new();
                for m in mismatches {
                    let _ = writeln!(body, "- {m}");
                }
                let _ = write!(body, "actual:\n{actual}");
                let _ = writeln!(
                    xml,
                    ">\n      <failure message=\"{message}\">{body}</failure>\n    </testcase>",
                    message = xml_escape(&mismatches.join("; "), true),
                    body = xml_escape(&body, false),
                );
            }
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
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
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::cases::suite::CaseReport;

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
    fn a_report_has_one_testcase_per_case_and_counts_failures() {
        let report = Report {
            suite: "nicpolicy-capvcd".to_string(),
            cases: vec![
                CaseReport {
                    path: PathBuf::from("tests/cases/capvcd/01-worker.yaml"),
                    outcome: Outcome::Passed,
                    elapsed: Duration::from_millis(2),
                },
                CaseReport {
                    path: PathBuf::from("02-dmz.yaml"),
                    outcome: Outcome::Failed {
                        mismatches: vec!["allowed: expected false, got true".to_string()],
                        actual: "allowed: true".to_string(),
                    },
                    elapsed: Duration::from_millis(3),
                },
            ],
            elapsed: Duration::from_millis(5),
        };
        let xml = super::report(&report);
        assert!(
            xml.contains(r#"<testsuite name="nicpolicy-capvcd" tests="2" failures="1""#),
            "{xml}"
        );
        assert!(
            xml.contains(
                r#"<testcase classname="tests/cases/capvcd" name="01-worker" time="0.002"/>"#
            ),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<testcase classname="." name="02-dmz""#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<failure message="allowed: expected false, got true">- allowed: expected false, got true"#),
            "{xml}"
        );
    }
}
