//! Values typed as msprobe produced them (Python / numpy scalar types) and their CSV text.
//!
//! msprobe writes Python `float`s (numpy float64 included) with `"{:.14f}"` and every other value
//! with `str()`, so the numpy type of each metric decides its cell text (spec §1.7).

use std::fmt::Write as _;

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
            PyVal::F32(v) => numpy_f32_str(*v),
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

/// numpy's `str(np.float32(x))`: shortest round-trip digits, positional when
/// `1e-4 <= |x| < 1e16` (or zero), scientific otherwise.
pub fn numpy_f32_str(v: f32) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    let (digits, exp10) = shortest_digits(v);
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    let abs = (v as f64).abs();
    if abs == 0.0 || (1e-4..1e16).contains(&abs) {
        out.push_str(&positional(&digits, exp10));
    } else {
        out.push_str(&scientific(&digits, exp10));
    }
    out
}

/// Python's `repr(float)`: shortest digits, positional when `1e-4 <= |x| < 1e16` by decimal
/// exponent, scientific otherwise.
pub fn python_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    let text = format!("{:e}", v.abs());
    let (mant, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let exp10: i32 = exp.parse().unwrap_or(0);
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    if v == 0.0 || (-4..16).contains(&exp10) {
        out.push_str(&positional(&digits, exp10));
    } else {
        out.push_str(&scientific(&digits, exp10));
    }
    out
}

/// Shortest round-trip decimal digits of |v| and the decimal exponent of the first digit.
fn shortest_digits(v: f32) -> (String, i32) {
    let text = format!("{:e}", v.abs());
    let (mant, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    (digits, exp.parse().unwrap_or(0))
}

fn positional(digits: &str, exp10: i32) -> String {
    let mut s = String::new();
    if exp10 >= 0 {
        let int_len = exp10 as usize + 1;
        if digits.len() <= int_len {
            s.push_str(digits);
            s.extend(std::iter::repeat_n('0', int_len - digits.len()));
            s.push_str(".0");
        } else {
            s.push_str(&digits[..int_len]);
            s.push('.');
            s.push_str(&digits[int_len..]);
        }
    } else {
        s.push_str("0.");
        s.extend(std::iter::repeat_n('0', (-exp10 - 1) as usize));
        s.push_str(digits);
    }
    s
}

fn scientific(digits: &str, exp10: i32) -> String {
    let mut s = String::new();
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    let sign = if exp10 < 0 { '-' } else { '+' };
    let _ = write!(s, "e{sign}{:02}", exp10.abs());
    s
}

/// Python's `str(tuple)` for a shape: `()`, `(3,)`, `(2, 3)`.
pub fn shape_tuple(shape: &[usize]) -> String {
    match shape {
        [] => "()".to_string(),
        [one] => format!("({one},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// One CSV field as Python's `csv` module writes it (excel dialect, QUOTE_MINIMAL).
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// One CSV record, `\r\n`-terminated, as Python's `csv.writer` writes it.
pub fn csv_record<S: AsRef<str>>(fields: &[S]) -> String {
    if fields.len() == 1 && fields[0].as_ref().is_empty() {
        return "\"\"\r\n".to_string();
    }
    let mut line = fields
        .iter()
        .map(|f| csv_field(f.as_ref()))
        .collect::<Vec<_>>()
        .join(",");
    line.push_str("\r\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float32_text_follows_numpy() {
        assert_eq!(numpy_f32_str(4.8965216e-05), "4.8965216e-05");
        assert_eq!(numpy_f32_str(0.0030941963), "0.0030941963");
        assert_eq!(numpy_f32_str(1e-4), "1e-04");
        assert_eq!(numpy_f32_str(1e16), "1e+16");
        assert_eq!(numpy_f32_str(1e15), "1000000000000000.0");
        assert_eq!(numpy_f32_str(123456789.0), "123456790.0");
        assert_eq!(numpy_f32_str(-0.0), "-0.0");
        assert_eq!(numpy_f32_str(0.5), "0.5");
        assert_eq!(numpy_f32_str(f32::NAN), "nan");
        assert_eq!(numpy_f32_str(f32::NEG_INFINITY), "-inf");
    }

    #[test]
    fn fixed_and_repr() {
        assert_eq!(fmt_fixed14(0.1), "0.10000000000000");
        assert_eq!(fmt_fixed14(f64::NAN), "nan");
        assert_eq!(fmt_fixed14(-0.0), "-0.00000000000000");
        assert_eq!(python_float_repr(0.0001), "0.0001");
        assert_eq!(python_float_repr(1e16), "1e+16");
        assert_eq!(python_float_repr(2.0), "2.0");
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(
            csv_record(&["a", "(3,)", "x\ny", "q\""]),
            "a,\"(3,)\",\"x\ny\",\"q\"\"\"\r\n"
        );
        assert_eq!(shape_tuple(&[2, 3]), "(2, 3)");
        assert_eq!(shape_tuple(&[]), "()");
    }
}
