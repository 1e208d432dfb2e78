//! Compare two msprobe dumps (target vs golden) the way `msprobe compare` does, and find
//! where they first diverge.
//!
//! Layers: [`model`] (dump.json -> rows), [`matching`] (pairing rows), [`stats_diff`],
//! [`tensor`] (metrics), [`judge`] (Result/Err_message), [`table`] (result table and CSV), [`xlsx`],
//! [`divergence`] (summary and first divergence), [`run`] (directories, files, CLI entry).

pub mod cell;
pub mod divergence;
pub mod error;
pub mod judge;
pub mod matching;
pub mod model;
pub mod pyfmt;
pub mod run;
pub mod stats_diff;
pub mod table;
pub mod tensor;
pub mod xlsx;

pub use error::{Error, Result};
pub use run::{CompareOptions, CompareOutcome, compare_dumps, run};
