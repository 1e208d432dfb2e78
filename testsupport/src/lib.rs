//! Helpers shared by the workspace's tests (a dev-dependency only): where the crate under test
//! and the repository's `testdata/` are, reading the `.npy` files there, the Python the interop
//! tests run, and with feature `gpu` the one Gpu of a test binary.

use std::path::{Path, PathBuf};

pub use dumpfmt::DType;

#[cfg(feature = "gpu")]
mod gpu;
pub mod kernel_raw;
pub mod runs;
#[cfg(feature = "gpu")]
pub use gpu::{few_workgroups, gpu, open_gpu};

/// The directory of the crate under test. Read when the test runs (cargo sets it for every test
/// process) rather than compiled in: cargo may keep a test binary built in another checkout that
/// shares the target directory, whose compile-time path is that checkout.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .expect("CARGO_MANIFEST_DIR is not set: run the tests through cargo")
}

/// The repository root (every crate is a directory of it). Without `CARGO_MANIFEST_DIR` (a test
/// binary run by hand) it is found from this crate's compile-time location instead.
pub fn repo_root() -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    crate_dir.join("..")
}

/// The repository's `testdata/` (fixtures and vectors; see its README), or `NUMPROBE_TESTDATA`.
pub fn testdata() -> PathBuf {
    std::env::var_os("NUMPROBE_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("testdata"))
}

/// A `.npy` file's dtype, shape and payload, read by dumpfmt's strict reader (bfloat16 arrays
/// stored as their `uint16` bits read as `U16`). Panics naming the file on any error.
pub fn read_npy(path: &Path) -> (DType, Vec<usize>, Vec<u8>) {
    let t = dumpfmt::npy::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (t.dtype(), t.shape().to_vec(), t.bytes().to_vec())
}

/// The Python of the interop tests: `NUMPROBE_PYTHON`, by default the venv `.ci/setup` makes.
pub fn python() -> PathBuf {
    std::env::var_os("NUMPROBE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/numprobe/venv/bin/python"))
}

/// The tests' 64-bit LCG (the MMIX constants, as testdata's generators use them): each call
/// returns the next state; callers take the bits they need.
pub fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state
    }
}

/// The recorded vectors' generator (testdata's `gen_ms_order.py` and `gen_torch_order.py`):
/// [`lcg`]'s top 24 bits a call.
pub fn lcg24(seed: u64) -> impl FnMut() -> u64 {
    let mut next = lcg(seed);
    move || next() >> 40
}
