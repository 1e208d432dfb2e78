//! compare's in-memory comparison on two arbitrary dump.json texts: no input panics. Whatever
//! the two texts are (malformed structure, odd records, names that match or not), the result
//! is a table or an error, and a table renders as CSV and a summary.
#![no_main]

use compare::matching::MatchOptions;
use compare::table::{TableOptions, to_csv};
use dumpfmt::json;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    // Two documents in one input: split at the first NUL byte (the golden side is the target
    // itself when there is none, which exercises exact matching).
    let (a, b) = match data.iter().position(|&c| c == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let (Ok(npu), Ok(bench)) = (
        json::parse(a, Path::new("fuzz/target/dump.json")),
        json::parse(b, Path::new("fuzz/golden/dump.json")),
    ) else {
        return;
    };
    for fuzzy in [false, true] {
        let opts = MatchOptions {
            fuzzy,
            ..Default::default()
        };
        // No tensor source: tensor-mode rows become `error` rows, never a read of any path.
        if let Ok(cmp) = compare::compare_dumps(
            &npu,
            &bench,
            None,
            &opts,
            &TableOptions::default(),
            &(),
        ) {
            let _ = to_csv(&cmp.table);
            let summary = compare::divergence::summarize(&cmp.table, &cmp.npu, 0.0);
            let _ = summary.to_markdown("target", "golden", "table.csv");
        }
    }
});
