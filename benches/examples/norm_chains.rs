//! Whether the float32 statistics pass is bound by its norm's chain of dependent adds: two
//! tensors' sums of squares one after the other against the same two chains interleaved in one
//! loop (an accumulator of 8 lanes each, torch's norm order within each tensor), beside the
//! capture's own pass (`torch_order::fused`) on the two tensors. If interleaving halves the
//! time, reading a call's large tensors together would too.
//!
//! usage: norm_chains [elements per tensor]   (default: 65536, a 256 x 256 weight)
use std::hint::black_box;
use std::time::Instant;

use stats_gpu::torch_order::fused;

const LANES: usize = 8;

fn chain(xs: &[f32]) -> [f32; LANES] {
    let mut acc = [0f32; LANES];
    for v in xs.chunks_exact(LANES) {
        for (a, x) in acc.iter_mut().zip(v) {
            *a += x * x;
        }
    }
    acc
}

fn two_chains(xs: &[f32], ys: &[f32]) -> ([f32; LANES], [f32; LANES]) {
    let (mut a, mut b) = ([0f32; LANES], [0f32; LANES]);
    for (v, w) in xs.chunks_exact(LANES).zip(ys.chunks_exact(LANES)) {
        for l in 0..LANES {
            a[l] += v[l] * v[l];
            b[l] += w[l] * w[l];
        }
    }
    (a, b)
}

/// Best µs of `f` over `reps` calls, out of 5 rounds.
fn best_us(reps: usize, mut f: impl FnMut() -> f32) -> f64 {
    let mut best = f64::INFINITY;
    let mut sink = 0f32;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            sink += f();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    black_box(sink);
    best * 1e6
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(65536, |a| a.parse().expect("elements"));
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i as f32 * 0.61).cos()).collect();
    let reps = (1 << 30) / (n * 8).max(1);
    let serial = best_us(reps, || chain(black_box(&xs))[0] + chain(black_box(&ys))[0]);
    let paired = best_us(reps, || {
        let (a, b) = two_chains(black_box(&xs), black_box(&ys));
        a[0] + b[0]
    });
    let pass = best_us(reps, || {
        fused(black_box(&xs)).norm + fused(black_box(&ys)).norm
    });
    let gbs = |us: f64| (2 * n * 4) as f64 / us / 1e3;
    println!("two tensors of {n} float32, read hot; µs for both (GB/s):");
    println!(
        "  chains one after the other  {serial:8.2} ({:.1})",
        gbs(serial)
    );
    println!(
        "  chains interleaved          {paired:8.2} ({:.1})",
        gbs(paired)
    );
    println!(
        "  torch_order::fused, twice   {pass:8.2} ({:.1})",
        gbs(pass)
    );
}
