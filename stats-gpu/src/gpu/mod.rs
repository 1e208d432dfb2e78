//! wgpu path: the fused statistics kernel on any Vulkan adapter (a real GPU, or lavapipe on CPU).
//!
//! [`Gpu`] holds the context (instance, adapter, device, queue, reusable buffers) and the
//! compiled pipelines; its methods are the entry points. Inside (private modules):
//!
//! - `context`: instance, adapter and device, separate from the kernels.
//! - `stats_kernel`: pipelines of `stats.wgsl`, record decoding, and the error bound.
//! - `stream`: one tensor, in chunks through a ring of two reused staging buffers
//!   ([`Gpu::partials`]).
//! - `batch`: many small tensors packed in one buffer, one dispatch, one readback
//!   ([`Gpu::partials_batch`]).
//! - `resident`: data already on the device (for benchmarks), with timestamp queries
//!   ([`Gpu::upload`], [`GpuTensor`]).
//! - `pair_kernel`: the (bench, device) pair pass of `pair.wgsl` ([`Gpu::pair_partials`]).
//!
//! Only f32, f16 and bf16 are handled here ([`Gpu::supports`]); 16-bit types are read as packed
//! u32 words, so no adapter feature beyond plain WebGPU is needed.

mod batch;
mod context;
mod pair_kernel;
mod resident;
mod stats_kernel;
mod stream;
mod timing;

use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::{DType, Elems, Partials, TensorView};

pub use pair_kernel::{PAIR_SUM_REL_TOL, PairParams, PairPartials, PairTiming};
pub use resident::GpuTensor;
pub use timing::CopyTiming;
/// The wgpu this crate was built with, for [`Gpu::adapter_info`], [`Gpu::device`] and the like.
pub use wgpu;

/// What went wrong on the GPU path.
#[derive(Clone, Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter (or none matching the requested one); the text names the missing driver.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("the GPU path does not handle {0:?} tensors (only f32, f16 and bf16)")]
    Unsupported(DType),
    /// Device creation, allocation or submission failed.
    #[error("GPU device error: {0}")]
    Device(String),
    /// Mapping a staging or readback buffer failed.
    #[error("GPU buffer mapping failed: {0}")]
    Map(String),
    /// A [`GpuTensor`] was used with a [`Gpu`] other than the one that uploaded it.
    #[error("GPU tensor belongs to another Gpu")]
    ForeignTensor,
}

/// Which adapter to open. The library reads no environment variable for this choice (wgpu
/// itself honours `WGPU_BACKEND` when it enumerates adapters); a program that lets its users
/// pick an adapter by name passes [`AdapterChoice::NameContains`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AdapterChoice {
    /// The best available: discrete before integrated before virtual before CPU.
    #[default]
    Auto,
    /// A CPU adapter (lavapipe).
    Cpu,
    /// The first adapter whose name contains this (case-insensitive).
    NameContains(String),
}

/// Options of [`Gpu::new`].
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// Bytes per chunk; `None` = min(binding limit, buffer limit, 1 GiB). Rounded down to a
    /// multiple of 256 and clamped to the adapter's limits. Tests set a few KiB to exercise the
    /// multi-chunk paths with little data.
    pub chunk_bytes: Option<u64>,
    pub adapter: AdapterChoice,
    /// Upper bound on workgroups per chunk; `None` = 32 on CPU adapters (lavapipe slows down
    /// with many workgroups), 4096 elsewhere.
    pub workgroups: Option<u32>,
}

/// Default chunk cap: well below the 2 GiB a Vulkan binding can never reach.
const MAX_CHUNK: u64 = 1 << 30;

/// The opened device, the compiled pipelines and reusable buffers.
pub struct Gpu {
    ctx: context::Context,
    kernels: stats_kernel::Kernels,
    /// The (bench, device) pair kernel, compiled on first use.
    pair_kernel: OnceLock<pair_kernel::PairKernel>,
    chunk_bytes: u64,
    workgroups: u32,
    /// Staging ring and record buffers, reused across calls; one user at a time.
    state: Mutex<stream::State>,
    timer: Option<timing::Timer>,
    /// Identifies this Gpu to the [`GpuTensor`]s it uploads.
    id: u64,
    /// Queue submissions so far (each carries at most one reduction dispatch).
    submissions: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.ctx.info.name)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("workgroups", &self.workgroups)
            .finish()
    }
}

impl Gpu {
    /// Opens the adapter `opts` names and compiles the statistics pipelines (the pair
    /// pipelines are compiled on first use). Opening costs tens to hundreds of milliseconds:
    /// open one and keep it (or let an [`Engine`](crate::Engine) do so).
    pub fn new(opts: GpuOptions) -> Result<Gpu, GpuError> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let ctx = context::Context::open(&opts.adapter)?;
        let kernels = stats_kernel::Kernels::new(&ctx.device);
        let limit = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size)
            .min(MAX_CHUNK);
        let chunk_bytes = match opts.chunk_bytes {
            Some(c) => c.min(limit) & !255,
            // Whole MiB keeps every offset aligned for any adapter.
            None => limit & !((1 << 20) - 1),
        }
        .max(256);
        let workgroups =
            opts.workgroups
                .unwrap_or(if ctx.info.device_type == wgpu::DeviceType::Cpu {
                    32
                } else {
                    4096
                });
        let workgroups = workgroups
            .clamp(1, ctx.limits.max_compute_workgroups_per_dimension)
            .min(stream::MAX_WORKGROUPS);
        let timer = ctx.timestamps.then(|| timing::Timer::new(&ctx));
        Ok(Gpu {
            ctx,
            kernels,
            pair_kernel: OnceLock::new(),
            chunk_bytes,
            workgroups,
            state: Mutex::new(stream::State::default()),
            timer,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            submissions: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Element types the GPU path reduces: float32, float16 and bfloat16.
    pub fn supports(dtype: DType) -> bool {
        stats_kernel::kind_of(dtype).is_some()
    }

    /// Statistics of one tensor of any size, streamed in chunks.
    pub fn partials(&self, view: &TensorView) -> Result<Partials, GpuError> {
        let mut state = self.lock_state();
        let result = stream::partials(self, &mut state, view);
        if result.is_err() {
            // A failure can leave a staging buffer half mapped: start afresh next time.
            *state = stream::State::default();
        }
        result
    }

    /// Statistics of many tensors: small ones are packed into one buffer and reduced by one
    /// dispatch and one readback (several only when they exceed one chunk); a tensor larger
    /// than a chunk is streamed on its own.
    pub fn partials_batch(&self, views: &[TensorView]) -> Result<Vec<Partials>, GpuError> {
        let mut state = self.lock_state();
        let result = batch::partials_batch(self, &mut state, views);
        if result.is_err() {
            *state = stream::State::default();
        }
        result
    }

    /// Error counts, error maxima and sums, ULP statistics, cosine inputs and compare's tensor
    /// metrics of a (bench, device) pair in one pass over both arrays (see [`PairPartials`]);
    /// either side holds f32, f16 or bf16 elements (other dtypes are
    /// [`GpuError::Unsupported`]; a [`TensorView`] gives its elements with
    /// [`TensorView::elems`]). Lengths beyond the shorter are ignored. Upload and record
    /// buffers are kept for the next call.
    pub fn pair_partials(
        &self,
        bench: Elems<'_>,
        device: Elems<'_>,
        params: &PairParams,
    ) -> Result<PairPartials, GpuError> {
        let (bench, device) = (
            pair_kernel::Side::new(bench)?,
            pair_kernel::Side::new(device)?,
        );
        // One user of the device's queue at a time, like the other entry points.
        let _state = self.lock_state();
        pair_kernel::pair_partials(self, bench, device, params)
    }

    fn pair(&self) -> &pair_kernel::PairKernel {
        self.pair_kernel
            .get_or_init(|| pair_kernel::PairKernel::new(&self.ctx.device))
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.ctx.info
    }

    /// Bytes per chunk in use.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Upper bound on workgroups per dispatch in use.
    pub fn workgroups(&self) -> u32 {
        self.workgroups
    }

    /// Whether kernel times can be measured with timestamp queries.
    pub fn has_timestamps(&self) -> bool {
        self.timer.is_some()
    }

    /// Command submissions made so far by this Gpu; a batch that fits one chunk costs one.
    pub fn submissions(&self) -> u64 {
        self.submissions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Submits one command buffer, counting it.
    fn submit(&self, enc: wgpu::CommandEncoder) -> wgpu::SubmissionIndex {
        self.submissions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.ctx.queue.submit([enc.finish()])
    }

    pub fn device(&self) -> &wgpu::Device {
        &self.ctx.device
    }

    pub fn queue(&self) -> &wgpu::Queue {
        &self.ctx.queue
    }

    fn lock_state(&self) -> MutexGuard<'_, stream::State> {
        self.state.lock().unwrap_or_else(|poisoned| {
            let mut s = poisoned.into_inner();
            *s = stream::State::default();
            s
        })
    }
}

/// Blocks until the device has finished all work submitted so far.
fn wait_idle(device: &wgpu::Device) -> Result<(), GpuError> {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map(|_| ())
        .map_err(|e| GpuError::Device(format!("waiting for the device: {e}")))
}

/// Runs `f` (which creates buffers) and turns an out-of-memory error into [`GpuError::Device`].
fn allocating<T>(device: &wgpu::Device, what: &str, f: impl FnOnce() -> T) -> Result<T, GpuError> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let value = f();
    match pollster::block_on(scope.pop()) {
        None => Ok(value),
        Some(e) => Err(GpuError::Device(format!("allocating {what}: {e}"))),
    }
}

/// Maps `buffer[..len]` for reading, waits, and copies it out.
fn read_buffer(
    device: &wgpu::Device,
    buffer: &wgpu::Buffer,
    len: u64,
) -> Result<Vec<u8>, GpuError> {
    let (tx, rx) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, ..len, move |r| {
        let _ = tx.send(r);
    });
    wait_idle(device)?;
    match rx.try_recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(GpuError::Map(format!("readback: {e}"))),
        Err(_) => return Err(GpuError::Map("readback: map callback never ran".into())),
    }
    let bytes = buffer
        .get_mapped_range(..len)
        .map_err(|e| GpuError::Map(format!("readback range: {e}")))?
        .to_vec();
    buffer.unmap();
    Ok(bytes)
}
