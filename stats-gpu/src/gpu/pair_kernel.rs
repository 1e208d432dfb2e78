//! Pair reduction of `pair.wgsl`: one read of (bench, device) f32 arrays yields the error-rate
//! counts, the error maxima and sums and the ULP error statistics that `ulp::fused` computes for
//! an fp32 device with an fp32 bench, and the inf/nan re-check counts, (float32 working dtype, float64 ULP dtype).
//!
//! Each invocation writes its own record (no workgroup tree, no barriers); the host folds the
//! records in f64, chunk after chunk. Counts and maxima are exact: every element-wise operation
//! is a single correctly rounded f32 operation, as on the CPU, given an adapter whose f32
//! division is correctly rounded (lavapipe's is; Vulkan only requires 2.5 ULP).
//!
//! # Sums and their error
//!
//! `sum_sq`, `rel_sum` and the ULP errors are summed per invocation with Neumaier-compensated
//! f32 pairs (error about 2·2^-24 of Σ|x| plus O(k²·2^-48) for k elements per invocation), the
//! records then in f64. The ULP errors are summed from `round_f32(D - B)·2^t`, which is within
//! 2^-24 relative of the CPU's float64 term, split by magnitude (terms of 2^64 and more scaled
//! by 2^-160) so no f32 sum overflows. Together: well below [`PAIR_SUM_REL_TOL`] relative to
//! the sum (all terms are non-negative) for any k below ~10^5.
//!
//! The ULP maximum is taken on an exact integer key of `round_f32(D - B)·2^t`; the host turns it
//! back into a float. It equals the CPU's float64 value to within 2^-24 relative (the CPU rounds
//! `D - B` to 53 bits, here to 24).

use super::{Gpu, GpuError, allocating, read_buffer};

/// Words of one invocation's record (see `pair.wgsl`).
const RECORD_WORDS: u64 = 30;
/// Invocations per workgroup.
const WG_SIZE: u32 = 256;

/// Relative tolerance of the GPU sums (`sum_sq`, `rel_sum`, `sum_ulp`) against an exact sum.
pub const PAIR_SUM_REL_TOL: f64 = 1e-5;

/// Thresholds of one comparison, as f32 (the working dtype).
#[derive(Clone, Debug)]
pub struct PairParams {
    pub eps: f32,
    pub small_value: f32,
    pub atol_benchmark: f32,
    pub atol_threshold: f32,
    pub rtol: f32,
    pub accumulative_bound: f32,
    /// The error-rate thresholds (0.01, 0.001, 0.0001 as f32).
    pub rel_thresholds: [f32; 3],
    /// ULP mantissa bits (23) and minimum exponent (-126).
    pub ulp_mant: i32,
    pub ulp_emin: i32,
    /// log2 of the ULP threshold (5: 32 ULP); only powers of two are handled.
    pub ulp_threshold_exp: i32,
    /// Largest t for which 2^t is finite in the bench dtype (127 for float32).
    pub factor_t_max: i32,
    /// Per biased f32 exponent: the lowest mantissa from which the bench dtype's `log2` rounds
    /// up to the next integer; 0x800000 for none.
    pub log2_bump: Box<[u32; 256]>,
    /// The device dtype's finite range (clip of the inf/nan re-check).
    pub clip_max: f32,
    /// Elements per chunk (0: as many as a chunk of this Gpu holds). Tests set a few hundred.
    pub chunk_elems: usize,
}

/// What one pass gathers, folded over all elements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairPartials {
    pub n: u64,
    pub lt_hundredth: u64,
    pub lt_thousandth: u64,
    pub lt_ten_thousandth: u64,
    pub inf_nan: u64,
    pub small: u64,
    pub small_err_benchmark: u64,
    pub small_err_threshold: u64,
    pub normal_rel_err: u64,
    pub acc_small: u64,
    pub acc_small_err: u64,
    pub acc_normal: u64,
    pub acc_normal_rel_err: u64,
    pub up: u64,
    pub down: u64,
    pub not_equal: u64,
    pub rel_valid: u64,
    pub ulp_over: u64,
    /// Non-finite positions failing the inf/nan re-check with `rtol` / the accumulative bound.
    pub inf_nan_fail_rtol: u64,
    pub inf_nan_fail_bound: u64,
    /// max |D - B|, NaN if any is NaN, -inf when empty.
    pub max_abs_err: f64,
    pub sum_sq: f64,
    /// max of the masked relative error (-1 at masked positions), -inf when empty.
    pub max_rel: f64,
    pub rel_sum: f64,
    /// NaN if any ULP error is NaN (so is `sum_ulp`).
    pub max_ulp: f64,
    pub sum_ulp: f64,
}

pub(crate) struct PairKernel {
    layout: wgpu::BindGroupLayout,
    pipeline: wgpu::ComputePipeline,
}

fn entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl PairKernel {
    pub fn new(device: &wgpu::Device) -> PairKernel {
        // Checked shader (runtime bounds checks kept): a first slice, not yet tuned.
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("pair.wgsl"),
            source: wgpu::ShaderSource::Wgsl(include_str!("pair.wgsl").into()),
        });
        let ro = wgpu::BufferBindingType::Storage { read_only: true };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("pair"),
            entries: &[
                entry(0, ro),
                entry(1, ro),
                entry(2, wgpu::BufferBindingType::Storage { read_only: false }),
                entry(3, wgpu::BufferBindingType::Uniform),
                entry(4, ro),
            ],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("pair"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("pair_chunk"),
            layout: Some(&pl),
            module: &module,
            entry_point: Some("pair_chunk"),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        PairKernel { layout, pipeline }
    }
}

fn uniform_bytes(p: &PairParams, n: u32) -> [u8; 64] {
    let f = |x: f32| x.to_bits();
    let i = |x: i32| x as u32;
    let words = [
        n,
        f(p.eps),
        f(p.small_value),
        f(p.atol_benchmark),
        f(p.atol_threshold),
        f(p.rtol),
        f(p.accumulative_bound),
        i(p.ulp_threshold_exp),
        f(p.rel_thresholds[0]),
        f(p.rel_thresholds[1]),
        f(p.rel_thresholds[2]),
        i(p.ulp_mant),
        i(p.ulp_emin),
        i(p.factor_t_max),
        0x7f80_0000,
        f(p.clip_max),
    ];
    let mut out = [0u8; 64];
    for (k, w) in words.into_iter().enumerate() {
        out[4 * k..4 * k + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Folds records into `acc`; `key` carries the running ULP maximum key.
fn fold(bytes: &[u8], acc: &mut PairPartials, key: &mut (u32, u32), nan_ulp: &mut bool) {
    for rec in bytes.chunks_exact(RECORD_WORDS as usize * 4) {
        let w = |i: usize| u32::from_le_bytes(rec[4 * i..4 * i + 4].try_into().unwrap());
        let f = |i: usize| f64::from(f32::from_bits(w(i)));
        let c = |i: usize| u64::from(w(i));
        acc.lt_hundredth += c(0);
        acc.lt_thousandth += c(1);
        acc.lt_ten_thousandth += c(2);
        acc.inf_nan += c(3);
        acc.small += c(4);
        acc.small_err_benchmark += c(5);
        acc.small_err_threshold += c(6);
        acc.normal_rel_err += c(7);
        acc.acc_small += c(8);
        acc.acc_small_err += c(9);
        acc.acc_normal += c(10);
        acc.acc_normal_rel_err += c(11);
        acc.up += c(12);
        acc.down += c(13);
        acc.not_equal += c(14);
        acc.rel_valid += c(15);
        acc.ulp_over += c(16);
        acc.inf_nan_fail_rtol += c(27);
        acc.inf_nan_fail_bound += c(28);
        let max_abs = if w(17) > 0 { f64::NAN } else { f(19) };
        acc.max_abs_err = nan_max(acc.max_abs_err, max_abs);
        *nan_ulp |= w(18) > 0;
        acc.sum_sq += f(20);
        acc.max_rel = nan_max(acc.max_rel, f(21));
        acc.rel_sum += f(22);
        if (w(23), w(24)) > *key {
            *key = (w(23), w(24));
        }
        acc.sum_ulp += f(25) + f(26) * 2f64.powi(160);
    }
}

/// The ULP value of a maximum key: 0 = none, 1 = zero, all ones = inf, else (biased exponent,
/// mantissa fraction).
fn key_value(key: (u32, u32)) -> f64 {
    match key.0 {
        0 => f64::NEG_INFINITY,
        1 => 0.0,
        u32::MAX => f64::INFINITY,
        e => (1.0 + f64::from(key.1) / 8_388_608.0) * 2f64.powi(e as i32 - 1024),
    }
}

pub(crate) fn pair_partials(
    gpu: &Gpu,
    bench: &[f32],
    device: &[f32],
    p: &PairParams,
) -> Result<PairPartials, GpuError> {
    let n = bench.len().min(device.len());
    let mut acc = PairPartials {
        n: n as u64,
        max_abs_err: f64::NEG_INFINITY,
        max_rel: f64::NEG_INFINITY,
        ..PairPartials::default()
    };
    if n == 0 {
        acc.max_ulp = f64::NEG_INFINITY;
        return Ok(acc);
    }
    let dev = &gpu.ctx.device;
    let queue = &gpu.ctx.queue;
    let limit = (gpu.chunk_bytes / 4) as usize;
    let chunk = if p.chunk_elems == 0 {
        limit
    } else {
        p.chunk_elems.min(limit)
    }
    .clamp(1, n);
    let wg = (chunk as u64)
        .div_ceil(u64::from(WG_SIZE) * 4)
        .clamp(1, u64::from(gpu.workgroups)) as u32;
    let invocations = u64::from(wg * WG_SIZE);
    let rec_bytes = invocations * RECORD_WORDS * 4;
    let data_bytes = (chunk as u64 * 4).next_multiple_of(16);
    let (bufs, bind) = allocating(dev, "pair buffers", || {
        let buf = |label: &str, size: u64, usage: wgpu::BufferUsages| {
            dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        let store = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let b = buf("pair bench", data_bytes, store);
        let d = buf("pair device", data_bytes, store);
        let out = buf(
            "pair records",
            rec_bytes,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        );
        let rb = buf(
            "pair readback",
            rec_bytes,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let uni = buf(
            "pair params",
            64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let table = buf("pair log2 table", 1024, store);
        let bind = dev.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("pair"),
            layout: &gpu.pair().layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: b.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: d.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: out.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: uni.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 4,
                    resource: table.as_entire_binding(),
                },
            ],
        });
        ([b, d, out, rb, uni, table], bind)
    })?;
    let [b_buf, d_buf, out, rb, uni, table] = &bufs;
    queue.write_buffer(table, 0, bytemuck::cast_slice(&p.log2_bump[..]));
    let mut key = (0u32, 0u32);
    let mut nan_ulp = false;
    for (bc, dc) in bench[..n].chunks(chunk).zip(device[..n].chunks(chunk)) {
        queue.write_buffer(b_buf, 0, bytemuck::cast_slice(bc));
        queue.write_buffer(d_buf, 0, bytemuck::cast_slice(dc));
        queue.write_buffer(uni, 0, &uniform_bytes(p, bc.len() as u32));
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("pair chunk"),
        });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("pair chunk"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&gpu.pair().pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(wg, 1, 1);
        }
        enc.copy_buffer_to_buffer(out, 0, rb, 0, rec_bytes);
        gpu.submit(enc);
        let recs = read_buffer(dev, rb, rec_bytes)?;
        fold(&recs, &mut acc, &mut key, &mut nan_ulp);
    }
    if nan_ulp {
        // A NaN ULP error makes both the maximum and the sum NaN, as on the CPU.
        acc.max_ulp = f64::NAN;
        acc.sum_ulp = f64::NAN;
    } else {
        acc.max_ulp = key_value(key);
    }
    Ok(acc)
}
