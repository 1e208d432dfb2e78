//! Element types and the borrowed tensor view every kernel takes.

/// Element type of the bytes a kernel reads. Mirrors the dtypes msprobe records statistics for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    Bool,
    U8,
    I8,
    I16,
    I32,
    I64,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    /// (re, im) f32 pairs; statistics are taken over `abs`.
    C64,
    /// (re, im) f64 pairs; statistics are taken over `abs`.
    C128,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::Bool | ElemType::U8 | ElemType::I8 => 1,
            ElemType::I16 | ElemType::U16 | ElemType::F16 | ElemType::BF16 => 2,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 | ElemType::C64 => 8,
            ElemType::C128 => 16,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F16 | ElemType::BF16 | ElemType::F32 | ElemType::F64
        )
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            ElemType::U8
                | ElemType::I8
                | ElemType::I16
                | ElemType::I32
                | ElemType::I64
                | ElemType::U16
                | ElemType::U32
                | ElemType::U64
        )
    }

    pub fn is_complex(self) -> bool {
        matches!(self, ElemType::C64 | ElemType::C128)
    }
}

/// Shape and bytes disagree.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("tensor of {elem:?} with shape {shape:?} needs {expected} bytes, got {actual}")]
pub struct ViewError {
    pub elem: ElemType,
    pub shape: Vec<usize>,
    pub expected: usize,
    pub actual: usize,
}

/// A borrowed, C-contiguous, little-endian tensor. No copy is made to build one: callers point
/// it at a memory map, a `.pt` storage or a framework's tensor memory.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    elem: ElemType,
    shape: &'a [usize],
    bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Checks that `bytes` holds exactly `prod(shape)` elements.
    pub fn new(elem: ElemType, shape: &'a [usize], bytes: &'a [u8]) -> Result<Self, ViewError> {
        let expected = shape
            .iter()
            .try_fold(elem.size(), |acc, &d| acc.checked_mul(d))
            .unwrap_or(usize::MAX);
        if expected != bytes.len() {
            return Err(ViewError {
                elem,
                shape: shape.to_vec(),
                expected,
                actual: bytes.len(),
            });
        }
        Ok(TensorView { elem, shape, bytes })
    }

    pub fn elem(&self) -> ElemType {
        self.elem
    }

    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of elements (1 for a 0-dim tensor).
    pub fn numel(&self) -> usize {
        self.bytes.len() / self.elem.size()
    }

    /// A 0-dim tensor (shape `[]`), which msprobe treats specially.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }
}
