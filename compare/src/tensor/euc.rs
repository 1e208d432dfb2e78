//! `EucDist` as msprobe computes it: `np.linalg.norm(n - b, ord=2)` on the two tensors widened
//! to float64, which numpy evaluates as `sqrt(dot(d, d))` with OpenBLAS's `ddot`.
//!
//! The sum of squares is rounded in OpenBLAS's order (0.3.23, the x86-64 kernel numpy 1.26's
//! wheels select on AVX2 CPUs, `Haswell`), so the cell carries msprobe's last digit:
//!
//! * with more than 10 000 elements and more than one OpenBLAS thread, the vector is split into
//!   one part per thread (`blas_level1_thread_with_return_value`: each part `ceil(left /
//!   threads_left)` long) and the parts' sums are added in order, starting from 0;
//! * in a part, the first `len & !15` elements go through 16 fused multiply-add accumulators
//!   (element `i` into accumulator `i % 16`), which are reduced pairwise as the kernel's
//!   `vextractf128`/`vaddpd`/`vhaddpd` sequence does;
//! * the remaining `len % 16` elements are added one by one, product rounded before the sum
//!   (the C loop after the kernel is not contracted into an FMA).
//!
//! OpenBLAS runs one thread per CPU unless told otherwise, so msprobe's value for tensors over
//! 10 000 elements depends on the machine it ran on; [`default_blas_threads`] is what OpenBLAS
//! would pick on this machine.

use std::ops::Range;

use rayon::prelude::*;

use super::{Operand, Side, with_pair};

/// OpenBLAS's threaded `ddot` is used only above this many elements.
const THREAD_MIN: usize = 10_000;
/// numpy 1.26's OpenBLAS is built with `MAX_THREADS=64`.
const MAX_THREADS: usize = 64;
/// Elements decoded at a time (a multiple of 16, so blocks keep the accumulator lanes).
const BLOCK: usize = 4096;

/// The OpenBLAS thread count of numpy on this machine: one per available CPU, at most 64.
pub fn default_blas_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
}

/// The ranges OpenBLAS's `ddot` gives its threads for `n` elements.
pub(crate) fn blas_parts(n: usize, threads: usize) -> Vec<Range<usize>> {
    let threads = threads.clamp(1, MAX_THREADS);
    if n <= THREAD_MIN || threads == 1 {
        return std::iter::once(0..n).collect();
    }
    let mut parts = Vec::with_capacity(threads);
    let (mut left, mut start) = (n, 0);
    while left > 0 {
        let width = left.div_ceil(threads - parts.len()).min(left);
        parts.push(start..start + width);
        start += width;
        left -= width;
    }
    parts
}

/// `sqrt(dot(d, d))` for `d = n - b` in float64, infinities and NaNs taken as 0 (msprobe zeroes
/// them where both tensors have them; where they differ, no metric is reported).
pub(crate) fn euc_dist(n: &Side, b: &Side, threads: usize) -> f64 {
    let parts = blas_parts(n.numel(), threads);
    let sums: Vec<f64> = parts.into_par_iter().map(|p| part_sum(n, b, p)).collect();
    sums.iter().fold(0.0, |acc, s| acc + s).sqrt()
}

/// One thread's `ddot` over `part`.
/// One thread's `ddot` over `part`. Strided sides are read a block at a time in lockstep
/// ([`with_pair`]).
fn part_sum(n: &Side, b: &Side, part: Range<usize>) -> f64 {
    let mut sum = PartSum::new(part.len());
    feed_blocks(n, b, part, &mut sum);
    sum.finish()
}

/// Feeds elements `range` of both sides to `sum`, [`BLOCK`] at a time.
pub(crate) fn feed_blocks(n: &Side, b: &Side, range: Range<usize>, sum: &mut PartSum) {
    let mut start = range.start;
    while start < range.end {
        let end = (start + BLOCK).min(range.end);
        with_pair(n, b, start..end, |x, y, r| sum.feed(x, y, r));
        start = end;
    }
}

/// One OpenBLAS part's `ddot`, fed the part's elements in order, any number at a time: the
/// first `len & !15` go through the 16 fused accumulators (element `i` of the part into
/// accumulator `i % 16`, whatever the feeds' edges), the rest are added one by one onto the
/// reduced accumulators. So a part can be summed from the chunks of another pass.
pub(crate) struct PartSum {
    /// Elements fed so far.
    done: usize,
    kernel_len: usize,
    acc: [f64; 16],
    /// The sum once the kernel's elements are in (reduced accumulators, then the tail).
    dot: Option<f64>,
    x: Vec<f64>,
    y: Vec<f64>,
}

impl PartSum {
    pub(crate) fn new(len: usize) -> PartSum {
        PartSum {
            done: 0,
            kernel_len: len & !15,
            acc: [0.0; 16],
            dot: None,
            x: Vec::new(),
            y: Vec::new(),
        }
    }

    /// Feeds elements `range` of the operands: the part's next `range.len()` elements.
    pub(crate) fn feed(&mut self, n: &Operand, b: &Operand, range: Range<usize>) {
        let mut start = range.start;
        while start < range.end {
            if self.done < self.kernel_len {
                let end = (start + BLOCK)
                    .min(range.end)
                    .min(start + (self.kernel_len - self.done));
                super::decode(n, start..end, &mut self.x);
                super::decode(b, start..end, &mut self.y);
                accumulate_at(&self.x, &self.y, &mut self.acc, self.done % 16);
                self.done += end - start;
                start = end;
            } else {
                let mut dot = self.tail_start();
                for i in start..range.end {
                    let d = finite_or_zero(n.get(i)) - finite_or_zero(b.get(i));
                    dot += d * d;
                }
                self.dot = Some(dot);
                self.done += range.end - start;
                start = range.end;
            }
        }
    }

    /// The sum the tail is added onto: the reduced accumulators (0 without kernel elements).
    fn tail_start(&self) -> f64 {
        match self.dot {
            Some(d) => d,
            None if self.kernel_len > 0 => reduce(&self.acc),
            None => 0.0,
        }
    }

    /// The part's sum (every element fed).
    pub(crate) fn finish(self) -> f64 {
        self.tail_start()
    }
}

/// Adds `(x - y)²` to the accumulators, element `k` into accumulator `(lane + k) % 16`: a
/// head up to the next accumulator 0, whole groups of 16 with the FMA kernel, then the rest.
/// Each accumulator sees its elements in order through fused multiply-adds, so the bits do not
/// depend on where the groups start.
fn accumulate_at(x: &[f64], y: &[f64], acc: &mut [f64; 16], lane: usize) {
    let head = ((16 - lane) % 16).min(x.len());
    for k in 0..head {
        let d = finite_or_zero(x[k]) - finite_or_zero(y[k]);
        acc[lane + k] = d.mul_add(d, acc[lane + k]);
    }
    let full = head + (x.len() - head) / 16 * 16;
    accumulate(&x[head..full], &y[head..full], acc);
    for k in full..x.len() {
        let (d, l) = (finite_or_zero(x[k]) - finite_or_zero(y[k]), k - full);
        acc[l] = d.mul_add(d, acc[l]);
    }
}

#[inline(always)]
fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

/// Adds `(x - y)²` of a block (a multiple of 16 long) to the 16 accumulators with FMA.
fn accumulate(x: &[f64], y: &[f64], acc: &mut [f64; 16]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports FMA (checked just above).
            unsafe { accumulate_fma(x, y, acc) };
            return;
        }
    }
    // Without the instruction `mul_add` calls libm's fma: slower, the same bits.
    accumulate_impl(x, y, acc);
}

/// The same loop compiled with the FMA instruction, so `mul_add` is one instruction per lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_fma(x: &[f64], y: &[f64], acc: &mut [f64; 16]) {
    accumulate_impl(x, y, acc);
}

#[inline(always)]
fn accumulate_impl(x: &[f64], y: &[f64], acc: &mut [f64; 16]) {
    debug_assert!(x.len().is_multiple_of(16) && x.len() == y.len());
    for (xs, ys) in x.chunks_exact(16).zip(y.chunks_exact(16)) {
        for l in 0..16 {
            let d = finite_or_zero(xs[l]) - finite_or_zero(ys[l]);
            acc[l] = d.mul_add(d, acc[l]);
        }
    }
}

/// The kernel's reduction of its four 4-lane registers (register `j` holds accumulators
/// `4j..4j+4`): high half onto low half, registers 0+1 and 2+3, then those two, then the pair.
fn reduce(a: &[f64; 16]) -> f64 {
    let half = |j: usize| [a[4 * j] + a[4 * j + 2], a[4 * j + 1] + a[4 * j + 3]];
    let (r0, r1, r2, r3) = (half(0), half(1), half(2), half(3));
    let s01 = [r0[0] + r1[0], r0[1] + r1[1]];
    let s23 = [r2[0] + r3[0], r2[1] + r3[1]];
    let s = [s01[0] + s23[0], s01[1] + s23[1]];
    s[0] + s[1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_follow_openblas_split() {
        assert_eq!(blas_parts(10_000, 8), vec![0..10_000]);
        assert_eq!(blas_parts(10_001, 1), vec![0..10_001]);
        assert_eq!(blas_parts(10_001, 2), vec![0..5001, 5001..10_001]);
        assert_eq!(
            blas_parts(10_003, 3),
            vec![0..3335, 3335..6669, 6669..10_003]
        );
        assert_eq!(blas_parts(20_000, 0), vec![0..20_000]);
    }

    /// Feeding a part in pieces of any size gives the bits of one pass over it.
    #[test]
    fn feeds_of_any_size_give_one_pass_bits() {
        let x: Vec<f64> = (0..1000)
            .map(|i| ((i as f64) * 0.731).sin() * 1e3)
            .collect();
        let y: Vec<f64> = (0..1000).map(|i| ((i as f64) * 0.129).cos()).collect();
        let shape = [x.len()];
        let xv = numprobe_tensor::TensorView::from_slice(&shape, &x).unwrap();
        let yv = numprobe_tensor::TensorView::from_slice(&shape, &y).unwrap();
        let (n, b) = (Operand::in_memory(xv), Operand::in_memory(yv));
        for part in [0..1000, 3..990, 0..15, 5..37] {
            let want = part_sum(&Side::view(xv), &Side::view(yv), part.clone());
            for step in [1usize, 5, 16, 17, 333] {
                let mut s = PartSum::new(part.len());
                let mut i = part.start;
                while i < part.end {
                    let e = (i + step).min(part.end);
                    s.feed(&n, &b, i..e);
                    i = e;
                }
                assert_eq!(s.finish().to_bits(), want.to_bits(), "{part:?} step {step}");
            }
        }
    }

    /// The tail after the kernel is not fused: with d² = 1 + 2⁻²⁹ + 2⁻⁶⁰ added to 2⁻⁵³ a fused
    /// add rounds up, numpy (and this) does not.
    #[test]
    fn tail_is_added_unfused() {
        let mut x = vec![0.0f64; 17];
        x[0] = 2f64.powi(-27);
        x[1] = 2f64.powi(-27);
        x[16] = 1.0 + 2f64.powi(-30);
        let y = vec![0.0f64; 17];
        let shape = [17usize];
        let xv = numprobe_tensor::TensorView::from_slice(&shape, &x).unwrap();
        let yv = numprobe_tensor::TensorView::from_slice(&shape, &y).unwrap();
        let (n, b) = (Side::view(xv), Side::view(yv));
        // numpy 1.26.4 / OpenBLAS 0.3.23 Haswell: x.dot(x) == 0x1.0000000800000p+0.
        assert_eq!(part_sum(&n, &b, 0..17), 1.0 + 2f64.powi(-29));
    }
}
