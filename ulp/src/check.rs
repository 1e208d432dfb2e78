//! run_ut / acc_check: one output pair -> the detail CSV row (spec §1.2, §1.5-§1.7).

use crate::fused::{DeviceFamily, Scope};
use crate::metrics::{AllMetrics, FloatData, metrics_in_scope};
use crate::pyfmt::{CSV_LINE_END, PyVal};
use crate::routing::{Routing, Standard, TorchDtype, standard_for};
use half::f16;
use pyrepr::{csv_record, shape_tuple};

/// A host array as numpy sees it.
#[derive(Clone, Copy, Debug)]
pub enum ArrayData<'a> {
    F16(&'a [f16]),
    F32(&'a [f32]),
    F64(&'a [f64]),
    Bool(&'a [bool]),
    U8(&'a [u8]),
    I8(&'a [i8]),
    I16(&'a [i16]),
    U16(&'a [u16]),
    I32(&'a [i32]),
    U32(&'a [u32]),
    I64(&'a [i64]),
    U64(&'a [u64]),
}

impl ArrayData<'_> {
    pub fn len(&self) -> usize {
        match self {
            ArrayData::F16(a) => a.len(),
            ArrayData::F32(a) => a.len(),
            ArrayData::F64(a) => a.len(),
            ArrayData::Bool(a) => a.len(),
            ArrayData::U8(a) => a.len(),
            ArrayData::I8(a) => a.len(),
            ArrayData::I16(a) => a.len(),
            ArrayData::U16(a) => a.len(),
            ArrayData::I32(a) => a.len(),
            ArrayData::U32(a) => a.len(),
            ArrayData::I64(a) => a.len(),
            ArrayData::U64(a) => a.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// numpy's dtype name.
    pub fn numpy_name(&self) -> &'static str {
        match self {
            ArrayData::F16(_) => "float16",
            ArrayData::F32(_) => "float32",
            ArrayData::F64(_) => "float64",
            ArrayData::Bool(_) => "bool",
            ArrayData::U8(_) => "uint8",
            ArrayData::I8(_) => "int8",
            ArrayData::I16(_) => "int16",
            ArrayData::U16(_) => "uint16",
            ArrayData::I32(_) => "int32",
            ArrayData::U32(_) => "uint32",
            ArrayData::I64(_) => "int64",
            ArrayData::U64(_) => "uint64",
        }
    }
    /// The torch dtype a tensor with this numpy dtype has.
    pub fn torch_dtype(&self) -> TorchDtype {
        match self {
            ArrayData::F16(_) => TorchDtype::Float16,
            ArrayData::F32(_) => TorchDtype::Float32,
            ArrayData::F64(_) => TorchDtype::Float64,
            ArrayData::Bool(_) => TorchDtype::Bool,
            ArrayData::U8(_) => TorchDtype::UInt8,
            ArrayData::I8(_) => TorchDtype::Int8,
            ArrayData::I16(_) => TorchDtype::Int16,
            ArrayData::U16(_) => TorchDtype::UInt16,
            ArrayData::I32(_) => TorchDtype::Int32,
            ArrayData::U32(_) => TorchDtype::UInt32,
            ArrayData::I64(_) => TorchDtype::Int64,
            ArrayData::U64(_) => TorchDtype::UInt64,
        }
    }
    fn float(&self) -> Option<FloatData<'_>> {
        match *self {
            ArrayData::F16(a) => Some(FloatData::F16(a)),
            ArrayData::F32(a) => Some(FloatData::F32(a)),
            ArrayData::F64(a) => Some(FloatData::F64(a)),
            _ => None,
        }
    }
    /// Element `i` as i128 for integer/bool arrays.
    fn int_at(&self, i: usize) -> Option<i128> {
        Some(match self {
            ArrayData::Bool(a) => a[i] as i128,
            ArrayData::U8(a) => a[i] as i128,
            ArrayData::I8(a) => a[i] as i128,
            ArrayData::I16(a) => a[i] as i128,
            ArrayData::U16(a) => a[i] as i128,
            ArrayData::I32(a) => a[i] as i128,
            ArrayData::U32(a) => a[i] as i128,
            ArrayData::I64(a) => a[i] as i128,
            ArrayData::U64(a) => a[i] as i128,
            _ => return None,
        })
    }
    fn group(&self) -> Option<u8> {
        match self {
            ArrayData::F16(_) | ArrayData::F32(_) | ArrayData::F64(_) => Some(0),
            ArrayData::Bool(_) | ArrayData::U8(_) => Some(1),
            ArrayData::I8(_) | ArrayData::I32(_) | ArrayData::I64(_) => Some(2),
            _ => None,
        }
    }
}

/// One side of the comparison: data, shape and the torch dtype shown in the CSV.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub data: ArrayData<'a>,
    pub shape: &'a [usize],
    pub torch_dtype: TorchDtype,
}

impl<'a> TensorRef<'a> {
    /// A tensor whose torch dtype follows its numpy dtype.
    pub fn new(data: ArrayData<'a>, shape: &'a [usize]) -> Self {
        TensorRef {
            data,
            shape,
            torch_dtype: data.torch_dtype(),
        }
    }
}

/// Options of one comparison.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions {
    pub routing: Routing,
    /// Whether any input of the call was fp8 (routes floats to the absolute threshold standard).
    pub fp8_input: bool,
}

/// APIs whose integer outputs are judged by `max|D - B| <= 1` (config.yaml).
pub const QUANTIZATION_APIS: &[&str] = &[
    "npu_rms_norm_dynamic_quant",
    "npu_dynamic_quant",
    "npu_quant_lightning_indexer",
];

/// The detail columns of one output, typed as msprobe produced them.
#[derive(Clone, Debug, PartialEq)]
pub struct DetailRow {
    pub bench_dtype: String,
    pub device_dtype: String,
    /// The device output's shape (the Shape cell is its Python tuple text).
    pub dims: Vec<usize>,
    pub shape: PyVal,
    pub cosine: PyVal,
    pub max_abs_err: PyVal,
    pub rel_err_hundredth: PyVal,
    pub rel_err_thousandth: PyVal,
    pub rel_err_ten_thousandth: PyVal,
    pub error_rate: PyVal,
    pub eb: PyVal,
    pub rmse: PyVal,
    pub small_value_err_ratio: PyVal,
    pub max_rel_error: PyVal,
    pub mean_rel_error: PyVal,
    pub inf_nan_error_ratio: PyVal,
    pub rel_err_ratio: PyVal,
    pub abs_err_ratio: PyVal,
    pub max_ulp_error: PyVal,
    pub mean_ulp_error: PyVal,
    pub ulp_error_proportion: PyVal,
    pub status: String,
    pub message: String,
}

/// The detail keys in CSV column order (as in the vectors).
pub const DETAIL_KEYS: [&str; 22] = [
    "bench_dtype",
    "device_dtype",
    "shape",
    "cosine",
    "max_abs_err",
    "rel_err_hundredth",
    "rel_err_thousandth",
    "rel_err_ten_thousandth",
    "error_rate",
    "eb",
    "rmse",
    "small_value_err_ratio",
    "max_rel_error",
    "mean_rel_error",
    "inf_nan_error_ratio",
    "rel_err_ratio",
    "abs_err_ratio",
    "max_ulp_error",
    "mean_ulp_error",
    "ulp_error_proportion",
    "status",
    "message",
];

/// The detail CSV header (accuracy_checking_details_*.csv).
pub const DETAIL_HEADER: [&str; 23] = [
    "API Name",
    "Bench Dtype",
    "DEVICE Dtype",
    "Shape",
    "余弦相似度",
    "最大绝对误差",
    "双百指标",
    "双千指标",
    "双万指标",
    "二进制一致错误率",
    "误差均衡性",
    "均方根误差",
    "小值域错误占比",
    "相对误差最大值",
    "相对误差平均值",
    "inf/nan错误率",
    "相对误差错误率",
    "绝对误差错误率",
    "ULP误差最大值",
    "ULP误差平均值",
    "ULP误差大于阈值占比",
    "Status",
    "Message",
];

impl DetailRow {
    fn blank() -> Self {
        let s = PyVal::space;
        DetailRow {
            bench_dtype: " ".into(),
            device_dtype: " ".into(),
            dims: Vec::new(),
            shape: s(),
            cosine: s(),
            max_abs_err: s(),
            rel_err_hundredth: s(),
            rel_err_thousandth: s(),
            rel_err_ten_thousandth: s(),
            error_rate: s(),
            eb: s(),
            rmse: s(),
            small_value_err_ratio: s(),
            max_rel_error: s(),
            mean_rel_error: s(),
            inf_nan_error_ratio: s(),
            rel_err_ratio: s(),
            abs_err_ratio: s(),
            max_ulp_error: s(),
            mean_ulp_error: s(),
            ulp_error_proportion: s(),
            status: String::new(),
            message: String::new(),
        }
    }

    /// The cells in DETAIL_KEYS order.
    pub fn cells(&self) -> Vec<PyVal> {
        vec![
            PyVal::Str(self.bench_dtype.clone()),
            PyVal::Str(self.device_dtype.clone()),
            self.shape.clone(),
            self.cosine.clone(),
            self.max_abs_err.clone(),
            self.rel_err_hundredth.clone(),
            self.rel_err_thousandth.clone(),
            self.rel_err_ten_thousandth.clone(),
            self.error_rate.clone(),
            self.eb.clone(),
            self.rmse.clone(),
            self.small_value_err_ratio.clone(),
            self.max_rel_error.clone(),
            self.mean_rel_error.clone(),
            self.inf_nan_error_ratio.clone(),
            self.rel_err_ratio.clone(),
            self.abs_err_ratio.clone(),
            self.max_ulp_error.clone(),
            self.mean_ulp_error.clone(),
            self.ulp_error_proportion.clone(),
            PyVal::Str(self.status.clone()),
            PyVal::Str(self.message.clone()),
        ]
    }

    /// The exact CSV record msprobe writes for this output (`\r\n`-terminated, no BOM).
    /// `row_name` is the API Name column, e.g. `Torch.add.0.forward.output.0`.
    pub fn csv_line(&self, row_name: &str) -> String {
        let mut fields = vec![row_name.to_string()];
        fields.extend(self.cells().iter().map(PyVal::csv_text));
        csv_record(&fields, CSV_LINE_END)
    }

    /// JSON object with the detail keys (plain values), `types` (numpy/Python type per key) and
    /// `csv_line`.
    pub fn to_json(&self, row_name: &str) -> serde_json::Value {
        let mut obj = serde_json::Map::new();
        let mut types = serde_json::Map::new();
        for (key, cell) in DETAIL_KEYS.iter().zip(self.cells()) {
            let v = if *key == "shape" {
                serde_json::Value::from(self.dims.clone())
            } else {
                cell.to_json()
            };
            obj.insert(key.to_string(), v);
            let ty = if *key == "shape" {
                "tuple"
            } else {
                cell.type_name()
            };
            types.insert(key.to_string(), serde_json::Value::from(ty));
        }
        obj.insert("api_name".into(), serde_json::Value::from(row_name));
        obj.insert("types".into(), serde_json::Value::Object(types));
        obj.insert(
            "csv_line".into(),
            serde_json::Value::from(self.csv_line(row_name)),
        );
        serde_json::Value::Object(obj)
    }
}

fn torch_size(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("torch.Size([{}])", parts.join(", "))
}

fn family_of(dtype: TorchDtype) -> DeviceFamily {
    match dtype {
        TorchDtype::Float16 => DeviceFamily::F16,
        TorchDtype::BFloat16 => DeviceFamily::BF16,
        TorchDtype::Float32 => DeviceFamily::F32,
        _ => DeviceFamily::Other,
    }
}

/// Compares one output pair as run_ut does (`_compare_torch_tensor`), returning the detail row.
///
/// `api_name` is the bare API name (`add`, `npu_dynamic_quant`); it selects the quantisation
/// rule and, with list-driven routing, the standard.
pub fn check_output(
    api_name: &str,
    bench: TensorRef<'_>,
    device: TensorRef<'_>,
    opts: CheckOptions,
) -> DetailRow {
    let mut row = DetailRow::blank();
    row.bench_dtype = bench.torch_dtype.torch_str().to_string();
    row.device_dtype = device.torch_dtype.torch_str().to_string();
    row.shape = PyVal::Str(shape_tuple(device.shape));
    row.dims = device.shape.to_vec();
    let done = |mut row: DetailRow, status: &str, message: String| {
        row.status = status.to_string();
        row.message = message;
        row
    };
    if bench.shape != device.shape {
        let msg = format!(
            "The shape of bench{} and npu{} not equal.",
            torch_size(bench.shape),
            torch_size(device.shape)
        );
        return done(row, "error", msg);
    }
    let comparable = match (bench.data.group(), device.data.group()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    if !comparable || bench.data.len() != device.data.len() {
        let msg = format!(
            "Bench out dtype is {} but npu output dtype is {}, cannot compare.",
            bench.data.numpy_name(),
            device.data.numpy_name()
        );
        return done(row, "error", msg);
    }
    let n = bench.data.len();
    if n == 0 {
        return done(row, "SKIP", "There is not bench calculation result.".into());
    }
    let (Some(b), Some(d)) = (bench.data.float(), device.data.float()) else {
        return check_integer(api_name, bench.data, device.data, row);
    };
    let zero_d = device.shape.is_empty();
    let standard = float_standard(api_name, device.torch_dtype, opts);
    // The pass gathers only what the row shows: under msprobe 26.2's routing that is the
    // benchmark standard for every float output.
    let scope = match standard {
        None | Some(Standard::Benchmark) => Scope::Benchmark,
        Some(_) => Scope::AllStandards,
    };
    let family = family_of(device.torch_dtype);
    let mut metrics = match metrics_in_scope(b, d, family, zero_d, scope) {
        Ok(m) => m,
        // Lengths were checked above; keep a typed row rather than panic if that ever changes.
        Err(e) => return done(row, "error", e.to_string()),
    };
    if device.torch_dtype.is_fp8() {
        metrics.ulp = Some(fp8_ulp_metrics(b, d));
    }
    check_float(&metrics, device.torch_dtype, standard, row)
}

/// The standard a float output of `device_dtype` is judged by; `None` for dtypes the new
/// precision standards do not cover (float64).
fn float_standard(
    api_name: &str,
    device_dtype: TorchDtype,
    opts: CheckOptions,
) -> Option<Standard> {
    let supported = matches!(
        device_dtype,
        TorchDtype::Float16
            | TorchDtype::BFloat16
            | TorchDtype::Float32
            | TorchDtype::Float8E4M3Fn
            | TorchDtype::Float8E5M2
    );
    let in_dtype = if opts.fp8_input {
        "torch.float8_e4m3fn"
    } else {
        "torch.float32"
    };
    supported.then(|| standard_for(api_name, device_dtype.torch_str(), in_dtype, opts.routing))
}

/// ULP metrics of an fp8 output (given as wider floats): the signed fp8 ULP error, its max,
/// mean (float64) and the share above 1.
fn fp8_ulp_metrics(bench: FloatData<'_>, device: FloatData<'_>) -> crate::metrics::UlpMetrics {
    let b: Vec<f64> = (0..bench.len()).map(|i| bench.get(i)).collect();
    let d: Vec<f64> = (0..device.len()).map(|i| device.get(i)).collect();
    let u = crate::metrics::fp8_ulp_errors(&b, &d);
    let max = u.iter().fold(f64::NEG_INFINITY, |m, &x| {
        if m.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    });
    let over = u.iter().filter(|&&x| x > 1.0).count();
    crate::metrics::UlpMetrics {
        max_ulp_error: PyVal::np_f64(max),
        mean_ulp_error: PyVal::np_f64(crate::elem::np_mean(&u)),
        ulp_error_proportion: PyVal::np_f64(over as f64 / u.len() as f64),
    }
}

fn check_integer(
    api_name: &str,
    bench: ArrayData<'_>,
    device: ArrayData<'_>,
    mut row: DetailRow,
) -> DetailRow {
    let n = bench.len();
    if QUANTIZATION_APIS.contains(&api_name) {
        if matches!(bench, ArrayData::Bool(_)) || matches!(device, ArrayData::Bool(_)) {
            row.status = "error".into();
            row.message = "numpy boolean subtract, the `-` operator, is not supported, use the \
                           bitwise_xor, the `^` operator, or the logical_xor function instead."
                .into();
            return row;
        }
        // |D - B| wraps in the (common) integer dtype, as numpy does.
        let same = bench.numpy_name() == device.numpy_name();
        let mut max: i128 = i128::MIN;
        for i in 0..n {
            let (x, y) = (bench.int_at(i).unwrap_or(0), device.int_at(i).unwrap_or(0));
            let diff = y - x;
            let v = if same {
                wrap_abs(diff, bench)
            } else {
                diff.abs()
            };
            max = max.max(v);
        }
        let ty = if same {
            numpy_int_type(bench)
        } else {
            "np.int64"
        };
        row.max_abs_err = PyVal::Int { v: max, ty };
        if max <= 1 {
            row.status = "pass".into();
            row.message = format!(
                "Quantization type: Max abs error is {max:.2}, less than or equal to 1, consider as pass.\n",
                max = max as f64
            );
        } else {
            row.status = "error".into();
            row.message = format!(
                "Quantization type: Max abs error is {max:.2}, greater than 1, consider as error.\n",
                max = max as f64
            );
        }
        return row;
    }
    let mismatches = (0..n)
        .filter(|&i| bench.int_at(i) != device.int_at(i))
        .count();
    let rate = mismatches as f64 / n as f64;
    row.error_rate = PyVal::py_float(rate);
    row.status = if rate == 0.0 { "pass" } else { "error" }.into();
    row.message = format!(
        "Current {} data, only perform binary comparison.",
        bench.numpy_name()
    );
    row
}

fn numpy_int_type(a: ArrayData<'_>) -> &'static str {
    match a {
        ArrayData::U8(_) => "np.uint8",
        ArrayData::I8(_) => "np.int8",
        ArrayData::I16(_) => "np.int16",
        ArrayData::U16(_) => "np.uint16",
        ArrayData::I32(_) => "np.int32",
        ArrayData::U32(_) => "np.uint32",
        ArrayData::U64(_) => "np.uint64",
        _ => "np.int64",
    }
}

/// `np.abs(d - b)` in a fixed-width integer dtype (two's complement wrap-around).
fn wrap_abs(diff: i128, like: ArrayData<'_>) -> i128 {
    fn wrap(v: i128, bits: u32, signed: bool) -> i128 {
        let m = 1i128 << bits;
        let mut r = v.rem_euclid(m);
        if signed && r >= m / 2 {
            r -= m;
        }
        r
    }
    let (bits, signed) = match like {
        ArrayData::U8(_) => (8, false),
        ArrayData::I8(_) => (8, true),
        ArrayData::I16(_) => (16, true),
        ArrayData::U16(_) => (16, false),
        ArrayData::I32(_) => (32, true),
        ArrayData::U32(_) => (32, false),
        ArrayData::U64(_) => (64, false),
        _ => (64, true),
    };
    let d = wrap(diff, bits, signed);
    wrap(d.abs(), bits, signed)
}

/// The float branch (`_compare_float_tensor`) given the fused metrics and the output's
/// standard (see [`float_standard`]).
fn check_float(
    m: &AllMetrics,
    device_dtype: TorchDtype,
    standard: Option<Standard>,
    mut row: DetailRow,
) -> DetailRow {
    let mut message = String::new();
    match standard {
        Some(standard) => fill_standard(&mut row, m, standard),
        None => message.push_str(&format!(
            "The data type {} is not supported for new precision standard.",
            device_dtype.torch_str()
        )),
    }
    let finish = |mut row: DetailRow, status: &str, message: String| {
        row.status = status.to_string();
        row.message = message;
        row
    };
    row.cosine = m.cosine.value.clone();
    message.push_str(m.cosine.message);
    message.push('\n');
    if !m.cosine.pass {
        message.push_str("Cosine similarity is less than 0.99, consider as error, skip other check and set to SPACE.\n");
        return finish(row, "error", message);
    }
    if let Some(max_abs) = &m.max_abs_err {
        row.max_abs_err = max_abs.clone();
    }
    if m.max_abs_err_value < 0.001 {
        message.push_str("Max abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");
        return finish(row, "pass", message);
    }
    let half = matches!(device_dtype, TorchDtype::Float16 | TorchDtype::BFloat16);
    if half {
        row.rel_err_hundredth = m.hundredth.value.clone();
        if !m.hundredth.pass {
            message.push_str("Relative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n");
            return finish(row, "error", message);
        }
    }
    row.rel_err_thousandth = m.thousandth.value.clone();
    if half {
        if m.thousandth.pass {
            message.push_str("Relative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");
            return finish(row, "pass", message);
        }
        message.push_str("Relative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n");
        return finish(row, "warning", message);
    }
    row.rel_err_ten_thousandth = m.ten_thousandth.value.clone();
    if matches!(device_dtype, TorchDtype::Float32 | TorchDtype::Float64) {
        if !m.thousandth.pass {
            message.push_str("Relative error is greater than 0.001, consider as error, skip other check and set to SPACE.\n");
            return finish(row, "error", message);
        }
        if !m.ten_thousandth.pass {
            message.push_str("Relative error is greater than 0.0001, consider as warning, skip other check and set to SPACE.\n");
            return finish(row, "warning", message);
        }
        message.push_str("Relative error is less than 0.0001, consider as pass.\n");
    }
    finish(row, "pass", message)
}

fn fill_standard(row: &mut DetailRow, m: &AllMetrics, standard: Standard) {
    match standard {
        Standard::Benchmark => {
            if let Some(b) = &m.benchmark {
                row.small_value_err_ratio = b.small_value_err_ratio.clone();
                row.max_rel_error = b.max_rel_error.clone();
                row.mean_rel_error = b.mean_rel_error.clone();
                row.rmse = b.rmse.clone();
                row.eb = b.eb.clone();
            }
        }
        Standard::AbsoluteThreshold => {
            if let Some(a) = &m.absolute_threshold {
                row.inf_nan_error_ratio = a.inf_nan_error_ratio.clone();
                row.rel_err_ratio = a.rel_err_ratio.clone();
                row.abs_err_ratio = a.abs_err_ratio.clone();
            }
        }
        Standard::Ulp => {
            if let Some(u) = &m.ulp {
                row.max_ulp_error = u.max_ulp_error.clone();
                row.mean_ulp_error = u.mean_ulp_error.clone();
                row.ulp_error_proportion = u.ulp_error_proportion.clone();
            }
        }
        Standard::Thousandth => row.rel_err_thousandth = m.thousandth.value.clone(),
        Standard::BinaryConsistency => {
            if let Some(e) = &m.binary_error_rate {
                row.error_rate = e.clone();
            }
        }
        Standard::AccumulativeError => {
            if let Some(a) = &m.accumulative {
                row.inf_nan_error_ratio = a.inf_nan_error_ratio.clone();
                row.rel_err_ratio = a.rel_err_ratio.clone();
                row.abs_err_ratio = a.abs_err_ratio.clone();
                row.eb = a.eb.clone();
            }
        }
    }
}

/// run_ut's roll-up of several outputs' statuses (order-dependent: a later warning overrides an
/// earlier error; spec §1.6).
pub fn rollup_statuses<S: AsRef<str>>(statuses: &[S]) -> &'static str {
    let mut result = "pass";
    for s in statuses {
        match s.as_ref() {
            "error" => result = "error",
            "warning" => result = "warning",
            _ => {}
        }
    }
    result
}
