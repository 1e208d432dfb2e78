//! The check both tensor-file targets run: no input panics, and a file that reads has exactly
//! the header's dtype, shape and `shape × itemsize` bytes.

pub fn check(data: &[u8], ext: &str) {
    // The readers take paths (they memory-map large files), so the input goes through a file.
    let dir = std::env::temp_dir().join(format!("numprobe-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("input.{ext}"));
    std::fs::write(&path, data).expect("temp file");
    let info = dumpfmt::tensor::read_info(&path);
    if let Ok(t) = dumpfmt::tensor::read_tensor(&path) {
        let info = info.expect("a readable tensor has a readable header");
        assert_eq!(info.dtype, t.dtype());
        assert_eq!(info.shape, t.shape());
        assert_eq!(t.bytes().len() as u64, info.nbytes);
    }
}
