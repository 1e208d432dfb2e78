//! Shared helpers for the benchmarks.

/// Deterministic, roughly normal bench values and a device/NPU copy with ~1e-3 relative noise
/// (xorshift64; the same numbers on every run and machine), for the accuracy-metric benches.
pub fn noisy_pair(n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let b = (next() + next() + next() - 1.5) * 2.0;
            (b, b * (1.0 + (next() - 0.5) * 2e-3))
        })
        .unzip()
}
