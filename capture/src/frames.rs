//! A call stack's lines as stack.json holds them, each also rendered once as a JSON string.
//!
//! A call site's frames are formatted once per process, but every step's journal and
//! stack.json hold them again: rendering (escaping kilobytes of source lines) and hashing
//! them at every step cost about 0.4 ms of a recorded tiny Llama step (benches/RESULTS.md).
//! An adapter keeps one [`Frames`] per call site and hands it to each step's [`crate::Session`].

use std::hash::BuildHasher;
use std::sync::OnceLock;

use dumpfmt::json;

/// The lines of one call stack, outermost last, with their JSON text.
#[derive(Debug)]
pub struct Frames {
    lines: Box<[String]>,
    /// Each line as a quoted JSON string, back to back; `ends[i]` is where line `i`'s ends.
    quoted: Vec<u8>,
    ends: Box<[usize]>,
    hash: u64,
}

/// One seed for every content hash of the process (random per process, so a journal from a
/// stranger cannot be built to collide), so that a hash computed once serves every step.
fn seed() -> &'static foldhash::fast::RandomState {
    static SEED: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    SEED.get_or_init(foldhash::fast::RandomState::default)
}

/// The content hash [`Frames::content_hash`] gives for `lines`.
pub fn hash_lines(lines: &[String]) -> u64 {
    seed().hash_one(lines)
}

impl Frames {
    pub fn new(lines: Vec<String>) -> Frames {
        let mut quoted = Vec::with_capacity(lines.iter().map(|l| l.len() + 2).sum());
        let mut ends = Vec::with_capacity(lines.len());
        for l in &lines {
            json::write_python_text(l, &mut quoted);
            ends.push(quoted.len());
        }
        Frames {
            hash: hash_lines(&lines),
            lines: lines.into_boxed_slice(),
            quoted,
            ends: ends.into_boxed_slice(),
        }
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Each line as `dumpfmt::json`'s writers quote it.
    pub fn quoted(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(a, b)| &self.quoted[a..b])
    }

    /// [`hash_lines`] of the lines, computed once.
    pub fn content_hash(&self) -> u64 {
        self.hash
    }
}

impl PartialEq for Frames {
    fn eq(&self, other: &Frames) -> bool {
        self.lines == other.lines
    }
}

impl Eq for Frames {}

#[cfg(test)]
mod tests {
    use super::*;
    use dumpfmt::json::Value;

    #[test]
    fn quoted_lines_are_those_of_the_json_writer() {
        let lines = vec![
            "File a.py, line 3, in f, \n x = \"y\" \\ z".to_owned(),
            String::new(),
            "ünïcødé \u{1F600} \t\u{7}".to_owned(),
        ];
        let f = Frames::new(lines.clone());
        assert_eq!(f.len(), 3);
        for (q, l) in f.quoted().zip(&lines) {
            assert_eq!(q, json::to_python_bytes(&Value::from(l.as_str())));
        }
        assert_eq!(f.quoted().count(), 3);
        assert_eq!(f.content_hash(), hash_lines(&lines));
        assert_ne!(f.content_hash(), hash_lines(&lines[..2]));
        assert_eq!(Frames::new(Vec::new()).quoted().count(), 0);
    }
}
