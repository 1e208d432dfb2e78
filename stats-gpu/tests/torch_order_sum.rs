//! The SIMD torch-order sum ([`torch_order::fused_sum`], each torch thread's chunk of a
//! multi-thread `torch.sum`) against the scalar cascade it must equal bit for bit, and the
//! pass that carries the chunks' sums beside the norm ([`torch_order::fused_threads`])
//! against the separate passes, on any float32 values (NaN, ±Inf, subnormals, ±0, huge and
//! tiny magnitudes), any length.

use proptest::prelude::*;
use stats_gpu::torch_order::{self, GRAIN};

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -1e4f32..1e4,
        1 => -1e-3f32..1e-3,
        1 => prop::sample::select(vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-40,
            -1e-45,
            3.0e38,
            -3.4e38,
            f32::MIN_POSITIVE,
        ]),
        1 => any::<u32>().prop_map(f32::from_bits),
    ]
}

fn sized_values() -> impl Strategy<Value = Vec<f32>> {
    prop_oneof![
        3 => prop::collection::vec(value(), 0..100),
        3 => mostly_finite(100..5000),
        1 => mostly_finite(5000..80_000),
    ]
}

fn finite_value() -> impl Strategy<Value = f32> {
    prop_oneof![
        20 => -1e4f32..1e4,
        4 => -1e-3f32..1e-3,
        1 => prop::sample::select(vec![0.0f32, -0.0, 1e-40, -1e-45, f32::MIN_POSITIVE]),
    ]
}

/// Finite values with, in a third of the cases, one or two NaN, infinite, huge or arbitrary
/// ones put in: a long tensor of [`value`]s holds a NaN nearly always, and every sum compared
/// would be NaN on both sides, whatever the order.
fn mostly_finite(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    let special = prop_oneof![
        3 => prop::sample::select(vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            3.0e38,
            -3.4e38,
            1e30,
        ]),
        1 => any::<u32>().prop_map(f32::from_bits),
    ];
    (
        prop::collection::vec(finite_value(), len),
        prop_oneof![2 => Just(Vec::new()), 1 => prop::collection::vec((any::<prop::sample::Index>(), special), 1..3)],
    )
        .prop_map(|(mut xs, put)| {
            if !xs.is_empty() {
                for (at, x) in put {
                    let i = at.index(xs.len());
                    xs[i] = x;
                }
            }
            xs
        })
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn simd_sum_equals_the_scalar_cascade(xs in sized_values()) {
        let (simd, scalar) = (torch_order::fused_sum(&xs), torch_order::cascade_sum(&xs));
        prop_assert!(same(simd, scalar), "{simd} vs {scalar} (n = {})", xs.len());
        if xs.iter().all(|x| x.is_finite()) {
            prop_assert_eq!(simd.to_bits(), torch_order::fused(&xs).sum.to_bits());
        }
    }
}

/// Lengths from just under the grain to three grains: multiples of 64 (every chunk starts at
/// a whole group for two threads) or not; thread counts that split and that do not.
fn chunked_values() -> impl Strategy<Value = (Vec<f32>, usize)> {
    (GRAIN / 64 - 2..3 * GRAIN / 64, any::<bool>(), 1usize..64).prop_flat_map(|(k, whole, r)| {
        let n = k * 64 + if whole { 0 } else { r };
        (
            mostly_finite(n..n + 1),
            prop_oneof![4 => 1usize..=4, 1 => 5usize..=8, 1 => Just(100usize)],
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn one_pass_chunk_sums_equal_the_separate_passes((xs, threads) in chunked_values()) {
        let f = torch_order::fused(&xs);
        let got = torch_order::fused_threads(&xs, threads);
        let sum = torch_order::torch_sum(&xs, threads);
        let n = xs.len();
        prop_assert!(same(got.sum, sum), "sum {} vs {sum} (n = {n}, threads = {threads})", got.sum);
        for (a, b, what) in [(got.norm, f.norm, "norm"), (got.max, f.max, "max"), (got.min, f.min, "min")] {
            prop_assert!(same(a, b), "{what} {a} vs {b} (n = {n}, threads = {threads})");
        }
        // md5 mode: the same pass hashing each block behind the statistics.
        let (with_crc, crc) = torch_order::fused_crc32_threads(&xs, threads);
        prop_assert_eq!(crc, crc32fast::hash(bytemuck::cast_slice(&xs)));
        for (a, b) in [(with_crc.sum, got.sum), (with_crc.norm, got.norm), (with_crc.max, got.max), (with_crc.min, got.min)] {
            prop_assert!(same(a, b), "md5 pass {a} vs {b} (n = {n}, threads = {threads})");
        }
    }
}

/// A multi-thread sum is the chunks' cascades added in order: checked against the scalar
/// cascade per chunk, at and around the grain where torch starts splitting.
#[test]
fn thread_chunks_are_summed_in_order() {
    for n in [GRAIN - 1, GRAIN, GRAIN + 1, 3 * GRAIN + 17, 200_003] {
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 2003) as f32 / 7.0 - 140.0)
            .collect();
        for threads in [1usize, 2, 3, 4] {
            let want = if threads == 1 || n < GRAIN {
                torch_order::cascade_sum(&xs)
            } else {
                let used = threads.min(n.div_ceil(GRAIN));
                let parts: Vec<f32> = xs
                    .chunks(n.div_ceil(used))
                    .map(torch_order::cascade_sum)
                    .collect();
                let mut slots = vec![0f32; threads];
                slots[..parts.len()].copy_from_slice(&parts);
                torch_order::cascade_sum(&slots)
            };
            assert_eq!(
                torch_order::torch_sum(&xs, threads).to_bits(),
                want.to_bits(),
                "n={n} threads={threads}"
            );
        }
    }
}

/// Test pools standing in for torch's `at::parallel_for`.
enum Pool {
    /// torch's split for this many threads, each chunk on a thread of its own, all at once.
    Spawned(usize),
    /// torch's split, each chunk called twice (the pass must read a chunk once).
    Twice(usize),
    /// torch's split, chunks called on the calling thread last to first.
    Reversed(usize),
    /// Calls nothing.
    Idle,
}

/// `at::parallel_for(0, n, grain)`'s chunks with `threads` threads (OpenMP's static split).
fn torch_split(n: usize, grain: usize, threads: usize) -> Vec<(usize, usize)> {
    if n < grain || threads <= 1 {
        return vec![(0, n)];
    }
    let chunk = n.div_ceil(threads.min(n.div_ceil(grain)));
    (0..n)
        .step_by(chunk)
        .map(|b| (b, (b + chunk).min(n)))
        .collect()
}

impl torch_order::TorchThreads for Pool {
    fn parallel_for(&self, n: usize, grain: usize, work: &(dyn Fn(usize, usize) + Sync)) {
        match *self {
            Pool::Spawned(t) => std::thread::scope(|s| {
                for (b, e) in torch_split(n, grain, t) {
                    s.spawn(move || work(b, e));
                }
            }),
            Pool::Twice(t) => {
                for (b, e) in torch_split(n, grain, t) {
                    work(b, e);
                    work(b, e);
                }
            }
            Pool::Reversed(t) => {
                for (b, e) in torch_split(n, grain, t).into_iter().rev() {
                    work(b, e);
                }
            }
            Pool::Idle => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Chunks read on torch's threads give the one-thread pass's bits, whatever the pool does:
    /// its own thread per chunk, the same chunk twice, another thread count (chunks that are
    /// not the pass's, which it then reads itself), or nothing.
    #[test]
    fn chunks_read_on_torch_threads_equal_the_calling_threads_pass(
        (xs, threads) in chunked_values(),
        other in 1usize..=5,
        kind in 0usize..4,
    ) {
        let pool = match kind {
            0 => Pool::Spawned(if other % 2 == 0 { threads } else { other }),
            1 => Pool::Twice(threads),
            2 => Pool::Reversed(other),
            _ => Pool::Idle,
        };
        let n = xs.len();
        let want = torch_order::fused_threads(&xs, threads);
        let got = torch_order::fused_threads_on(&xs, threads, None, Some(&pool));
        for (a, b, what) in [(got.sum, want.sum, "sum"), (got.norm, want.norm, "norm"), (got.max, want.max, "max"), (got.min, want.min, "min")] {
            prop_assert!(same(a, b), "{what} {a} vs {b} (n = {n}, threads = {threads}, pool {kind}/{other})");
        }
        let mut crc = crc32fast::Hasher::new();
        let hashed = torch_order::fused_threads_on(&xs, threads, Some(&mut crc), Some(&pool));
        prop_assert_eq!(crc.finalize(), crc32fast::hash(bytemuck::cast_slice(&xs)));
        prop_assert!(same(hashed.sum, want.sum) && same(hashed.norm, want.norm));
    }
}

/// Any float16 values as float32 (every bit pattern: NaN, ±Inf, subnormals, ±0, the largest),
/// runs of one value (whose squares tie on the accumulator's grid), any length.
fn half_values() -> impl Strategy<Value = Vec<f32>> {
    let one = any::<u16>().prop_map(|b| stats_gpu::f16::from_bits(b).to_f32());
    let finite = any::<u16>()
        .prop_map(|b| stats_gpu::f16::from_bits(b & 0xfbff).to_f32())
        .prop_filter("finite", |x| x.is_finite());
    prop_oneof![
        1 => prop::collection::vec(one, 0..300),
        3 => prop::collection::vec(finite.clone(), 0..5000),
        1 => prop::collection::vec(finite, 30_000..70_000),
        1 => (any::<u16>(), 0usize..3000)
            .prop_map(|(b, n)| vec![stats_gpu::f16::from_bits(b & 0x7bff).to_f32(); n]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The float16 norm order's chain, taken a block at a time on the accumulator's grid,
    /// equals the chain added one element after the other, at one to three torch threads.
    #[test]
    fn float16_norm_equals_the_one_by_one_chain(xs in half_values(), threads in 1usize..=3) {
        use torch_order::{NormOrder, torch_norm_in};
        let chain = |part: &[f32]| part.iter().fold(0f32, |acc, &x| acc + x * x);
        let total = if xs.len() >= GRAIN && threads > 1 {
            let k = threads.min(xs.len().div_ceil(GRAIN));
            xs.chunks(xs.len().div_ceil(k)).fold(0f32, |acc, part| acc + chain(part))
        } else {
            chain(&xs)
        };
        let got = torch_norm_in(&xs, NormOrder::Float16, threads);
        prop_assert!(same(got, total.sqrt()), "{got} vs {} (n = {})", total.sqrt(), xs.len());
    }
}
