//! What a request body becomes once read: a review is parsed into a JSON value and copied into
//! the policy's request, so its memory is its nodes and its strings, not its bytes. A 3 MB
//! review of a million empty network names takes some 80 MiB decoded; the body budget
//! (`connections.maxBufferedBytes`) counts this estimate, taken before anything is built, so
//! many such reviews at once wait for room or are refused instead of taking the pod past its
//! memory limit.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Bytes a decoded node costs beyond its text: the JSON value (32 bytes), its slot in an
/// array or map, and its share of the copies the review makes of it (the policy's request, the
/// patch), measured on reviews of many short values.
pub const BYTES_PER_NODE: usize = 96;

/// About what `body` takes in memory once parsed and copied: [`BYTES_PER_NODE`] per node (value,
/// key) and twice each string's bytes. Counted in one pass that builds nothing; a body that is
/// not JSON is counted up to where it stops being so (the parse fails there too).
pub fn estimate(body: &[u8]) -> usize {
    let mut count = Count::default();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    // A body that is not JSON ends the count where it fails; what was counted stands.
    let _ = Counting(&mut count).deserialize(&mut deserializer);
    count
        .nodes
        .saturating_mul(BYTES_PER_NODE)
        .saturating_add(count.text.saturating_mul(2))
}

#[derive(Default)]
struct Count {
    nodes: usize,
    text: usize,
}

struct Counting<'a>(&'a mut Count);

impl<'de> DeserializeSeed<'de> for Counting<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
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

#[cfg(test)]
mod tests {
    use super::*;

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
