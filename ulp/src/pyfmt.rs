//! Values typed as msprobe produced them (Python / numpy scalar types) and their CSV text.
//!
//! msprobe writes Python `float`s (numpy float64 included) with `"{:.14f}"` and every other value
//! with `str()`, so the numpy type of each metric decides its cell text (spec §1.7). The digits
//! themselves (`repr(float)`, `str(np.float32)`, shape tuples, csv quoting) come from the pyrepr crate.

/// msprobe writes its ulp CSVs with `csv.writer`'s default line end, which also makes a field
/// holding a lone `\r` quoted (pandas' `\n` would not).
pub const CSV_LINE_END: &str = "\r\n";

/// One detail cell: a value together with the Python/numpy type msprobe gave it.
#[derive(Clone, Debug, PartialEq)]
pub enum PyVal {
    /// A Python `str` (msprobe's own texts, e.g. the blank `" "`).
    Str(String),
    /// A float64 scalar; `numpy` tells `np.float64` from a plain Python `float`.
    F64 { v: f64, numpy: bool },
    /// A numpy float32 scalar.
    F32(f32),
    /// An integer; `ty` is its type name as the vectors spell it (`int`, `np.int64`, `np.int8`, ...).
    Int { v: i128, ty: &'static str },
}

impl PyVal {
    /// The blank cell msprobe uses for columns a check did not fill.
    pub fn space() -> Self {
        PyVal::Str(" ".to_string())
    }
    pub fn np_f64(v: f64) -> Self {
        PyVal::F64 { v, numpy: true }
    }
    pub fn py_float(v: f64) -> Self {
        PyVal::F64 { v, numpy: false }
    }
    pub fn py_int(v: i64) -> Self {
        PyVal::Int {
            v: v as i128,
            ty: "int",
        }
    }
    pub fn is_space(&self) -> bool {
        matches!(self, PyVal::Str(s) if s == " ")
    }

    /// The type name as the reference vectors spell it.
    pub fn type_name(&self) -> &'static str {
        match self {
            PyVal::Str(_) => "str",
            PyVal::F64 { numpy: true, .. } => "np.float64",
            PyVal::F64 { numpy: false, .. } => "float",
            PyVal::F32(_) => "np.float32",
            PyVal::Int { ty, .. } => ty,
        }
    }

    /// The value as f64 when it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PyVal::Str(_) => None,
            PyVal::F64 { v, .. } => Some(*v),
            PyVal::F32(v) => Some(*v as f64),
            PyVal::Int { v, .. } => Some(*v as f64),
        }
    }

    /// The text msprobe's CSV writer puts in the cell.
    pub fn csv_text(&self) -> String {
        match self {
            PyVal::Str(s) => s.clone(),
            PyVal::F64 { v, .. } => fmt_fixed14(*v),
            PyVal::F32(v) => pyrepr::str_f32(*v),
            PyVal::Int { v, .. } => v.to_string(),
        }
    }

    /// Plain JSON: numbers as numbers, non-finite floats as `"nan"`/`"inf"`/`"-inf"`, texts as is.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        let float = |v: f64| {
            if v.is_nan() {
                Value::from("nan")
            } else if v.is_infinite() {
                Value::from(if v > 0.0 { "inf" } else { "-inf" })
            } else {
                Value::from(v)
            }
        };
        match self {
            PyVal::Str(s) => Value::from(s.as_str()),
            PyVal::F64 { v, .. } => float(*v),
            // The f32 value written with its shortest f32 digits, so it reads back exactly.
            PyVal::F32(v) => {
                if v.is_finite() {
                    let text = format!("{v:e}");
                    text.parse::<f64>().map(Value::from).unwrap_or(Value::Null)
                } else {
                    float(*v as f64)
                }
            }
            PyVal::Int { v, .. } => {
                if let Ok(i) = i64::try_from(*v) {
                    Value::from(i)
                } else {
                    Value::from(*v as f64)
                }
            }
        }
    }
}

/// The cell text ([`PyVal::csv_text`]).
impl std::fmt::Display for PyVal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.csv_text())
    }
}

/// Python's `"{:.14f}".format(x)`.
pub fn fmt_fixed14(v: f64) -> String {
    fmt_fixed(v, 14)
}

/// Python's `"{:.Nf}".format(x)` (both round the exact binary value half-to-even).
pub fn fmt_fixed(v: f64, decimals: usize) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else if v.is_infinite() {
        if v > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        }
    } else {
        format!("{v:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_and_repr() {
        assert_eq!(fmt_fixed14(0.1), "0.10000000000000");
        assert_eq!(fmt_fixed14(f64::NAN), "nan");
        assert_eq!(fmt_fixed14(-0.0), "-0.00000000000000");
        assert_eq!(PyVal::F32(1e-4).csv_text(), "1e-04");
        assert_eq!(PyVal::np_f64(1e-4).csv_text(), "0.00010000000000");
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(
            pyrepr::csv_record(["a", "(3,)", "x\ny", "q\"", "r\rs"], CSV_LINE_END),
            "a,\"(3,)\",\"x\ny\",\"q\"\"\",\"r\rs\"\r\n"
        );
    }
}
