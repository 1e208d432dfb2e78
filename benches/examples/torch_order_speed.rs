//! Throughput of the capture hot path: the float32 statistics pass in torch's summation
//! order (statistics mode), the same pass with the CRC-32 (md5 mode), and at two torch threads
//! (Mean summed in two chunks) the pass followed by a second one for the chunks' sums against
//! the one pass carrying them (`fused_threads`), on tensors read hot (the same buffer again)
//! and cold (a rotation of buffers larger than the cache, like a training step's parameters
//! and gradients).
//!
//! usage: torch_order_speed [MiB ...]   (default: 1 9 64)
use std::time::Instant;

use stats_gpu::torch_order::{fused, fused_crc32, fused_portable, fused_threads, torch_sum};

/// Best bytes per second of `f` over every buffer of `bufs`, out of `rounds` rounds.
fn rate<F: FnMut(&[f32]) -> f32>(bufs: &[Vec<f32>], rounds: usize, mut f: F) -> f64 {
    let mut best = f64::INFINITY;
    let mut sink = 0f32;
    for _ in 0..rounds {
        let t = Instant::now();
        for b in bufs {
            sink += f(b);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    let bytes: usize = bufs.iter().map(|b| b.len() * 4).sum();
    bytes as f64 / best / 1e9
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("size in MiB"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1, 9, 64]
    } else {
        sizes
    };
    let mut seed: u32 = 7;
    println!(
        "GB/s (best of rounds)   portable    simd   crc32 alone   simd, then crc32   simd+crc32 in blocks   2 threads: simd, then chunk sums   chunk sums in the pass"
    );
    for mib in sizes {
        let n = (mib << 20) / 4;
        let count = (1024 / mib).max(1);
        let bufs: Vec<Vec<f32>> = (0..count)
            .map(|_| {
                (0..n)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                    })
                    .collect()
            })
            .collect();
        let reps = (1024 / mib).clamp(3, 100);
        for (label, set, rounds) in [("hot ", &bufs[..1], reps), ("cold", &bufs[..], 3)] {
            let crc = |x: &[f32]| crc32fast::hash(bytemuck::cast_slice(x)) as f32;
            let port = rate(set, rounds, |x| fused_portable(x).norm);
            let simd = rate(set, rounds, |x| fused(x).norm);
            let c = rate(set, rounds, crc);
            let two = rate(set, rounds, |x| fused(x).norm + crc(x));
            let one = rate(set, rounds, |x| {
                let (f, c) = fused_crc32(x);
                f.norm + c as f32
            });
            let chunks_after = rate(set, rounds, |x| fused(x).norm + torch_sum(x, 2));
            let chunks_in = rate(set, rounds, |x| {
                let f = fused_threads(x, 2);
                f.norm + f.sum
            });
            println!(
                "{mib:>4} MiB {label}             {port:7.2} {simd:7.2} {c:13.2} {two:18.2} {one:22.2} {chunks_after:34.2} {chunks_in:24.2}"
            );
        }
    }
}
