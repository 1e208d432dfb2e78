#![doc = include_str!("../README.md")]

pub mod construct;
pub mod dump;
pub mod dumpdir;
pub mod error;
pub mod fsio;
pub mod json;
pub mod kernel;
pub mod layout;
pub mod names;
pub mod npy;
pub mod outfile;
pub mod pickle;
pub mod pt;
pub mod stack;
pub mod tensor;
pub mod validate;

pub use dumpdir::{Dump, Rank, TensorEntry};
pub use error::{DataNameProblem, Error, Result};
pub use numprobe_tensor::{DType, TensorView, ViewError};
pub use tensor::Tensor;
