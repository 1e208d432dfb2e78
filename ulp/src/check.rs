//! run_ut / acc_check: one output pair -> the [`Verdict`]: status, standard, metrics and the
//! detail CSV row (spec §1.2, §1.5-§1.7).
//!
//! [`check`] takes two `ndarray` arrays; [`check_output`] takes two borrowed [`TensorView`]s
//! with the dtype msprobe reports for each ([`Output`]).

use crate::fused::{DeviceFamily, Scope};
use crate::metrics::{AllMetrics, float_values, metrics_in_scope};
use crate::pyfmt::{CSV_LINE_END, PyVal};
use crate::routing::{Routing, Standard, standard_for};
use numprobe_tensor::ndarray::{ArrayBase, Data, Dimension};
use numprobe_tensor::{DType, Element, Elems, TensorView};
use pyrepr::{csv_record, shape_tuple};

/// One output of a comparison: its elements as numpy holds them, and the dtype msprobe reports
/// for it.
#[derive(Clone, Copy, Debug)]
pub struct Output<'a> {
    /// The elements. bfloat16 elements are widened to float32 before the metrics, as msprobe
    /// does before it hands a bf16 output to numpy.
    pub view: TensorView<'a>,
    /// The framework tensor's dtype: shown in the Bench Dtype / DEVICE Dtype column, and for
    /// the device output it picks the thresholds and the standard (`torch.bfloat16` for a bf16
    /// output handed over as float32 values).
    pub dtype: DType,
}

impl<'a> Output<'a> {
    /// An output whose reported dtype is the view's.
    pub fn new(view: TensorView<'a>) -> Self {
        Output {
            view,
            dtype: view.dtype(),
        }
    }

    /// An output handed over in another dtype than the framework tensor's, e.g. bf16 or fp8
    /// values widened to float32 with `dtype` `BF16` / `F8E4M3FN`.
    pub fn with_dtype(view: TensorView<'a>, dtype: DType) -> Self {
        Output { view, dtype }
    }
}

/// Options of one comparison.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions {
    pub routing: Routing,
    /// Whether any input of the call was fp8 (routes floats to the absolute threshold standard).
    pub fp8_input: bool,
    /// Gather every standard's metrics into [`Verdict::metrics`], not only those of the
    /// standard that judges the output (run_ut's case, about a third less work per element).
    /// The row and the status do not change.
    pub all_standards: bool,
}

/// What run_ut concludes for one output, in msprobe's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Pass,
    Warning,
    Error,
    /// An empty output ("There is not bench calculation result.").
    Skip,
}

impl Status {
    /// The Status cell: `pass`, `warning`, `error` or `SKIP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warning => "warning",
            Status::Error => "error",
            Status::Skip => "SKIP",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The judgement of one (bench, device) output pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// pass / warning / error (or SKIP for an empty output).
    pub status: Status,
    /// The accuracy standard whose metrics fill the row: the routed standard of a float output,
    /// binary consistency for an integer or bool one; `None` when no standard applies (float64
    /// outputs, the quantisation rule, shape or dtype mismatches, empty outputs).
    pub standard: Option<Standard>,
    /// The metrics of a float pair (`None` for integer and bool outputs and when the pair was
    /// not compared). Only the judging standard's unless [`CheckOptions::all_standards`].
    pub metrics: Option<AllMetrics>,
    /// The detail row msprobe writes (`accuracy_checking_details_*.csv`).
    pub row: DetailRow,
}

impl Verdict {
    /// The exact CSV record of the row ([`DetailRow::csv_line`]).
    pub fn csv_line(&self, row_name: &str) -> String {
        self.row.csv_line(row_name)
    }
}

/// Outputs the checker does not take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// Complex or raw float8 elements: msprobe's checker computes on neither (float8 outputs
    /// come widened to float32, see [`Output::with_dtype`]).
    #[error("the {side} output holds {} elements, which the accuracy checker does not take", .dtype.torch_name())]
    UnsupportedDtype { side: &'static str, dtype: DType },
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

/// One side's elements as numpy holds them: borrowed from the view when its bytes can be, else
/// copied to aligned memory (hand-made files need not be aligned; a bool byte other than 0 or
/// 1 reads as true), and bfloat16 widened to float32 as msprobe does before numpy.
enum Host<'a> {
    Borrowed(Elems<'a>),
    Widened(Vec<f32>),
    Copied {
        dtype: DType,
        words: Vec<u64>,
        len: usize,
        shape: [usize; 1],
    },
}

impl<'a> Host<'a> {
    fn new(view: TensorView<'a>, side: &'static str) -> Result<Self, CheckError> {
        let dtype = view.dtype();
        if dtype.is_complex() || matches!(dtype, DType::F8E4M3FN | DType::F8E5M2) {
            return Err(CheckError::UnsupportedDtype { side, dtype });
        }
        if dtype == DType::BF16 {
            let widened = view
                .bytes()
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect();
            return Ok(Host::Widened(widened));
        }
        if let Ok(elems) = view.elems() {
            return Ok(Host::Borrowed(elems));
        }
        let bytes = view.bytes();
        // u64 words: aligned for every element type that gets here.
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        let copy = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()];
        copy.copy_from_slice(bytes);
        if dtype == DType::Bool {
            copy.iter_mut().for_each(|b| *b = u8::from(*b != 0));
        }
        Ok(Host::Copied {
            dtype,
            words,
            len: bytes.len(),
            shape: [view.numel()],
        })
    }

    fn elems(&self) -> Elems<'_> {
        match self {
            Host::Borrowed(e) => *e,
            Host::Widened(v) => Elems::F32(v),
            Host::Copied {
                dtype,
                words,
                len,
                shape,
            } => {
                let bytes = &bytemuck::cast_slice::<u64, u8>(words)[..*len];
                TensorView::new(*dtype, shape, bytes)
                    .and_then(|v| v.elems())
                    .expect("an aligned copy of a checked view, bools normalised")
            }
        }
    }
}

/// Whether numpy holds these elements as floats.
fn is_float_data(e: Elems<'_>) -> bool {
    matches!(e, Elems::F16(_) | Elems::F32(_) | Elems::F64(_))
}

/// Element `i` of an integer or bool array as i128.
fn int_at(a: Elems<'_>, i: usize) -> Option<i128> {
    Some(match a {
        Elems::Bool(a) => a[i] as i128,
        Elems::U8(a) => a[i] as i128,
        Elems::I8(a) => a[i] as i128,
        Elems::I16(a) => a[i] as i128,
        Elems::U16(a) => a[i] as i128,
        Elems::I32(a) => a[i] as i128,
        Elems::U32(a) => a[i] as i128,
        Elems::I64(a) => a[i] as i128,
        Elems::U64(a) => a[i] as i128,
        _ => return None,
    })
}

/// The dtype groups run_ut compares with each other (floats; bool and uint8; int8, int32 and
/// int64); other dtypes compare with nothing.
fn group(a: Elems<'_>) -> Option<u8> {
    match a {
        Elems::F16(_) | Elems::F32(_) | Elems::F64(_) => Some(0),
        Elems::Bool(_) | Elems::U8(_) => Some(1),
        Elems::I8(_) | Elems::I32(_) | Elems::I64(_) => Some(2),
        _ => None,
    }
}

/// Compares one output pair as run_ut does (`_compare_torch_tensor`).
///
/// `api_name` is the bare API name (`add`, `npu_dynamic_quant`); it selects the quantisation
/// rule and, with list-driven routing, the standard. Any view is taken: bfloat16 elements are
/// widened to float32 (as msprobe does), unaligned bytes copied; complex and raw float8
/// elements are an error.
pub fn check_output(
    api_name: &str,
    bench: Output<'_>,
    device: Output<'_>,
    opts: CheckOptions,
) -> Result<Verdict, CheckError> {
    let bench_host = Host::new(bench.view, "bench")?;
    let device_host = Host::new(device.view, "device")?;
    let (b, d) = (bench_host.elems(), device_host.elems());
    let (bench_shape, device_shape) = (bench.view.shape(), device.view.shape());
    let mut row = DetailRow::blank();
    row.bench_dtype = bench.dtype.torch_name().to_string();
    row.device_dtype = device.dtype.torch_name().to_string();
    row.shape = PyVal::Str(shape_tuple(device_shape));
    row.dims = device_shape.to_vec();
    let uncompared = |row: DetailRow, status: Status, message: String| {
        let (status, row) = conclude(row, status, message);
        Verdict {
            status,
            standard: None,
            metrics: None,
            row,
        }
    };
    if bench_shape != device_shape {
        let msg = format!(
            "The shape of bench{} and npu{} not equal.",
            torch_size(bench_shape),
            torch_size(device_shape)
        );
        return Ok(uncompared(row, Status::Error, msg));
    }
    let comparable = match (group(b), group(d)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    if !comparable || b.len() != d.len() {
        let msg = format!(
            "Bench out dtype is {} but npu output dtype is {}, cannot compare.",
            b.dtype().numpy_name(),
            d.dtype().numpy_name()
        );
        return Ok(uncompared(row, Status::Error, msg));
    }
    if b.is_empty() {
        let msg = "There is not bench calculation result.".into();
        return Ok(uncompared(row, Status::Skip, msg));
    }
    if !is_float_data(b) {
        return Ok(check_integer(api_name, b, d, row));
    }
    let zero_d = device_shape.is_empty();
    let standard = float_standard(api_name, device.dtype, opts);
    // The pass gathers only what the row shows: under msprobe 26.2's routing that is the
    // benchmark standard for every float output.
    let scope = match standard {
        _ if opts.all_standards => Scope::AllStandards,
        None | Some(Standard::Benchmark) => Scope::Benchmark,
        Some(_) => Scope::AllStandards,
    };
    let family = DeviceFamily::of(device.dtype);
    let mut metrics = match metrics_in_scope(b, d, family, zero_d, scope) {
        Ok(m) => m,
        // Lengths and dtypes were checked above; keep a typed row rather than panic if that
        // ever changes.
        Err(e) => return Ok(uncompared(row, Status::Error, e.to_string())),
    };
    if matches!(device.dtype, DType::F8E4M3FN | DType::F8E5M2) {
        metrics.ulp = Some(fp8_ulp_metrics(b, d));
    }
    let (status, row) = check_float(&metrics, device.dtype, standard, row);
    Ok(Verdict {
        status,
        standard,
        metrics: Some(metrics),
        row,
    })
}

/// Compares two `ndarray` arrays (any dimension, any layout) as run_ut compares a bench and a
/// device output, each reported as its array's dtype: every metric of the pair and msprobe's
/// verdict in one call. See [`check_output`] for `api_name` and the dtypes taken; to report
/// another dtype than the array's (bf16 values handed over as float32), use [`check_output`]
/// with [`Output::with_dtype`].
pub fn check<A, B, SA, SB, DA, DB>(
    api_name: &str,
    bench: &ArrayBase<SA, DA>,
    device: &ArrayBase<SB, DB>,
    opts: CheckOptions,
) -> Result<Verdict, CheckError>
where
    A: Element,
    B: Element,
    SA: Data<Elem = A>,
    SB: Data<Elem = B>,
    DA: Dimension,
    DB: Dimension,
{
    // Arrays in C order are borrowed; others are copied into it.
    let (bench, device) = (bench.as_standard_layout(), device.as_standard_layout());
    let standard = "an array in standard layout is a view";
    let bench = TensorView::from_array(&bench).expect(standard);
    let device = TensorView::from_array(&device).expect(standard);
    check_output(api_name, Output::new(bench), Output::new(device), opts)
}
/// Sets the row's status and message.
fn conclude(mut row: DetailRow, status: Status, message: String) -> (Status, DetailRow) {
    row.status = status.as_str().to_string();
    row.message = message;
    (status, row)
}

/// The standard a float output of `device_dtype` is judged by; `None` for dtypes the new
/// precision standards do not cover (float64).
fn float_standard(api_name: &str, device_dtype: DType, opts: CheckOptions) -> Option<Standard> {
    let supported = matches!(
        device_dtype,
        DType::F16 | DType::BF16 | DType::F32 | DType::F8E4M3FN | DType::F8E5M2
    );
    let in_dtype = if opts.fp8_input {
        "torch.float8_e4m3fn"
    } else {
        "torch.float32"
    };
    supported.then(|| standard_for(api_name, device_dtype.torch_name(), in_dtype, opts.routing))
}

/// ULP metrics of an fp8 output (given as wider floats): the signed fp8 ULP error, its max,
/// mean (float64) and the share above 1.
fn fp8_ulp_metrics(bench: Elems<'_>, device: Elems<'_>) -> crate::metrics::UlpMetrics {
    let values = |e| float_values(e).expect("a float pair");
    let u = crate::metrics::fp8_ulp_errors(&values(bench), &values(device));
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

/// An integer or bool pair: the quantisation rule for the quantisation APIs, else binary
/// consistency.
fn check_integer(
    api_name: &str,
    bench: Elems<'_>,
    device: Elems<'_>,
    mut row: DetailRow,
) -> Verdict {
    let n = bench.len();
    let (bench_name, device_name) = (bench.dtype().numpy_name(), device.dtype().numpy_name());
    if QUANTIZATION_APIS.contains(&api_name) {
        let (status, row) = if matches!(bench, Elems::Bool(_)) || matches!(device, Elems::Bool(_)) {
            let message = "numpy boolean subtract, the `-` operator, is not supported, use the \
                           bitwise_xor, the `^` operator, or the logical_xor function instead.";
            conclude(row, Status::Error, message.into())
        } else {
            // |D - B| wraps in the (common) integer dtype, as numpy does.
            let same = bench_name == device_name;
            let mut max: i128 = i128::MIN;
            for i in 0..n {
                let (x, y) = (
                    int_at(bench, i).unwrap_or(0),
                    int_at(device, i).unwrap_or(0),
                );
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
                let message = format!(
                    "Quantization type: Max abs error is {max:.2}, less than or equal to 1, consider as pass.\n",
                    max = max as f64
                );
                conclude(row, Status::Pass, message)
            } else {
                let message = format!(
                    "Quantization type: Max abs error is {max:.2}, greater than 1, consider as error.\n",
                    max = max as f64
                );
                conclude(row, Status::Error, message)
            }
        };
        return Verdict {
            status,
            standard: None,
            metrics: None,
            row,
        };
    }
    let mismatches = (0..n)
        .filter(|&i| int_at(bench, i) != int_at(device, i))
        .count();
    let rate = mismatches as f64 / n as f64;
    row.error_rate = PyVal::py_float(rate);
    let status = if rate == 0.0 {
        Status::Pass
    } else {
        Status::Error
    };
    let message = format!("Current {bench_name} data, only perform binary comparison.");
    let (status, row) = conclude(row, status, message);
    Verdict {
        status,
        standard: Some(Standard::BinaryConsistency),
        metrics: None,
        row,
    }
}

fn numpy_int_type(a: Elems<'_>) -> &'static str {
    match a {
        Elems::U8(_) => "np.uint8",
        Elems::I8(_) => "np.int8",
        Elems::I16(_) => "np.int16",
        Elems::U16(_) => "np.uint16",
        Elems::I32(_) => "np.int32",
        Elems::U32(_) => "np.uint32",
        Elems::U64(_) => "np.uint64",
        _ => "np.int64",
    }
}

/// `np.abs(d - b)` in a fixed-width integer dtype (two's complement wrap-around).
fn wrap_abs(diff: i128, like: Elems<'_>) -> i128 {
    fn wrap(v: i128, bits: u32, signed: bool) -> i128 {
        let m = 1i128 << bits;
        let mut r = v.rem_euclid(m);
        if signed && r >= m / 2 {
            r -= m;
        }
        r
    }
    let (bits, signed) = match like {
        Elems::U8(_) => (8, false),
        Elems::I8(_) => (8, true),
        Elems::I16(_) => (16, true),
        Elems::U16(_) => (16, false),
        Elems::I32(_) => (32, true),
        Elems::U32(_) => (32, false),
        Elems::U64(_) => (64, false),
        _ => (64, true),
    };
    let d = wrap(diff, bits, signed);
    wrap(d.abs(), bits, signed)
}

/// The float branch (`_compare_float_tensor`) given the fused metrics and the output's
/// standard (see [`float_standard`]).
fn check_float(
    m: &AllMetrics,
    device_dtype: DType,
    standard: Option<Standard>,
    mut row: DetailRow,
) -> (Status, DetailRow) {
    let mut message = String::new();
    match standard {
        Some(standard) => fill_standard(&mut row, m, standard),
        None => message.push_str(&format!(
            "The data type {} is not supported for new precision standard.",
            device_dtype.torch_name()
        )),
    }
    row.cosine = m.cosine.value.clone();
    message.push_str(m.cosine.message);
    message.push('\n');
    if !m.cosine.pass {
        message.push_str("Cosine similarity is less than 0.99, consider as error, skip other check and set to SPACE.\n");
        return conclude(row, Status::Error, message);
    }
    if let Some(max_abs) = &m.max_abs_err {
        row.max_abs_err = max_abs.clone();
    }
    if m.max_abs_err_value < 0.001 {
        message.push_str("Max abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");
        return conclude(row, Status::Pass, message);
    }
    let half = matches!(device_dtype, DType::F16 | DType::BF16);
    if half {
        row.rel_err_hundredth = m.hundredth.value.clone();
        if !m.hundredth.pass {
            message.push_str("Relative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n");
            return conclude(row, Status::Error, message);
        }
    }
    row.rel_err_thousandth = m.thousandth.value.clone();
    if half {
        if m.thousandth.pass {
            message.push_str("Relative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");
            return conclude(row, Status::Pass, message);
        }
        message.push_str("Relative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n");
        return conclude(row, Status::Warning, message);
    }
    row.rel_err_ten_thousandth = m.ten_thousandth.value.clone();
    if matches!(device_dtype, DType::F32 | DType::F64) {
        if !m.thousandth.pass {
            message.push_str("Relative error is greater than 0.001, consider as error, skip other check and set to SPACE.\n");
            return conclude(row, Status::Error, message);
        }
        if !m.ten_thousandth.pass {
            message.push_str("Relative error is greater than 0.0001, consider as warning, skip other check and set to SPACE.\n");
            return conclude(row, Status::Warning, message);
        }
        message.push_str("Relative error is less than 0.0001, consider as pass.\n");
    }
    conclude(row, Status::Pass, message)
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
