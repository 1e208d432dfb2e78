#![allow(dead_code)]
use std::path::PathBuf;

#[path = "../../../testsupport/paths.rs"]
mod paths;
#[allow(unused_imports)]
pub use paths::{manifest_dir, shared};

pub fn fixtures() -> PathBuf {
    shared().join("fixtures/msprobe-26.2.0-cpu")
}
