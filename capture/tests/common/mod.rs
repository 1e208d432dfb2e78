#![allow(dead_code)]
use std::path::PathBuf;

/// The shared/ folder beside the repository (or `NUMPROBE_SHARED`).
pub fn shared() -> PathBuf {
    if let Ok(p) = std::env::var("NUMPROBE_SHARED") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

pub fn fixtures() -> PathBuf {
    shared().join("fixtures/msprobe-26.2.0-cpu")
}
