//! The capture hot path: Max, Min, `torch.sum` (single-thread, or in the chunks of several
//! torch threads) and `torch.norm` of a float32 tensor from one read (plus, in md5 mode, its
//! CRC-32 from the same read).
//!
//! One algorithm, written once over a vector of [`VEC`] lanes ([`Lanes`]): plain arrays
//! (portable, the reference) or AVX2 registers. The additions are ATen's, in ATen's order
//! (see the parent module); only the extremes are free in their order, so they keep one
//! accumulator per vector of a group, which leaves the norm's accumulator as the loop's only
//! dependency chain. The pass is resumable between blocks of groups, so the CRC can read each
//! block right after the statistics did, while it is still in L1/L2, instead of reading the
//! tensor a second time from memory; and it can restart the sum's cascade at a group boundary
//! while the norm and the extremes run on, so a multi-thread sum's chunks ride on the same
//! read ([`fused_threads`]), and each chunk can be read on the torch thread that wrote it
//! ([`fused_threads_on`]).

use super::{
    GRAIN, ILP, LEVELS, NormOrder, TorchThreads, VEC, add_acc, cascade_level, cascade_sum, row_sum,
    sequential_norm, thread_chunk, torch_sum,
};

/// Floats per group: the [`ILP`] vectors one cascade step adds.
pub(super) const GROUP: usize = ILP * VEC;

/// Max, Min, single-thread `torch.sum` and `torch.norm` of float32 values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fused {
    pub max: f32,
    pub min: f32,
    pub sum: f32,
    pub norm: f32,
}

/// The operations the pass needs on one vector of [`VEC`] floats.
trait Lanes: Copy {
    fn splat(x: f32) -> Self;
    /// # Safety
    /// `p` points at [`VEC`] readable floats.
    unsafe fn load(p: *const f32) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self > o ? self : o` per lane.
    fn max(self, o: Self) -> Self;
    /// `self < o ? self : o` per lane.
    fn min(self, o: Self) -> Self;
    fn to_array(self) -> [f32; VEC];
    fn from_array(a: [f32; VEC]) -> Self;
    /// A hint that `p` will be read soon (never faults).
    fn prefetch(_p: *const f32) {}
}

impl Lanes for [f32; VEC] {
    fn splat(x: f32) -> Self {
        [x; VEC]
    }
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees VEC readable floats.
        unsafe { p.cast::<[f32; VEC]>().read_unaligned() }
    }
    fn add(self, o: Self) -> Self {
        std::array::from_fn(|l| self[l] + o[l])
    }
    fn mul(self, o: Self) -> Self {
        std::array::from_fn(|l| self[l] * o[l])
    }
    fn max(self, o: Self) -> Self {
        std::array::from_fn(|l| if self[l] > o[l] { self[l] } else { o[l] })
    }
    fn min(self, o: Self) -> Self {
        std::array::from_fn(|l| if self[l] < o[l] { self[l] } else { o[l] })
    }
    fn to_array(self) -> [f32; VEC] {
        self
    }
    fn from_array(a: [f32; VEC]) -> Self {
        a
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Lanes, VEC};
    use std::arch::x86_64::*;

    /// Bytes read ahead of the current group: enough loads in flight to cover memory latency
    /// for tensors that left the cache, near enough to land in L1/L2 before use.
    const PREFETCH: usize = 2048;

    #[derive(Clone, Copy)]
    pub(super) struct M256(__m256);

    // Every method is only reached from `advance_avx2`, which requires AVX2 of its caller;
    // `#[inline(always)]` puts the intrinsics inside that AVX2 function.
    impl Lanes for M256 {
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: AVX2 (hence AVX) is enabled in the only caller, see above.
            M256(unsafe { _mm256_set1_ps(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: VEC readable floats at p (caller), AVX enabled (see above).
            M256(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see above.
            M256(unsafe { _mm256_add_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see above.
            M256(unsafe { _mm256_mul_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn max(self, o: Self) -> Self {
            // SAFETY: see above. max_ps(a, b) is `a > b ? a : b` per lane.
            M256(unsafe { _mm256_max_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn min(self, o: Self) -> Self {
            // SAFETY: see above. min_ps(a, b) is `a < b ? a : b` per lane.
            M256(unsafe { _mm256_min_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn to_array(self) -> [f32; VEC] {
            let mut out = [0f32; VEC];
            // SAFETY: out holds VEC floats; AVX enabled (see above).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) };
            out
        }
        #[inline(always)]
        fn from_array(a: [f32; VEC]) -> Self {
            // SAFETY: a holds VEC floats; AVX enabled (see above).
            M256(unsafe { _mm256_loadu_ps(a.as_ptr()) })
        }
        #[inline(always)]
        fn prefetch(p: *const f32) {
            let p = p.wrapping_byte_add(PREFETCH).cast::<i8>();
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(p);
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            }
        }
    }
}

/// The accumulators between blocks of groups.
#[derive(Clone)]
struct State {
    /// ATen's cascade levels, [`ILP`] vector accumulators each.
    acc: [[[f32; VEC]; ILP]; LEVELS],
    /// The norm's single vector accumulator.
    sq: [f32; VEC],
    /// Extremes, one accumulator per vector of a group.
    mx: [[f32; VEC]; ILP],
    mn: [[f32; VEC]; ILP],
    level_power: u32,
    level_step: usize,
    /// Groups added so far.
    done: usize,
}

impl State {
    fn new(groups: usize) -> State {
        let (level_power, level_step) = cascade_level(groups);
        State {
            acc: [[[0.0; VEC]; ILP]; LEVELS],
            sq: [0.0; VEC],
            mx: [[f32::NEG_INFINITY; VEC]; ILP],
            mn: [[f32::INFINITY; VEC]; ILP],
            level_power,
            level_step,
            done: 0,
        }
    }

    /// Adds groups `self.done..to` of `xs`; `STATS` false: the sum only (the norm and the
    /// extremes stay as they were).
    fn advance_with<const STATS: bool>(&mut self, xs: &[f32], to: usize, simd: bool) {
        assert!(to * GROUP <= xs.len() && self.done <= to);
        #[cfg(target_arch = "x86_64")]
        if simd && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked above).
            unsafe { advance_avx2::<STATS>(self, xs, to) };
            return;
        }
        let _ = simd;
        advance::<[f32; VEC], STATS>(self, xs, to);
    }

    fn advance(&mut self, xs: &[f32], to: usize, simd: bool) {
        self.advance_with::<true>(xs, to, simd);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn advance_avx2<const STATS: bool>(st: &mut State, xs: &[f32], to: usize) {
    advance::<avx2::M256, STATS>(st, xs, to);
}

/// Groups `st.done..to` (bounds checked by the caller) through lanes `V`: the level-0
/// accumulators, the norm and the extremes (`STATS`) in registers, ATen's level carry after
/// every `level_step` groups counted from the tensor's start.
#[inline(always)]
fn advance<V: Lanes, const STATS: bool>(st: &mut State, xs: &[f32], to: usize) {
    let mut a0: [V; ILP] = st.acc[0].map(V::from_array);
    let mut sq = V::from_array(st.sq);
    let mut mx: [V; ILP] = st.mx.map(V::from_array);
    let mut mn: [V; ILP] = st.mn.map(V::from_array);
    let base = xs.as_ptr();
    let mut i = st.done;
    while i < to {
        let batch_end = (i / st.level_step + 1) * st.level_step;
        let stop = to.min(batch_end);
        for g in i..stop {
            let p = base.wrapping_add(g * GROUP);
            V::prefetch(p);
            for k in 0..ILP {
                // SAFETY: g < to and to * GROUP <= xs.len() (asserted in `advance`).
                let v = unsafe { V::load(p.add(k * VEC)) };
                a0[k] = a0[k].add(v);
                if STATS {
                    sq = sq.add(v.mul(v));
                    mx[k] = v.max(mx[k]);
                    mn[k] = v.min(mn[k]);
                }
            }
        }
        i = stop;
        if stop == batch_end {
            // A whole batch: ATen moves level 0 up, and further up at coarser multiples.
            st.acc[0] = a0.map(V::to_array);
            a0 = [V::splat(0.0); ILP];
            let mask = st.level_step - 1;
            for j in 1..LEVELS {
                let (lo, hi) = st.acc.split_at_mut(j);
                add_acc(&mut hi[0], &lo[j - 1]);
                lo[j - 1] = [[0.0; VEC]; ILP];
                if i & (mask << (j as u32 * st.level_power)) != 0 {
                    break;
                }
            }
        }
    }
    st.acc[0] = a0.map(V::to_array);
    st.sq = sq.to_array();
    st.mx = mx.map(V::to_array);
    st.mn = mn.map(V::to_array);
    st.done = to;
}

/// The result from the state after every full group: the leftover vectors and scalars
/// exactly as ATen adds them, the norm's in `order` (whose vector span ends at a whole
/// group or later: the groups' squares are all in the lanes).
fn finish(st: State, xs: &[f32], order: NormOrder) -> Fused {
    let n = xs.len();
    let vecs = n / VEC;
    let groups = vecs / ILP;
    let lanes_end = order.lanes_end(n).max(groups * GROUP);
    debug_assert_eq!(st.done, groups);
    let State {
        mut acc, mut sq, ..
    } = st;
    let (first, rest) = acc.split_at_mut(1);
    for r in rest.iter() {
        add_acc(&mut first[0], r);
    }
    let mut ps = first[0];
    let mut mx = st.mx[0];
    let mut mn = st.mn[0];
    for k in 1..ILP {
        mx = st.mx[k].max(mx);
        mn = st.mn[k].min(mn);
    }
    // Vectors left over after the groups go to accumulator 0.
    for (j, v) in xs[groups * GROUP..vecs * VEC].chunks_exact(VEC).enumerate() {
        let in_lanes = groups * GROUP + (j + 1) * VEC <= lanes_end;
        for l in 0..VEC {
            let x = v[l];
            ps[0][l] += x;
            mx[l] = if x > mx[l] { x } else { mx[l] };
            mn[l] = if x < mn[l] { x } else { mn[l] };
            if in_lanes {
                sq[l] += x * x;
            }
        }
    }
    let (p0, prest) = ps.split_at_mut(1);
    for r in prest.iter() {
        for (x, y) in p0[0].iter_mut().zip(r) {
            *x += *y;
        }
    }
    let tail = &xs[vecs * VEC..];
    let sum = if vecs == 0 {
        row_sum::<1>(xs, n)[0]
    } else {
        let mut total = 0f32;
        for &x in tail {
            total += x;
        }
        for l in p0[0] {
            total += l;
        }
        total
    };
    let mut total_sq = sq[0];
    for &a in &sq[1..] {
        total_sq += a;
    }
    let mut max = f32::NEG_INFINITY;
    let mut min = f32::INFINITY;
    for l in 0..VEC {
        max = max.max(mx[l]);
        min = min.min(mn[l]);
    }
    for &x in &xs[lanes_end..] {
        total_sq += x * x;
    }
    for &x in tail {
        max = max.max(x);
        min = min.min(x);
    }
    Fused {
        max,
        min,
        sum,
        norm: total_sq.sqrt(),
    }
}

fn fused_with(xs: &[f32], simd: bool) -> Fused {
    let groups = xs.len() / GROUP;
    let mut st = State::new(groups);
    st.advance(xs, groups, simd);
    finish(st, xs, NormOrder::Float32)
}

/// [`Fused`] statistics of `xs` (any length; meaningful when every value is finite, which
/// the caller checks on the result: a NaN or infinity makes `sum` non-finite).
///
/// One thread: the norm is one chain of additions in torch's order, so the pass cannot be
/// cut into chunks for several threads.
pub fn fused(xs: &[f32]) -> Fused {
    fused_with(xs, true)
}

/// [`fused`] with `sum` as `torch.sum` takes it with `threads` torch threads
/// ([`super::torch_sum`], bit for bit). From [`GRAIN`](super::GRAIN) elements on torch sums equal chunks on
/// separate threads: when every chunk starts at a whole group (at two threads, any length
/// that is a multiple of 64, as a model's tensors are), each chunk's cascade rides on the
/// same read as the norm's chain, whose latency bounds the pass, instead of a second pass
/// over the tensor (40% more time, benches/RESULTS.md); other lengths take that second pass.
pub fn fused_threads(xs: &[f32], threads: usize) -> Fused {
    fused_threads_on(xs, threads, None, None)
}

/// [`fused_threads`] and the CRC-32 of the same bytes, hashed block by block behind the
/// statistics as in [`fused_crc32`].
pub fn fused_crc32_threads(xs: &[f32], threads: usize) -> (Fused, u32) {
    let mut crc = crc32fast::Hasher::new();
    let f = fused_threads_on(xs, threads, Some(&mut crc), None);
    (f, crc.finalize())
}

/// [`fused_threads`] (and with `crc` the CRC-32 of the same bytes, as [`fused_crc32_threads`])
/// read where torch wrote the tensor: with `on`, each thread chunk on the thread `on` gives
/// it (torch's own `parallel_for`), the first on the calling thread, one after the other
/// (the norm's chain runs through them in order); without, all on the calling thread.
///
/// The result is the same bits wherever a chunk runs. What changes is the cache: torch's
/// elementwise operators cut a tensor into the same chunks, so each chunk is in the cache of
/// the core that wrote it; read from the calling thread, another core's chunk crosses over
/// and the next in-place write to it must take it back (an optimizer step then ran its
/// second thread's half two to three times slower, benches/RESULTS.md).
///
/// Each chunk after the first is one `parallel_for` call, in which only that chunk's thread
/// works: the chain must see the chunks in order, and a pool that runs them otherwise than
/// one per thread at once (torch's native pool may queue them) would hang a chunk that waited
/// for its predecessor inside one call.
pub fn fused_threads_on(
    xs: &[f32],
    threads: usize,
    crc: Option<&mut crc32fast::Hasher>,
    on: Option<&dyn TorchThreads>,
) -> Fused {
    fused_threads_order(xs, NormOrder::Float32, threads, crc, on)
}

/// [`fused_threads_on`] over the float32 values of a float32, bfloat16 or float16 tensor, its
/// norm in that dtype's `order`: the bfloat16 order rides on the same read; the float16
/// order, a chain of single additions (torch's own norm of float16), takes a second read
/// after it, by blocks on the accumulator's grid (`chain.rs`: about 3.5 times the vector
/// pass, half of the chain as written).
pub fn fused_threads_order(
    xs: &[f32],
    order: NormOrder,
    threads: usize,
    crc: Option<&mut crc32fast::Hasher>,
    on: Option<&dyn TorchThreads>,
) -> Fused {
    let mut f = fused_lanes(xs, order, threads, crc, on);
    if order == NormOrder::Float16 {
        f.norm = sequential_norm(xs, threads);
    }
    f
}

/// The pass itself, its norm in `order`'s lanes (for [`NormOrder::Float16`], whose norm
/// is not a lanes order, a value the caller replaces).
fn fused_lanes(
    xs: &[f32],
    order: NormOrder,
    threads: usize,
    mut crc: Option<&mut crc32fast::Hasher>,
    on: Option<&dyn TorchThreads>,
) -> Fused {
    let n = xs.len();
    let chunk = thread_chunk(n, threads);
    let Some(chunk) = chunk.filter(|c| c.is_multiple_of(GROUP)) else {
        let mut st = State::new(n / GROUP);
        advance_hashing(&mut st, xs, crc.as_deref_mut());
        hash_tail(xs, crc);
        let mut f = finish(st, xs, order);
        if chunk.is_some() {
            // Chunks that start inside a group: their sums take a pass of their own.
            f.sum = torch_sum(xs, threads);
        }
        return f;
    };
    // torch's per-thread slots, the unused ones zero (as `torch_sum` adds them).
    let mut slots = vec![0f32; threads];
    let parts = n.div_ceil(chunk);
    let mut carried: Option<State> = None;
    let mut last: Option<Fused> = None;
    for (i, slot) in slots.iter_mut().enumerate().take(parts) {
        let (lo, hi) = (i * chunk, ((i + 1) * chunk).min(n));
        let mut step = || {
            let part = &xs[lo..hi];
            // A fresh cascade per chunk; the norm's chain and the extremes go on from the
            // last chunk, whose whole groups ended where this one's begin.
            let mut st = State::new(part.len() / GROUP);
            if let Some(prev) = carried.take() {
                st.sq = prev.sq;
                st.mx = prev.mx;
                st.mn = prev.mn;
            }
            advance_hashing(&mut st, part, crc.as_deref_mut());
            if i + 1 == parts {
                // The tensor's leftover vectors and scalars are this chunk's: `finish` adds
                // them to the norm and extremes where a single pass would.
                hash_tail(part, crc.as_deref_mut());
                let f = finish(st, part, order);
                *slot += f.sum;
                last = Some(f);
            } else {
                // Whole groups only: the chunk's sum needs no leftovers.
                *slot += finish(st.clone(), part, order).sum;
                carried = Some(st);
            }
        };
        match on {
            // Chunk 0 is the calling thread's in torch's split.
            Some(on) if i > 0 => {
                let pending = std::sync::Mutex::new(Some(step));
                let take = || pending.lock().unwrap_or_else(|e| e.into_inner()).take();
                on.parallel_for(n, GRAIN, &|b, e| {
                    if (b, e) == (lo, hi)
                        && let Some(mut step) = take()
                    {
                        step();
                    }
                });
                // A pool that cut the range otherwise (another thread count) ran no chunk
                // of ours: this thread reads it.
                if let Some(mut step) = take() {
                    step();
                }
            }
            _ => step(),
        }
    }
    let mut f = last.expect("the last chunk ran");
    f.sum = cascade_sum(&slots);
    f
}

/// Adds every whole group of `xs` to `st`; with `crc`, block by block, each hashed right
/// after the statistics read it (while it is in L1).
fn advance_hashing(st: &mut State, xs: &[f32], crc: Option<&mut crc32fast::Hasher>) {
    let groups = xs.len() / GROUP;
    let Some(crc) = crc else {
        st.advance(xs, groups, true);
        return;
    };
    let bytes: &[u8] = bytemuck::cast_slice(xs);
    let mut at = 0;
    while at < groups {
        let to = groups.min(at + CRC_BLOCK_GROUPS);
        st.advance(xs, to, true);
        crc.update(&bytes[at * GROUP * 4..to * GROUP * 4]);
        at = to;
    }
}

/// Hashes the bytes of `xs` after its whole groups.
fn hash_tail(xs: &[f32], crc: Option<&mut crc32fast::Hasher>) {
    if let Some(crc) = crc {
        let bytes: &[u8] = bytemuck::cast_slice(xs);
        crc.update(&bytes[xs.len() / GROUP * GROUP * 4..]);
    }
}

/// The single-thread `torch.sum` of `xs` ([`super::cascade_sum`], bit for bit) through the
/// same SIMD loop without the other statistics: what each thread's chunk of a multi-thread
/// sum costs, a fraction of the fused pass (whose norm chain bounds its speed).
pub fn fused_sum(xs: &[f32]) -> f32 {
    fused_sum_with(xs, true)
}

fn fused_sum_with(xs: &[f32], simd: bool) -> f32 {
    let groups = xs.len() / GROUP;
    let mut st = State::new(groups);
    st.advance_with::<false>(xs, groups, simd);
    finish(st, xs, NormOrder::Float32).sum
}

/// [`fused`] without SIMD intrinsics (the reference the tests hold the SIMD loop to).
pub fn fused_portable(xs: &[f32]) -> Fused {
    fused_with(xs, false)
}

/// Groups per block of [`fused_crc32`]: 16 KiB, read by the CRC while in L1.
const CRC_BLOCK_GROUPS: usize = 16 * 1024 / (GROUP * 4);

/// [`fused`] and the CRC-32 (zlib's) of the same bytes from one read of memory: the tensor
/// goes by blocks, each summarised and then hashed while it is still in cache.
pub fn fused_crc32(xs: &[f32]) -> (Fused, u32) {
    fused_crc32_threads(xs, 1)
}

#[cfg(test)]
mod tests {
    use super::super::{GRAIN, cascade_sum, torch_norm};
    use super::*;

    fn data(n: usize, seed: u32, scale: f32, offset: f32) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 8) as f32 / (1u32 << 24) as f32 * scale + offset
            })
            .collect()
    }

    /// The fused pass gives what the separate functions give, bit for bit, with and without
    /// SIMD, with and without the CRC riding along.
    #[test]
    fn fused_agrees_with_the_separate_sums() {
        for n in [
            0usize,
            1,
            5,
            8,
            9,
            31,
            32,
            33,
            255,
            1000,
            4096 + 7,
            70_001,
            600_000,
        ] {
            let xs = data(n, 12345 + n as u32, 6.0, -2.5);
            let f = fused(&xs);
            assert_eq!(f, fused_portable(&xs), "n={n}");
            assert_eq!(f.sum.to_bits(), cascade_sum(&xs).to_bits(), "n={n}");
            assert_eq!(f.norm.to_bits(), torch_norm(&xs).to_bits(), "n={n}");
            let mx = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mn = xs.iter().copied().fold(f32::INFINITY, f32::min);
            assert_eq!((f.max, f.min), (mx, mn), "n={n}");
            assert_eq!(fused_sum(&xs).to_bits(), f.sum.to_bits(), "n={n}");
            assert_eq!(
                fused_sum_with(&xs, false).to_bits(),
                f.sum.to_bits(),
                "n={n}"
            );
            let (g, crc) = fused_crc32(&xs);
            assert_eq!(g, f, "n={n}");
            assert_eq!(crc, crc32fast::hash(bytemuck::cast_slice(&xs)), "n={n}");
        }
    }

    /// The chunks' sums riding on the norm's pass give what the fused pass and the separate
    /// multi-thread sum give, bit for bit: lengths whose chunks start at whole groups and
    /// lengths whose do not, around the grain, thread counts that split or not.
    #[test]
    fn fused_threads_agrees_with_fused_and_torch_sum() {
        for n in [
            GRAIN - 1,
            GRAIN,
            GRAIN + 1,
            2 * GRAIN,
            2 * GRAIN + 64,
            2 * GRAIN + 96,
            65_536,
            65_536 + 7,
            131_072 + 32 * 3,
            3 * GRAIN + 17,
            600_000,
        ] {
            let xs = data(n, 777 + n as u32, 3.0, -1.0);
            let f = fused(&xs);
            for threads in [1usize, 2, 3, 4, 8, 65, 100] {
                let want = Fused {
                    sum: super::super::torch_sum(&xs, threads),
                    ..f
                };
                let got = fused_threads(&xs, threads);
                assert_eq!(got, want, "n={n} threads={threads}");
                assert_eq!(
                    got.sum.to_bits(),
                    want.sum.to_bits(),
                    "n={n} threads={threads}"
                );
                let crc = crc32fast::hash(bytemuck::cast_slice(&xs));
                assert_eq!(
                    fused_crc32_threads(&xs, threads),
                    (want, crc),
                    "n={n} threads={threads}"
                );
            }
        }
    }

    /// Each dtype's norm order rides on the pass (or follows it) bit for bit as the reference
    /// adds it, at any thread count, with the sum, extremes and CRC unchanged; and the orders
    /// do differ, so the pass is not the float32 one under another name.
    #[test]
    fn fused_norm_follows_each_dtypes_order() {
        use super::super::torch_norm_in;
        let mut differ = [0usize; 2];
        for n in [
            8usize,
            15,
            16,
            24,
            31,
            40,
            47,
            56,
            1000 + 8,
            4096 + 13,
            GRAIN + 8,
            2 * GRAIN + 72,
            70_001,
        ] {
            let xs = data(n, 4242 + n as u32, 1000.0, -400.0);
            for threads in [1usize, 2, 3] {
                let f32_pass = fused_threads(&xs, threads);
                for order in [NormOrder::Float32, NormOrder::BFloat16, NormOrder::Float16] {
                    let got = fused_threads_order(&xs, order, threads, None, None);
                    let want = torch_norm_in(&xs, order, threads);
                    assert_eq!(got.norm.to_bits(), want.to_bits(), "n={n} {order:?}");
                    assert_eq!(
                        (got.sum.to_bits(), got.max, got.min),
                        (f32_pass.sum.to_bits(), f32_pass.max, f32_pass.min),
                        "n={n} {order:?}"
                    );
                    let mut crc = crc32fast::Hasher::new();
                    let hashed = fused_threads_order(&xs, order, threads, Some(&mut crc), None);
                    assert_eq!(hashed, got, "n={n} {order:?}");
                    assert_eq!(crc.finalize(), crc32fast::hash(bytemuck::cast_slice(&xs)));
                }
                let norm = |o| torch_norm_in(&xs, o, threads).to_bits();
                differ[0] += usize::from(norm(NormOrder::BFloat16) != norm(NormOrder::Float32));
                differ[1] += usize::from(norm(NormOrder::Float16) != norm(NormOrder::Float32));
            }
        }
        assert!(differ[0] > 5 && differ[1] > 5, "{differ:?}");
    }

    /// Past 2^20 groups the cascade's level step grows beyond 16: the SIMD loop carries its
    /// levels like ATen does there too, also when cut into CRC blocks.
    #[test]
    fn fused_simd_equals_portable_with_a_wide_cascade() {
        let n = (1usize << 25) + GROUP * 3 + 5;
        let xs = data(n, 99, 1.0, -0.25);
        assert_eq!(cascade_level(n / GROUP), (5, 32));
        let f = fused(&xs);
        assert_eq!(f, fused_portable(&xs));
        assert_eq!(f.sum.to_bits(), cascade_sum(&xs).to_bits());
        assert_eq!(fused_sum(&xs).to_bits(), f.sum.to_bits());
        assert_eq!(fused_crc32(&xs).0, f);
    }
}
