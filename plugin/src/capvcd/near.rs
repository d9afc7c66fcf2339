//! "Did you mean": the known network name nearest to one that is not known.
//!
//! It runs on every evaluation that names a network missing from the inventory, against every
//! network of the inventory, so it is written to cost little: names are compared as bytes when
//! both are ASCII (every Cloud Director name seen so far), the Levenshtein rows live in one
//! buffer reused across candidates, and a candidate is dropped as soon as no alignment can bring
//! it within [`MAX_EDITS`].

/// Edits (insertions, deletions, substitutions) within which a name is suggested.
pub const MAX_EDITS: usize = 2;

/// The known name nearest to `name` (case or a typo or two apart), if any is near: the one with
/// the fewest edits, the first in byte order among equals. Case is folded for ASCII letters
/// (other letters that differ in case count as one edit each), which keeps Unicode case tables
/// out of the module.
pub fn closest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut scratch = Scratch::new(name);
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in known {
        let limit = best.map_or(MAX_EDITS, |(edits, _)| edits);
        let Some(edits) = scratch.distance_within(candidate, limit) else {
            continue;
        };
        let better = match best {
            None => true,
            Some((best_edits, best_name)) => (edits, candidate) < (best_edits, best_name),
        };
        if better {
            best = Some((edits, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance over characters, ASCII case folded.
#[cfg(test)]
pub fn edit_distance(a: &str, b: &str) -> usize {
    let mut scratch = Scratch::new(a);
    scratch
        .distance_within(b, usize::MAX)
        .expect("every distance is within usize::MAX")
}

/// The name being matched, folded once, and the row buffer the candidates share.
struct Scratch {
    /// The name's characters, ASCII letters lowered; empty when the name is ASCII.
    chars: Vec<char>,
    /// The name's bytes, ASCII letters lowered (used when the name is ASCII).
    bytes: Vec<u8>,
    /// Characters in the name.
    len: usize,
    ascii: bool,
    row: Vec<usize>,
    candidate: Vec<char>,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let ascii = name.is_ascii();
        let (bytes, chars) = if ascii {
            (
                name.bytes().map(|b| b.to_ascii_lowercase()).collect(),
                Vec::new(),
            )
        } else {
            (
                Vec::new(),
                name.chars()
                    .map(|c| c.to_ascii_lowercase())
                    .collect::<Vec<_>>(),
            )
        };
        let len = if ascii { bytes.len() } else { chars.len() };
        Scratch {
            chars,
            bytes,
            len,
            ascii,
            row: Vec::new(),
            candidate: Vec::new(),
        }
    }

    /// The edits between the name and `candidate`, or `None` when they are more than `limit`.
    fn distance_within(&mut self, candidate: &str, limit: usize) -> Option<usize> {
        if self.ascii && candidate.is_ascii() {
            // Lengths that differ by more than the limit are never within it.
            if self.len.abs_diff(candidate.len()) > limit {
                return None;
            }
            let name = std::mem::take(&mut self.bytes);
            let edits = banded(&name, candidate.as_bytes(), limit, &mut self.row, |a, b| {
                *a == b.to_ascii_lowercase()
            });
            self.bytes = name;
            return edits;
        }
        let count = candidate.chars().count();
        if self.len.abs_diff(count) > limit {
            return None;
        }
        let mut folded = std::mem::take(&mut self.candidate);
        folded.clear();
        folded.extend(candidate.chars().map(|c| c.to_ascii_lowercase()));
        let name: Vec<char> = if self.ascii {
            self.bytes.iter().map(|&b| char::from(b)).collect()
        } else {
            std::mem::take(&mut self.chars)
        };
        let edits = banded(&name, &folded, limit, &mut self.row, |a, b| *a == b);
        if !self.ascii {
            self.chars = name;
        }
        self.candidate = folded;
        edits
    }
}

/// Levenshtein distance between `a` and `b`, or `None` as soon as every cell of a row is over
/// `limit` (a row's minimum never falls in later rows).
fn banded<A, B: Copy>(
    a: &[A],
    b: &[B],
    limit: usize,
    row: &mut Vec<usize>,
    same: impl Fn(&A, B) -> bool,
) -> Option<usize> {
    row.clear();
    row.extend(0..=b.len());
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        let mut lowest = row[0];
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if same(ca, cb) {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            lowest = lowest.min(row[j + 1]);
            diagonal = above;
        }
        if lowest > limit {
            return None;
        }
    }
    let edits = row[b.len()];
    (edits <= limit).then_some(edits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definition, to check the banded, folded one against.
    fn reference(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
        let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let above = row[j + 1];
                row[j + 1] = if ca == cb {
                    diagonal
                } else {
                    1 + diagonal.min(above).min(row[j])
                };
                diagonal = above;
            }
        }
        row[b.len()]
    }

    const NAMES: &[&str] = &[
        "",
        "s",
        "storage-net",
        "Storage-Net",
        "storage-nett",
        "strage-nte",
        "storage-net-2",
        "workload-net",
        "workload-nett",
        "mgmt-net",
        "mgmt-net-ä",
        "MGMT-NET-Ä",
        "mgmt-nét",
        "speicher-netz-ü",
        "Speicher-Netz-Ü",
        "ストレージ-net",
    ];

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("storage-net", "storage-net"), 0);
        assert_eq!(edit_distance("storage-nett", "storage-net"), 1);
        assert_eq!(edit_distance("strage-nte", "storage-net"), 3);
        assert_eq!(edit_distance("Storage-NET", "storage-net"), 0);
        // Only ASCII letters are folded.
        assert_eq!(edit_distance("MGMT-NET-Ä", "mgmt-net-ä"), 1);
    }

    #[test]
    fn the_banded_distance_is_the_plain_one_within_the_limit() {
        for a in NAMES {
            for b in NAMES {
                let expected = reference(a, b);
                assert_eq!(edit_distance(a, b), expected, "{a:?} {b:?}");
                for limit in 0..4 {
                    let within = Scratch::new(a).distance_within(b, limit);
                    let wanted = (expected <= limit).then_some(expected);
                    assert_eq!(within, wanted, "{a:?} {b:?} within {limit}");
                }
            }
        }
    }

    #[test]
    fn the_closest_is_the_fewest_edits_then_the_first_name() {
        /// What `closest` promises, spelled out over every candidate.
        fn expected<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
            known
                .iter()
                .map(|candidate| (reference(name, candidate), *candidate))
                .filter(|(edits, _)| *edits <= MAX_EDITS)
                .min()
                .map(|(_, candidate)| candidate)
        }
        for name in NAMES {
            for skip in 0..NAMES.len() {
                let known: Vec<&str> = NAMES.iter().copied().skip(skip).collect();
                assert_eq!(
                    closest(name, known.iter().copied()),
                    expected(name, &known),
                    "{name:?} among {known:?}"
                );
            }
        }
        assert_eq!(
            closest(
                "workload-nett",
                ["mgmt-net", "storage-net", "workload-net"].into_iter()
            ),
            Some("workload-net")
        );
        assert_eq!(
            closest("backup-net", ["mgmt-net", "storage-net"].into_iter()),
            None
        );
    }
}
