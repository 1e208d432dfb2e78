//! Many small tensors in one dispatch: they are packed word-aligned into one staging buffer, an
//! offsets table splits them into tasks of at most [`TASK_WORDS`] words, each 32-invocation
//! segment of a workgroup reduces one task (so a workgroup's barriers serve 8 small tensors),
//! and one readback brings every task's record home. A dispatch + readback costs
//! 56–91 µs on an H200, so one per tensor would dominate a training step's thousands of tensors.

use super::stats_kernel::{self, RECORD_BYTES, WG_SIZE, WORD};
use super::stream::{self, State};
use super::{Gpu, GpuError, allocating, read_buffer};
use crate::{Partials, TensorView};

/// Invocations per task (`SEG` in the shader).
const SEG: u64 = 32;
/// Tasks a workgroup reduces at once.
const TASKS_PER_WG: u32 = WG_SIZE / SEG as u32;
/// Words per task: eight iterations of the unrolled loop for one segment (a 4096-element f32
/// tensor is one task).
const TASK_WORDS: u64 = SEG * stats_kernel::UNROLL as u64 * 8;
/// Tasks per dispatch (records: 16 MiB; table: 4 MiB).
const MAX_TASKS: u64 = 1 << 18;

/// Buffers of the batch kernel, bound to one ring's data buffers.
pub(crate) struct BatchBufs {
    params: wgpu::Buffer,
    tasks: wgpu::Buffer,
    out: wgpu::Buffer,
    out_rb: wgpu::Buffer,
    bind: [wgpu::BindGroup; 2],
}

impl BatchBufs {
    fn new(gpu: &Gpu, data: [&wgpu::Buffer; 2]) -> Result<BatchBufs, GpuError> {
        let device = &gpu.ctx.device;
        allocating(device, "batch buffers", || {
            let buffer = |label: &str, size: u64, usage: wgpu::BufferUsages| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            };
            let params = buffer(
                "batch params",
                16,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            );
            let tasks = buffer(
                "batch tasks",
                MAX_TASKS * 16,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            );
            let out = buffer(
                "batch records",
                MAX_TASKS * RECORD_BYTES,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            );
            let out_rb = buffer(
                "batch records readback",
                MAX_TASKS * RECORD_BYTES,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            );
            let bind = data.map(|d| {
                device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("stats batch"),
                    layout: &gpu.kernels.batch_layout,
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 3,
                            resource: d.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 4,
                            resource: out.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 5,
                            resource: params.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 6,
                            resource: tasks.as_entire_binding(),
                        },
                    ],
                })
            });
            BatchBufs {
                params,
                tasks,
                out,
                out_rb,
                bind,
            }
        })
    }
}

fn tasks_of(len: u64) -> u64 {
    (len / WORD).div_ceil(TASK_WORDS).max(1)
}

pub(crate) fn partials_batch(
    gpu: &Gpu,
    state: &mut State,
    views: &[TensorView],
) -> Result<Vec<Partials>, GpuError> {
    if let Some(v) = views.iter().find(|v| !Gpu::supports(v.dtype())) {
        return Err(GpuError::Unsupported(v.dtype()));
    }
    let mut results: Vec<Partials> = views
        .iter()
        .map(|v| Partials {
            count: v.numel() as u64,
            ..Partials::EMPTY
        })
        .collect();
    let mut group: Vec<usize> = Vec::new();
    let (mut group_bytes, mut group_tasks) = (0u64, 0u64);
    let mut slot = 0usize;
    for (i, v) in views.iter().enumerate() {
        let len = v.bytes().len() as u64;
        if len == 0 {
            continue;
        }
        let padded = len.next_multiple_of(WORD);
        if padded > gpu.chunk_bytes {
            // Too big to share a binding: stream it alone.
            results[i] = stream::partials(gpu, state, v)?;
            continue;
        }
        let tasks = tasks_of(len);
        if group_bytes + padded > gpu.chunk_bytes || group_tasks + tasks > MAX_TASKS {
            run_group(gpu, state, views, &group, group_bytes, slot, &mut results)?;
            slot ^= 1;
            group.clear();
            (group_bytes, group_tasks) = (0, 0);
        }
        group.push(i);
        group_bytes += padded;
        group_tasks += tasks;
    }
    if !group.is_empty() {
        run_group(gpu, state, views, &group, group_bytes, slot, &mut results)?;
    }
    Ok(results)
}

/// Packs `group` (indices into `views`, `bytes` in all once padded) into one staging slot,
/// reduces it with one dispatch and folds the task records into `results`.
fn run_group(
    gpu: &Gpu,
    state: &mut State,
    views: &[TensorView],
    group: &[usize],
    bytes: u64,
    slot: usize,
    results: &mut [Partials],
) -> Result<(), GpuError> {
    let device = &gpu.ctx.device;
    let queue = &gpu.ctx.queue;
    let ring = stream::ring(gpu, state, bytes)?;
    if ring.batch.is_none() {
        let data = [&ring.slots[0].data, &ring.slots[1].data];
        ring.batch = Some(BatchBufs::new(gpu, data)?);
    }
    let bufs = ring.batch.as_ref().expect("batch buffers were just built");
    let slot_ref = &mut ring.slots[slot];
    slot_ref.acquire(device)?;

    let mut parts: Vec<(u64, &[u8])> = Vec::with_capacity(group.len());
    let mut table: Vec<u8> = Vec::new();
    let mut owners: Vec<usize> = Vec::new();
    let mut offset = 0u64;
    for &i in group {
        let v = &views[i];
        let kind = stats_kernel::kind_of(v.dtype()).expect("checked by partials_batch");
        let len = v.bytes().len() as u64;
        parts.push((offset, v.bytes()));
        let (words, tail) = stats_kernel::split_words(len, v.dtype());
        let words = u64::from(words);
        let n_tasks = tasks_of(len);
        for t in 0..n_tasks {
            let start = t * TASK_WORDS;
            let n = TASK_WORDS.min(words - start);
            let last = t + 1 == n_tasks;
            let row = [
                ((offset / WORD) + start) as u32,
                n as u32,
                if last { tail } else { 0 },
                kind,
            ];
            row.iter()
                .for_each(|x| table.extend_from_slice(&x.to_le_bytes()));
            owners.push(i);
        }
        offset += len.next_multiple_of(WORD);
    }
    slot_ref.fill(&parts, offset)?;
    let n_tasks = owners.len() as u32;
    queue.write_buffer(&bufs.tasks, 0, &table);
    let mut params = [0u8; 16];
    params[..4].copy_from_slice(&n_tasks.to_le_bytes());
    params[4..8].copy_from_slice(&stats_kernel::INF_BITS.to_le_bytes());
    queue.write_buffer(&bufs.params, 0, &params);

    // Each workgroup takes TASKS_PER_WG tasks per round and loops; few workgroups on CPU
    // adapters, where each one costs, one round each on GPUs as far as the limit allows.
    let rounds_of_all = n_tasks.div_ceil(TASKS_PER_WG);
    let cap = if gpu.ctx.info.device_type == wgpu::DeviceType::Cpu {
        gpu.workgroups
    } else {
        super::stream::MAX_WORKGROUPS
    };
    let x = rounds_of_all
        .min(cap)
        .min(gpu.ctx.limits.max_compute_workgroups_per_dimension)
        .max(1);
    let records = u64::from(n_tasks) * RECORD_BYTES;
    let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("stats batch"),
    });
    enc.copy_buffer_to_buffer(&slot_ref.staging, 0, &slot_ref.data, 0, offset.max(WORD));
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("stats batch"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&gpu.kernels.batch);
        pass.set_bind_group(0, &bufs.bind[slot], &[]);
        pass.dispatch_workgroups(x, 1, 1);
    }
    enc.copy_buffer_to_buffer(&bufs.out, 0, &bufs.out_rb, 0, records);
    let index = gpu.submit(enc);
    slot_ref.release(index);
    let recs = read_buffer(device, &bufs.out_rb, records)?;
    for (rec, &owner) in recs.chunks_exact(RECORD_BYTES as usize).zip(&owners) {
        results[owner].merge(&stats_kernel::decode_record(rec));
    }
    Ok(())
}
