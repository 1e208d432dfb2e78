//! The borrowed tensor view every numprobe crate passes around, and its typed forms.

use crate::DType;
use bytemuck::{CheckedBitPattern, NoUninit};
use half::{bf16, f16};
use ndarray::{ArrayBase, ArrayViewD, Data, Dimension, IxDyn};
use num_complex::{Complex32, Complex64};

/// A Rust element type with a [`DType`]: what a typed slice or an `ndarray` array may hold.
///
/// Implemented for `bool`, the integers, `half::f16`, `half::bf16`, `f32`, `f64` and
/// `num_complex::Complex32`/`Complex64`. float8 has no Rust type here; its bytes are read
/// through [`TensorView::bytes`] or [`Elems`].
pub trait Element: CheckedBitPattern + NoUninit + Send + Sync + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}

elements! {
    bool => Bool, u8 => U8, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u16 => U16,
    u32 => U32, u64 => U64, f16 => F16, bf16 => BF16, f32 => F32, f64 => F64,
    Complex32 => C64, Complex64 => C128,
}

/// Why bytes, a shape and a dtype do not make a view, or a view not the asked-for type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// The byte count is not `numel × dtype.size()`.
    #[error("{dtype:?} tensor of shape {shape:?} needs {expected} bytes, got {actual}")]
    Length {
        dtype: DType,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    /// The shape's element count overflows `usize`.
    #[error("shape {0:?} has more elements than memory can address")]
    ShapeOverflow(Vec<usize>),
    /// A typed access asked for another dtype than the view holds.
    #[error("the tensor holds {actual:?}, not {expected:?}")]
    DType { expected: DType, actual: DType },
    /// The bytes do not start on the element type's alignment (hand-made files can do that);
    /// copy them into an aligned buffer first.
    #[error("{dtype:?} bytes are not aligned to {align} bytes")]
    Misaligned { dtype: DType, align: usize },
    /// A bool tensor holds a byte other than 0 or 1.
    #[error("a bool tensor holds a byte that is neither 0 nor 1")]
    InvalidBool,
    /// An `ndarray` array that is not in standard (C-contiguous) layout.
    #[error("the array is not C-contiguous (call as_standard_layout() first)")]
    NotContiguous,
}

/// Number of elements of `shape` (1 for a 0-dim tensor), `None` on overflow.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// A borrowed, C-contiguous, little-endian tensor: dtype, shape and bytes.
///
/// Building one copies nothing: point it at a memory map, a `.pt` storage, a framework's tensor
/// memory or an `ndarray` array ([`TensorView::from_array`]). [`TensorView::to_ndarray`] and
/// [`TensorView::typed`] give the elements back as an `ndarray` view or a slice, again without
/// a copy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorView<'a> {
    dtype: DType,
    shape: &'a [usize],
    bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Checks that `bytes` holds exactly `numel(shape)` elements of `dtype`.
    pub fn new(dtype: DType, shape: &'a [usize], bytes: &'a [u8]) -> Result<Self, ViewError> {
        let expected = checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| ViewError::ShapeOverflow(shape.to_vec()))?;
        if expected != bytes.len() {
            return Err(ViewError::Length {
                dtype,
                shape: shape.to_vec(),
                expected,
                actual: bytes.len(),
            });
        }
        Ok(TensorView {
            dtype,
            shape,
            bytes,
        })
    }

    /// A view of a typed slice in C order.
    pub fn from_slice<T: Element>(shape: &'a [usize], data: &'a [T]) -> Result<Self, ViewError> {
        TensorView::new(T::DTYPE, shape, bytemuck::cast_slice(data))
    }

    /// A view of an `ndarray` array or array view of any dimension. Fails only when the array
    /// is not in standard layout (a transposed or sliced view); no copy is made.
    pub fn from_array<T, S, D>(array: &'a ArrayBase<S, D>) -> Result<Self, ViewError>
    where
        T: Element,
        S: Data<Elem = T>,
        D: Dimension,
    {
        let data = array.as_slice().ok_or(ViewError::NotContiguous)?;
        TensorView::from_slice(array.shape(), data)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// The elements in C order, little-endian, `numel × dtype.size()` bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of elements (1 for a 0-dim tensor).
    pub fn numel(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// A 0-dim tensor (shape `[]`), which msprobe treats apart from a one-element tensor.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    /// The elements as a slice of `T`, which must be the view's dtype.
    pub fn typed<T: Element>(&self) -> Result<&'a [T], ViewError> {
        if T::DTYPE != self.dtype {
            return Err(ViewError::DType {
                expected: T::DTYPE,
                actual: self.dtype,
            });
        }
        match bytemuck::checked::try_cast_slice::<u8, T>(self.bytes) {
            Ok(s) => Ok(s),
            Err(bytemuck::checked::CheckedCastError::InvalidBitPattern) => {
                Err(ViewError::InvalidBool)
            }
            Err(_) => Err(ViewError::Misaligned {
                dtype: self.dtype,
                align: std::mem::align_of::<T>(),
            }),
        }
    }

    /// The elements as an `ndarray` view of the view's shape (zero copy).
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayViewD<'a, T>, ViewError> {
        let data = self.typed::<T>()?;
        Ok(ArrayViewD::from_shape(IxDyn(self.shape), data)
            .expect("TensorView::new checked numel(shape) against the bytes"))
    }

    /// The elements as the typed slice of the view's dtype.
    pub fn elems(&self) -> Result<Elems<'a>, ViewError> {
        Ok(match self.dtype {
            DType::Bool => Elems::Bool(self.typed()?),
            DType::U8 => Elems::U8(self.typed()?),
            DType::I8 => Elems::I8(self.typed()?),
            DType::I16 => Elems::I16(self.typed()?),
            DType::I32 => Elems::I32(self.typed()?),
            DType::I64 => Elems::I64(self.typed()?),
            DType::U16 => Elems::U16(self.typed()?),
            DType::U32 => Elems::U32(self.typed()?),
            DType::U64 => Elems::U64(self.typed()?),
            DType::F16 => Elems::F16(self.typed()?),
            DType::BF16 => Elems::BF16(self.typed()?),
            DType::F32 => Elems::F32(self.typed()?),
            DType::F64 => Elems::F64(self.typed()?),
            DType::C64 => Elems::C64(self.typed()?),
            DType::C128 => Elems::C128(self.typed()?),
            DType::F8E4M3FN => Elems::F8E4M3FN(self.bytes),
            DType::F8E5M2 => Elems::F8E5M2(self.bytes),
        })
    }
}

/// A tensor's elements as a typed slice, one variant per [`DType`] (float8 as its raw bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elems<'a> {
    Bool(&'a [bool]),
    U8(&'a [u8]),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    F32(&'a [f32]),
    F64(&'a [f64]),
    C64(&'a [Complex32]),
    C128(&'a [Complex64]),
    F8E4M3FN(&'a [u8]),
    F8E5M2(&'a [u8]),
}

impl<'a> Elems<'a> {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Elems::Bool(_) => DType::Bool,
            Elems::U8(_) => DType::U8,
            Elems::I8(_) => DType::I8,
            Elems::I16(_) => DType::I16,
            Elems::I32(_) => DType::I32,
            Elems::I64(_) => DType::I64,
            Elems::U16(_) => DType::U16,
            Elems::U32(_) => DType::U32,
            Elems::U64(_) => DType::U64,
            Elems::F16(_) => DType::F16,
            Elems::BF16(_) => DType::BF16,
            Elems::F32(_) => DType::F32,
            Elems::F64(_) => DType::F64,
            Elems::C64(_) => DType::C64,
            Elems::C128(_) => DType::C128,
            Elems::F8E4M3FN(_) => DType::F8E4M3FN,
            Elems::F8E5M2(_) => DType::F8E5M2,
        }
    }

    /// The elements' bytes (little-endian, as stored).
    pub fn bytes(&self) -> &'a [u8] {
        match *self {
            Elems::Bool(s) => bytemuck::cast_slice(s),
            Elems::U8(s) | Elems::F8E4M3FN(s) | Elems::F8E5M2(s) => s,
            Elems::I8(s) => bytemuck::cast_slice(s),
            Elems::I16(s) => bytemuck::cast_slice(s),
            Elems::I32(s) => bytemuck::cast_slice(s),
            Elems::I64(s) => bytemuck::cast_slice(s),
            Elems::U16(s) => bytemuck::cast_slice(s),
            Elems::U32(s) => bytemuck::cast_slice(s),
            Elems::U64(s) => bytemuck::cast_slice(s),
            Elems::F16(s) => bytemuck::cast_slice(s),
            Elems::BF16(s) => bytemuck::cast_slice(s),
            Elems::F32(s) => bytemuck::cast_slice(s),
            Elems::F64(s) => bytemuck::cast_slice(s),
            Elems::C64(s) => bytemuck::cast_slice(s),
            Elems::C128(s) => bytemuck::cast_slice(s),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes().len() / self.dtype().size()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// A view of these elements with `shape`.
    pub fn view(&self, shape: &'a [usize]) -> Result<TensorView<'a>, ViewError> {
        TensorView::new(self.dtype(), shape, self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array, ArrayD, ShapeBuilder};

    #[test]
    fn ndarray_round_trip_borrows_the_same_memory() {
        let a = Array::from_shape_fn((2, 3), |(i, j)| bf16::from_f32((i * 3 + j) as f32));
        let v = TensorView::from_array(&a).unwrap();
        assert_eq!(v.dtype(), DType::BF16);
        assert_eq!(v.shape(), &[2, 3]);
        assert_eq!(v.bytes().as_ptr(), a.as_ptr().cast());
        let back = v.to_ndarray::<bf16>().unwrap();
        assert_eq!(back.as_ptr(), a.as_ptr());
        assert_eq!(back, a.view().into_dyn());
    }

    #[test]
    fn every_element_type_round_trips() {
        fn check<T: Element + std::fmt::Debug + PartialEq>(x: T) {
            let a = ArrayD::from_elem(vec![2, 1, 2], x);
            let v = TensorView::from_array(&a).unwrap();
            assert_eq!(v.dtype(), T::DTYPE);
            assert_eq!(v.numel(), 4);
            assert_eq!(v.to_ndarray::<T>().unwrap(), a.view());
            assert_eq!(v.elems().unwrap().dtype(), T::DTYPE);
            assert_eq!(v.elems().unwrap().bytes(), v.bytes());
        }
        check(true);
        check(7u8);
        check(-7i8);
        check(-7i16);
        check(-7i32);
        check(-7i64);
        check(7u16);
        check(7u32);
        check(7u64);
        check(f16::from_f32(1.5));
        check(bf16::from_f32(1.5));
        check(1.5f32);
        check(1.5f64);
        check(Complex32::new(1.0, -2.0));
        check(Complex64::new(1.0, -2.0));
    }

    #[test]
    fn zero_dim_and_empty() {
        let x = [3.0f32];
        let v = TensorView::from_slice(&[], &x).unwrap();
        assert!(v.is_scalar());
        assert_eq!(v.to_ndarray::<f32>().unwrap().ndim(), 0);
        let e: [f32; 0] = [];
        let v = TensorView::from_slice(&[0, 5], &e).unwrap();
        assert_eq!(v.numel(), 0);
        assert_eq!(v.to_ndarray::<f32>().unwrap().shape(), &[0, 5]);
    }

    #[test]
    fn refuses_what_is_not_a_view() {
        assert!(matches!(
            TensorView::new(DType::F32, &[2, 3], &[0; 23]),
            Err(ViewError::Length { expected: 24, .. })
        ));
        assert!(matches!(
            TensorView::new(DType::F32, &[usize::MAX, 2], &[]),
            Err(ViewError::ShapeOverflow(_))
        ));
        let v = TensorView::new(DType::F32, &[2], &[0; 8]).unwrap();
        assert!(matches!(v.typed::<f64>(), Err(ViewError::DType { .. })));
        let bad = [0u8, 2];
        let v = TensorView::new(DType::Bool, &[2], &bad).unwrap();
        assert_eq!(v.typed::<bool>(), Err(ViewError::InvalidBool));
        let t = Array::from_shape_vec((2, 2).f(), vec![1.0f32; 4]).unwrap();
        assert_eq!(
            TensorView::from_array(&t).unwrap_err(),
            ViewError::NotContiguous
        );
    }

    #[test]
    fn misaligned_bytes_are_an_error_not_a_copy() {
        let words = [0u32; 3];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        let v = TensorView::new(DType::F32, &[2], &bytes[1..9]).unwrap();
        assert_eq!(
            v.typed::<f32>(),
            Err(ViewError::Misaligned {
                dtype: DType::F32,
                align: 4
            })
        );
    }
}
