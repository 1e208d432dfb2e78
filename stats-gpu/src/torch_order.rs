//! float32 sum, `Mean` and `Norm` in the order of PyTorch's CPU kernels, so that statistics
//! compare equal with the ones msprobe records (`torch.mean(t)` and `torch.norm(t)` of float32
//! tensors, which round after every addition; the [`fast`](crate::fast) path sums in f64 and
//! rounds once, which is more accurate and differs in the last bits). [`Exactness::TorchCpu`]
//! selects this order in [`crate::statistics`]; the functions here are the kernels themselves.
//!
//! [`Exactness::TorchCpu`]: crate::Exactness::TorchCpu
//!
//! Found by experiment against torch 2.15 on x86_64 (AVX-512 machine, ATen's reduction
//! kernels running 8-lane `Vectorized<float>` here) and checked by
//! `capture/python_tests/test_pytorch_capture.py::test_torch_order_*` (through the capture
//! extension's `torch_order_mean_norm`):
//!
//! * `torch.sum` of a contiguous tensor (ATen's `cascade_sum`): the row is read as vectors of
//!   [`VEC`] floats; groups of [`ILP`] vectors feed [`ILP`] vector accumulators through a
//!   4-level cascade (level step `2^max(4, ceil_log2(groups) / 4)`); leftover vectors go into
//!   accumulator 0, accumulators are added in order, then the leftover scalars are summed,
//!   then the [`VEC`] lanes are added to that in lane order. Rows shorter than one vector
//!   use the same cascade on scalars. `mean = sum / numel` in float32.
//! * With `T > 1` torch threads and at least [`GRAIN`] elements, the range is cut into
//!   `min(T, ceil(n / GRAIN))` equal chunks (OpenMP's static split), each chunk summed as
//!   above into a per-thread slot, and the `T` slots summed again (two-pass reduction).
//! * `torch.norm` (p = 2): one [`VEC`]-lane accumulator of `x * x` (product rounded, no FMA),
//!   lanes added in order, then the leftover scalars; `sqrt` in float32. This matched torch
//!   on 99.3% of random tensors of 8 to 3000 elements and on tensors of 1M and 3M
//!   elements; tensors under 8 elements take another kernel whose order was not pinned
//!   down (the adapter asks torch for those), and the others differ by one ulp at most.
//! * bfloat16 and float16 tensors are reduced as their float32 values: the sum as above,
//!   the norm in the order of its dtype's kernel ([`NormOrder`]), then each result rounded
//!   to the dtype.

mod chain;
mod fused;
pub use fused::{
    Fused, fused, fused_crc32, fused_crc32_threads, fused_portable, fused_sum, fused_threads,
    fused_threads_on, fused_threads_order,
};

/// Lanes of ATen's `Vectorized<float>` in the kernels measured.
pub const VEC: usize = 8;
/// Vector accumulators of `row_sum` (ATen's `ilp_factor`).
pub const ILP: usize = 4;
const LEVELS: usize = 4;
/// `at::internal::GRAIN_SIZE`: below it a reduction runs on one thread.
pub const GRAIN: usize = 32768;

fn ceil_log2(x: usize) -> u32 {
    if x <= 1 {
        0
    } else {
        usize::BITS - (x - 1).leading_zeros()
    }
}

fn add_into<const W: usize>(acc: &mut [[f32; W]; ILP], row: &[f32]) {
    for (k, a) in acc.iter_mut().enumerate() {
        for (l, v) in a.iter_mut().enumerate() {
            *v += row[k * W + l];
        }
    }
}

fn add_acc<const W: usize>(dst: &mut [[f32; W]; ILP], src: &[[f32; W]; ILP]) {
    for (d, s) in dst.iter_mut().zip(src) {
        for (x, y) in d.iter_mut().zip(s) {
            *x += *y;
        }
    }
}

/// `(level_power, level_step)` of ATen's 4-level cascade over `size` items.
fn cascade_level(size: usize) -> (u32, usize) {
    let level_power = (ceil_log2(size) / LEVELS as u32).max(4);
    (level_power, 1usize << level_power)
}

/// ATen's `multi_row_sum` over `size` groups of `ILP * W` floats.
fn multi_row_sum<const W: usize>(xs: &[f32], size: usize) -> [[f32; W]; ILP] {
    let (level_power, level_step) = cascade_level(size);
    let level_mask = level_step - 1;
    let group = ILP * W;
    let mut acc = [[[0f32; W]; ILP]; LEVELS];
    let mut i = 0;
    while i + level_step <= size {
        for _ in 0..level_step {
            add_into(&mut acc[0], &xs[i * group..(i + 1) * group]);
            i += 1;
        }
        for j in 1..LEVELS {
            let (lo, hi) = acc.split_at_mut(j);
            add_acc(&mut hi[0], &lo[j - 1]);
            lo[j - 1] = [[0.0; W]; ILP];
            if i & (level_mask << (j as u32 * level_power)) != 0 {
                break;
            }
        }
    }
    while i < size {
        add_into(&mut acc[0], &xs[i * group..(i + 1) * group]);
        i += 1;
    }
    let (first, rest) = acc.split_at_mut(1);
    for r in rest.iter() {
        add_acc(&mut first[0], r);
    }
    first[0]
}

/// ATen's `row_sum` over the first `n` items of width `W` (vectors or scalars).
fn row_sum<const W: usize>(xs: &[f32], n: usize) -> [f32; W] {
    let size_ilp = n / ILP;
    let mut ps = multi_row_sum::<W>(xs, size_ilp);
    for i in size_ilp * ILP..n {
        for l in 0..W {
            ps[0][l] += xs[i * W + l];
        }
    }
    let (first, rest) = ps.split_at_mut(1);
    for r in rest.iter() {
        for (x, y) in first[0].iter_mut().zip(r) {
            *x += *y;
        }
    }
    first[0]
}

/// One row of ATen's `cascade_sum` (the single-thread `torch.sum` of contiguous `xs`).
pub fn cascade_sum(xs: &[f32]) -> f32 {
    let n = xs.len();
    if n < VEC {
        return row_sum::<1>(xs, n)[0];
    }
    let vecs = n / VEC;
    let lanes = row_sum::<VEC>(xs, vecs);
    let mut total = 0f32;
    for &x in &xs[vecs * VEC..] {
        total += x;
    }
    for l in lanes {
        total += l;
    }
    total
}

/// The length of each torch thread's chunk of a reduction over `n` elements with `threads`
/// threads (the last may be shorter), or None when torch reduces them on one thread.
pub(crate) fn thread_chunk(n: usize, threads: usize) -> Option<usize> {
    if n < GRAIN || threads <= 1 {
        return None;
    }
    Some(n.div_ceil(threads.min(n.div_ceil(GRAIN))))
}

/// A caller's way onto torch's own intra-op threads (ATen's `at::parallel_for`), so that
/// [`fused_threads_on`] reads each thread chunk of a tensor on the thread that wrote it.
pub trait TorchThreads: Sync {
    /// Calls `work(begin, end)` for each chunk of `0..n` as torch cuts it with `grain` (the
    /// chunks of [`torch_sum`] and of torch's elementwise operators), each on the thread
    /// torch gives that chunk, and returns when every call has returned. A pool that cannot
    /// may call `work` for any chunks, or none, on any thread: the caller reads what was not
    /// given to it itself.
    fn parallel_for(&self, n: usize, grain: usize, work: &(dyn Fn(usize, usize) + Sync));
}

/// `torch.sum` of contiguous float32 `xs` with `threads` torch threads.
pub fn torch_sum(xs: &[f32], threads: usize) -> f32 {
    let Some(chunk) = thread_chunk(xs.len(), threads) else {
        return cascade_sum(xs);
    };
    let mut slots = vec![0f32; threads];
    for (slot, part) in slots.iter_mut().zip(xs.chunks(chunk)) {
        *slot += fused_sum(part);
    }
    cascade_sum(&slots)
}

/// `torch.mean` of contiguous float32 `xs` (non-empty) with `threads` torch threads.
pub fn torch_mean(xs: &[f32], threads: usize) -> f32 {
    torch_sum(xs, threads) / xs.len() as f32
}

/// `b` as float32 values when it is 4-byte aligned and a whole number of floats.
pub fn as_f32(b: &[u8]) -> Option<&[f32]> {
    bytemuck::try_cast_slice(b).ok()
}

/// The order in which ATen's `torch.norm` (p = 2) adds the squares of a contiguous tensor,
/// by the tensor's dtype (the squares are of its values as float32, added in float32).
/// Found by experiment against torch 2.15 (benches/RESULTS.md, 2026-12-07 19:30–21:00 UTC):
/// the orders differ in where the last float32 bits land, and a bfloat16 or float16 result
/// rounds differently where its float32 value sits next to a rounding tie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormOrder {
    /// float32: ATen's last-dimension kernel, one [`VEC`]-lane accumulator over the whole
    /// vectors, its lanes added in order, then the `n % VEC` leftover squares one by one.
    Float32,
    /// bfloat16: the same kernel over bfloat16 vectors of `2 × VEC` elements, each widened
    /// into two float vectors that go into the accumulator in turn; so `n % (2 × VEC)`
    /// squares are left over.
    BFloat16,
    /// float16, which that kernel leaves out: ATen's generic reduction, one float32
    /// accumulator adding each square in turn; from [`GRAIN`] elements on with several
    /// torch threads, one per thread chunk (those of [`torch_sum`]), the chunks' results
    /// added in thread order.
    Float16,
}

impl NormOrder {
    /// The elements of `n` that go through the vector accumulator (the rest are added one by
    /// one after its lanes).
    pub fn lanes_end(self, n: usize) -> usize {
        match self {
            NormOrder::Float32 => n - n % VEC,
            NormOrder::BFloat16 => n - n % (2 * VEC),
            NormOrder::Float16 => 0,
        }
    }
}

/// `torch.norm` (p = 2) of contiguous float32 `xs`.
pub fn torch_norm(xs: &[f32]) -> f32 {
    torch_norm_in(xs, NormOrder::Float32, 1)
}

/// `torch.norm` (p = 2) of a contiguous tensor whose values as float32 are `xs`, in the order
/// of its dtype's kernel, with `threads` torch threads; the float32 result, which torch
/// rounds to the tensor's dtype.
pub fn torch_norm_in(xs: &[f32], order: NormOrder, threads: usize) -> f32 {
    if order == NormOrder::Float16 {
        return sequential_norm(xs, threads);
    }
    let full = order.lanes_end(xs.len());
    let mut acc = [0f32; VEC];
    for v in xs[..full].chunks_exact(VEC) {
        for (a, &x) in acc.iter_mut().zip(v) {
            *a += x * x;
        }
    }
    let mut total = acc[0];
    for &a in &acc[1..] {
        total += a;
    }
    for &x in &xs[full..] {
        total += x * x;
    }
    total.sqrt()
}

/// [`NormOrder::Float16`]'s norm: a chain of single additions per thread chunk, the chunks'
/// sums added in order after torch's zero. Exact for float16 values ([`chain`]).
pub(crate) fn sequential_norm(xs: &[f32], threads: usize) -> f32 {
    let chain = chain::squares_chain;
    let total = match thread_chunk(xs.len(), threads) {
        None => chain(xs),
        Some(chunk) => xs.chunks(chunk).fold(0f32, |acc, part| acc + chain(part)),
    };
    total.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cascade_levels_follow_the_size() {
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(17), 5);
        // Exact inputs sum exactly whatever the order.
        for n in [1, 7, 8, 31, 33, 4096, 100_003] {
            let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
            let want: f64 = xs.iter().map(|&x| x as f64).sum();
            assert_eq!(torch_sum(&xs, 1) as f64, want, "n={n}");
            assert_eq!(torch_sum(&xs, 3) as f64, want, "n={n}");
        }
    }

    #[test]
    fn norm_of_exact_squares() {
        assert_eq!(torch_norm(&[3.0, 4.0]), 5.0);
        let xs = vec![2.0f32; 25];
        assert_eq!(torch_norm(&xs), 10.0);
        assert_eq!(torch_norm(&[]), 0.0);
    }
}
