//! Where tensor-mode metrics run: the CPU, or (feature `gpu`) stats-gpu's pair kernel, which
//! gathers the same partial results (`tensor::Partial`) in one read of both tensors.
//!
//! The GPU takes float32/float16/bfloat16 pairs whose bytes are aligned for their type; it
//! hands a pair back to the CPU path (which then decides every cell as before) when an element
//! is inf or NaN (msprobe's zeroing and mask rules), when a value exceeds 2^50 in magnitude
//! or all of one side lies below 2^-30 (the kernel's sums would lose precision there).

use std::sync::atomic::{AtomicU8, Ordering};

/// Where [`super::compare_tensors`] computes the metrics of large float pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TensorBackend {
    Cpu,
    /// The GPU for every pair it takes; an error opening it falls back to the CPU.
    Gpu,
    /// The GPU for pairs of at least [`AUTO_GPU_MIN_ELEMS`] elements when the process-wide Gpu
    /// is a hardware adapter (a CPU adapter such as lavapipe is slower than the CPU path on the
    /// same cores); else the CPU.
    #[default]
    Auto,
}

/// Below this many elements per tensor the upload and dispatch cost more than the CPU pass.
pub const AUTO_GPU_MIN_ELEMS: usize = 4 << 20;

static BACKEND: AtomicU8 = AtomicU8::new(2);

/// Sets the backend [`super::compare_tensors`] uses from now on (process-wide).
pub fn set_tensor_backend(backend: TensorBackend) {
    BACKEND.store(
        match backend {
            TensorBackend::Cpu => 0,
            TensorBackend::Gpu => 1,
            TensorBackend::Auto => 2,
        },
        Ordering::Relaxed,
    );
}

/// The backend set by [`set_tensor_backend`] (default [`TensorBackend::Auto`]).
pub fn tensor_backend() -> TensorBackend {
    match BACKEND.load(Ordering::Relaxed) {
        0 => TensorBackend::Cpu,
        1 => TensorBackend::Gpu,
        _ => TensorBackend::Auto,
    }
}

#[cfg(feature = "gpu")]
pub(crate) use imp::gpu_partial;

#[cfg(not(feature = "gpu"))]
pub(crate) fn gpu_partial(
    _n: &crate::tensor::RawTensor,
    _b: &crate::tensor::RawTensor,
    _backend: TensorBackend,
) -> Option<crate::tensor::Partial> {
    None
}

#[cfg(feature = "gpu")]
mod imp {
    use std::sync::OnceLock;

    use half::{bf16, f16};
    use stats_gpu::Elems;
    use stats_gpu::gpu::{Gpu, GpuError, GpuOptions, PairParams, wgpu};

    use super::{AUTO_GPU_MIN_ELEMS, TensorBackend};
    use crate::tensor::{ElemDtype, Partial, RawTensor};

    /// The tensor's elements as kernel input; `None` for other dtypes or unaligned bytes.
    fn data<'a>(t: &RawTensor<'a>) -> Option<Elems<'a>> {
        Some(match t.dtype {
            ElemDtype::F32 => Elems::F32(bytemuck::try_cast_slice::<u8, f32>(t.bytes).ok()?),
            ElemDtype::F16 => Elems::F16(bytemuck::try_cast_slice::<u8, f16>(t.bytes).ok()?),
            ElemDtype::BF16 => Elems::BF16(bytemuck::try_cast_slice::<u8, bf16>(t.bytes).ok()?),
            _ => return None,
        })
    }

    /// The Gpu of the tensor metrics, opened on first use (stats-gpu keeps no process-wide one).
    fn shared_gpu() -> Result<&'static Gpu, GpuError> {
        static GPU: OnceLock<Result<Gpu, GpuError>> = OnceLock::new();
        GPU.get_or_init(|| Gpu::new(GpuOptions::default()))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn gpu_for(backend: TensorBackend, numel: usize) -> Option<&'static Gpu> {
        match backend {
            TensorBackend::Cpu => None,
            TensorBackend::Gpu => shared_gpu().ok(),
            TensorBackend::Auto => (numel >= AUTO_GPU_MIN_ELEMS)
                .then(shared_gpu)
                .and_then(Result::ok)
                .filter(|g| g.adapter_info().device_type != wgpu::DeviceType::Cpu),
        }
    }

    /// The partial results of a float pair (NPU `n`, bench `b`) from the GPU, or `None` when
    /// the CPU path must take it (see the module notes).
    pub(crate) fn gpu_partial(
        n: &RawTensor,
        b: &RawTensor,
        backend: TensorBackend,
    ) -> Option<Partial> {
        gpu_partial_with(n, b, gpu_for(backend, n.numel())?, 0)
    }

    /// As [`gpu_partial`] on a given Gpu and chunk size (tests).
    pub(crate) fn gpu_partial_with(
        n: &RawTensor,
        b: &RawTensor,
        gpu: &Gpu,
        chunk_elems: usize,
    ) -> Option<Partial> {
        let (nd, bd) = (data(n)?, data(b)?);
        if nd.len() != bd.len() {
            return None;
        }
        let g = gpu
            .pair_partials(bd, nd, &PairParams::for_compare(chunk_elems))
            .ok()?;
        let tiny = 2f64.powi(-30);
        let scale_ok = |m: f64| m == 0.0 || m >= tiny;
        if g.nonfinite > 0
            || g.cos_out_of_range > 0
            || !scale_ok(g.max_abs_device)
            || !scale_ok(g.max_abs_bench)
        {
            return None;
        }
        Some(Partial {
            dot: g.dot,
            nn: g.dd,
            nb: g.bb,
            ss: g.cmp_sum_sq,
            max_abs: g.cmp_max_abs,
            max_rel: g.cmp_max_rel,
            lt1: g.cmp_lt_thousandth,
            lt5: g.cmp_lt_five_thousandths,
            any_invalid: false,
            mask_mismatch: false,
        })
    }
}

#[cfg(feature = "gpu")]
pub(crate) use imp::gpu_partial_with;
