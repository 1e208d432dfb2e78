//! Shared by the `gpu_*` test binaries: comparing GPU partials with the f64 reference, and
//! random data.
#![allow(dead_code)]

use stats_gpu::{DType, Partials, TensorView, reference};

/// Relative tolerance of `sum` (against Σ|x|) and of `sum_sq`; the kernel's bound is 4.8e-7
/// (see `stats_kernel.rs`).
pub const REL_TOL: f64 = 1e-6;

/// Element values of a float view, widened to f64.
pub fn values(view: &TensorView) -> Vec<f64> {
    let b = view.bytes();
    match view.dtype() {
        DType::F32 => b
            .chunks_exact(4)
            .map(|w| f64::from(f32::from_le_bytes(w.try_into().unwrap())))
            .collect(),
        DType::F16 => b
            .chunks_exact(2)
            .map(|w| half::f16::from_le_bytes(w.try_into().unwrap()).to_f64())
            .collect(),
        DType::BF16 => b
            .chunks_exact(2)
            .map(|w| half::bf16::from_le_bytes(w.try_into().unwrap()).to_f64())
            .collect(),
        other => panic!("not a GPU type: {other:?}"),
    }
}

/// `got` against the reference: counts, min and max exact; sums within [`REL_TOL`].
pub fn check(got: &Partials, view: &TensorView) -> Result<(), String> {
    let want = reference::partials(view);
    let abs_sum: f64 = values(view)
        .into_iter()
        .filter(|x| x.is_finite())
        .map(f64::abs)
        .sum();
    let ctx = || {
        format!(
            "{:?} x {}:\n got  {got:?}\n want {want:?}",
            view.dtype(),
            view.numel()
        )
    };
    if (
        got.count,
        got.nan_count,
        got.pos_inf_count,
        got.neg_inf_count,
    ) != (
        want.count,
        want.nan_count,
        want.pos_inf_count,
        want.neg_inf_count,
    ) {
        return Err(format!("counts differ: {}", ctx()));
    }
    // == treats -0 and +0 alike, as the reference's f64::min may return either.
    if got.min != want.min || got.max != want.max {
        return Err(format!("min/max differ: {}", ctx()));
    }
    if (got.sum - want.sum).abs() > REL_TOL * abs_sum {
        return Err(format!(
            "sum off by more than {REL_TOL}·Σ|x| = {}: {}",
            REL_TOL * abs_sum,
            ctx()
        ));
    }
    if (got.sum_sq - want.sum_sq).abs() > REL_TOL * want.sum_sq {
        return Err(format!(
            "sum_sq off by more than {REL_TOL} relative: {}",
            ctx()
        ));
    }
    if (got.int_min, got.int_max) != (i128::MAX, i128::MIN) {
        return Err(format!("int extremes set for a float tensor: {}", ctx()));
    }
    Ok(())
}

/// Deterministic xorshift, so that big cases need no proptest shrinking.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// `n` elements of `elem` drawn as `unit() * scale`, as little-endian bytes.
pub fn random_bytes(elem: DType, n: usize, scale: f64, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * elem.size());
    for _ in 0..n {
        let x = rng.unit() * scale;
        match elem {
            DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
            other => panic!("not a GPU type: {other:?}"),
        }
    }
    out
}
