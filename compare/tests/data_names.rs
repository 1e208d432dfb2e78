//! compare reads a dump's tensor files only inside its `dump_tensor_data/`: a link out of it, a
//! FIFO (which would block the read forever) or a name that is not a plain file name is an
//! error for that row, never opened.

use compare::run::DumpDirSource;
use compare::table::TensorSource;
use dumpfmt::{DType, TensorView, pt};

#[cfg(unix)]
#[test]
fn links_out_fifos_and_paths_are_refused() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dump_tensor_data");
    std::fs::create_dir(&dir).unwrap();
    let bytes = 1.5f32.to_le_bytes();
    let view = TensorView::new(DType::F32, &[1], &bytes).unwrap();
    pt::write(&dir.join("ok.pt"), view, "cpu").unwrap();
    pt::write(&tmp.path().join("outside.pt"), view, "cpu").unwrap();
    symlink(tmp.path().join("outside.pt"), dir.join("evil.pt")).unwrap();
    let fifo = dir.join("fifo.pt");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success())
    );
    let src = DumpDirSource {
        npu_dir: dir.clone(),
        bench_dir: dir.clone(),
    };
    assert_eq!(src.load(true, "ok.pt").unwrap().dtype(), DType::F32);
    for (name, why) in [
        ("evil.pt", "outside the tensor directory"),
        ("fifo.pt", "not a regular file"),
        ("../outside.pt", "not a file name"),
    ] {
        let e = src.load(false, name).unwrap_err();
        assert!(e.contains(why), "{name}: {e}");
    }
}
