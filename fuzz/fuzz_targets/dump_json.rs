//! The JSON parser and the typed dump model: no input panics, and whatever parses writes back
//! to bytes that parse to the same value.
#![no_main]

use dumpfmt::dump::DumpFile;
use dumpfmt::json;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz/dump.json");
    let Ok(value) = json::parse(data, file) else {
        return;
    };
    let bytes = json::to_python_bytes(&value);
    let again = json::parse(&bytes, file).expect("written JSON parses");
    assert_eq!(again, value, "write → parse changed the value");
    // The typed views must reject or accept, never panic.
    let _ = DumpFile::schema_problems(&value, file);
    if let Ok(dump) = DumpFile::from_value(value, file) {
        for entry in dump.entries() {
            let _ = entry.tensors();
        }
    }
});
