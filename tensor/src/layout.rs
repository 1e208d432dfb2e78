//! Strided layouts as torch defines them.

/// Whether a tensor with these `(size, stride)` dimensions, outermost first, is contiguous
/// in torch's sense (`is_contiguous()`, the default memory format): every dimension of more
/// than one element has the stride of a row-major layout (size-1 dimensions may carry any
/// stride), and a tensor without elements is contiguous whatever its strides.
pub fn is_contiguous<I>(dims: I) -> bool
where
    I: DoubleEndedIterator<Item = (u64, u64)> + Clone,
{
    if dims.clone().any(|(n, _)| n == 0) {
        return true;
    }
    let mut expected = 1u64;
    for (n, s) in dims.rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(n);
    }
    true
}

/// Row-major strides as torch computes them (size-0 dimensions count as 1).
pub fn contiguous_strides(shape: &[usize]) -> Vec<u64> {
    let mut strides = vec![0u64; shape.len()];
    let mut acc = 1u64;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d.max(1) as u64);
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contiguous(shape: &[u64], strides: &[u64]) -> bool {
        is_contiguous(shape.iter().copied().zip(strides.iter().copied()))
    }

    #[test]
    fn contiguity_as_torch_defines_it() {
        assert!(contiguous(&[], &[]));
        assert!(contiguous(&[6, 8], &[8, 1]));
        assert!(!contiguous(&[8, 6], &[1, 8]));
        // Size-1 dimensions may carry any stride.
        assert!(contiguous(&[1, 6, 8], &[7, 8, 1]));
        assert!(contiguous(&[6, 1], &[1, 99]));
        // Expanded (stride 0) and stepped slices are not.
        assert!(!contiguous(&[6, 8], &[0, 1]));
        assert!(!contiguous(&[5, 4], &[8, 2]));
        // Tensors without elements are, whatever the strides.
        assert!(contiguous(&[0, 3], &[1, 5]));
    }

    #[test]
    fn row_major_strides() {
        assert_eq!(contiguous_strides(&[2, 3]), vec![3, 1]);
        assert_eq!(contiguous_strides(&[2, 0, 3]), vec![3, 3, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<u64>::new());
        let shape = [2usize, 3, 4];
        let strides = contiguous_strides(&shape);
        assert!(is_contiguous(shape.iter().map(|&d| d as u64).zip(strides)));
    }
}
