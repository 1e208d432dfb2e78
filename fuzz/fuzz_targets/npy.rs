//! The .npy reader: no input panics; a file that reads has exactly shape × itemsize bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The readers take paths (they memory-map large files), so the input goes through a file.
    let dir = std::env::temp_dir().join(format!("numprobe-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("input.npy");
    std::fs::write(&path, data).expect("temp file");
    let info = dumpfmt::tensor::read_info(&path);
    match dumpfmt::tensor::read_tensor(&path) {
        Ok(t) => {
            let info = info.expect("a readable tensor has a readable header");
            assert_eq!(info.dtype, t.dtype());
            assert_eq!(info.shape, t.shape());
            assert_eq!(t.bytes().len() as u64, info.nbytes);
        }
        Err(_) => {}
    }
});
