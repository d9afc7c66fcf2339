//! What a request body becomes once read: a review is parsed into a JSON value and copied into
//! the policy's request, so its memory is its nodes and its strings, not its bytes. A 3 MB
//! review of a million empty network names takes some 80 MiB decoded; the body budget
//! (`connections.maxBufferedBytes`) counts this estimate, taken before anything is built, so
//! many such reviews at once wait for room or are refused instead of taking the pod past its
//! memory limit.

/// Bytes a decoded node costs beyond its text: the JSON value (32 bytes), its slot in an
/// array or map, and its share of the copies the review makes of it (the policy's request, the
/// patch), measured on reviews of many short values.
pub const BYTES_PER_NODE: usize = 96;

/// About what `body` takes in memory once parsed and copied: [`BYTES_PER_NODE`] per node (value,
/// key) and twice each string's bytes. Counted by one scan of the bytes that builds and checks
/// nothing (every review pays it, before its parse): a string's text is counted as written,
/// escapes included, which is never less than it decodes to, and a body that is not JSON is
/// counted whole (its parse fails later).
pub fn estimate(body: &[u8]) -> usize {
    let (nodes, text) = count(body);
    nodes
        .saturating_mul(BYTES_PER_NODE)
        .saturating_add(text.saturating_mul(2))
}

/// The nodes (values and keys) of `body` and the bytes of its strings.
fn count(body: &[u8]) -> (usize, usize) {
    let (mut nodes, mut text) = (0usize, 0usize);
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                nodes += 1;
                i += 1;
                let start = i;
                // To the closing quote; an escape takes the next byte with it (an escaped quote
                // ends nothing). Strings are most of a review's bytes: memchr skips through them.
                loop {
                    match body
                        .get(i..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                    {
                        Some(at) if body[i + at] == b'"' => {
                            i += at;
                            break;
                        }
                        Some(at) => i += at + 2,
                        // Unterminated: the rest is the string.
                        None => {
                            i = body.len();
                            break;
                        }
                    }
                }
                text += i.min(body.len()) - start;
                i += 1;
            }
            b'{' | b'[' => {
                nodes += 1;
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                nodes += 1;
                while i < body.len()
                    && matches!(body[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
            }
            b't' | b'f' | b'n' => {
                nodes += 1;
                while i < body.len() && body[i].is_ascii_alphabetic() {
                    i += 1;
                }
            }
            // White space, `,`, `:`, `}`, `]`, and bytes no JSON has.
            _ => i += 1,
        }
    }
    (nodes, text)
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

    use super::*;

    /// The count by a JSON parser (serde's), which the scan must never fall below.
    fn parsed(body: &[u8]) -> (usize, usize) {
        #[derive(Default)]
        struct Count {
            nodes: usize,
            text: usize,
        }
        struct Counting<'a>(&'a mut Count);
        impl<'de> DeserializeSeed<'de> for Counting<'_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
        impl<'de> Visitor<'de> for Counting<'_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
                self.0.nodes += 1;
                Ok(())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
                self.0.nodes += 1;
                Ok(())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
                self.0.nodes += 1;
                Ok(())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
                self.0.nodes += 1;
                Ok(())
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
                self.0.nodes += 1;
                self.0.text += text.len();
                Ok(())
            }
            fn visit_unit<E: de::Error>(self) -> Result<(), E> {
                self.0.nodes += 1;
                Ok(())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                self.0.nodes += 1;
                while seq.next_element_seed(Counting(&mut *self.0))?.is_some() {}
                Ok(())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                self.0.nodes += 1;
                while map.next_key_seed(Counting(&mut *self.0))?.is_some() {
                    map.next_value_seed(Counting(&mut *self.0))?;
                }
                Ok(())
            }
        }
        let mut count = Count::default();
        Counting(&mut count)
            .deserialize(&mut serde_json::Deserializer::from_slice(body))
            .expect("JSON");
        (count.nodes, count.text)
    }

    #[test]
    fn the_scan_counts_what_a_parser_counts_and_never_less() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/admission");
        let mut read = 0;
        for entry in std::fs::read_dir(&dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let body = std::fs::read(&path).expect("fixture");
            let (nodes, text) = count(&body);
            let (parsed_nodes, parsed_text) = parsed(&body);
            assert_eq!(nodes, parsed_nodes, "{}", path.display());
            // Escapes are counted as written.
            assert!(text >= parsed_text, "{}", path.display());
            read += 1;
        }
        assert!(read > 3, "read the fixtures");
        // Escapes, numbers of every shape, the literals, nesting.
        let tricky =
            br#"{"a\"b":["\u00e9\n", -1.5e+3, 0, true, false, null, {"":[[]]}], "q":"\\"}"#;
        assert_eq!(count(tricky).0, parsed(tricky).0);
        assert!(count(tricky).1 >= parsed(tricky).1);
        // Cut anywhere, even inside an escape, the scan ends without a fault.
        for end in 0..tricky.len() {
            let _ = count(&tricky[..end]);
        }
        assert_eq!(count(br#"["abc\"#), (2, 4));
    }

    #[test]
    fn an_ordinary_review_is_small_and_a_million_empty_names_are_not() {
        let review = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/admission/vcdmachine-create-worker.json"),
        )
        .expect("fixture");
        let ordinary = estimate(&review);
        assert!(ordinary < 64 << 10, "{ordinary} bytes");
        // 3 MB: a million empty names.
        let mut names = String::from(r#"{"request":{"object":{"spec":{"extraOvdcNetworks":["#);
        names.push_str(&vec![r#""""#; 1_000_000].join(","));
        names.push_str("]}}}}");
        let huge = estimate(names.as_bytes());
        assert!(huge > 64 << 20, "{huge} bytes for {} bytes", names.len());
        // Not JSON: counted up to where it stops.
        assert!(estimate(b"[1,2,3,oops") >= 3 * BYTES_PER_NODE);
    }
}
