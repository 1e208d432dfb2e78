//! Strict reader and writer of msprobe's dump format (PyTorch and MindSpore flavours).
//!
//! * [`dumpdir`]: [`Dump::open`] a dump directory, walk its ranks and tensor records, load any
//!   tensor file as an `ndarray` view.
//! * [`json`]: an order-preserving JSON model that reads msprobe's non-standard tokens
//!   (`NaN`, `Infinity`) and writes exactly what Python's `json.dump(obj, f, indent=1)` writes.
//! * [`dump`], [`stack`], [`construct`]: typed views of `dump.json`, `stack.json`,
//!   `construct.json` and `debug.json`.
//! * [`names`]: API, module and tensor data names.
//! * [`layout`]: dump root → steps → ranks.
//! * [`npy`], [`pt`] (with [`pickle`]), [`tensor`]: tensor files.
//! * [`validate`]: the checks behind `numprobe validate`.
//!
//! Element types and tensor views are `numprobe-tensor`'s [`DType`] and [`TensorView`]: a
//! [`tensor::Tensor`] read from a file hands out a view of its (often memory-mapped) bytes.
//!
//! Bad input yields an [`Error`] naming the file and the JSON path or byte offset; no input
//! makes these readers panic (fuzzed).

pub mod construct;
pub mod dump;
pub mod dumpdir;
pub mod error;
pub mod json;
pub mod layout;
pub mod names;
pub mod npy;
pub mod pickle;
pub mod pt;
pub mod stack;
pub mod tensor;
pub mod validate;

pub use dumpdir::{Dump, Rank, TensorEntry};
pub use error::{DataNameProblem, Error, Result};
pub use numprobe_tensor::{DType, TensorView, ViewError};
pub use tensor::Tensor;
