//! The fused pass on the GPU (feature `gpu`): stats-gpu's pair kernel, fed with this crate's
//! thresholds and log2 semantics, for an fp32 device compared with an fp32 bench.
//!
//! GPU-computed (each field mirrors the one of [`FusedStats`](crate::fused::FusedStats) for
//! `W = f32`, `U = f64`): `n`, the three error-rate counts, `inf_nan`, the benchmark and
//! absolute-threshold masks and error counts, the accumulative masks and counts, `up`, `down`,
//! `not_equal`, `rel_valid`, `ulp_over`, `inf_nan_fail_rtol`, `inf_nan_fail_bound` (exact); `max_abs_err`, `max_rel` (exact); `max_ulp`
//! (within 2^-24 relative); `sum_sq`, `rel_sum`, `sum_ulp` (within
//! [`PAIR_SUM_REL_TOL`](stats_gpu::gpu::PAIR_SUM_REL_TOL) relative while invocations see few
//! elements, see stats-gpu's `pair_kernel.rs`).
//!
//! Not GPU-computed yet: the cosine inputs (`dot`, `dd`, `bb`, `max_abs_device`, `max_abs_bench`), numpy's exact
//! float32 summation order (`rel_sum_exact`), f16/bf16/f64 data.

use std::sync::OnceLock;

use stats_gpu::gpu::{Gpu, GpuError, PairParams, PairPartials};

use crate::elem::Elem;
use crate::elem::FloatKind;
use crate::fused::{DeviceFamily, Params};

/// Per biased float32 exponent, the lowest mantissa whose `floor(log2|x|)` (as this crate's
/// CPU path computes it) is one above the exponent; 0x800000 where none is. `None` if that
/// set is not a contiguous top range of the binade (then a table cannot express it).
fn log2_bump() -> Option<&'static [u32; 256]> {
    static TABLE: OnceLock<Option<Box<[u32; 256]>>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let mut t = Box::new([0x80_0000u32; 256]);
            for ef in 1u32..255 {
                let e = f64::from(ef as i32 - 127);
                let bumped = |m: u32| f32::from_bits((ef << 23) | m).floor_log2_abs() > e;
                let mut lowest = 0x80_0000;
                for m in (0..0x80_0000u32).rev() {
                    if !bumped(m) {
                        break;
                    }
                    lowest = m;
                }
                // Below the top range, every mantissa must give the exponent itself; the CPU
                // path only consults log2 in the binade's top 4097 mantissas.
                let start = lowest.saturating_sub(4200);
                if (start..lowest).any(bumped) {
                    return None;
                }
                t[ef as usize] = lowest;
            }
            Some(t)
        })
        .as_deref()
}

/// Why the GPU pass cannot run.
#[derive(Debug, thiserror::Error)]
pub enum GpuFusedError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("the float32 log2 of this platform is not monotonic near binade tops")]
    Log2Table,
}

/// Pair parameters for an fp32 device and an fp32 bench; `chunk_elems` 0 = the Gpu's chunk.
pub fn pair_params_f32(chunk_elems: usize) -> Result<PairParams, GpuFusedError> {
    let p = Params::new(DeviceFamily::F32, FloatKind::F32, FloatKind::F32);
    let (mant, emin) = p.ulp.expect("fp32 has ULP parameters");
    let f = |x: f64| x as f32;
    Ok(PairParams {
        eps: f(p.eps),
        small_value: f(p.small_value),
        atol_benchmark: f(p.atol_benchmark),
        atol_threshold: f(p.atol_threshold),
        rtol: f(p.rtol),
        accumulative_bound: f(p.accumulative_bound),
        rel_thresholds: [0.01, 0.001, 0.0001],
        ulp_mant: mant,
        ulp_emin: emin,
        // fp32 thresholds the kernel compares by exponent: 32 = 2^5.
        ulp_threshold_exp: p.ulp_threshold.log2() as i32,
        factor_t_max: 127,
        log2_bump: Box::new(*log2_bump().ok_or(GpuFusedError::Log2Table)?),
        clip_max: f(p.clip_max),
        chunk_elems,
    })
}

/// The GPU-computed subset of the fused statistics of an fp32 (bench, device) pair; field
/// meanings as in `FusedStats` (maxima in f64, exactly the f32 values the CPU path gives).
pub fn gpu_fused_f32(
    gpu: &Gpu,
    bench: &[f32],
    device: &[f32],
    chunk_elems: usize,
) -> Result<PairPartials, GpuFusedError> {
    let params = pair_params_f32(chunk_elems)?;
    Ok(gpu.pair_partials(bench, device, &params)?)
}
