//! Where a computation runs: the one [`Backend`] switch and the [`Engine`] that owns the GPU
//! context (and, for a capture inside torch, holds torch's threads).
//!
//! Nothing here is process-wide: a caller makes an [`Engine`] (which opens the GPU on first
//! use, with the adapter the caller chose in [`GpuOptions`]), or hands
//! it a [`Gpu`] it opened itself, and passes the engine to the computations.
//! [`Engine::select`] is the one place that decides, per input, between the CPU and the GPU.

#[cfg(feature = "gpu")]
use std::sync::OnceLock;

use ndarray::{ArrayBase, Data, Dimension};

#[cfg(feature = "gpu")]
use crate::gpu::{Gpu, GpuError, GpuOptions};
use crate::summary::{self, Options, Record, StatsError};
use crate::torch_order::TorchThreads;
use crate::{Element, TensorView};

/// Where a reduction runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// The CPU (the [`fast`](crate::fast) path), always.
    Cpu,
    /// The GPU for every input its kernels handle (float32, float16 and bfloat16), the CPU for
    /// the rest. A GPU that cannot be opened (or a build without the `gpu` feature) is an
    /// error.
    Gpu,
    /// The GPU for large inputs of float32, float16 or bfloat16 when the adapter is a hardware
    /// GPU; the CPU otherwise (a software adapter such as lavapipe is slower than the CPU path
    /// it runs on, and below the size threshold the upload costs more than the CPU pass). A GPU
    /// that cannot be opened means the CPU, not an error.
    #[default]
    Auto,
}

/// Tensors at least this large go to the GPU under [`Backend::Auto`] in
/// [`Engine::statistics`]; below it the transfer costs more than the CPU pass.
pub const AUTO_GPU_MIN_BYTES: usize = 64 << 20;

/// Owns the GPU context of a caller: opened on first use (never for [`Backend::Cpu`], nor for
/// inputs [`Backend::Auto`] keeps on the CPU), then reused; a failure to open it is remembered.
///
/// Build one per program (or per thread pool) and pass it to the computations; it is `Sync`,
/// and the [`Gpu`] serialises its own use.
pub struct Engine<'g> {
    /// Options of the GPU opened on first use, and that GPU (or why it could not be opened).
    #[cfg(feature = "gpu")]
    gpu_options: GpuOptions,
    #[cfg(feature = "gpu")]
    opened: OnceLock<Result<Gpu, GpuError>>,
    /// The caller's GPU, used instead of opening one.
    #[cfg(feature = "gpu")]
    given: Option<&'g Gpu>,
    #[cfg(not(feature = "gpu"))]
    _gpu: std::marker::PhantomData<&'g ()>,
    /// torch's intra-op threads, which read the thread chunks of torch-order passes.
    torch_threads: Option<&'g dyn TorchThreads>,
}

impl Default for Engine<'static> {
    fn default() -> Self {
        Engine::new()
    }
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Engine");
        #[cfg(feature = "gpu")]
        match self.given {
            Some(g) => d.field("gpu", g),
            None => d
                .field("gpu_options", &self.gpu_options)
                .field("gpu", &self.opened.get()),
        };
        d.field("torch_threads", &self.torch_threads.is_some());
        d.finish()
    }
}

impl Engine<'static> {
    /// An engine that opens the best adapter ([`AdapterChoice::Auto`](crate::gpu::AdapterChoice))
    /// with default chunking when a computation first needs the GPU.
    pub fn new() -> Engine<'static> {
        Engine {
            #[cfg(feature = "gpu")]
            gpu_options: GpuOptions::default(),
            #[cfg(feature = "gpu")]
            opened: OnceLock::new(),
            #[cfg(feature = "gpu")]
            given: None,
            #[cfg(not(feature = "gpu"))]
            _gpu: std::marker::PhantomData,
            torch_threads: None,
        }
    }

    /// An engine that opens its GPU with `opts` (adapter, chunk size) on first use.
    #[cfg(feature = "gpu")]
    pub fn with_gpu_options(opts: GpuOptions) -> Engine<'static> {
        Engine {
            gpu_options: opts,
            opened: OnceLock::new(),
            given: None,
            torch_threads: None,
        }
    }

    /// An engine that owns an already opened GPU.
    #[cfg(feature = "gpu")]
    pub fn from_gpu(gpu: Gpu) -> Engine<'static> {
        Engine {
            gpu_options: GpuOptions::default(),
            opened: OnceLock::from(Ok(gpu)),
            given: None,
            torch_threads: None,
        }
    }
}

impl<'g> Engine<'g> {
    /// An engine that uses the caller's GPU.
    #[cfg(feature = "gpu")]
    pub fn with_gpu(gpu: &'g Gpu) -> Engine<'g> {
        Engine {
            gpu_options: GpuOptions::default(),
            opened: OnceLock::new(),
            given: Some(gpu),
            torch_threads: None,
        }
    }

    /// This engine reading the thread chunks of torch-order passes on `threads`
    /// ([`fused_threads_on`](crate::torch_order::fused_threads_on): each chunk on the torch thread that wrote it).
    pub fn with_torch_threads(mut self, threads: &'g dyn TorchThreads) -> Engine<'g> {
        self.torch_threads = Some(threads);
        self
    }

    /// The torch threads given by [`Engine::with_torch_threads`].
    pub fn torch_threads(&self) -> Option<&'g dyn TorchThreads> {
        self.torch_threads
    }

    /// The GPU, opened now if it was not yet.
    #[cfg(feature = "gpu")]
    pub fn gpu(&self) -> Result<&Gpu, GpuError> {
        match self.given {
            Some(g) => Ok(g),
            None => self
                .opened
                .get_or_init(|| Gpu::new(self.gpu_options.clone()))
                .as_ref()
                .map_err(Clone::clone),
        }
    }

    /// The GPU to run one input on under `backend`, or `None` for the CPU. `handled`: the GPU
    /// kernel takes this input (dtype, layout); `large`: the input is large enough for
    /// [`Backend::Auto`] to send it (each computation has its own threshold, such as
    /// [`AUTO_GPU_MIN_BYTES`]). Fails only for [`Backend::Gpu`] when the GPU cannot be opened.
    #[cfg(feature = "gpu")]
    pub fn select(
        &self,
        backend: Backend,
        handled: bool,
        large: bool,
    ) -> Result<Option<&Gpu>, GpuError> {
        Ok(match backend {
            Backend::Cpu => None,
            Backend::Gpu => {
                let gpu = self.gpu()?;
                handled.then_some(gpu)
            }
            Backend::Auto if handled && large => self
                .gpu()
                .ok()
                .filter(|g| g.adapter_info().device_type != wgpu::DeviceType::Cpu),
            Backend::Auto => None,
        })
    }

    /// msprobe's record of `view` under `opts` (see [`summary::compute`]).
    pub fn compute(&self, view: &TensorView, opts: &Options) -> Result<Record, StatsError> {
        summary::compute(view, opts, self)
    }

    /// msprobe's record of an `ndarray` array under `opts`; see [`crate::statistics`].
    pub fn statistics<T, S, D>(
        &self,
        array: &ArrayBase<S, D>,
        opts: &Options,
    ) -> Result<Record, StatsError>
    where
        T: Element,
        S: Data<Elem = T>,
        D: Dimension,
    {
        let standard = array.as_standard_layout();
        let view = TensorView::from_array(&standard)?;
        self.compute(&view, opts)
    }

    /// Whether `view` runs on the GPU under `backend` for statistics, and on which.
    pub(crate) fn stats_gpu(
        &self,
        view: &TensorView,
        backend: Backend,
    ) -> Result<Option<StatsGpu<'_>>, StatsError> {
        #[cfg(feature = "gpu")]
        {
            let handled = Gpu::supports(view.dtype());
            let large = view.bytes().len() >= AUTO_GPU_MIN_BYTES;
            Ok(self.select(backend, handled, large)?.map(StatsGpu))
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = view;
            match backend {
                Backend::Gpu => Err(StatsError::NoGpuSupport),
                Backend::Cpu | Backend::Auto => Ok(None),
            }
        }
    }
}

/// The GPU a statistics computation was sent to (uninhabited without the `gpu` feature).
pub(crate) struct StatsGpu<'a>(
    #[cfg(feature = "gpu")] pub &'a Gpu,
    #[cfg(not(feature = "gpu"))] std::convert::Infallible,
    #[cfg(not(feature = "gpu"))] std::marker::PhantomData<&'a ()>,
);

impl StatsGpu<'_> {
    pub(crate) fn partials(&self, view: &TensorView) -> Result<crate::Partials, StatsError> {
        #[cfg(feature = "gpu")]
        {
            Ok(self.0.partials(view)?)
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = view;
            match self.0 {}
        }
    }
}
