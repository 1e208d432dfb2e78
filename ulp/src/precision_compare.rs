//! api_precision_compare: NPU vs GPU verdicts from two accuracy_checking_details CSVs (spec §4).
//!
//! msprobe reads both files with pandas, so each column is typed as a whole (all-number columns
//! become float64/int64, any other column stays text with NA cells as NaN). The verdict code then
//! sees Python floats, ints or strings; this module reproduces that typing because it decides
//! both the errors raised and the text of copied cells.

use crate::pyfmt::{CSV_LINE_END, PyVal};
use crate::routing::{Routing, Standard, standard_for};
use pyrepr::{csv_record, python_float, write_csv_record};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Errors that stop api_precision_compare before any output is written.
#[derive(Debug, thiserror::Error)]
pub enum PrecisionCompareError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not UTF-8 text")]
    NotUtf8 { path: PathBuf },
    #[error("{path}: the following columns {columns} are missing in {which}")]
    MissingColumns {
        path: PathBuf,
        columns: String,
        which: &'static str,
    },
    #[error("{path}: the CSV has no header row")]
    Empty { path: PathBuf },
    /// Not a readable CSV (an unterminated quote, a record of the wrong length).
    #[error("{path}: {error}")]
    Csv { path: PathBuf, error: CsvError },
    /// The timestamp would not make a plain file name.
    #[error("{0}")]
    Timestamp(String),
    /// An output file could not be written (a link or special file at its name, a full disk).
    #[error(transparent)]
    Output(#[from] dumpfmt::Error),
    /// An input CSV is not a regular file (a FIFO, a device, a directory): refused, never
    /// waited on.
    #[error(transparent)]
    Input(dumpfmt::Error),
}

/// A cell after pandas' column typing, as the verdict code sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Str(String),
    Float(f64),
    Int(i64),
}

impl Cell {
    fn py_type(&self) -> &'static str {
        match self {
            Cell::Str(_) => "str",
            Cell::Float(_) => "float",
            Cell::Int(_) => "int",
        }
    }
    /// Python's `str(value)`.
    fn py_str(&self) -> String {
        match self {
            Cell::Str(s) => s.clone(),
            Cell::Float(v) => pyrepr::repr_f64(*v),
            Cell::Int(v) => v.to_string(),
        }
    }
    /// The cell as written back by msprobe (floats with 14 decimals).
    fn to_pyval(&self) -> PyVal {
        match self {
            Cell::Str(s) => PyVal::Str(s.clone()),
            Cell::Float(v) => PyVal::py_float(*v),
            Cell::Int(v) => PyVal::py_int(*v),
        }
    }
    /// `str.isspace()`, or the AttributeError a non-string raises.
    fn isspace(&self) -> Result<bool, String> {
        match self {
            Cell::Str(s) => Ok(!s.is_empty() && s.chars().all(char::is_whitespace)),
            other => Err(format!(
                "'{}' object has no attribute 'isspace'",
                other.py_type()
            )),
        }
    }
}

/// Why a CSV could not be read, with the 1-based line it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    #[error("line {line}: a quoted field opened here is never closed")]
    UnterminatedQuote { line: usize },
    #[error("line {line}: {got} fields where the header has {expected}")]
    FieldCount {
        line: usize,
        expected: usize,
        got: usize,
    },
    #[error("the CSV has no header row")]
    Empty,
}

/// One CSV record and the line it starts on (1-based).
pub type CsvRecord = (usize, Vec<String>);

/// Splits CSV text into records (RFC 4180 quoting, `\n` or `\r\n` line ends, BOM dropped,
/// blank lines skipped as pandas does). A quote that is never closed is an error naming the
/// line it opened on, never a field swallowing the rest of the file.
pub fn parse_csv(text: &str) -> Result<Vec<CsvRecord>, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut field_started = false;
    let mut line = 1usize;
    let mut row_line = 1usize;
    let mut quote_line = 1usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_quotes {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    in_quotes = false;
                }
            } else {
                if c == '\n' {
                    line += 1;
                }
                field.push(c);
            }
            continue;
        }
        match c {
            '"' => {
                if !field_started && row.is_empty() {
                    row_line = line;
                }
                in_quotes = true;
                quote_line = line;
                field_started = true;
            }
            ',' => {
                if !field_started && row.is_empty() {
                    row_line = line;
                }
                row.push(std::mem::take(&mut field));
                field_started = true;
            }
            '\r' | '\n' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                if field_started || !field.is_empty() || !row.is_empty() {
                    row.push(std::mem::take(&mut field));
                    rows.push((row_line, std::mem::take(&mut row)));
                }
                field_started = false;
                line += 1;
            }
            _ => {
                if !field_started && row.is_empty() {
                    row_line = line;
                }
                field.push(c);
                field_started = true;
            }
        }
    }
    if in_quotes {
        return Err(CsvError::UnterminatedQuote { line: quote_line });
    }
    if field_started || !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push((row_line, row));
    }
    Ok(rows)
}

const PANDAS_NA: &[&str] = &[
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
];

fn pandas_int(s: &str) -> Option<i64> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

fn pandas_float(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let lower = t.to_ascii_lowercase();
    match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Some(f64::INFINITY),
        "-inf" | "-infinity" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    let body = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
    if body.is_empty() || !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if !body
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'))
    {
        return None;
    }
    t.parse().ok()
}

/// A CSV read as pandas would type it.
#[derive(Clone, Debug)]
pub struct Frame {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Frame {
    /// Types each column as `pd.read_csv` does with default options. Strict where pandas is
    /// lenient: a record whose field count differs from the header's is an error (pandas pads
    /// a short one with NaN), so a broken file is never read as rows of garbage.
    pub fn from_text(text: &str) -> Result<Frame, CsvError> {
        let mut records = parse_csv(text)?.into_iter();
        let (_, columns) = records.next().ok_or(CsvError::Empty)?;
        let width = columns.len();
        let raw: Vec<Vec<String>> = records
            .map(|(line, r)| {
                if r.len() == width {
                    Ok(r)
                } else {
                    Err(CsvError::FieldCount {
                        line,
                        expected: width,
                        got: r.len(),
                    })
                }
            })
            .collect::<Result<_, _>>()?;
        let mut typed: Vec<Vec<Cell>> = vec![Vec::with_capacity(width); raw.len()];
        for col in 0..width {
            let cells: Vec<&str> = raw.iter().map(|r| r[col].as_str()).collect();
            let is_na = |s: &str| PANDAS_NA.contains(&s);
            let non_na: Vec<&str> = cells.iter().copied().filter(|s| !is_na(s)).collect();
            let all_int = non_na.iter().all(|s| pandas_int(s).is_some());
            let all_float = non_na.iter().all(|s| pandas_float(s).is_some());
            let any_na = non_na.len() != cells.len();
            for (r, s) in cells.iter().enumerate() {
                let cell = if is_na(s) {
                    Cell::Float(f64::NAN)
                } else if all_int && !any_na {
                    Cell::Int(pandas_int(s).unwrap_or(0))
                } else if all_int || all_float {
                    Cell::Float(
                        pandas_int(s)
                            .map(|i| i as f64)
                            .or_else(|| pandas_float(s))
                            .unwrap_or(f64::NAN),
                    )
                } else {
                    Cell::Str(s.to_string())
                };
                typed[r].push(cell);
            }
        }
        Ok(Frame {
            columns,
            rows: typed,
        })
    }
}

const COL_API_NAME: &str = "API Name";
const COL_DEVICE_DTYPE: &str = "DEVICE Dtype";
const COL_SHAPE: &str = "Shape";
const COL_SMALL_VALUE: &str = "小值域错误占比";
const COL_RMSE: &str = "均方根误差";
const COL_MAX_REL: &str = "相对误差最大值";
const COL_MEAN_REL: &str = "相对误差平均值";
const COL_EB: &str = "误差均衡性";
const COL_ERROR_RATE: &str = "二进制一致错误率";
const COL_INF_NAN: &str = "inf/nan错误率";
const COL_REL_ERR_RATIO: &str = "相对误差错误率";
const COL_ABS_ERR_RATIO: &str = "绝对误差错误率";
const COL_MEAN_ULP: &str = "ULP误差平均值";
const COL_ULP_PROPORTION: &str = "ULP误差大于阈值占比";
const COL_THOUSANDTH: &str = "双千指标";
const COL_MESSAGE: &str = "Message";

const REQUIRED: [&str; 14] = [
    COL_API_NAME,
    COL_DEVICE_DTYPE,
    COL_SMALL_VALUE,
    COL_RMSE,
    COL_MAX_REL,
    COL_MEAN_REL,
    COL_EB,
    COL_ERROR_RATE,
    COL_INF_NAN,
    COL_REL_ERR_RATIO,
    COL_ABS_ERR_RATIO,
    COL_MEAN_ULP,
    COL_ULP_PROPORTION,
    COL_THOUSANDTH,
];

/// Result CSV header.
pub const RESULT_HEADER: [&str; 4] = [
    "API Name",
    "Forward Test Success",
    "Backward Test Success",
    "Message",
];
/// Details CSV header.
pub const DETAILS_HEADER: [&str; 28] = [
    "API Name",
    "小值域错误比值",
    "小值域判定结果",
    "均方根误差比值",
    "均方根误差判定结果",
    "相对误差最大值比值",
    "相对误差最大值判定结果",
    "相对误差平均值比值",
    "相对误差平均值判定结果",
    "误差均衡性比值",
    "误差均衡性判定结果",
    "inf/nan错误率",
    "inf/nan判定结果",
    "相对误差错误率",
    "相对误差判定结果",
    "绝对误差错误率",
    "绝对误差判定结果",
    "二进制一致错误率",
    "二进制一致错误率判定结果",
    "ULP误差平均值",
    "ULP误差大于阈值占比",
    "ULP误差大于阈值占比比值",
    "ULP误差判定结果",
    "双千指标",
    "双千指标判定结果",
    "比对结果",
    "比对算法",
    "Message",
];

const UNSUPPORTED_DTYPES: [&str; 3] = ["torch.float64", "torch.complex64", "torch.complex128"];
const UNSUPPORTED_MESSAGE: &str = "This data type does not support benchmark compare.";
const TOPK_MESSAGE: &str = "在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 如果topk精度不达标，请检查是否是该原因导致的。";

/// Details row slots (ApiPrecisionOutputColumn order).
#[derive(Clone, Copy)]
#[repr(usize)]
enum Slot {
    ApiName = 0,
    SmallValueRatio,
    SmallValueStatus,
    RmseRatio,
    RmseStatus,
    MaxRelRatio,
    MaxRelStatus,
    MeanRelRatio,
    MeanRelStatus,
    EbRatio,
    EbStatus,
    InfNanRatio,
    InfNanStatus,
    RelErrRatio,
    RelErrStatus,
    AbsErrRatio,
    AbsErrStatus,
    ErrorRate,
    ErrorRateStatus,
    MeanUlp,
    UlpProportion,
    UlpProportionRatio,
    UlpStatus,
    Thousandth,
    ThousandthStatus,
    Result,
    Algorithm,
    Message,
}

struct DetailsRow([PyVal; 28]);

impl DetailsRow {
    fn new() -> Self {
        DetailsRow(std::array::from_fn(|_| PyVal::space()))
    }
    fn set(&mut self, slot: Slot, v: PyVal) {
        self.0[slot as usize] = v;
    }
    fn set_str(&mut self, slot: Slot, v: &str) {
        self.0[slot as usize] = PyVal::Str(v.to_string());
    }
    fn text(&self) -> String {
        let cells: Vec<String> = self.0.iter().map(PyVal::csv_text).collect();
        csv_record(&cells, CSV_LINE_END)
    }
}

struct Row<'a> {
    index: &'a HashMap<&'a str, usize>,
    cells: &'a [Cell],
}

impl Row<'_> {
    /// `row[column]`; a missing column raises KeyError as pandas does.
    fn get(&self, col: &str) -> Result<&Cell, String> {
        self.index
            .get(col)
            .map(|&i| &self.cells[i])
            .ok_or_else(|| format!("'{col}'"))
    }
}

fn str_is(cell: &Cell, text: &str) -> bool {
    matches!(cell, Cell::Str(s) if s == text)
}

/// `convert_str_to_float`.
fn convert_to_float(cell: &Cell) -> Result<f64, String> {
    match cell {
        Cell::Str(s) if s.trim().is_empty() => Err("ERROR: Input data is an empty string".into()),
        Cell::Str(s) => {
            python_float(s).ok_or_else(|| "ERROR: Input data cannot be converted to float".into())
        }
        Cell::Float(v) => Ok(*v),
        Cell::Int(v) => Ok(*v as f64),
    }
}

/// `_get_and_convert_value`: blank text reads as 0.0.
fn metric_value(cell: &Cell) -> Result<f64, String> {
    match cell {
        Cell::Str(s) if s.trim().is_empty() => Ok(0.0),
        other => convert_to_float(other),
    }
}

fn min_err(dtype: &str) -> f64 {
    match dtype {
        "torch.float16" => 2f64.powi(-11),
        "torch.bfloat16" => 2f64.powi(-8),
        _ => 2f64.powi(-14),
    }
}

/// `|npu| / max(|gpu|, min_err(dtype))`.
pub fn calc_ratio(x: f64, y: f64, dtype: &str) -> f64 {
    x.abs() / y.abs().max(min_err(dtype))
}

fn inf_or_nan(x: f64) -> bool {
    !x.is_finite()
}

/// `check_inf_or_nan`: (ratio NaN, consistent, message).
fn check_inf_or_nan(x: f64, y: f64, column: &str) -> (f64, bool, String) {
    let consistent = if x.is_infinite() || y.is_infinite() {
        x.is_infinite() && y.is_infinite() && x == y
    } else {
        x.is_nan() && y.is_nan()
    };
    let msg = if consistent {
        format!("{column}同为同号inf或nan\n")
    } else {
        format!("{column}inf或nan不一致\n")
    };
    (f64::NAN, consistent, msg)
}

fn api_level(api_name: &str) -> u8 {
    const L2: &[&str] = &[
        "addmm",
        "npu_cross_entropy_loss",
        "npu_cross_entropy_loss_backward",
        "GELU",
        "layer_norm",
        "matmul",
        "mm",
        "index",
        "one_hot",
        "sum",
        "npu_rms_norm",
        "npu_rms_norm_backward",
        "nonzero",
    ];
    const L1: &[&str] = &[
        "embedding",
        "npu_fusion_attention_grad",
        "npu_fusion_attention",
        "scatter_",
        "scatter_add_",
    ];
    if L2.contains(&api_name) {
        2
    } else if L1.contains(&api_name) {
        1
    } else {
        0
    }
}

fn benchmark_verdict(
    npu: &Row<'_>,
    gpu: &Row<'_>,
    dtype: &str,
    api_name: &str,
    out: &mut DetailsRow,
) -> Result<&'static str, String> {
    let level = api_level(api_name);
    let rmse_mean_thr = [2.0, 1.5, 1.2][level as usize];
    let max_thr = [10.0, 5.0, 2.0][level as usize];
    let metrics: [(&str, f64, Slot, Slot, &str); 5] = [
        (
            COL_SMALL_VALUE,
            2.0,
            Slot::SmallValueRatio,
            Slot::SmallValueStatus,
            "ERROR: 小值域错误比值超过阈值\n",
        ),
        (
            COL_RMSE,
            rmse_mean_thr,
            Slot::RmseRatio,
            Slot::RmseStatus,
            "ERROR: 均方根误差比值超过阈值\n",
        ),
        (
            COL_MAX_REL,
            max_thr,
            Slot::MaxRelRatio,
            Slot::MaxRelStatus,
            "ERROR: 相对误差最大值比值超过阈值\n",
        ),
        (
            COL_MEAN_REL,
            rmse_mean_thr,
            Slot::MeanRelRatio,
            Slot::MeanRelStatus,
            "ERROR: 相对误差平均值比值超过阈值\n",
        ),
        (COL_EB, 2.0, Slot::EbRatio, Slot::EbStatus, ""),
    ];
    let mut message = String::new();
    let mut results = Vec::new();
    for (col, thr, ratio_slot, status_slot, err_msg) in metrics {
        let n = metric_value(npu.get(col)?)?;
        let g = metric_value(gpu.get(col)?)?;
        let (ratio, consistent) = if inf_or_nan(n) || inf_or_nan(g) {
            let (r, c, m) = check_inf_or_nan(n, g, col);
            message.push_str(&m);
            (r, c)
        } else {
            (calc_ratio(n, g, dtype), true)
        };
        let status = if !consistent {
            "error"
        } else if inf_or_nan(ratio) || ratio <= thr {
            "pass"
        } else {
            "error"
        };
        results.push((ratio, ratio_slot, status, status_slot, err_msg));
    }
    let mut result = "pass";
    for (i, (ratio, ratio_slot, status, status_slot, _)) in results.iter().enumerate() {
        out.set(*ratio_slot, PyVal::py_float(*ratio));
        out.set_str(*status_slot, status);
        if i < 4 && *status == "error" {
            result = "error";
        }
    }
    for (_, _, status, _, err_msg) in results.iter().take(4) {
        if *status == "error" {
            message.push_str(err_msg);
        }
    }
    out.set_str(Slot::Result, result);
    out.set_str(Slot::Algorithm, Standard::Benchmark.algorithm_name());
    out.set_str(Slot::Message, &message);
    Ok(result)
}

fn is_fp8_or_hif8(dtype: &str) -> bool {
    matches!(
        dtype,
        "torch.float8_e4m3fn"
            | "torch.float8_e5m2"
            | "<class 'torch_npu.utils.hif8_tensor.HiFloat8Tensor'>"
            | "torch_npu.HiFloat8Tensor"
    )
}

/// The standards judged by one NPU column alone (binary consistency, thousandth): the value and
/// its status go to their slots, and the status is the row's result.
fn single_metric_verdict(
    npu: &Row<'_>,
    out: &mut DetailsRow,
    standard: Standard,
    (column, value_slot, status_slot): (&str, Slot, Slot),
    passes: fn(f64) -> bool,
    error_message: &str,
) -> Result<&'static str, String> {
    let cell = npu.get(column)?;
    let status = if passes(convert_to_float(cell)?) {
        "pass"
    } else {
        "error"
    };
    out.set(value_slot, cell.to_pyval());
    out.set_str(status_slot, status);
    out.set_str(Slot::Result, status);
    out.set_str(Slot::Algorithm, standard.algorithm_name());
    out.set_str(
        Slot::Message,
        if status == "error" { error_message } else { "" },
    );
    Ok(status)
}

fn ulp_verdict(
    npu: &Row<'_>,
    gpu: &Row<'_>,
    dtype: &str,
    out: &mut DetailsRow,
) -> Result<&'static str, String> {
    let mut message = String::new();
    let (mean_ulp, npu_prop, ratio, consistent) = if is_fp8_or_hif8(dtype) {
        let p = metric_value(npu.get(COL_ULP_PROPORTION)?)?;
        (None, p, None, true)
    } else {
        let n_mean = metric_value(npu.get(COL_MEAN_ULP)?)?;
        let g_mean = metric_value(gpu.get(COL_MEAN_ULP)?)?;
        let mut mean_ok = true;
        if inf_or_nan(n_mean) || inf_or_nan(g_mean) {
            let (_, c, m) = check_inf_or_nan(n_mean, g_mean, COL_MEAN_ULP);
            mean_ok = c;
            message.push_str(&m);
        }
        let n_prop = metric_value(npu.get(COL_ULP_PROPORTION)?)?;
        let g_prop = metric_value(gpu.get(COL_ULP_PROPORTION)?)?;
        let (ratio, prop_ok) = if inf_or_nan(n_prop) || inf_or_nan(g_prop) {
            let (r, c, m) = check_inf_or_nan(n_prop, g_prop, COL_ULP_PROPORTION);
            message.push_str(&m);
            (r, c)
        } else {
            (calc_ratio(n_prop, g_prop, dtype), true)
        };
        (Some(n_mean), n_prop, Some(ratio), mean_ok && prop_ok)
    };
    out.set(
        Slot::MeanUlp,
        mean_ulp.map_or_else(PyVal::space, PyVal::py_float),
    );
    out.set(Slot::UlpProportion, PyVal::py_float(npu_prop));
    out.set(
        Slot::UlpProportionRatio,
        ratio.map_or_else(PyVal::space, PyVal::py_float),
    );
    let fail = "ERROR: ULP误差不满足标准\n";
    let status = if !consistent {
        // msprobe leaves the ULP status column blank on an inf/nan mismatch.
        message.push_str(fail);
        out.set_str(Slot::Result, "error");
        out.set_str(Slot::Algorithm, Standard::Ulp.algorithm_name());
        out.set_str(Slot::Message, &message);
        return Ok("error");
    } else {
        let ratio = ratio.unwrap_or(f64::NAN);
        let pass = if is_fp8_or_hif8(dtype) {
            npu_prop < 0.001
        } else if dtype == "torch.float32" {
            mean_ulp.unwrap_or(f64::NAN) < 64.0 || npu_prop < 0.05 || ratio < 1.0
        } else {
            npu_prop < 0.001 || ratio < 1.0
        };
        if pass { "pass" } else { "error" }
    };
    if status == "error" {
        message.push_str(fail);
    }
    out.set_str(Slot::UlpStatus, status);
    out.set_str(Slot::Result, status);
    out.set_str(Slot::Algorithm, Standard::Ulp.algorithm_name());
    out.set_str(Slot::Message, &message);
    Ok(status)
}

/// (values, statuses, overall) of the absolute-threshold rates.
fn absolute_rates(
    npu: &Row<'_>,
    out: &mut DetailsRow,
) -> Result<([&'static str; 3], &'static str), String> {
    let cols = [
        (COL_INF_NAN, Slot::InfNanRatio, Slot::InfNanStatus),
        (COL_REL_ERR_RATIO, Slot::RelErrRatio, Slot::RelErrStatus),
        (COL_ABS_ERR_RATIO, Slot::AbsErrRatio, Slot::AbsErrStatus),
    ];
    let mut values = [0.0; 3];
    for (i, (col, _, _)) in cols.iter().enumerate() {
        values[i] = convert_to_float(npu.get(col)?)?;
    }
    let mut statuses = ["pass"; 3];
    for (i, (_, vslot, sslot)) in cols.iter().enumerate() {
        statuses[i] = if values[i] == 0.0 { "pass" } else { "error" };
        out.set(*vslot, PyVal::py_float(values[i]));
        out.set_str(*sslot, statuses[i]);
    }
    let overall = if statuses.contains(&"error") {
        "error"
    } else {
        "pass"
    };
    Ok((statuses, overall))
}

const RATE_MESSAGES: [&str; 3] = [
    "ERROR: inf/nan错误率超过阈值",
    "ERROR: 相对误差错误率超过阈值",
    "ERROR: 绝对误差错误率超过阈值",
];

fn standard_verdict(
    standard: Standard,
    npu: &Row<'_>,
    gpu: &Row<'_>,
    dtype: &str,
    api_name: &str,
    out: &mut DetailsRow,
) -> Result<&'static str, String> {
    match standard {
        Standard::Benchmark => benchmark_verdict(npu, gpu, dtype, api_name, out),
        Standard::Ulp => ulp_verdict(npu, gpu, dtype, out),
        Standard::BinaryConsistency => single_metric_verdict(
            npu,
            out,
            standard,
            (COL_ERROR_RATE, Slot::ErrorRate, Slot::ErrorRateStatus),
            |rate| rate == 0.0,
            "ERROR: 二进制一致错误率超过阈值\n",
        ),
        Standard::Thousandth => single_metric_verdict(
            npu,
            out,
            standard,
            (COL_THOUSANDTH, Slot::Thousandth, Slot::ThousandthStatus),
            |ratio| ratio >= 0.999,
            "ERROR: 双千指标不达标\n",
        ),
        Standard::AbsoluteThreshold => {
            let (statuses, overall) = absolute_rates(npu, out)?;
            let mut message = String::new();
            for (s, m) in statuses.iter().zip(RATE_MESSAGES) {
                if *s == "error" {
                    message.push_str(m);
                }
            }
            out.set_str(Slot::Result, overall);
            out.set_str(Slot::Algorithm, standard.algorithm_name());
            out.set_str(Slot::Message, &message);
            Ok(overall)
        }
        Standard::AccumulativeError => {
            let (statuses, overall) = absolute_rates(npu, out)?;
            let eb = convert_to_float(npu.get(COL_EB)?)?;
            let eb_thr = match dtype {
                "torch.float16" => 2f64.powi(-20),
                "torch.bfloat16" => 2f64.powi(-7),
                _ => 2f64.powi(-14),
            };
            let eb_status = if eb <= eb_thr { "pass" } else { "error" };
            let result = if overall == "error" || eb_status == "error" {
                "error"
            } else {
                "pass"
            };
            out.set(Slot::EbRatio, PyVal::py_float(eb));
            out.set_str(Slot::EbStatus, eb_status);
            let mut parts: Vec<String> = Vec::new();
            for (s, m) in statuses.iter().zip(RATE_MESSAGES) {
                if *s == "error" {
                    parts.push(format!("{m}\n"));
                }
            }
            if eb_status == "error" {
                parts.push("ERROR: 误差均衡性超过阈值\n".into());
            }
            out.set_str(Slot::Result, result);
            out.set_str(Slot::Algorithm, standard.algorithm_name());
            out.set_str(Slot::Message, &parts.join("\n"));
            Ok(result)
        }
    }
}

/// `get_api_status`: the verdict of one NPU row against its GPU row.
fn api_status(
    npu: &Row<'_>,
    gpu: &Row<'_>,
    name: &str,
    api_name: &str,
    routing: Routing,
    out: &mut DetailsRow,
) -> Result<&'static str, String> {
    let dtype_cell = npu.get(COL_DEVICE_DTYPE)?;
    let skip = dtype_cell.isspace()?
        || UNSUPPORTED_DTYPES.iter().any(|d| str_is(dtype_cell, d))
        || str_is(npu.get(COL_SHAPE)?, "(0,)");
    out.set_str(Slot::ApiName, name);
    if skip {
        out.set_str(Slot::Result, "SKIP");
        out.set(Slot::Message, npu.get(COL_MESSAGE)?.to_pyval());
        return Ok("SKIP");
    }
    let dtype = dtype_cell.py_str();
    let in_dtype = if npu.get(COL_REL_ERR_RATIO)?.isspace()? {
        "torch.float32"
    } else {
        "torch.float8_e4m3fn"
    };
    let standard = standard_for(api_name, &dtype, in_dtype, routing);
    standard_verdict(standard, npu, gpu, &dtype, api_name, out)
}

/// Applies one standard's verdict to an NPU/GPU cell pair (the `record_*` functions of
/// msprobe): returns the status and the 28 details cells. Cells absent from the maps are
/// missing columns. `api_name` is the bare name (it picks the benchmark guard level).
pub fn record_verdict(
    standard: Standard,
    npu_cells: &[(&str, Cell)],
    gpu_cells: &[(&str, Cell)],
    dtype: &str,
    api_name: &str,
) -> Result<(&'static str, Vec<PyVal>), String> {
    fn build<'a>(cells: &[(&'a str, Cell)], dtype: &str) -> (Vec<&'a str>, Vec<Cell>) {
        let mut names: Vec<&'a str> = cells.iter().map(|(n, _)| *n).collect();
        let mut values: Vec<Cell> = cells.iter().map(|(_, c)| c.clone()).collect();
        names.push(COL_DEVICE_DTYPE);
        values.push(Cell::Str(dtype.to_string()));
        (names, values)
    }
    let (npu_names, npu_values) = build(npu_cells, dtype);
    let (gpu_names, gpu_values) = build(gpu_cells, dtype);
    let npu_index: HashMap<&str, usize> =
        npu_names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let gpu_index: HashMap<&str, usize> =
        gpu_names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let npu = Row {
        index: &npu_index,
        cells: &npu_values,
    };
    let gpu = Row {
        index: &gpu_index,
        cells: &gpu_values,
    };
    let mut out = DetailsRow::new();
    let status = standard_verdict(standard, &npu, &gpu, dtype, api_name, &mut out)?;
    Ok((status, out.0.to_vec()))
}

/// `type.name.index.direction.output.k` (6 parts) or with a prefix (7 parts):
/// (bare api name, full api name, direction).
fn split_row_name(name: &str) -> Option<(String, String, String)> {
    let p: Vec<&str> = name.split('.').collect();
    match p.len() {
        6 => Some((
            p[1].to_string(),
            format!("{}.{}.{}", p[0], p[1], p[2]),
            p[3].to_string(),
        )),
        7 => Some((
            format!("{}.{}", p[1], p[2]),
            format!("{}.{}.{}.{}", p[0], p[1], p[2], p[3]),
            p[4].to_string(),
        )),
        _ => None,
    }
}

fn rollup(statuses: &[&str]) -> &'static str {
    if statuses.is_empty() {
        " "
    } else if statuses.iter().all(|s| *s == "SKIP") {
        "SKIP"
    } else if statuses.contains(&"error") {
        "error"
    } else if statuses.contains(&"warning") {
        "warning"
    } else {
        "pass"
    }
}

/// api_precision_compare's roll-up of one API's statuses (spec §4.5).
pub fn api_checker_result<S: AsRef<str>>(statuses: &[S]) -> &'static str {
    let v: Vec<&str> = statuses.iter().map(|s| s.as_ref()).collect();
    rollup(&v)
}

fn invalid_pattern(name: &str) -> bool {
    const SPECIAL: &[char] = &['＋', '－', '＝', '％', '＠', '+', '-', '=', '%', '@'];
    name.starts_with(SPECIAL)
        || name
            .split(';')
            .skip(1)
            .any(|rest| rest.starts_with(SPECIAL))
}

/// The two output texts (without BOM) and, if msprobe would have stopped early, why.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareTexts {
    pub result_csv: String,
    pub details_csv: String,
    pub aborted: Option<String>,
}

/// Why [`compare_texts`] could not read one of its inputs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// Not a readable CSV.
    #[error("{which}: {error}")]
    Csv {
        which: &'static str,
        error: CsvError,
    },
    /// msprobe's required columns are missing (comma-separated).
    #[error("the following columns {columns} are missing in {which}")]
    MissingColumns {
        which: &'static str,
        columns: String,
    },
}

impl TextError {
    /// `"npu_csv"` or `"gpu_csv"`: the input concerned.
    pub fn which(&self) -> &'static str {
        match self {
            TextError::Csv { which, .. } | TextError::MissingColumns { which, .. } => which,
        }
    }
}

/// Runs api_precision_compare on two detail-CSV texts.
pub fn compare_texts(
    npu_text: &str,
    gpu_text: &str,
    routing: Routing,
) -> Result<CompareTexts, TextError> {
    let frame =
        |text: &str, which| Frame::from_text(text).map_err(|error| TextError::Csv { which, error });
    let npu = frame(npu_text, "npu_csv")?;
    let gpu = frame(gpu_text, "gpu_csv")?;
    for (frame, which) in [(&npu, "npu_csv"), (&gpu, "gpu_csv")] {
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|c| !frame.columns.iter().any(|h| h == c))
            .collect();
        if !missing.is_empty() {
            return Err(TextError::MissingColumns {
                which,
                columns: missing.join(","),
            });
        }
    }
    let mut result = csv_record(&RESULT_HEADER, CSV_LINE_END);
    let mut details = csv_record(&DETAILS_HEADER, CSV_LINE_END);
    let aborted = analyse(&npu, &gpu, routing, &mut result, &mut details);
    Ok(CompareTexts {
        result_csv: result,
        details_csv: details,
        aborted,
    })
}

fn index_of(frame: &Frame) -> HashMap<&str, usize> {
    // pandas keeps the first of duplicated header names under that name.
    let mut map = HashMap::new();
    for (i, c) in frame.columns.iter().enumerate() {
        map.entry(c.as_str()).or_insert(i);
    }
    map
}

fn analyse(
    npu: &Frame,
    gpu: &Frame,
    routing: Routing,
    result: &mut String,
    details: &mut String,
) -> Option<String> {
    let npu_index = index_of(npu);
    let gpu_index = index_of(gpu);
    let gpu_name_col = gpu_index[COL_API_NAME];
    let mut forward: Vec<&'static str> = Vec::new();
    let mut backward: Vec<&'static str> = Vec::new();
    let mut last_api: Option<String> = None;
    let mut last_dtype: Option<Cell> = None;
    let mut last_skip_message = String::new();

    let flush = |api: &str,
                 dtype: &Option<Cell>,
                 fwd: &[&str],
                 bwd: &[&str],
                 skip_msg: &mut String,
                 result: &mut String| {
        if dtype
            .as_ref()
            .is_some_and(|d| UNSUPPORTED_DTYPES.iter().any(|u| str_is(d, u)))
        {
            write_csv_record(
                &[api, "SKIP", "SKIP", UNSUPPORTED_MESSAGE],
                CSV_LINE_END,
                result,
            );
            return;
        }
        let f = rollup(fwd);
        let b = rollup(bwd);
        let mut message = String::new();
        let base = crate::routing::bare_api_name(api).filter(|_| api.split('.').count() <= 4);
        if f == "error" && base.as_deref() == Some("topk") {
            message.push_str(TOPK_MESSAGE);
        }
        if f == "SKIP" {
            message.push_str(skip_msg);
        }
        write_csv_record(&[api, f, b, &message], CSV_LINE_END, result);
        skip_msg.clear();
    };

    for cells in &npu.rows {
        let row = Row {
            index: &npu_index,
            cells,
        };
        let name_cell = &cells[npu_index[COL_API_NAME]];
        let name = match name_cell {
            Cell::Str(s) => s.clone(),
            other => {
                return Some(format!(
                    "'{}' object has no attribute 'split'",
                    other.py_type()
                ));
            }
        };
        if invalid_pattern(&name) {
            return Some(format!("api name contains special characters: {name}"));
        }
        let gpu_rows: Vec<&Vec<Cell>> = gpu
            .rows
            .iter()
            .filter(|r| str_is(&r[gpu_name_col], &name))
            .collect();
        let Some((api_name, api_full, direction)) = split_row_name(&name) else {
            let err = format!("The API name {name} is invalid.");
            let mut d = DetailsRow::new();
            d.set_str(Slot::ApiName, &name);
            d.set_str(Slot::Result, "SKIP");
            d.set_str(Slot::Message, &err);
            details.push_str(&d.text());
            write_csv_record(&[name.as_str(), "SKIP", "SKIP", &err], CSV_LINE_END, result);
            continue;
        };
        if gpu_rows.is_empty() {
            continue;
        }
        if gpu_rows.len() > 1 {
            return Some(format!(
                "This API : {name} has multiple records in the GPU data."
            ));
        }
        let gpu_row = Row {
            index: &gpu_index,
            cells: gpu_rows[0],
        };
        let mut d = DetailsRow::new();
        let status = match api_status(&row, &gpu_row, &name, &api_name, routing, &mut d) {
            Ok(s) => s,
            Err(err) => {
                let mut d = DetailsRow::new();
                d.set_str(Slot::ApiName, &name);
                d.set_str(Slot::Result, "SKIP");
                d.set_str(Slot::Message, &err);
                details.push_str(&d.text());
                write_csv_record(&[name.as_str(), "SKIP", "SKIP", &err], CSV_LINE_END, result);
                continue;
            }
        };
        details.push_str(&d.text());
        if let Some(last) = last_api.as_ref().filter(|l| **l != api_full) {
            flush(
                last,
                &last_dtype,
                &forward,
                &backward,
                &mut last_skip_message,
                result,
            );
            forward.clear();
            backward.clear();
        }
        let dtype_cell = row.get(COL_DEVICE_DTYPE).ok().cloned();
        let supported = !dtype_cell
            .as_ref()
            .is_some_and(|d| UNSUPPORTED_DTYPES.iter().any(|u| str_is(d, u)));
        last_api = Some(api_full);
        last_dtype = dtype_cell;
        if !supported {
            continue;
        }
        match direction.as_str() {
            "forward" => {
                forward.push(status);
                last_skip_message = if status == "SKIP" {
                    row.get(COL_MESSAGE).map(Cell::py_str).unwrap_or_default()
                } else {
                    String::new()
                };
            }
            "backward" => backward.push(status),
            _ => {}
        }
    }
    if let Some(last) = &last_api {
        flush(
            last,
            &last_dtype,
            &forward,
            &backward,
            &mut last_skip_message,
            result,
        );
    }
    None
}

/// Paths written by [`run`], and the reason msprobe would have stopped early (a duplicated GPU
/// row, an API name with special characters): the files then hold what was written until then.
#[derive(Clone, Debug)]
pub struct Outputs {
    pub result_csv: PathBuf,
    pub details_csv: PathBuf,
    pub aborted: Option<String>,
}

/// Reads the NPU and GPU detail CSVs and writes `api_precision_compare_result_{timestamp}.csv`
/// and `api_precision_compare_details_{timestamp}.csv` (UTF-8 with BOM) into `out_dir`.
pub fn run(
    npu_csv: &Path,
    gpu_csv: &Path,
    out_dir: &Path,
    timestamp: &str,
) -> Result<Outputs, PrecisionCompareError> {
    run_with(npu_csv, gpu_csv, out_dir, timestamp, Routing::V26_2)
}

/// [`run`] with a choice of routing rules.
pub fn run_with(
    npu_csv: &Path,
    gpu_csv: &Path,
    out_dir: &Path,
    timestamp: &str,
    routing: Routing,
) -> Result<Outputs, PrecisionCompareError> {
    let read = |p: &Path| -> Result<String, PrecisionCompareError> {
        // A FIFO or device is refused when opened; the file's own size bounds the read.
        let bytes = dumpfmt::fsio::read_regular(p).map_err(PrecisionCompareError::Input)?;
        String::from_utf8(bytes).map_err(|_| PrecisionCompareError::NotUtf8 {
            path: p.to_path_buf(),
        })
    };
    // Checked before any work: the timestamp becomes part of the output file names.
    dumpfmt::outfile::check_timestamp(timestamp).map_err(PrecisionCompareError::Timestamp)?;
    let npu_text = read(npu_csv)?;
    let gpu_text = read(gpu_csv)?;
    let texts = compare_texts(&npu_text, &gpu_text, routing).map_err(|e| {
        let path = if e.which() == "npu_csv" {
            npu_csv
        } else {
            gpu_csv
        }
        .to_path_buf();
        match e {
            TextError::Csv {
                error: CsvError::Empty,
                ..
            } => PrecisionCompareError::Empty { path },
            TextError::Csv { error, .. } => PrecisionCompareError::Csv { path, error },
            TextError::MissingColumns { which, columns } => PrecisionCompareError::MissingColumns {
                path,
                columns,
                which,
            },
        }
    })?;
    std::fs::create_dir_all(out_dir).map_err(|source| PrecisionCompareError::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let result_csv = out_dir.join(format!("api_precision_compare_result_{timestamp}.csv"));
    let details_csv = out_dir.join(format!("api_precision_compare_details_{timestamp}.csv"));
    for (path, text) in [
        (&result_csv, &texts.result_csv),
        (&details_csv, &texts.details_csv),
    ] {
        let mut bytes = "\u{feff}".as_bytes().to_vec();
        bytes.extend_from_slice(text.as_bytes());
        // Never through a link, never half-written (dumpfmt's output writer).
        dumpfmt::outfile::write(path, &bytes)?;
    }
    Ok(Outputs {
        result_csv,
        details_csv,
        aborted: texts.aborted,
    })
}
