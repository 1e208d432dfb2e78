#![allow(dead_code)]
use std::path::PathBuf;

/// msprobe 26.2.0's CPU dumps of the fixture model.
pub fn fixtures() -> PathBuf {
    testsupport::testdata().join("fixtures/msprobe-26.2.0-cpu")
}
