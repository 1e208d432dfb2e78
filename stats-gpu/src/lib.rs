//! msprobe's tensor statistics in one fused pass.
//!
//! A tensor is seen as a [`TensorView`]: element type, shape and borrowed little-endian bytes.
//! Every path (the f64 [`reference`](mod@reference) oracle, the SIMD + rayon [`fast`] CPU path and the wgpu
//! [`gpu`] path) reduces a view to mergeable [`Partials`]; [`summary`] turns partials into the
//! values msprobe records (`Max`, `Min`, `Mean`, `Norm`) with its per-dtype rules, and
//! [`checksum`] gives the `md5` field (CRC-32 or XOR).
//!
//! This crate depends on no other numprobe crate, so a tool that only wants the kernels takes
//! one dependency.

pub mod checksum;
pub mod elem;
pub mod fast;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod partials;
pub mod reference;
pub mod summary;

pub use elem::{ElemType, TensorView, ViewError};
pub use partials::Partials;
