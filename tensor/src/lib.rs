#![doc = include_str!("../README.md")]

pub mod dtype;
pub mod float8;
pub mod layout;
pub mod view;

pub use dtype::DType;
pub use view::{Element, Elems, TensorView, ViewError, checked_numel};

// The element types of the public API, so an embedder names the same versions.
pub use half::{bf16, f16};
pub use ndarray;
pub use num_complex::{Complex32, Complex64};
