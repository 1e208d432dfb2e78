//! Mergeable partial results of the one-pass reduction.
//!
//! Threads, chunks, GPU workgroups, batched tensors and (later) shards all produce `Partials` and
//! combine them with [`Partials::merge`]; msprobe's numbers are derived only at the end
//! ([`crate::summary`]). `merge` is associative and commutative up to floating-point rounding of
//! `sum`/`sum_sq`, which are accumulated in f64.

/// Counts, extremes and sums of one stretch of a tensor.
///
/// For complex tensors the element value is `abs(z)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Partials {
    /// Elements seen.
    pub count: u64,
    pub nan_count: u64,
    pub pos_inf_count: u64,
    pub neg_inf_count: u64,
    /// Smallest and largest non-NaN value, infinities included; `+inf`/`-inf` when none seen.
    pub min: f64,
    pub max: f64,
    /// Sum and sum of squares of the finite values.
    pub sum: f64,
    pub sum_sq: f64,
    /// Exact extremes of integer and bool tensors (bool as 0/1); `i128::MAX`/`i128::MIN` when
    /// none seen or not an integer tensor.
    pub int_min: i128,
    pub int_max: i128,
}

impl Default for Partials {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl Partials {
    /// The identity of [`merge`](Self::merge).
    pub const EMPTY: Partials = Partials {
        count: 0,
        nan_count: 0,
        pos_inf_count: 0,
        neg_inf_count: 0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        sum: 0.0,
        sum_sq: 0.0,
        int_min: i128::MAX,
        int_max: i128::MIN,
    };

    /// Folds `other` into `self`.
    pub fn merge(&mut self, other: &Partials) {
        self.count += other.count;
        self.nan_count += other.nan_count;
        self.pos_inf_count += other.pos_inf_count;
        self.neg_inf_count += other.neg_inf_count;
        // f64::min/max ignore NaN, and neither field ever holds one.
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
        self.int_min = self.int_min.min(other.int_min);
        self.int_max = self.int_max.max(other.int_max);
    }

    /// `a.merge(b)` as a value, for folds.
    pub fn merged(mut self, other: &Partials) -> Partials {
        self.merge(other);
        self
    }

    /// Adds one float element.
    #[inline]
    pub fn push_f64(&mut self, x: f64) {
        self.count += 1;
        if x.is_nan() {
            self.nan_count += 1;
            return;
        }
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        if x == f64::INFINITY {
            self.pos_inf_count += 1;
        } else if x == f64::NEG_INFINITY {
            self.neg_inf_count += 1;
        } else {
            self.sum += x;
            self.sum_sq += x * x;
        }
    }

    /// Adds one integer (or bool as 0/1) element.
    #[inline]
    pub fn push_int(&mut self, x: i128) {
        self.int_min = self.int_min.min(x);
        self.int_max = self.int_max.max(x);
        self.push_f64(x as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_of_halves_equals_whole() {
        let xs = [1.5, -2.0, f64::NAN, f64::INFINITY, 0.25, -7.0];
        let mut whole = Partials::EMPTY;
        xs.iter().for_each(|&x| whole.push_f64(x));
        let (mut a, mut b) = (Partials::EMPTY, Partials::EMPTY);
        xs[..3].iter().for_each(|&x| a.push_f64(x));
        xs[3..].iter().for_each(|&x| b.push_f64(x));
        assert_eq!(a.merged(&b), whole);
        assert_eq!(whole.nan_count, 1);
        assert_eq!(whole.pos_inf_count, 1);
        assert_eq!(whole.min, -7.0);
        assert_eq!(whole.max, f64::INFINITY);
        assert_eq!(whole.sum, 1.5 - 2.0 + 0.25 - 7.0);
    }

    #[test]
    fn empty_is_identity() {
        let mut p = Partials::EMPTY;
        p.push_int(-3);
        assert_eq!(p.merged(&Partials::EMPTY), p);
        assert_eq!(Partials::EMPTY.merged(&p), p);
    }
}
