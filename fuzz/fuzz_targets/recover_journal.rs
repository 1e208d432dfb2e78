//! The capture journal reader behind `numprobe recover`: arbitrary bytes as a journal never
//! panic, and whatever replays also renders dump.json / stack.json / construct.json that parse.
#![no_main]

use capture::{DumpState, journal};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz/numprobe_journal.bin");
    // Also as a journal of today's format: most inputs would stop at the magic otherwise.
    let mut framed = journal::MAGIC.to_vec();
    framed.extend_from_slice(data);
    for bytes in [data, &framed[..]] {
        let Ok(replay) = journal::parse(bytes, path) else {
            continue;
        };
        let consumed = replay.ignored_tail + replay.damaged_bytes;
        assert!(
            consumed <= bytes.len() as u64,
            "more bytes skipped than read"
        );
        let mut state = DumpState::new();
        for r in &replay.records {
            // Whatever decodes re-encodes to a payload that decodes to the same record.
            assert_eq!(journal::Record::decode(&r.encode()).as_ref(), Some(r));
            state.apply(r);
        }
        for (name, bytes) in state.render_files() {
            dumpfmt::json::parse(&bytes, Path::new(name)).expect("rendered JSON parses");
        }
    }
});
