//! Result / Err_message: msprobe's per-API judgement rules (spec 5.5), run on the typed
//! table cells of each API group.

use crate::cell::Cell;
use crate::model::Mode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Pass,
    Warning,
    Error,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Pass => "pass",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// Verdict of one row.
#[derive(Clone, Debug, PartialEq)]
pub struct RowVerdict {
    pub level: Level,
    pub messages: Vec<String>,
}

impl RowVerdict {
    pub(crate) fn raise(&mut self, level: Level, msg: &str) {
        if level > self.level {
            self.level = level;
        }
        self.messages.push(msg.to_string());
    }

    /// `json.dumps(list_of_messages)`.
    pub fn err_message(&self) -> String {
        let parts: Vec<String> = self.messages.iter().map(|m| pyrepr::json_str(m)).collect();
        format!("[{}]", parts.join(", "))
    }
}

/// Column positions the rules read (missing columns are treated as empty).
pub struct Columns {
    idx: std::collections::HashMap<String, usize>,
}

impl Columns {
    pub fn new(header: &[String]) -> Columns {
        Columns {
            idx: header
                .iter()
                .enumerate()
                .map(|(i, h)| (h.clone(), i))
                .collect(),
        }
    }
    fn get<'a>(&self, row: &'a [Cell], name: &str) -> &'a Cell {
        static NONE: Cell = Cell::None;
        self.idx
            .get(name)
            .and_then(|&i| row.get(i))
            .unwrap_or(&NONE)
    }
}

/// Python `float(text.strip('%')) / 100`, 0 when it is not a number.
fn str2float(c: &Cell) -> f64 {
    let Cell::Str(s) = c else { return 0.0 };
    py_float(s.trim_matches('%'))
        .map(|f| f / 100.0)
        .unwrap_or(0.0)
}

/// Python's `float(str)`.
fn py_float(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok()
}

fn is_inf_or_nan(c: &Cell) -> bool {
    match c {
        Cell::Float(f) => !f.is_finite(),
        Cell::Str(s) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "inf" | "-inf" | "nan"
        ),
        _ => false,
    }
}

#[derive(PartialEq)]
enum Ignore {
    All,
    Input,
    No,
}

const ALL_IGNORE: [&str; 9] = [
    "empty",
    "empty_like",
    "numpy",
    "to",
    "__setitem__",
    "empty_with_format",
    "new_empty_strided",
    "new_empty",
    "empty_strided",
];
const INPUT_IGNORE: [&str; 4] = [
    "_reduce_scatter_base",
    "_all_gather_base",
    "all_to_all_single",
    "batch_isend_irecv",
];

const NPU_NAME: &str = "NPU Name";
const BENCH_NAME: &str = "Bench Name";

/// Judges one API group. `rows` are the table rows of the group in table order.
pub fn judge_group(mode: Mode, cols: &Columns, rows: &[&[Cell]]) -> Vec<RowVerdict> {
    let mut v: Vec<RowVerdict> = rows
        .iter()
        .map(|_| RowVerdict {
            level: Level::Pass,
            messages: vec![],
        })
        .collect();
    let name_of = |r: &[Cell]| cols.get(r, NPU_NAME).py_str();
    let is_output: Vec<bool> = rows
        .iter()
        .map(|r| name_of(r).contains(".output."))
        .collect();
    let inputs: Vec<usize> = (0..rows.len()).filter(|&i| !is_output[i]).collect();
    let outputs: Vec<usize> = (0..rows.len()).filter(|&i| is_output[i]).collect();
    let ignore = match inputs.first() {
        None => Ignore::No,
        Some(&i) => {
            let name = name_of(rows[i]);
            match name.split('.').nth(1) {
                Some(api) if ALL_IGNORE.contains(&api) => Ignore::All,
                Some(api) if INPUT_IGNORE.contains(&api) => Ignore::Input,
                _ => Ignore::No,
            }
        }
    };
    let per_row: Vec<usize> = match ignore {
        Ignore::All => vec![],
        Ignore::Input => outputs.clone(),
        Ignore::No => inputs.iter().chain(outputs.iter()).copied().collect(),
    };
    let use_inputs = ignore == Ignore::No;

    // min/max of a metric over input or output rows, msprobe's `get_min_or_max_value`.
    let extreme = |header: &str, which: &[usize], is_min: bool| -> f64 {
        let mut acc = if is_min { 1.0 } else { 0.0 };
        for &i in which {
            let c = cols.get(rows[i], header);
            let value = match c {
                Cell::None => continue,
                Cell::Str(s) if s == "Nan" || s == "N/A" => continue,
                Cell::Str(s) if s.ends_with('%') => str2float(c),
                Cell::Str(_) | Cell::List(_) => continue,
                Cell::Bool(b) => *b as i32 as f64,
                Cell::Int(x) => *x as f64,
                Cell::Float(f) => *f,
            };
            // Python min/max keep the first argument unless the second is strictly better.
            if (is_min && value < acc) || (!is_min && value > acc) {
                acc = value;
            }
        }
        acc
    };

    let checkers: &[&str] = match mode {
        Mode::Statistics => &[
            "infnan", "relerr", "reqgrad", "params", "dtype", "shape", "relwarn",
        ],
        Mode::Tensor => &[
            "infnan",
            "thousandth",
            "reqgrad",
            "params",
            "dtype",
            "shape",
            "coswarn",
        ],
        Mode::Md5 => &["crc"],
    };
    for &checker in checkers {
        match checker {
            "infnan" => {
                for &i in &per_row {
                    let r = rows[i];
                    if is_inf_or_nan(cols.get(r, "Bench max"))
                        || is_inf_or_nan(cols.get(r, "Bench min"))
                    {
                        continue;
                    }
                    if is_inf_or_nan(cols.get(r, "NPU max"))
                        || is_inf_or_nan(cols.get(r, "NPU min"))
                    {
                        v[i].raise(
                            Level::Error,
                            "error: There is nan/inf/-inf in the maximum or minimum value of NPU.",
                        );
                    }
                }
            }
            "relerr" if use_inputs => {
                let in_max = extreme("NormRelativeErr", &inputs, false).abs();
                if in_max < 0.1 {
                    for &i in &outputs {
                        if str2float(cols.get(rows[i], "NormRelativeErr")).abs() > 0.5 {
                            v[i].raise(
                                Level::Error,
                                "error: The NormRelativeErr of output is greater than 0.5.",
                            );
                        }
                    }
                }
            }
            "thousandth" if use_inputs && !outputs.is_empty() => {
                let h = "One Thousandth Err Ratio";
                if extreme(h, &inputs, true) > 0.9 && extreme(h, &outputs, true) < 0.1 {
                    v[outputs[0]].raise(
                        Level::Error,
                        "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6.",
                    );
                }
            }
            "reqgrad" => {
                for &i in &per_row {
                    let r = rows[i];
                    let bench_name = cols.get(r, BENCH_NAME);
                    if !bench_name.truthy() || bench_name.is_str("N/A") {
                        continue;
                    }
                    let (a, b) = (
                        cols.get(r, "NPU Requires_grad"),
                        cols.get(r, "Bench Requires_grad"),
                    );
                    if !a.truthy() || !b.truthy() {
                        continue;
                    }
                    if !a.py_eq(b) {
                        v[i].raise(
                            Level::Error,
                            "error: The Required_Grad of NPU and Bench are inconsistent",
                        );
                    }
                }
            }
            "params" if use_inputs => {
                for &i in &inputs {
                    let r = rows[i];
                    let bench_name = cols.get(r, BENCH_NAME);
                    if !bench_name.truthy() || bench_name.is_str("N/A") {
                        continue;
                    }
                    let (nd, bd) = (cols.get(r, "NPU Dtype"), cols.get(r, "Bench Dtype"));
                    if !nd.truthy() || !bd.truthy() {
                        continue;
                    }
                    if !nd.py_str().contains("class") || !bd.py_str().contains("class") {
                        continue;
                    }
                    if cols.get(r, "NPU Tensor Shape").py_str() != "[]" {
                        continue;
                    }
                    if !cols.get(r, "NPU max").py_eq(cols.get(r, "Bench max")) {
                        v[i].raise(
                            Level::Error,
                            "error: The scalar parameters of NPU and Bench are inconsistent.",
                        );
                    }
                }
            }
            "dtype" => {
                for &i in &per_row {
                    let r = rows[i];
                    let (nn, bn) = (cols.get(r, NPU_NAME), cols.get(r, BENCH_NAME));
                    if !bn.truthy() || bn.is_str("N/A") || nn.is_str("N/A") {
                        continue;
                    }
                    let bns = bn.py_str();
                    if bns.contains("qkv") || bns.contains("gate_up") {
                        continue;
                    }
                    let (nd, bd) = (cols.get(r, "NPU Dtype"), cols.get(r, "Bench Dtype"));
                    if !nd.truthy() || !bd.truthy() {
                        continue;
                    }
                    if !nd.py_eq(bd) {
                        v[i].raise(
                            Level::Error,
                            "error: The dtype of NPU and Bench are inconsistent.",
                        );
                    }
                }
            }
            "shape" => {
                for &i in &per_row {
                    let r = rows[i];
                    let bn = cols.get(r, BENCH_NAME);
                    if !bn.truthy() || bn.is_str("N/A") {
                        continue;
                    }
                    let (ns, bs) = (
                        cols.get(r, "NPU Tensor Shape"),
                        cols.get(r, "Bench Tensor Shape"),
                    );
                    if matches!(ns, Cell::None) || matches!(bs, Cell::None) {
                        continue;
                    }
                    if !ns.py_eq(bs) {
                        v[i].raise(
                            Level::Error,
                            "error: The shape of NPU and Bench are inconsistent.",
                        );
                    }
                }
            }
            "relwarn" if use_inputs && !outputs.is_empty() => {
                let inp = extreme("NormRelativeErr", &inputs, false).abs();
                let out = extreme("NormRelativeErr", &outputs, false).abs();
                let flag = if inp == 0.0 {
                    out > 0.1
                } else {
                    out / inp > 10.0
                };
                if flag {
                    v[outputs[0]].raise(
                        Level::Warning,
                        "warning: The norm relative error of output is 10 times that of input.",
                    );
                }
            }
            "coswarn" if use_inputs && !outputs.is_empty() => {
                let inp = extreme("Cosine", &inputs, true);
                let out = extreme("Cosine", &outputs, true);
                if inp > 0.9 && inp - out > 0.1 {
                    v[outputs[0]].raise(
                        Level::Warning,
                        "warning: The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1",
                    );
                }
            }
            "crc" => {
                for &i in &per_row {
                    let r = rows[i];
                    let (a, b) = (cols.get(r, "NPU MD5"), cols.get(r, "BENCH MD5"));
                    if !a.py_eq(b) {
                        let null = |c: &Cell| c.is_str("N/A") || c.is_str("Nan") || c.is_str("");
                        if null(a) || null(b) {
                            v[i].raise(
                                Level::Warning,
                                "warning: The parameter of NPU does not match the bench.",
                            );
                        } else {
                            v[i].raise(
                                Level::Error,
                                "error: The CRC-32 value of NPU differs from that of the bench.",
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }
    v
}

/// Worst level of a group (msprobe's API-level result).
pub fn group_level(v: &[RowVerdict]) -> Level {
    v.iter().map(|r| r.level).max().unwrap_or(Level::Pass)
}
