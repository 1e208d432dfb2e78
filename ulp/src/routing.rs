//! The accuracy standards and which standard judges an API's output (spec §3).

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

/// msprobe's internal name ([`Standard::as_str`]).
impl std::fmt::Display for Standard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
