//! Pair reduction of `pair.wgsl`: one read of a (bench f32, device f32/f16/bf16) pair yields
//! the error-rate counts, the error maxima and sums, the ULP error statistics and the cosine
//! inputs that `ulp::fused` computes for a float32 working dtype, and the inf/nan re-check
//! counts.
//!
//! Each invocation folds its elements (four per step, vector loads), each workgroup folds its
//! 256 invocations in shared memory and writes one record; the host folds the records in f64,
//! chunk after chunk. Counts and maxima are exact: every element-wise operation is a single
//! correctly rounded f32 operation, as on the CPU, given an adapter whose f32 division is
//! correctly rounded (lavapipe's is; Vulkan only requires 2.5 ULP).
//!
//! # Sums and their error
//!
//! `sum_sq`, `rel_sum` and the ULP errors are summed with Neumaier-compensated f32 pairs
//! (sum and compensation both reach the host), so each is within about 2·2^-24 of Σ|x|
//! (all terms are non-negative: relative to the sum) — see [`PAIR_SUM_REL_TOL`]. The ULP
//! errors are summed from `round_f32(D - B)·2^t`, within 2^-24 relative of the CPU's float64
//! term, split by magnitude (terms of 2^64 and more scaled by 2^-160) so no f32 sum overflows.
//!
//! The cosine inputs `dot`, `dd`, `bb` sum exact (Dekker) products in compensated pairs plus
//! the summed low parts: about 2^-46 of Σ|x·y|. Elements outside [2^-50, 2^50] (other than 0)
//! are left out of them and counted in `cos_out_of_range`; callers redo the cosine sums on the
//! CPU when that count is not 0.
//!
//! The ULP maximum is taken on an exact integer key of `round_f32(D - B)·2^t` and, for a
//! float64 ULP dtype, the rounding error of that difference (TwoSum); the host turns it back
//! into the float the CPU gets (`D - B` rounded to 53 bits, or to 24 for a float32 ULP dtype).
//! The ULP proportion count is exact likewise.
//!
//! # Buffers
//!
//! The staging ring (two MAP_WRITE buffers), the storage, record and readback buffers and
//! their bind groups are kept between calls and only grow: repeated pairs allocate nothing.

use std::sync::{Mutex, OnceLock, mpsc};

use super::{Gpu, GpuError, allocating};
use crate::Elems;

/// Words of one workgroup's record (see `pair.wgsl`).
const RECORD_WORDS: u64 = 60;
const RECORD_BYTES: u64 = RECORD_WORDS * 4;
/// Invocations per workgroup.
const WG_SIZE: u64 = 256;

/// Relative tolerance of the GPU sums (`sum_sq`, `rel_sum`, `sum_ulp`) against an exact sum.
pub const PAIR_SUM_REL_TOL: f64 = 1e-5;

/// One side of a pair as the kernel reads it: float32, or 16-bit floats read as packed words.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Side<'a> {
    bytes: &'a [u8],
    /// Bytes per element.
    size: usize,
    /// The shader's storage format: 0 f32, 1 f16, 2 bf16.
    format: usize,
}

impl<'a> Side<'a> {
    /// The side of `elems`; dtypes other than f32, f16 and bf16 are [`GpuError::Unsupported`].
    pub(crate) fn new(elems: Elems<'a>) -> Result<Side<'a>, GpuError> {
        let format = match elems {
            Elems::F32(_) => 0,
            Elems::F16(_) => 1,
            Elems::BF16(_) => 2,
            other => return Err(GpuError::Unsupported(other.dtype())),
        };
        Ok(Side {
            bytes: elems.bytes(),
            size: elems.dtype().size(),
            format,
        })
    }

    fn len(&self) -> usize {
        self.bytes.len() / self.size
    }

    fn elem_bytes(&self) -> u64 {
        self.size as u64
    }

    fn format(&self) -> usize {
        self.format
    }

    fn bytes(&self, range: std::ops::Range<usize>) -> &'a [u8] {
        &self.bytes[range.start * self.size..range.end * self.size]
    }
}

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
    /// Largest binary exponent of a finite ULP error in the ULP dtype (127 for float32, 1023
    /// for float64); larger products are inf.
    pub ulp_max_exp: i32,
    /// Per biased f32 exponent: the lowest mantissa from which the bench dtype's `log2` rounds
    /// up to the next integer; 0x800000 for none.
    pub log2_bump: Box<[u32; 256]>,
    /// The device dtype's finite range (clip of the inf/nan re-check).
    pub clip_max: f32,
    /// The bench is cast to float16 for the finiteness and sign tests (an fp16 device).
    pub round_bench_f16: bool,
    /// Elements per chunk (0: as many as a chunk of this Gpu holds); rounded down to a
    /// multiple of 4. Tests set a few hundred.
    pub chunk_elems: usize,
}

impl PairParams {
    /// Parameters for compare's tensor metrics (the `cmp_` fields, the cosine inputs and
    /// `nonfinite`, which no threshold affects); the standards' fields are then meaningless.
    pub fn for_compare(chunk_elems: usize) -> PairParams {
        PairParams {
            eps: f32::EPSILON,
            small_value: 2f32.powi(-20),
            atol_benchmark: 2f32.powi(-30),
            atol_threshold: 2f32.powi(-30),
            rtol: 2f32.powi(-20),
            accumulative_bound: 2f32.powi(-11),
            rel_thresholds: [0.01, 0.001, 0.0001],
            ulp_mant: 23,
            ulp_emin: -126,
            ulp_threshold_exp: 5,
            factor_t_max: 127,
            ulp_max_exp: 1023,
            log2_bump: Box::new([0x80_0000; 256]),
            clip_max: f32::MAX,
            round_bench_f16: false,
            chunk_elems,
        }
    }
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
    /// compare's tensor metrics over the elements where both sides are finite: max |D - B|
    /// (the float64 difference), max of `|(D' - B') / B'|` in float32 (eps added to both where
    /// B == 0), its counts below 0.001 and 0.005, and Σ(D - B)² (float64 differences).
    pub cmp_max_abs: f64,
    pub cmp_max_rel: f64,
    pub cmp_lt_thousandth: u64,
    pub cmp_lt_five_thousandths: u64,
    pub cmp_sum_sq: f64,
    /// Elements where D or B is inf or NaN (left out of the `cmp_` fields).
    pub nonfinite: u64,
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
    /// max |D| and max |B|: NaN if that side holds a NaN, -inf when empty.
    pub max_abs_device: f64,
    pub max_abs_bench: f64,
    /// Σ D·B, Σ D², Σ B² over the elements inside the cosine range.
    pub dot: f64,
    pub dd: f64,
    pub bb: f64,
    /// Elements with |D| or |B| above 2^50 (or not finite), left out of the sums above.
    pub cos_out_of_range: u64,
}

type MapResult = Result<(), wgpu::BufferAsyncError>;

/// One slot of the upload ring.
struct Slot {
    staging: wgpu::Buffer,
    bench: wgpu::Buffer,
    device: wgpu::Buffer,
    records: wgpu::Buffer,
    readback: wgpu::Buffer,
    params: wgpu::Buffer,
    bind: wgpu::BindGroup,
    /// The staging buffer's pending map (after the submission that last read it).
    staging_map: Option<(mpsc::Receiver<MapResult>, wgpu::SubmissionIndex)>,
}

/// Buffers kept between calls.
struct PairBuffers {
    /// Bench bytes and device bytes per chunk the buffers hold.
    bench_cap: u64,
    device_cap: u64,
    record_cap: u64,
    table: wgpu::Buffer,
    slots: [Slot; 2],
}

pub(crate) struct PairKernel {
    layout: wgpu::BindGroupLayout,
    module: wgpu::ShaderModule,
    pipeline_layout: wgpu::PipelineLayout,
    /// Pipelines per (bench, device) storage format (f32, f16, bf16), compiled on first use.
    pipelines: [[OnceLock<wgpu::ComputePipeline>; 3]; 3],
    buffers: Mutex<Option<PairBuffers>>,
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
                entry(5, ro),
                entry(6, ro),
            ],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("pair"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        PairKernel {
            layout,
            module,
            pipeline_layout: pl,
            pipelines: Default::default(),
            buffers: Mutex::new(None),
        }
    }

    fn pipeline(
        &self,
        device: &wgpu::Device,
        bench_fmt: usize,
        dev_fmt: usize,
    ) -> &wgpu::ComputePipeline {
        self.pipelines[bench_fmt][dev_fmt].get_or_init(|| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("pair_chunk"),
                layout: Some(&self.pipeline_layout),
                module: &self.module,
                entry_point: Some("pair_chunk"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &[("BENCH_FMT", bench_fmt as f64), ("DEV_FMT", dev_fmt as f64)],
                    ..Default::default()
                },
                cache: None,
            })
        })
    }
}

fn uniform_bytes(p: &PairParams, n: u32) -> [u8; 80] {
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
        i(p.ulp_max_exp),
        u32::from(p.round_bench_f16),
        0,
        0,
    ];
    let mut out = [0u8; 80];
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

/// Running fold of the records.
struct Fold {
    acc: PairPartials,
    key: (u32, u32, u32),
    nan_ulp: bool,
    nan_d: bool,
    nan_b: bool,
    cmp_abs_key: (u32, u32),
}

impl Fold {
    fn records(&mut self, bytes: &[u8]) {
        let acc = &mut self.acc;
        for rec in bytes.chunks_exact(RECORD_BYTES as usize) {
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
            self.nan_ulp |= w(18) > 0;
            acc.sum_sq += f(20) + f(29);
            acc.max_rel = nan_max(acc.max_rel, f(21));
            acc.rel_sum += f(22) + f(30);
            if (w(23), w(24), w(47)) > self.key {
                self.key = (w(23), w(24), w(47));
            }
            acc.sum_ulp += (f(25) + f(31)) + (f(26) + f(32)) * 2f64.powi(160);
            acc.max_abs_device = acc.max_abs_device.max(f(33));
            acc.max_abs_bench = acc.max_abs_bench.max(f(34));
            self.nan_d |= w(35) > 0;
            self.nan_b |= w(36) > 0;
            acc.cos_out_of_range += c(37);
            acc.dot += (f(38) + f(39)) + f(40);
            acc.dd += (f(41) + f(42)) + f(43);
            acc.bb += (f(44) + f(45)) + f(46);
            let abs_key = (w(48), w(49));
            if abs_key > self.cmp_abs_key {
                self.cmp_abs_key = abs_key;
            }
            acc.cmp_max_rel = acc.cmp_max_rel.max(f(50));
            acc.cmp_lt_thousandth += c(51);
            acc.cmp_lt_five_thousandths += c(52);
            acc.cmp_sum_sq += (f(53) + f(54)) + f(55) + (f(57) + f(58)) * 2f64.powi(-120);
            acc.nonfinite += c(56);
        }
    }

    fn finish(mut self) -> PairPartials {
        let acc = &mut self.acc;
        if self.nan_ulp {
            // A NaN ULP error makes both the maximum and the sum NaN, as on the CPU.
            acc.max_ulp = f64::NAN;
            acc.sum_ulp = f64::NAN;
        } else {
            acc.max_ulp = key_value(self.key);
        }
        if self.nan_d {
            acc.max_abs_device = f64::NAN;
        }
        acc.cmp_max_abs = match self.cmp_abs_key {
            (0, 0) => f64::NEG_INFINITY,
            (s, e) => f64::from(f32::from_bits(s)) + decode_err(e),
        };
        if self.nan_b {
            acc.max_abs_bench = f64::NAN;
        }
        self.acc
    }
}

/// The ULP value of a maximum key: 0 = none, 1 = zero, all ones = inf, else (biased exponent,
/// mantissa fraction, rounding error of the f32 difference relative to its binade, encoded to
/// order as integers). The f64 sum rounds |D - B| as a float64 subtraction does.
fn key_value(key: (u32, u32, u32)) -> f64 {
    match key.0 {
        0 => f64::NEG_INFINITY,
        1 => 0.0,
        u32::MAX => f64::INFINITY,
        e => {
            ((1.0 + f64::from(key.1) / 8_388_608.0) + decode_err(key.2))
                * 2f64.powi(e as i32 - 1024)
        }
    }
}

/// An error term from its order-preserving encoding (0 = none).
fn decode_err(k: u32) -> f64 {
    if k == 0 {
        return 0.0;
    }
    let bits = if k & 0x8000_0000 != 0 {
        k & 0x7fff_ffff
    } else {
        !k
    };
    f64::from(f32::from_bits(bits))
}

fn buffers(
    gpu: &Gpu,
    kernel: &PairKernel,
    bench_cap: u64,
    device_cap: u64,
    record_cap: u64,
) -> Result<PairBuffers, GpuError> {
    let dev = &gpu.ctx.device;
    allocating(dev, "pair buffers", || {
        let buf = |label: &str, size: u64, usage: wgpu::BufferUsages, mapped: bool| {
            dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: mapped,
            })
        };
        let store = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let table = buf("pair log2 table", 1040, store, false);
        fn bind_entry(binding: u32, b: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
            wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            }
        }
        let slot = |_: usize| {
            let staging = buf(
                "pair staging",
                bench_cap + device_cap,
                wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                true,
            );
            let bench = buf("pair bench", bench_cap, store, false);
            let device = buf("pair device", device_cap, store, false);
            let records = buf(
                "pair records",
                record_cap,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                false,
            );
            let readback = buf(
                "pair readback",
                record_cap,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                false,
            );
            let params = buf(
                "pair params",
                80,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                false,
            );
            let bind = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("pair"),
                layout: &kernel.layout,
                entries: &[
                    bind_entry(0, &bench),
                    bind_entry(1, &device),
                    bind_entry(2, &records),
                    bind_entry(3, &params),
                    bind_entry(4, &table),
                    bind_entry(5, &device),
                    bind_entry(6, &bench),
                ],
            });
            Slot {
                staging,
                bench,
                device,
                records,
                readback,
                params,
                bind,
                staging_map: None,
            }
        };
        let slots = [slot(0), slot(1)];
        PairBuffers {
            bench_cap,
            device_cap,
            record_cap,
            table,
            slots,
        }
    })
}

/// Waits for `index` (and what came before it), then for the map callback behind `rx`.
fn wait_map(
    dev: &wgpu::Device,
    rx: &mpsc::Receiver<MapResult>,
    index: wgpu::SubmissionIndex,
    what: &str,
) -> Result<(), GpuError> {
    let mut poll = wgpu::PollType::Wait {
        submission_index: Some(index),
        timeout: None,
    };
    for _ in 0..2 {
        dev.poll(poll)
            .map_err(|e| GpuError::Device(format!("waiting for the {what}: {e}")))?;
        match rx.try_recv() {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => return Err(GpuError::Map(format!("{what}: {e}"))),
            Err(mpsc::TryRecvError::Empty) => poll = wgpu::PollType::wait_indefinitely(),
            Err(mpsc::TryRecvError::Disconnected) => break,
        }
    }
    Err(GpuError::Map(format!("{what}: map callback never ran")))
}

/// Maps a slot's readback after `index`, folds its records and unmaps it.
fn read_records(
    dev: &wgpu::Device,
    slot: &Slot,
    len: u64,
    index: wgpu::SubmissionIndex,
    fold: &mut Fold,
) -> Result<(), GpuError> {
    let (tx, rx) = mpsc::channel();
    slot.readback
        .map_async(wgpu::MapMode::Read, ..len, move |r| {
            let _ = tx.send(r);
        });
    wait_map(dev, &rx, index, "pair readback")?;
    {
        let view = slot
            .readback
            .get_mapped_range(..len)
            .map_err(|e| GpuError::Map(format!("pair readback range: {e}")))?;
        fold.records(&view);
    }
    slot.readback.unmap();
    Ok(())
}

pub(crate) fn pair_partials(
    gpu: &Gpu,
    bench: Side<'_>,
    device: Side<'_>,
    p: &PairParams,
) -> Result<PairPartials, GpuError> {
    let n = bench.len().min(device.len());
    let mut fold = Fold {
        acc: PairPartials {
            n: n as u64,
            max_abs_err: f64::NEG_INFINITY,
            max_rel: f64::NEG_INFINITY,
            max_abs_device: f64::NEG_INFINITY,
            max_abs_bench: f64::NEG_INFINITY,
            cmp_max_abs: f64::NEG_INFINITY,
            cmp_max_rel: f64::NEG_INFINITY,
            ..PairPartials::default()
        },
        key: (0, 0, 0),
        nan_ulp: false,
        nan_d: false,
        nan_b: false,
        cmp_abs_key: (0, 0),
    };
    if n == 0 {
        return Ok(fold.finish());
    }
    let kernel = gpu.pair();
    let mut cache = kernel
        .buffers
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let result = run(gpu, kernel, &mut cache, bench, device, n, p, &mut fold);
    if result.is_err() {
        // A failure can leave a buffer mapped or a map pending: start afresh next time.
        *cache = None;
    }
    result.map(|()| fold.finish())
}

#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    kernel: &PairKernel,
    cache: &mut Option<PairBuffers>,
    bench: Side<'_>,
    device: Side<'_>,
    n: usize,
    p: &PairParams,
    fold: &mut Fold,
) -> Result<(), GpuError> {
    let dev = &gpu.ctx.device;
    let queue = &gpu.ctx.queue;
    // A chunk's bench bytes fit one binding (device bytes are at most as many).
    let limit = (gpu.chunk_bytes / 4) as usize;
    let chunk = if p.chunk_elems == 0 {
        limit
    } else {
        p.chunk_elems.min(limit)
    };
    let chunk = (chunk & !3).max(4).min(n.next_multiple_of(4));
    let quads = (chunk / 4) as u64;
    let wg = quads.div_ceil(WG_SIZE).clamp(1, u64::from(gpu.workgroups)) as u32;
    let rec_bytes = u64::from(wg) * RECORD_BYTES;
    let bench_bytes = chunk as u64 * 4;
    let device_bytes = (chunk as u64 * device.elem_bytes()).next_multiple_of(16);
    if cache.as_ref().is_none_or(|b| {
        b.bench_cap < bench_bytes || b.device_cap < device_bytes || b.record_cap < rec_bytes
    }) {
        *cache = None;
        let (bc, dc, rc) = cache
            .as_ref()
            .map_or((0, 0, 0), |b| (b.bench_cap, b.device_cap, b.record_cap));
        *cache = Some(buffers(
            gpu,
            kernel,
            bench_bytes.max(bc),
            device_bytes.max(dc).max(bench_bytes),
            rec_bytes.max(rc),
        )?);
    }
    let bufs = cache.as_mut().expect("pair buffers were just built");
    // The log2 table, then 1.0 for the shader's `opaque` (and padding).
    let mut table = p.log2_bump.to_vec();
    table.extend([1f32.to_bits(), 0, 0, 0]);
    queue.write_buffer(&bufs.table, 0, bytemuck::cast_slice(&table));
    let pipeline = kernel.pipeline(dev, bench.format(), device.format());
    let bench_cap = bufs.bench_cap;
    // The previous chunk's readback, folded once the next chunk is under way.
    let mut pending: Option<(usize, wgpu::SubmissionIndex)> = None;
    for (k, start) in (0..n).step_by(chunk).enumerate() {
        let end = (start + chunk).min(n);
        let s = k % 2;
        let slot = &mut bufs.slots[s];
        if let Some((rx, index)) = slot.staging_map.take() {
            wait_map(dev, &rx, index, "pair staging buffer")?;
        }
        let b_bytes = bench.bytes(start..end);
        let d_bytes = device.bytes(start..end);
        let b_len = (b_bytes.len() as u64).next_multiple_of(16);
        let d_len = (d_bytes.len() as u64).next_multiple_of(16);
        {
            let mut view = slot
                .staging
                .get_mapped_range_mut(..bench_cap + d_len)
                .map_err(|e| GpuError::Map(format!("pair staging range: {e}")))?;
            view.slice(..b_bytes.len()).copy_from_slice(b_bytes);
            let d0 = bench_cap as usize;
            view.slice(d0..d0 + d_bytes.len()).copy_from_slice(d_bytes);
        }
        slot.staging.unmap();
        queue.write_buffer(&slot.params, 0, &uniform_bytes(p, (end - start) as u32));
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("pair chunk"),
        });
        enc.copy_buffer_to_buffer(&slot.staging, 0, &slot.bench, 0, b_len);
        enc.copy_buffer_to_buffer(&slot.staging, bench_cap, &slot.device, 0, d_len);
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("pair chunk"),
                timestamp_writes: None,
            });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &slot.bind, &[]);
            pass.dispatch_workgroups(wg, 1, 1);
        }
        enc.copy_buffer_to_buffer(&slot.records, 0, &slot.readback, 0, rec_bytes);
        let index = gpu.submit(enc);
        let (tx, rx) = mpsc::channel();
        slot.staging.map_async(wgpu::MapMode::Write, .., move |r| {
            let _ = tx.send(r);
        });
        slot.staging_map = Some((rx, index.clone()));
        if let Some((ps, pi)) = pending.replace((s, index)) {
            read_records(dev, &bufs.slots[ps], rec_bytes, pi, fold)?;
        }
    }
    if let Some((ps, pi)) = pending {
        read_records(dev, &bufs.slots[ps], rec_bytes, pi, fold)?;
    }
    Ok(())
}

/// Kernel time of the pair pass on data already on the device (see
/// [`Gpu::pair_resident_timing`]).
#[derive(Clone, Debug)]
pub struct PairTiming {
    /// The partials of the first (uploading) pass.
    pub partials: PairPartials,
    /// Best wall-clock time per dispatch, from batches of back-to-back dispatches.
    pub best: std::time::Duration,
    pub workgroups: u32,
    /// Bytes the kernel reads per dispatch (both inputs).
    pub bytes: u64,
}

impl Gpu {
    /// Uploads a pair that fits one chunk, reduces it once (the returned partials), then times
    /// `reps` back-to-back dispatches over the resident buffers, three times, and keeps the
    /// best time per dispatch (for bandwidth measurements; the records are re-read once).
    pub fn pair_resident_timing(
        &self,
        bench: Elems<'_>,
        device: Elems<'_>,
        params: &PairParams,
        reps: u32,
    ) -> Result<PairTiming, GpuError> {
        let (bench, device) = (Side::new(bench)?, Side::new(device)?);
        let n = bench.len().min(device.len());
        let chunk = (self.chunk_bytes / 4) as usize;
        if n == 0 || n > chunk {
            return Err(GpuError::Device(format!(
                "resident pair timing needs 1..={chunk} elements (one chunk), got {n}"
            )));
        }
        let _state = self.lock_state();
        let partials = pair_partials(self, bench, device, params)?;
        let kernel = self.pair();
        let cache = kernel
            .buffers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let bufs = cache
            .as_ref()
            .ok_or_else(|| GpuError::Device("pair buffers missing after a pass".into()))?;
        // The single chunk ran in slot 0, whose buffers and parameters still hold it.
        let slot = &bufs.slots[0];
        let quads = n.div_ceil(4) as u64;
        let wg = quads.div_ceil(WG_SIZE).clamp(1, u64::from(self.workgroups)) as u32;
        let dev = &self.ctx.device;
        let pipeline = kernel.pipeline(dev, bench.format(), device.format());
        let mut best = std::time::Duration::MAX;
        for _ in 0..3 {
            let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("pair timing"),
            });
            for _ in 0..reps.max(1) {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("pair timing"),
                    timestamp_writes: None,
                });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &slot.bind, &[]);
                pass.dispatch_workgroups(wg, 1, 1);
            }
            let start = std::time::Instant::now();
            let index = self.submit(enc);
            dev.poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| GpuError::Device(format!("waiting for the timing run: {e}")))?;
            best = best.min(start.elapsed() / reps.max(1));
        }
        let bytes = n as u64 * (bench.elem_bytes() + device.elem_bytes());
        Ok(PairTiming {
            partials,
            best,
            workgroups: wg,
            bytes,
        })
    }
}
