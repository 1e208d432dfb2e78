//! Tensors kept on the device, to measure the kernel without the upload (benchmarks, and callers
//! that reduce the same data more than once).

use std::time::Duration;

use super::stats_kernel::{self, RECORD_BYTES, WORD};
use super::{Gpu, GpuError, allocating, read_buffer};
use crate::{DType, Partials, TensorView};

struct Chunk {
    data: wgpu::Buffer,
    n_words: u32,
    tail: u32,
}

/// What depends on the workgroup count: per-chunk uniforms and bind groups, record buffers.
struct Dispatch {
    workgroups: u32,
    _params: Vec<wgpu::Buffer>,
    binds: Vec<wgpu::BindGroup>,
    out: wgpu::Buffer,
    out_rb: wgpu::Buffer,
}

/// A tensor uploaded by [`Gpu::upload`]: one device buffer per chunk.
pub struct GpuTensor {
    gpu_id: u64,
    dtype: DType,
    kind: u32,
    numel: u64,
    bytes: u64,
    chunks: Vec<Chunk>,
    dispatch: Dispatch,
}

impl std::fmt::Debug for GpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTensor")
            .field("dtype", &self.dtype)
            .field("numel", &self.numel)
            .field("chunks", &self.chunks.len())
            .field("workgroups", &self.dispatch.workgroups)
            .finish()
    }
}

impl GpuTensor {
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn numel(&self) -> u64 {
        self.numel
    }

    /// Bytes of the tensor (without padding).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Workgroups per chunk dispatch.
    pub fn workgroups(&self) -> u32 {
        self.dispatch.workgroups
    }
}

impl Gpu {
    /// Copies `view` to the device, in chunks of [`Gpu::chunk_bytes`].
    pub fn upload(&self, view: &TensorView) -> Result<GpuTensor, GpuError> {
        let kind =
            stats_kernel::kind_of(view.dtype()).ok_or(GpuError::Unsupported(view.dtype()))?;
        let device = &self.ctx.device;
        let bytes = view.bytes();
        let chunk = self.chunk_bytes as usize;
        let chunks = allocating(device, "resident tensor", || {
            bytes
                .chunks(chunk)
                .map(|piece| {
                    let padded = (piece.len() as u64).next_multiple_of(WORD);
                    let data = device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("resident chunk"),
                        size: padded,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: true,
                    });
                    {
                        let mut view = data.get_mapped_range_mut(..).expect("mapped at creation");
                        view.slice(..piece.len()).copy_from_slice(piece);
                        view.slice(piece.len()..).fill(0);
                    }
                    data.unmap();
                    let (n_words, tail) =
                        stats_kernel::split_words(piece.len() as u64, view.dtype());
                    Chunk {
                        data,
                        n_words,
                        tail,
                    }
                })
                .collect::<Vec<_>>()
        })?;
        let first_words = (bytes.len().min(chunk) as u64).div_ceil(WORD);
        let workgroups = stats_kernel::workgroups_for(first_words, self.workgroups);
        let dispatch = self.dispatch_for(&chunks, workgroups)?;
        Ok(GpuTensor {
            gpu_id: self.id,
            dtype: view.dtype(),
            kind,
            numel: view.numel() as u64,
            bytes: bytes.len() as u64,
            chunks,
            dispatch,
        })
    }

    /// Changes the workgroups per chunk dispatch of `t` (1 ..= 65535), e.g. to find the best
    /// count for an adapter.
    pub fn set_workgroups(&self, t: &mut GpuTensor, workgroups: u32) -> Result<(), GpuError> {
        if t.gpu_id != self.id {
            return Err(GpuError::ForeignTensor);
        }
        let max =
            super::stream::MAX_WORKGROUPS.min(self.ctx.limits.max_compute_workgroups_per_dimension);
        t.dispatch = self.dispatch_for(&t.chunks, workgroups.clamp(1, max))?;
        Ok(())
    }

    fn dispatch_for(&self, chunks: &[Chunk], workgroups: u32) -> Result<Dispatch, GpuError> {
        let device = &self.ctx.device;
        let records = (chunks.len() as u64 * u64::from(workgroups)).max(1);
        allocating(device, "resident records", || {
            let out = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("resident records"),
                size: records * RECORD_BYTES,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let out_rb = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("resident readback"),
                size: records * RECORD_BYTES,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let params: Vec<wgpu::Buffer> = chunks
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    let buf = device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("resident params"),
                        size: 16,
                        usage: wgpu::BufferUsages::UNIFORM,
                        mapped_at_creation: true,
                    });
                    let p = stats_kernel::chunk_params(c.n_words, c.tail, k as u32 * workgroups);
                    buf.get_mapped_range_mut(..)
                        .expect("mapped at creation")
                        .copy_from_slice(&p);
                    buf.unmap();
                    buf
                })
                .collect();
            let binds = chunks
                .iter()
                .zip(&params)
                .map(|(c, p)| {
                    device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some("resident chunk"),
                        layout: &self.kernels.chunk_layout,
                        entries: &[
                            wgpu::BindGroupEntry {
                                binding: 0,
                                resource: c.data.as_entire_binding(),
                            },
                            wgpu::BindGroupEntry {
                                binding: 1,
                                resource: out.as_entire_binding(),
                            },
                            wgpu::BindGroupEntry {
                                binding: 2,
                                resource: p.as_entire_binding(),
                            },
                        ],
                    })
                })
                .collect();
            Dispatch {
                workgroups,
                _params: params,
                binds,
                out,
                out_rb,
            }
        })
    }

    /// Statistics of an uploaded tensor: all chunks in one compute pass, one readback.
    pub fn partials_resident(&self, t: &GpuTensor) -> Result<Partials, GpuError> {
        Ok(self.run_resident(t, false)?.0)
    }

    /// As [`partials_resident`](Self::partials_resident), plus the time between the start and
    /// the end of the compute pass from timestamp queries (`None` when the adapter has none).
    pub fn partials_resident_timed(
        &self,
        t: &GpuTensor,
    ) -> Result<(Partials, Option<Duration>), GpuError> {
        self.run_resident(t, true)
    }

    fn run_resident(
        &self,
        t: &GpuTensor,
        timed: bool,
    ) -> Result<(Partials, Option<Duration>), GpuError> {
        if t.gpu_id != self.id {
            return Err(GpuError::ForeignTensor);
        }
        // The timestamp and readback buffers are shared: one user at a time.
        let _guard = self.lock_state();
        let mut result = Partials {
            count: t.numel,
            ..Partials::EMPTY
        };
        if t.chunks.is_empty() {
            return Ok((result, None));
        }
        let device = &self.ctx.device;
        let timer = self.timer.as_ref().filter(|_| timed);
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("resident stats"),
        });
        self.encode_resident(t, &mut enc, timer);
        let records = t.chunks.len() as u64 * u64::from(t.dispatch.workgroups) * RECORD_BYTES;
        enc.copy_buffer_to_buffer(&t.dispatch.out, 0, &t.dispatch.out_rb, 0, records);
        if let Some(tm) = timer {
            tm.resolve(&mut enc);
        }
        self.submit(enc);
        let recs = read_buffer(device, &t.dispatch.out_rb, records)?;
        stats_kernel::fold_records(&recs, &mut result);
        let elapsed = match timer {
            Some(tm) => Some(tm.read(&self.ctx)?),
            None => None,
        };
        Ok((result, elapsed))
    }

    /// All chunks of `t` in one compute pass, with timestamps around it when `timer` is given.
    pub(crate) fn encode_resident(
        &self,
        t: &GpuTensor,
        enc: &mut wgpu::CommandEncoder,
        timer: Option<&super::timing::Timer>,
    ) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("resident stats"),
            timestamp_writes: timer.map(|tm| tm.pass_writes()),
        });
        pass.set_pipeline(&self.kernels.chunk[t.kind as usize]);
        for bind in &t.dispatch.binds {
            pass.set_bind_group(0, bind, &[]);
            pass.dispatch_workgroups(t.dispatch.workgroups, 1, 1);
        }
    }
}
