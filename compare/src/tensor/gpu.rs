//! Where tensor-mode metrics run: the CPU, or (feature `gpu`) stats-gpu's pair kernel, which
//! gathers the same partial results (`tensor::Partial`) in one read of both tensors.
//!
//! The GPU takes float32/float16/bfloat16 pairs whose bytes are aligned for their type; it
//! hands a pair back to the CPU path (which then decides every cell as before) when an element
//! is inf or NaN (msprobe's zeroing and mask rules), when a value exceeds 2^50 in magnitude
//! or all of one side lies below 2^-30 (the kernel's sums would lose precision there).

/// The backend choice: [`Backend::Cpu`], [`Backend::Gpu`] (every pair the GPU takes; an error
/// opening it falls back to the CPU) or [`Backend::Auto`] (the GPU for pairs of at least
/// [`AUTO_GPU_MIN_ELEMS`] elements when the adapter is a hardware one: a CPU adapter such as
/// lavapipe is slower than the CPU path on the same cores). Without feature `gpu` every choice
/// runs on the CPU.
pub use stats_gpu::Backend;

/// Below this many elements per tensor the upload and dispatch cost more than the CPU pass.
pub const AUTO_GPU_MIN_ELEMS: usize = 4 << 20;

/// Where the tensor metrics of one comparison run: the [`Backend`] choice and stats-gpu's
/// [`stats_gpu::Engine`], which opens its GPU on first need (never for [`Backend::Cpu`]) and
/// drops it with the engine. Shared by the threads that compare rows.
#[derive(Debug, Default)]
// Without feature `gpu` the engines are kept (same API) but never consulted.
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub struct Engine<'e> {
    backend: Backend,
    /// The caller's stats-gpu engine, else `own` (with the default adapter choice).
    given: Option<&'e stats_gpu::Engine<'e>>,
    own: stats_gpu::Engine<'static>,
}

impl Engine<'static> {
    /// An engine for `backend` with stats-gpu's default adapter choice; opens nothing yet.
    pub fn new(backend: Backend) -> Engine<'static> {
        Engine {
            backend,
            given: None,
            own: stats_gpu::Engine::new(),
        }
    }
}

impl<'e> Engine<'e> {
    /// An engine for `backend` on the caller's stats-gpu engine (its adapter choice, or a GPU
    /// it already opened).
    pub fn with_stats_engine(backend: Backend, stats: &'e stats_gpu::Engine<'e>) -> Engine<'e> {
        Engine {
            backend,
            given: Some(stats),
            own: stats_gpu::Engine::new(),
        }
    }

    /// The backend choice.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The partial results of a float pair (NPU `n`, bench `b`) from the GPU, or `None` when
    /// the CPU path must take it (the backend, the size, or see the module notes).
    #[cfg(feature = "gpu")]
    pub(crate) fn gpu_partial(
        &self,
        n: &crate::tensor::Operand,
        b: &crate::tensor::Operand,
    ) -> Option<crate::tensor::Partial> {
        imp::gpu_partial_with(n, b, self.gpu_for(n.view.numel())?, 0)
    }

    /// Without feature `gpu` every pair runs on the CPU.
    #[cfg(not(feature = "gpu"))]
    pub(crate) fn gpu_partial(
        &self,
        _n: &crate::tensor::Operand,
        _b: &crate::tensor::Operand,
    ) -> Option<crate::tensor::Partial> {
        None
    }

    /// The GPU a pair of `numel` elements runs on under this backend, opened on first need. A
    /// GPU that cannot be opened means the CPU, even for [`Backend::Gpu`]: a comparison
    /// table is complete either way.
    #[cfg(feature = "gpu")]
    fn gpu_for(&self, numel: usize) -> Option<&stats_gpu::gpu::Gpu> {
        self.given
            .unwrap_or(&self.own)
            .select(self.backend, true, numel >= AUTO_GPU_MIN_ELEMS)
            .ok()
            .flatten()
    }
}

#[cfg(feature = "gpu")]
mod imp {
    use half::{bf16, f16};
    use numprobe_tensor::DType;
    use stats_gpu::Elems;
    use stats_gpu::gpu::{Gpu, PairParams};

    use crate::tensor::{Operand, Partial};

    /// The tensor's elements as kernel input; `None` for other dtypes or unaligned bytes.
    fn data<'a>(t: &Operand<'a>) -> Option<Elems<'a>> {
        let v = &t.view;
        Some(match v.dtype() {
            DType::F32 => Elems::F32(v.typed::<f32>().ok()?),
            DType::F16 => Elems::F16(v.typed::<f16>().ok()?),
            DType::BF16 => Elems::BF16(v.typed::<bf16>().ok()?),
            _ => return None,
        })
    }

    /// The partial results of a float pair on a given Gpu and chunk size (0: the Gpu's), or
    /// `None` when the CPU path must take it (see the module notes).
    pub(crate) fn gpu_partial_with(
        n: &Operand,
        b: &Operand,
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
