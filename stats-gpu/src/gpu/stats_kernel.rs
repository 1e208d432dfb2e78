//! Pipelines of `stats.wgsl` and the host side of its records.
//!
//! # Summation order and error bound
//!
//! Each invocation walks its words in grid-stride order. A block of 4 words (16 f32 or 32 16-bit
//! values; 1 word near the end) is summed in plain f32 as a balanced tree (depth <= 5), then added
//! to the invocation's Neumaier-compensated (sum, compensation) pair. The 256 pairs of a
//! workgroup are folded as a tree of compensated pair additions; the host folds the per-workgroup
//! pairs (`sum + compensation`) in f64 in record order, and merges chunks with
//! [`Partials::merge`](crate::Partials::merge).
//!
//! With u = 2^-24, N the elements of one invocation and S1 = Σ|x|, that gives
//! `|sum - exact| <= (5u + 2u + O(N u²)) · S1` (block tree, compensated accumulation, workgroup
//! fold) plus f64 rounding, i.e. below `4.5e-7 · Σ|x|` for any tensor this crate can see.
//! `sum_sq` adds only non-negative terms, each square rounded once, so its relative error is
//! below `8u ≈ 4.8e-7`, plus at most 2^-150 per element whose square underflows inside a block
//! that holds larger values (a block is at least 2^-100, so this is below 2^-90 relative).
//! Overflow and underflow are avoided by splitting the sums by magnitude (see `stats.wgsl`):
//! values of 2^32 and more are summed scaled by 2^-80, tiny values' squares are scaled by 2^174.
//! Tests check `1e-6 · Σ|x|` for the sum and `1e-6 · sum_sq` for the sum of squares.

use crate::{DType, Partials};

/// Invocations per workgroup (the `@workgroup_size` of both entry points).
pub(crate) const WG_SIZE: u32 = 256;
/// Words (vec4<u32>) per invocation per iteration of the main loop.
pub(crate) const UNROLL: u32 = 4;
/// Bytes of one workgroup record.
pub(crate) const RECORD_BYTES: u64 = 64;
/// Bytes of one word.
pub(crate) const WORD: u64 = 16;
pub(crate) const INF_BITS: u32 = 0x7f80_0000;

/// Element kind as the shader numbers it, or `None` when the GPU path does not handle it.
pub(crate) fn kind_of(elem: DType) -> Option<u32> {
    match elem {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::BF16 => Some(2),
        _ => None,
    }
}

pub(crate) struct Kernels {
    pub chunk_layout: wgpu::BindGroupLayout,
    pub batch_layout: wgpu::BindGroupLayout,
    /// Indexed by [`kind_of`].
    pub chunk: [wgpu::ComputePipeline; 3],
    pub batch: wgpu::ComputePipeline,
}

fn storage(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

fn uniform(binding: u32) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl Kernels {
    pub fn new(device: &wgpu::Device) -> Kernels {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some("stats.wgsl"),
            source: wgpu::ShaderSource::Wgsl(include_str!("stats.wgsl").into()),
        };
        // SAFETY: without runtime checks an out-of-bounds access or an endless loop would be
        // undefined behaviour; the shader has neither. Every index is below the bound the host
        // sized the buffer for: `data[i + 3g]` with `i + 3g < n_words`, the tail word `data[n]`
        // only when the chunk has one (its padded copy holds it), records at
        // `out_base + workgroup < records` (one record per workgroup per chunk), batch tasks
        // below `n_tasks <= MAX_TASKS` words of a table of MAX_TASKS rows, vector lanes below 4.
        // Every loop counter moves towards its bound without wrapping (indices < 2^28, strides
        // < 2^24). The checks would add a compare per load and a counter per iteration to the
        // hot loop, where a 16-bit tensor already spends several ALU operations per byte.
        let module = unsafe {
            device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        };
        let chunk_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("stats chunk"),
            entries: &[storage(0, true), storage(1, false), uniform(2)],
        });
        let batch_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("stats batch"),
            entries: &[
                storage(3, true),
                storage(4, false),
                uniform(5),
                storage(6, true),
            ],
        });
        let pipeline = |layout: &wgpu::BindGroupLayout, entry: &str, kind: u32| {
            let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(entry),
                bind_group_layouts: &[Some(layout)],
                immediate_size: 0,
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &[("KIND", f64::from(kind))],
                    // Every shared slot is written before it is read.
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            })
        };
        let chunk = [0, 1, 2].map(|k| pipeline(&chunk_layout, "stats_chunk", k));
        let batch = pipeline(&batch_layout, "stats_batch", 0);
        Kernels {
            chunk_layout,
            batch_layout,
            chunk,
            batch,
        }
    }
}

/// Folds workgroup records (16 little-endian words each) into `into`, leaving `count` alone.
pub(crate) fn fold_records(bytes: &[u8], into: &mut Partials) {
    for rec in bytes.chunks_exact(RECORD_BYTES as usize) {
        into.merge(&decode_record(rec));
    }
}

/// One record as partials with `count` 0 (the host knows the count from the size).
pub(crate) fn decode_record(rec: &[u8]) -> Partials {
    let w = |i: usize| u32::from_le_bytes(rec[4 * i..4 * i + 4].try_into().unwrap());
    let f = |i: usize| f64::from(f32::from_bits(w(i)));
    // sum + compensation of pair starting at word i.
    let pair = |i: usize| f(i) + f(i + 1);
    let sum = pair(5) + pair(7) * 2f64.powi(80);
    let sum_sq = pair(9) * 2f64.powi(-174) + pair(11) + pair(13) * 2f64.powi(160);
    Partials {
        count: 0,
        nan_count: u64::from(w(2)),
        pos_inf_count: u64::from(w(3)),
        neg_inf_count: u64::from(w(4)),
        min: f(0),
        max: f(1),
        sum,
        sum_sq,
        ..Partials::EMPTY
    }
}

/// Workgroups for `words` words: enough that every invocation has a few iterations of work, at
/// most `target`.
pub(crate) fn workgroups_for(words: u64, target: u32) -> u32 {
    let per_wg = u64::from(WG_SIZE * UNROLL) * 2;
    words.div_ceil(per_wg).clamp(1, u64::from(target.max(1))) as u32
}

/// The 16-byte uniform of `stats_chunk`.
pub(crate) fn chunk_params(n_words: u32, tail_elems: u32, out_base: u32) -> [u8; 16] {
    let mut p = [0u8; 16];
    for (i, v) in [n_words, tail_elems, out_base, INF_BITS]
        .into_iter()
        .enumerate()
    {
        p[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    p
}

/// Whole words and tail elements of `bytes` bytes of `elem`.
pub(crate) fn split_words(bytes: u64, elem: DType) -> (u32, u32) {
    let words = bytes / WORD;
    let tail = (bytes % WORD) / elem.size() as u64;
    (words as u32, tail as u32)
}
