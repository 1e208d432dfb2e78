//! msprobe's tensor statistics (`Max`, `Min`, `Mean`, `Norm` and the `md5` field) in one fused
//! pass over a tensor's memory, on the CPU or on any Vulkan GPU through wgpu.
//!
//! A tool that holds an `ndarray` array calls [`statistics`] and gets the [`Record`] msprobe
//! would write for that tensor; [`Options`] picks msprobe's `summary_mode`, `precision`, the
//! framework's rules ([`Flavour`]), the [`Backend`] and the summation order of float32 Mean and
//! Norm ([`Exactness`]). Everything below that call is public too, built on the borrowed
//! [`TensorView`] of the `numprobe-tensor` crate (re-exported here), for tools that manage
//! memory, batches or the GPU themselves.
//!
//! # Modules
//!
//! * [`summary`]: the record msprobe writes, derived from partials with its per-dtype rules;
//!   [`Options`], [`Record`], [`summary::compute`] for a [`TensorView`].
//! * [`backend`]: [`Backend`] (CPU, GPU or automatic) and [`Engine`], which owns the GPU
//!   context and is the one place where a computation is sent to the CPU or the GPU.
//! * [`partials`]: [`Partials`], the mergeable counts, extremes and sums every path produces.
//! * [`mod@reference`]: the f64 element-by-element oracle the other paths are tested against.
//! * [`fast`]: the SIMD + multi-core CPU path (f64 accumulation).
//! * [`torch_order`]: float32 sum, mean and norm in the order of PyTorch's CPU kernels, bit
//!   for bit what `torch.mean` / `torch.norm` return ([`Exactness::TorchCpu`]).
//! * [`ms_order`]: float32/float16 mean and norm in the order of MindSpore's CPU kernels
//!   ([`Exactness::MindSporeCpu`]).
//! * [`checksum`]: CRC-32 (msprobe's `md5` key) and msprobe's XOR checksum.
//! * [`gpu`] (feature `gpu`, on by default): the wgpu context ([`gpu::Gpu`]) and the WGSL
//!   kernels: statistics of one tensor, of a batch of tensors, and the (bench, device) pair
//!   reduction the accuracy standards use.
//!
//! This crate depends on no other numprobe crate but `numprobe-tensor` and `pyrepr`.
//!
//! # Example
//!
//! The README's example, which runs as a test of this crate:
#![doc = include_str!("../README.md")]

pub mod backend;
pub mod checksum;
pub mod fast;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod ms_order;
pub mod partials;
pub mod reference;
pub mod summary;
pub mod torch_order;

pub use backend::{Backend, Engine};
pub use numprobe_tensor::{self, DType, Element, Elems, TensorView, ViewError, bf16, f16, ndarray};
pub use partials::Partials;
pub use summary::{
    Checksum, Exactness, Flavour, Options, Precision, Record, Stat, StatsError, Streamed,
    SummaryMode,
};

use ndarray::{ArrayBase, Data, Dimension};

/// msprobe's statistics of an `ndarray` array of any element type and dimension, with a
/// GPU context opened for this call only if `opts.backend` sends the array to the GPU
/// (keep an [`Engine`] and call [`Engine::statistics`] to reuse one across calls).
///
/// An array that is not in standard (C-contiguous) layout is copied into it first, as msprobe
/// reads a tensor's contiguous copy.
pub fn statistics<T, S, D>(array: &ArrayBase<S, D>, opts: &Options) -> Result<Record, StatsError>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension,
{
    Engine::new().statistics(array, opts)
}
