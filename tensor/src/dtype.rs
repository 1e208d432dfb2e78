//! The element types that occur in dumps, with every spelling the formats use for them:
//! PyTorch's `torch.float32`, MindSpore's `Float32`, numpy's `float32` / `<f4` and the `.pt`
//! storage class.

/// Element type of a tensor: every dtype msprobe's dump format carries.
///
/// This is the dtype of the bytes as stored, which is not always the dtype dump.json names
/// (MindSpore saves bfloat16 tensors as float32 `.npy` files, for example).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
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
    C64,
    C128,
    /// float8 variants are recorded by name but carry no statistics in msprobe.
    F8E4M3FN,
    F8E5M2,
}

/// (dtype, torch name, MindSpore name, numpy descr, legacy torch storage class).
/// torch pickles the unsigned 16/32/64-bit and float8 dtypes through `UntypedStorage` +
/// `torch.<dtype>` rather than a typed storage class; their class names here are only labels.
const TABLE: &[(DType, &str, &str, &str, &str)] = &[
    (DType::Bool, "torch.bool", "Bool", "|b1", "BoolStorage"),
    (DType::U8, "torch.uint8", "UInt8", "|u1", "ByteStorage"),
    (DType::I8, "torch.int8", "Int8", "|i1", "CharStorage"),
    (DType::I16, "torch.int16", "Int16", "<i2", "ShortStorage"),
    (DType::I32, "torch.int32", "Int32", "<i4", "IntStorage"),
    (DType::I64, "torch.int64", "Int64", "<i8", "LongStorage"),
    (DType::U16, "torch.uint16", "UInt16", "<u2", "UInt16Storage"),
    (DType::U32, "torch.uint32", "UInt32", "<u4", "UInt32Storage"),
    (DType::U64, "torch.uint64", "UInt64", "<u8", "UInt64Storage"),
    (DType::F16, "torch.float16", "Float16", "<f2", "HalfStorage"),
    (
        DType::BF16,
        "torch.bfloat16",
        "BFloat16",
        "<V2",
        "BFloat16Storage",
    ),
    (
        DType::F32,
        "torch.float32",
        "Float32",
        "<f4",
        "FloatStorage",
    ),
    (
        DType::F64,
        "torch.float64",
        "Float64",
        "<f8",
        "DoubleStorage",
    ),
    (
        DType::C64,
        "torch.complex64",
        "Complex64",
        "<c8",
        "ComplexFloatStorage",
    ),
    (
        DType::C128,
        "torch.complex128",
        "Complex128",
        "<c16",
        "ComplexDoubleStorage",
    ),
    (
        DType::F8E4M3FN,
        "torch.float8_e4m3fn",
        "Float8E4M3FN",
        "|V1",
        "Float8_e4m3fnStorage",
    ),
    (
        DType::F8E5M2,
        "torch.float8_e5m2",
        "Float8E5M2",
        "|V1",
        "Float8_e5m2Storage",
    ),
];

impl DType {
    /// Every variant, in declaration order.
    pub const ALL: [DType; 17] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
        DType::F8E4M3FN,
        DType::F8E5M2,
    ];

    fn row(
        self,
    ) -> &'static (
        DType,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every DType has a table row")
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3FN | DType::F8E5M2 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// `torch.float32` etc., as PyTorch dumps write `dtype`.
    pub fn torch_name(self) -> &'static str {
        self.row().1
    }

    /// `Float32` etc., as MindSpore dumps write `dtype`.
    pub fn mindspore_name(self) -> &'static str {
        self.row().2
    }

    /// numpy's dtype name (`float32`, `int64`, `bool`). numpy itself has no bfloat16 or
    /// float8; for those this is the name the `ml_dtypes` package gives them.
    pub fn numpy_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::F8E4M3FN => "float8_e4m3fn",
            DType::F8E5M2 => "float8_e5m2",
        }
    }

    /// Parses [`DType::numpy_name`].
    pub fn from_numpy_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.numpy_name() == s)
    }

    /// numpy's little-endian `descr` (bf16 has none in numpy; `<V2` is only a placeholder).
    pub fn npy_descr(self) -> &'static str {
        self.row().3
    }

    /// The legacy storage class name `torch.save` pickles (`FloatStorage`).
    pub fn torch_storage(self) -> &'static str {
        self.row().4
    }

    /// Parses `torch.float32` and torch's aliases (`torch.float`, `torch.half`, ...).
    pub fn from_torch_name(s: &str) -> Option<DType> {
        // torch aliases that str(dtype) never prints but users may type.
        let s = match s {
            "torch.float" => "torch.float32",
            "torch.double" => "torch.float64",
            "torch.half" => "torch.float16",
            "torch.long" => "torch.int64",
            "torch.int" => "torch.int32",
            "torch.short" => "torch.int16",
            "torch.cfloat" => "torch.complex64",
            "torch.cdouble" => "torch.complex128",
            other => other,
        };
        TABLE.iter().find(|r| r.1 == s).map(|r| r.0)
    }

    /// Parses `Float32` etc.
    pub fn from_mindspore_name(s: &str) -> Option<DType> {
        TABLE.iter().find(|r| r.2 == s).map(|r| r.0)
    }

    /// Accepts either framework's spelling.
    pub fn from_any_name(s: &str) -> Option<DType> {
        Self::from_torch_name(s).or_else(|| Self::from_mindspore_name(s))
    }

    /// Parses a legacy storage class name (`FloatStorage`).
    pub fn from_torch_storage(s: &str) -> Option<DType> {
        TABLE.iter().find(|r| r.4 == s).map(|r| r.0)
    }

    /// numpy descr, either byte-order mark (`<`, `|`, `=`) accepted for little-endian data.
    /// Big-endian (`>`) data is rejected by the caller, not here.
    pub fn from_npy_descr(s: &str) -> Option<DType> {
        let body = s.strip_prefix(['<', '|', '=']).unwrap_or(s);
        match body {
            "b1" => Some(DType::Bool),
            "u1" => Some(DType::U8),
            "i1" => Some(DType::I8),
            "i2" => Some(DType::I16),
            "i4" => Some(DType::I32),
            "i8" => Some(DType::I64),
            "u2" => Some(DType::U16),
            "u4" => Some(DType::U32),
            "u8" => Some(DType::U64),
            "f2" => Some(DType::F16),
            "f4" => Some(DType::F32),
            "f8" => Some(DType::F64),
            "c8" => Some(DType::C64),
            "c16" => Some(DType::C128),
            _ => None,
        }
    }

    /// Real floating types, float8 included.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 | DType::F8E4M3FN | DType::F8E5M2
        )
    }

    /// complex64 and complex128.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// Integer types, signed and unsigned (not bool).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::U8
                | DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::U16
                | DType::U32
                | DType::U64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for d in DType::ALL {
            assert_eq!(DType::from_torch_name(d.torch_name()), Some(d));
            assert_eq!(DType::from_mindspore_name(d.mindspore_name()), Some(d));
            assert_eq!(DType::from_torch_storage(d.torch_storage()), Some(d));
        }
    }

    #[test]
    fn numpy_names_are_distinct_and_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_numpy_name(d.numpy_name()), Some(d));
        }
        assert_eq!(DType::F32.numpy_name(), "float32");
        assert_eq!(DType::from_numpy_name("float"), None);
    }

    #[test]
    fn npy_descrs_of_numpy_types_round_trip() {
        for d in DType::ALL {
            if matches!(d, DType::BF16 | DType::F8E4M3FN | DType::F8E5M2) {
                assert_eq!(DType::from_npy_descr(d.npy_descr()), None);
            } else {
                assert_eq!(DType::from_npy_descr(d.npy_descr()), Some(d));
            }
        }
        assert_eq!(DType::from_npy_descr(">f4"), None);
    }
}
