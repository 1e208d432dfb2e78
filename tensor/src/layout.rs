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

/// The element offset, from a strided view's first element, of its last one (`Σ (size − 1) ×
/// stride`); `Some(0)` for a 0-dimensional view, None when the view has no elements or the
/// sum overflows. A view fits a storage of `n` elements at offset `o` when `o + last < n`.
pub fn last_offset(size: &[u64], stride: &[u64]) -> Option<u64> {
    if size.contains(&0) {
        return None;
    }
    size.iter().zip(stride).try_fold(0u64, |acc, (&n, &s)| {
        acc.checked_add((n - 1).checked_mul(s)?)
    })
}

/// Writes the `item`-byte elements of a strided view of `storage` (its first element at
/// element `offset`) into `out` in C order: what torch's `contiguous()` makes of it. One
/// innermost row at a time; a row of unit stride is one copy. The caller sizes `out` (so it
/// may be the bytes of an aligned buffer of the element type); every byte of it is written,
/// so a reused buffer needs no clearing first.
///
/// # Panics
/// When `out` is not `numel × item` bytes, or the view reaches outside `storage` (check with
/// [`last_offset`] first).
pub fn gather_into(
    storage: &[u8],
    item: usize,
    offset: u64,
    size: &[u64],
    stride: &[u64],
    out: &mut [u8],
) {
    let numel: u64 = size.iter().product();
    assert_eq!(
        out.len() as u64,
        numel * item as u64,
        "output of the wrong size"
    );
    let start = offset as usize * item;
    let Some((&inner, outer)) = size.split_last() else {
        out.copy_from_slice(&storage[start..start + item]);
        return;
    };
    if out.is_empty() {
        return;
    }
    let row_bytes = inner as usize * item;
    let step = stride[outer.len()] as usize * item;
    let mut idx = vec![0u64; outer.len()];
    let mut base = start;
    for row in out.chunks_exact_mut(row_bytes) {
        let src = &storage[base..];
        if step == item {
            row.copy_from_slice(&src[..row_bytes]);
        } else {
            match item {
                1 => copy_strided::<1>(row, src, step),
                2 => copy_strided::<2>(row, src, step),
                4 => copy_strided::<4>(row, src, step),
                8 => copy_strided::<8>(row, src, step),
                _ => copy_strided_n(row, src, step, item),
            }
        }
        // The next row: an odometer over the outer dimensions, moving `base` along.
        for d in (0..outer.len()).rev() {
            idx[d] += 1;
            base += stride[d] as usize * item;
            if idx[d] < size[d] {
                break;
            }
            base -= size[d] as usize * stride[d] as usize * item;
            idx[d] = 0;
        }
    }
}

fn copy_strided<const N: usize>(dst: &mut [u8], src: &[u8], step: usize) {
    for (i, d) in dst.chunks_exact_mut(N).enumerate() {
        d.copy_from_slice(&src[i * step..i * step + N]);
    }
}

fn copy_strided_n(dst: &mut [u8], src: &[u8], step: usize, item: usize) {
    for (i, d) in dst.chunks_exact_mut(item).enumerate() {
        d.copy_from_slice(&src[i * step..i * step + item]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_gathered_in_c_order() {
        let storage: Vec<u8> = (0..24).collect();
        // Filled with a byte no storage byte below equals: an element the gather skipped
        // would show (callers reuse buffers without clearing them).
        let gather = |item: usize, offset, size: &[u64], stride: &[u64]| {
            let mut out = vec![0xAAu8; size.iter().product::<u64>() as usize * item];
            gather_into(&storage, item, offset, size, stride, &mut out);
            out
        };
        // (4, 6)[1:3, ::2]: offset 6, size (2, 3), stride (6, 2).
        assert_eq!(gather(1, 6, &[2, 3], &[6, 2]), vec![6, 8, 10, 12, 14, 16]);
        // A transpose of (2, 3).
        assert_eq!(gather(1, 0, &[3, 2], &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
        // 0-dimensional, and without elements.
        assert_eq!(gather(1, 5, &[], &[]), vec![5]);
        assert!(gather(1, 0, &[3, 0], &[1, 1]).is_empty());
        // Four-byte elements with gaps (a chunk of a fused projection), and expanded.
        assert_eq!(
            gather(4, 1, &[2, 1], &[3, 1]),
            vec![4, 5, 6, 7, 16, 17, 18, 19]
        );
        assert_eq!(gather(2, 0, &[2, 2], &[0, 1]), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(last_offset(&[2, 3], &[6, 2]), Some(10));
        assert_eq!(last_offset(&[], &[]), Some(0));
        assert_eq!(last_offset(&[0, 3], &[1, 1]), None);
        assert_eq!(last_offset(&[3, 2], &[u64::MAX, 1]), None);
    }

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
