//! The float16 norm's chain (`acc = acc + x * x` in float32, rounded after every addition,
//! one element after the other: [`NormOrder::Float16`](super::NormOrder::Float16)) without
//! waiting on each addition.
//!
//! Written as a loop, each addition waits for the one before: about a nanosecond an element,
//! seven times the float32 vector pass; by blocks on a grid, below half of that. But while the accumulator stays in one binade `[2^e, 2^(e+1))`
//! every sum it takes is rounded to the same grid, the multiples of its ulp `u`, and the
//! accumulator is itself on that grid: adding `s` moves it by `u * round(s / u)`, whatever
//! its value, except where `s / u` ends in exactly one half (a tie, which rounds to the even
//! neighbour of the sum, so depends on the accumulator). A float16 value's square is exact in
//! float32 (22 significant bits at most), so those steps are integers computed independently
//! and summed exactly, in vector lanes. A block whose steps hold a tie, or whose sum leaves
//! the binade (all squares are nonnegative, so the accumulator only grows and the end
//! tells), or that holds a value that is not finite, is added one element after the other
//! as written (walking a tied block's steps in integers, each tie by the accumulator's
//! parity, measured slower than that). The result is the loop's, bit for bit, for any
//! float32 input whose squares are exact.

/// Elements per block: the integer steps of a block (each below 2^24) sum exactly in i32.
const BLOCK: usize = 64;

/// `sum(x * x)` of `xs` as one float32 accumulator from zero adds it, element by element.
/// Exact for values whose squares are exact in float32 (those of float16 values).
pub(crate) fn squares_chain(xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked above).
        return unsafe { squares_chain_avx2(xs) };
    }
    squares_chain_with(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn squares_chain_avx2(xs: &[f32]) -> f32 {
    squares_chain_with(xs)
}

#[inline(always)]
fn squares_chain_with(xs: &[f32]) -> f32 {
    let mut acc = 0f32;
    let mut blocks = xs.chunks_exact(BLOCK);
    for b in &mut blocks {
        acc = match block_steps(acc, b) {
            Some(next) => next,
            None => one_by_one(acc, b),
        };
    }
    one_by_one(acc, blocks.remainder())
}

/// The chain as written: the reference, and the fallback of a block the grid cannot take.
fn one_by_one(acc: f32, xs: &[f32]) -> f32 {
    xs.iter().fold(acc, |acc, &x| acc + x * x)
}

/// The accumulator after `b` from `acc` by the grid of its binade, or None where that does
/// not hold (see the module docs).
#[inline(always)]
fn block_steps(acc: f32, b: &[f32]) -> Option<f32> {
    // A normal accumulator whose ulp is normal too (its grid scales exactly by a power of
    // two), below the top binade (whose end is not a float32).
    let exp = (acc.to_bits() >> 23) & 0xff;
    if !(24..254).contains(&exp) {
        return None;
    }
    let ulp = f32::from_bits((exp - 23) << 23);
    let inv_ulp = f32::from_bits((127 + 127 - (exp - 23)) << 23);
    if !inv_ulp.is_normal() {
        return None;
    }
    let mut steps = 0i32;
    let mut off_grid = false;
    for &x in b {
        // Exact: the square (float16 values) and its scaling by a power of two (a quotient
        // that underflows is far below one half, so it rounds to zero either way).
        let t = x * x * inv_ulp;
        let r = t.round_ties_even();
        // A tie, or a step of 2^24 ulps or more (which leaves the binade), or not finite.
        // (`|`, not `||`: no branch, so the loop runs in vector lanes.)
        // One comparison that a NaN fails too.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let outside = !(t < 16_777_216.0);
        off_grid |= ((t - r).abs() == 0.5) | outside;
        // Clamped into 0..=2^24 (a NaN to 0) so that the conversion needs no saturation,
        // which would take the loop out of vector lanes; the steps of a block the grid
        // takes are in that range already. (Not `clamp`: it keeps a NaN.)
        #[allow(clippy::manual_clamp)]
        let clamped = r.max(0.0).min(16_777_216.0);
        // SAFETY: `clamped` is finite and within i32's range.
        steps += unsafe { clamped.to_int_unchecked::<i32>() };
    }
    if off_grid {
        return None;
    }
    let next = acc as f64 + steps as f64 * ulp as f64;
    // Still in the binade (then `next` is on its grid, so exact in float32).
    (next < f64::from(f32::from_bits((exp + 1) << 23))).then_some(next as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// float16 values (as float32) of random sign and mantissa, exponents within `spread`
    /// binades, with a share of short mantissas (values whose squares tie on the grid).
    fn halves(n: usize, seed: u64, spread: u64, short: bool) -> Vec<f32> {
        let mut next = testsupport::lcg24(seed);
        (0..n)
            .map(|_| {
                let r = next();
                let e = (next() % (spread + 1)) as i32 - (spread / 2) as i32;
                let mant = if short && r.is_multiple_of(3) {
                    (r >> 2) & 0x300
                } else {
                    (r >> 2) & 0x3ff
                };
                let bits = ((r & 1) << 15) as u16 | (((e + 15) as u16) << 10) | mant as u16;
                half::f16::from_bits(bits).to_f32()
            })
            .collect()
    }

    #[test]
    fn the_grid_gives_the_chain_bit_for_bit() {
        let mut cases = 0;
        for (i, n) in [0usize, 1, 63, 64, 65, 1000, 4097, 70_001, 300_000]
            .into_iter()
            .enumerate()
        {
            for spread in [0u64, 6, 24, 29] {
                for short in [false, true] {
                    let xs = halves(n, 17 + i as u64 * 7 + spread, spread, short);
                    let want = one_by_one(0.0, &xs);
                    assert_eq!(squares_chain(&xs).to_bits(), want.to_bits(), "n={n}");
                    assert_eq!(squares_chain_with(&xs).to_bits(), want.to_bits(), "n={n}");
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 72);
    }

    #[test]
    fn blocks_the_grid_cannot_take_are_added_one_by_one() {
        // Ties: every square is half an ulp of an accumulator at 2^24 (which stays there, as
        // each sum rounds to the even neighbour).
        let big = 2f32.powi(24);
        assert_eq!(block_steps(big, &[1.0; 64]), None);
        assert_eq!(one_by_one(big, &[1.0; 64]), big);
        // A sum that leaves the binade, and values that are not finite.
        assert_eq!(block_steps(1.0, &[1.0; 64]), None);
        assert_eq!(block_steps(1.0, &[f32::INFINITY; 64]), None);
        assert_eq!(block_steps(1.0, &[f32::NAN; 64]), None);
        let nan = [[0.5f32; 63].as_slice(), &[f32::NAN]].concat();
        assert!(squares_chain(&nan).is_nan());
        // Zero and subnormal accumulators take the chain itself.
        assert_eq!(block_steps(0.0, &[0.5; 64]), None);
        assert_eq!(block_steps(f32::from_bits(1), &[0.0; 64]), None);
        // On the grid: 64 steps of two ulps each (squares of 2^-11 at an accumulator of 1).
        let tiny = 2f32.powi(-11);
        assert_eq!(
            block_steps(1.0, &[tiny; 64]),
            Some(1.0 + 64.0 * 2f32.powi(-22))
        );
        assert_eq!(
            block_steps(1.0, &[tiny; 64]).unwrap().to_bits(),
            one_by_one(1.0, &[tiny; 64]).to_bits()
        );
    }
}
