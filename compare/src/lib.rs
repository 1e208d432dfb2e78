//! Compare two msprobe dumps (target vs golden) the way `msprobe compare` does, and find
//! where they first diverge.
//!
//! A comparison reads the two runs' dump.json files, pairs their rows, measures each pair
//! (statistics differences, md5 equality, or tensor metrics computed from the tensor files),
//! judges every row with msprobe's rules and writes msprobe's result table byte for byte, plus a
//! summary naming the first call whose outputs differ while its inputs agree. [`run()`] does all
//! of it from paths; [`compare_dumps`] from parsed dump.json values; [`tensor::compare_tensors`]
//! measures one pair of [`numprobe_tensor::TensorView`]s.
//!
//! Modules, in the order the data flows:
//!
//! * [`model`]: dump.json (and stack.json) as rows, one per tensor or scalar leaf, grouped per
//!   call; the mode (statistics, md5, tensor).
//! * [`matching`]: pairing target rows with golden rows (exact, fuzzy, name-mapping tables).
//! * [`stats_diff`]: statistics-mode differences, with pandas' number parsing.
//! * [`tensor`]: tensor-mode metrics in one chunked pass over both tensors; [`tensor::gpu`]
//!   holds the backend choice ([`tensor::gpu::Backend`]) and the GPU path (feature `gpu`).
//! * [`judge`]: msprobe's `Result` and `Err_message`.
//! * [`table`]: the result table and its CSV text; [`xlsx`]: the same as `.xlsx`.
//! * [`divergence`]: counts per verdict and the first divergence (`summary.md`).
//! * [`mod@run`]: entry points, options, output files and the resume journal.
//! * [`run_tree`]: a whole distributed run (every step and rank), the cross-rank origin;
//!   [`run_tree_json`]: its summary.md and JSON texts.
//! * [`cell`], [`pyfmt`]: table cells as Python prints them.
//!
//! The README's example, run as a doctest, compares two dumps written to a temporary directory.

pub mod cell;
pub mod divergence;
pub mod error;
mod f32_scan;
pub mod judge;
pub mod kernel;
pub mod matching;
pub mod model;
pub mod pyfmt;
pub mod run;
pub mod run_tree;
pub mod run_tree_json;
pub mod stats_diff;
pub mod table;
pub mod tensor;
pub mod xlsx;

pub use error::{Error, Result};
pub use run::{
    CompareOptions, CompareOutcome, Compared, compare_dumps, compare_named, run, run_keeping,
};

/// The README's example, compiled and run by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
