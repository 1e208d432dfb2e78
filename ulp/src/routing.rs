//! Torch dtypes as msprobe names them, the accuracy standards, and which standard judges an API
//! (spec §3).

/// The torch dtypes that reach the accuracy checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TorchDtype {
    Float16,
    BFloat16,
    Float32,
    Float64,
    Float8E4M3Fn,
    Float8E5M2,
    Complex64,
    Complex128,
    Bool,
    UInt8,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt16,
    UInt32,
    UInt64,
}

impl TorchDtype {
    /// `str(torch dtype)`, e.g. `torch.float16`.
    pub fn torch_str(self) -> &'static str {
        match self {
            TorchDtype::Float16 => "torch.float16",
            TorchDtype::BFloat16 => "torch.bfloat16",
            TorchDtype::Float32 => "torch.float32",
            TorchDtype::Float64 => "torch.float64",
            TorchDtype::Float8E4M3Fn => "torch.float8_e4m3fn",
            TorchDtype::Float8E5M2 => "torch.float8_e5m2",
            TorchDtype::Complex64 => "torch.complex64",
            TorchDtype::Complex128 => "torch.complex128",
            TorchDtype::Bool => "torch.bool",
            TorchDtype::UInt8 => "torch.uint8",
            TorchDtype::Int8 => "torch.int8",
            TorchDtype::Int16 => "torch.int16",
            TorchDtype::Int32 => "torch.int32",
            TorchDtype::Int64 => "torch.int64",
            TorchDtype::UInt16 => "torch.uint16",
            TorchDtype::UInt32 => "torch.uint32",
            TorchDtype::UInt64 => "torch.uint64",
        }
    }

    /// Parses `float16`, `torch.float16`, `bf16`-style names.
    pub fn parse(name: &str) -> Option<Self> {
        let n = name.strip_prefix("torch.").unwrap_or(name);
        Some(match n {
            "float16" | "half" | "fp16" => TorchDtype::Float16,
            "bfloat16" | "bf16" => TorchDtype::BFloat16,
            "float32" | "float" | "fp32" => TorchDtype::Float32,
            "float64" | "double" | "fp64" => TorchDtype::Float64,
            "float8_e4m3fn" => TorchDtype::Float8E4M3Fn,
            "float8_e5m2" => TorchDtype::Float8E5M2,
            "complex64" => TorchDtype::Complex64,
            "complex128" => TorchDtype::Complex128,
            "bool" => TorchDtype::Bool,
            "uint8" => TorchDtype::UInt8,
            "int8" => TorchDtype::Int8,
            "int16" => TorchDtype::Int16,
            "int32" => TorchDtype::Int32,
            "int64" => TorchDtype::Int64,
            "uint16" => TorchDtype::UInt16,
            "uint32" => TorchDtype::UInt32,
            "uint64" => TorchDtype::UInt64,
            _ => return None,
        })
    }

    pub fn is_fp8(self) -> bool {
        matches!(self, TorchDtype::Float8E4M3Fn | TorchDtype::Float8E5M2)
    }
}

/// The accuracy standards (`CompareConst` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Standard {
    Benchmark,
    AbsoluteThreshold,
    BinaryConsistency,
    Ulp,
    Thousandth,
    AccumulativeError,
}

impl Standard {
    /// msprobe's internal name, as in `standard_routing.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Standard::Benchmark => "benchmark",
            Standard::AbsoluteThreshold => "absolute_threshold",
            Standard::BinaryConsistency => "binary_consistency",
            Standard::Ulp => "ulp_compare",
            Standard::Thousandth => "thousandth_threshold",
            Standard::AccumulativeError => "accumulative_error_compare",
        }
    }
    /// The algorithm name written in api_precision_compare's details CSV.
    pub fn algorithm_name(self) -> &'static str {
        match self {
            Standard::Benchmark => "标杆比对法",
            Standard::AbsoluteThreshold => "绝对阈值法",
            Standard::BinaryConsistency => "二进制一致法",
            Standard::Ulp => "ULP误差比对法",
            Standard::Thousandth => "双千指标法",
            Standard::AccumulativeError => "累积误差比对法",
        }
    }
}

/// Which routing rules to apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Routing {
    /// msprobe 26.2.0: every fp16/bf16/fp32/fp64 output uses the benchmark standard.
    #[default]
    V26_2,
    /// Before 2026-01-22: the API lists decide for floating outputs too.
    ListDriven,
}

pub const ABSOLUTE_THRESHOLD_APIS: &[&str] = &[
    "mul",
    "mul_",
    "__mul__",
    "__imul__",
    "__rmul__",
    "add",
    "add_",
    "__add__",
    "__iadd__",
    "__radd__",
    "div",
    "div_",
    "__div__",
    "__idiv__",
    "divide",
    "divide_",
    "leaky_relu",
    "leaky_relu_",
    "prelu",
    "reciprocal",
    "reciprocal_",
    "rsqrt",
    "rsqrt_",
    "square",
    "square_",
    "sub",
    "sub_",
    "rsub",
    "__isub__",
    "__sub__",
];
pub const BINARY_APIS: &[&str] = &[
    "abs",
    "abs_",
    "absolute",
    "absolute_",
    "argmin",
    "bitwise_and",
    "bitwise_and_",
    "broadcast_to",
    "ceil",
    "ceil_",
    "equal",
    "fill_",
    "flatten",
    "floor",
    "floor_",
    "gather",
    "greater",
    "greater_",
    "greater_equal",
    "greater_equal_",
    "histc",
    "isfinite",
    "isnan",
    "less",
    "less_",
    "less_equal",
    "less_equal_",
    "logical_and",
    "logical_and_",
    "logical_not",
    "logical_not_",
    "logical_or",
    "logical_or_",
    "masked_fill",
    "masked_fill_",
    "max_pool3d",
    "maximum",
    "minimum",
    "neg",
    "neg_",
    "nonzero",
    "not_equal",
    "not_equal_",
    "one_hot",
    "pad",
    "relu",
    "reshape",
    "round",
    "round_",
    "select",
    "sign",
    "sign_",
    "sort",
    "tile",
    "topk",
    "transpose",
    "transpose_",
    "tril",
    "tril_",
    "triu",
    "triu_",
    "type_as",
];
pub const ULP_APIS: &[&str] = &[
    "__matmul__",
    "addbmm",
    "addbmm_",
    "addmm",
    "addmm_",
    "baddbmm",
    "baddbmm_",
    "bilinear",
    "bmm",
    "chain_matmul",
    "hspmm",
    "linear",
    "matmul",
    "mm",
    "mv",
    "smm",
    "sspaddmm",
];
pub const THOUSANDTH_APIS: &[&str] = &["conv1d", "conv2d"];
pub const ACCUMULATIVE_APIS: &[&str] = &["test_api"];

/// Dtype strings with their own standard (benchmark support list plus the unsupported ones);
/// anything else falls to binary consistency.
const BINARY_UNSUPPORTED: &[&str] = &[
    "torch.float16",
    "torch.bfloat16",
    "torch.float32",
    "torch.float8_e4m3fn",
    "torch.float8_e5m2",
    "torch.float64",
    "torch.complex64",
    "torch.complex128",
];

fn is_fp8_or_hif8(dtype: &str) -> bool {
    matches!(
        dtype,
        "torch.float8_e4m3fn"
            | "torch.float8_e5m2"
            | "<class 'torch_npu.utils.hif8_tensor.HiFloat8Tensor'>"
            | "torch_npu.HiFloat8Tensor"
    )
}

/// The standard msprobe applies to an output (`_get_standard_category`): `api_name` is the bare
/// name (`matmul`), dtypes are torch strings.
pub fn standard_for(api_name: &str, out_dtype: &str, in_dtype: &str, routing: Routing) -> Standard {
    if is_fp8_or_hif8(out_dtype) {
        return Standard::Ulp;
    }
    if is_fp8_or_hif8(in_dtype) {
        return Standard::AbsoluteThreshold;
    }
    if routing == Routing::V26_2
        && matches!(
            out_dtype,
            "torch.float16" | "torch.bfloat16" | "torch.float32" | "torch.float64"
        )
    {
        return Standard::Benchmark;
    }
    if !BINARY_UNSUPPORTED.contains(&out_dtype) {
        return Standard::BinaryConsistency;
    }
    let lists: [(Standard, &[&str]); 5] = [
        (Standard::AbsoluteThreshold, ABSOLUTE_THRESHOLD_APIS),
        (Standard::BinaryConsistency, BINARY_APIS),
        (Standard::Ulp, ULP_APIS),
        (Standard::Thousandth, THOUSANDTH_APIS),
        (Standard::AccumulativeError, ACCUMULATIVE_APIS),
    ];
    for (standard, apis) in lists {
        if apis.contains(&api_name) {
            return standard;
        }
    }
    Standard::Benchmark
}

/// The bare API name of a full name: `Torch.matmul.0` -> `matmul`,
/// `Torch.linalg.inv.0` -> `linalg.inv`; a row name with `.forward.output.k` is accepted too.
pub fn bare_api_name(full: &str) -> Option<String> {
    let parts: Vec<&str> = full.split('.').collect();
    match parts.len() {
        3 => Some(parts[1].to_string()),
        4 => Some(format!("{}.{}", parts[1], parts[2])),
        6 => Some(parts[1].to_string()),
        7 => Some(format!("{}.{}", parts[1], parts[2])),
        _ => None,
    }
}
