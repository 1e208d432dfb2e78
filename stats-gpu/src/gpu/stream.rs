//! One tensor of any size: chunks go through a ring of two reused MAP_WRITE staging buffers, so
//! the host copies chunk k+1 while the device reduces chunk k. Reusing the staging memory is what
//! makes uploads fast (fresh staging memory costs page faults; see notes/wgpu-on-ci.md §5).

use std::sync::mpsc;

use super::stats_kernel::{self, RECORD_BYTES, WORD};
use super::{Gpu, GpuError, allocating, read_buffer};
use crate::{Partials, TensorView};

/// Highest workgroup count per dispatch (the WebGPU per-dimension limit).
pub(crate) const MAX_WORKGROUPS: u32 = 65535;
/// Chunks whose records are collected before one readback.
const FLUSH_CHUNKS: u64 = 16;

type MapResult = Result<(), wgpu::BufferAsyncError>;

/// Buffers kept between calls.
#[derive(Default)]
pub(crate) struct State {
    pub ring: Option<Ring>,
}

pub(crate) struct Slot {
    pub staging: wgpu::Buffer,
    pub data: wgpu::Buffer,
    chunk_bg: wgpu::BindGroup,
    /// The map request issued after the last submission that read `staging`.
    pending: Option<(mpsc::Receiver<MapResult>, wgpu::SubmissionIndex)>,
}

impl Slot {
    /// Waits until `staging` is mapped for writing again.
    pub fn acquire(&mut self, device: &wgpu::Device) -> Result<(), GpuError> {
        let Some((rx, index)) = self.pending.take() else {
            return Ok(());
        };
        let mut poll = wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        };
        for _ in 0..2 {
            device
                .poll(poll)
                .map_err(|e| GpuError::Device(format!("waiting for a staging buffer: {e}")))?;
            match rx.try_recv() {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => return Err(GpuError::Map(format!("staging buffer: {e}"))),
                Err(mpsc::TryRecvError::Empty) => poll = wgpu::PollType::wait_indefinitely(),
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        }
        Err(GpuError::Map(
            "staging buffer: map callback never ran".into(),
        ))
    }

    /// Copies `bytes` to the start of the (acquired) staging buffer, zero-pads to a whole word
    /// and unmaps it. The source may have any alignment.
    pub fn fill(&mut self, parts: &[(u64, &[u8])], end: u64) -> Result<(), GpuError> {
        {
            let mut view = self
                .staging
                .get_mapped_range_mut(..end.max(WORD))
                .map_err(|e| GpuError::Map(format!("staging range: {e}")))?;
            let mut at = 0usize;
            for &(offset, bytes) in parts {
                let offset = offset as usize;
                if offset > at {
                    view.slice(at..offset).fill(0);
                }
                view.slice(offset..offset + bytes.len())
                    .copy_from_slice(bytes);
                at = offset + bytes.len();
            }
            let end = end.max(WORD) as usize;
            if end > at {
                view.slice(at..end).fill(0);
            }
        }
        self.staging.unmap();
        Ok(())
    }

    /// Asks for `staging` to be mapped again once submission `index` is done.
    pub fn release(&mut self, index: wgpu::SubmissionIndex) {
        let (tx, rx) = mpsc::channel();
        self.staging.map_async(wgpu::MapMode::Write, .., move |r| {
            let _ = tx.send(r);
        });
        self.pending = Some((rx, index));
    }
}

pub(crate) struct Ring {
    /// Bytes per staging / data buffer.
    pub cap: u64,
    pub slots: [Slot; 2],
    params: wgpu::Buffer,
    out: wgpu::Buffer,
    out_rb: wgpu::Buffer,
    /// Lazily built buffers of the batch kernel, bound to `slots[..].data`.
    pub batch: Option<super::batch::BatchBufs>,
}

impl Ring {
    fn new(gpu: &Gpu, cap: u64) -> Result<Ring, GpuError> {
        let device = &gpu.ctx.device;
        let records = FLUSH_CHUNKS * u64::from(gpu.workgroups);
        allocating(device, "staging and record buffers", || {
            let buffer = |label: &str, size: u64, usage: wgpu::BufferUsages, mapped: bool| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: mapped,
                })
            };
            let params = buffer(
                "stats params",
                16,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                false,
            );
            let out = buffer(
                "stats records",
                records * RECORD_BYTES,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                false,
            );
            let out_rb = buffer(
                "stats records readback",
                records * RECORD_BYTES,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                false,
            );
            let slot = |i: usize| {
                let staging = buffer(
                    &format!("stats staging {i}"),
                    cap,
                    wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    true,
                );
                let data = buffer(
                    &format!("stats data {i}"),
                    cap,
                    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    false,
                );
                let chunk_bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("stats chunk"),
                    layout: &gpu.kernels.chunk_layout,
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: data.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: out.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: params.as_entire_binding(),
                        },
                    ],
                });
                Slot {
                    staging,
                    data,
                    chunk_bg,
                    pending: None,
                }
            };
            let slots = [slot(0), slot(1)];
            Ring {
                cap,
                slots,
                params,
                out,
                out_rb,
                batch: None,
            }
        })
    }
}

/// The ring, (re)built with at least `need` bytes per slot (rounded up to 1 MiB, at most one
/// chunk).
pub(crate) fn ring<'s>(
    gpu: &Gpu,
    state: &'s mut State,
    need: u64,
) -> Result<&'s mut Ring, GpuError> {
    let need = need.max(WORD).min(gpu.chunk_bytes);
    if state.ring.as_ref().is_none_or(|r| r.cap < need) {
        state.ring = None;
        let cap = need.next_multiple_of(1 << 20).min(gpu.chunk_bytes);
        state.ring = Some(Ring::new(gpu, cap)?);
    }
    Ok(state.ring.as_mut().expect("ring was just built"))
}

pub(crate) fn partials(
    gpu: &Gpu,
    state: &mut State,
    view: &TensorView,
) -> Result<Partials, GpuError> {
    let kind = stats_kernel::kind_of(view.dtype()).ok_or(GpuError::Unsupported(view.dtype()))?;
    let bytes = view.bytes();
    let mut result = Partials {
        count: view.numel() as u64,
        ..Partials::EMPTY
    };
    if bytes.is_empty() {
        return Ok(result);
    }
    let device = &gpu.ctx.device;
    let queue = &gpu.ctx.queue;
    let ring = ring(gpu, state, bytes.len() as u64)?;
    // Chunks are whole words (cap is a multiple of 256); only the last one has a tail.
    let chunk = ring.cap as usize;
    let first_words = (bytes.len().min(chunk) as u64).div_ceil(WORD);
    let wg = stats_kernel::workgroups_for(first_words, gpu.workgroups);
    let n_chunks = bytes.len().div_ceil(chunk);
    let mut in_flush = 0u64;
    for (k, piece) in bytes.chunks(chunk).enumerate() {
        let slot = &mut ring.slots[k % 2];
        slot.acquire(device)?;
        let len = piece.len() as u64;
        let padded = len.next_multiple_of(WORD);
        slot.fill(&[(0, piece)], padded)?;
        let (n_words, tail) = stats_kernel::split_words(len, view.dtype());
        let base = (in_flush * u64::from(wg)) as u32;
        queue.write_buffer(
            &ring.params,
            0,
            &stats_kernel::chunk_params(n_words, tail, base),
        );
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("stats chunk"),
        });
        enc.copy_buffer_to_buffer(&slot.staging, 0, &slot.data, 0, padded);
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("stats chunk"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&gpu.kernels.chunk[kind as usize]);
            pass.set_bind_group(0, &slot.chunk_bg, &[]);
            pass.dispatch_workgroups(wg, 1, 1);
        }
        in_flush += 1;
        let flush = in_flush == FLUSH_CHUNKS || k + 1 == n_chunks;
        let records = in_flush * u64::from(wg) * RECORD_BYTES;
        if flush {
            enc.copy_buffer_to_buffer(&ring.out, 0, &ring.out_rb, 0, records);
        }
        let index = gpu.submit(enc);
        slot.release(index);
        if flush {
            let recs = read_buffer(device, &ring.out_rb, records)?;
            stats_kernel::fold_records(&recs, &mut result);
            in_flush = 0;
        }
    }
    Ok(result)
}
