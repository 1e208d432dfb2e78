//! Statistics mode: `{Max,Min,Mean,L2norm} diff` and `{Max,Min,Mean,Norm}RelativeErr` texts
//! from the NPU and bench statistic of one row (spec 5.3).

use crate::cell::Cell;
use pyrepr::repr_f64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Nan,
    Inf,
    NegInf,
    Num,
    Device,
    Na,
    Other,
}

/// pandas' `to_numeric` on a value, as far as the dumps need it.
fn to_numeric(c: &Cell) -> Option<f64> {
    match c {
        Cell::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        Cell::Int(i) => Some(*i as f64),
        Cell::Float(f) if !f.is_nan() => Some(*f),
        Cell::Str(s) => parse_number(s).filter(|f| !f.is_nan()),
        _ => None,
    }
}

/// A number as pandas/Python read it from text (surrounding spaces allowed).
pub fn parse_number(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() || t.contains('_') {
        return None;
    }
    t.parse::<f64>().ok()
}

fn classify(c: &Cell, text: &str) -> Class {
    let lower = text.to_ascii_lowercase();
    if matches!(c, Cell::None) || matches!(c, Cell::Float(f) if f.is_nan()) || lower == "nan" {
        Class::Nan
    } else if matches!(c, Cell::Float(f) if *f == f64::INFINITY) || lower == "inf" {
        Class::Inf
    } else if matches!(c, Cell::Float(f) if *f == f64::NEG_INFINITY) || lower == "-inf" {
        Class::NegInf
    } else if to_numeric(c).is_some() && lower != "true" && lower != "false" {
        Class::Num
    } else if lower.contains("npu") || lower.contains("cpu") || lower.contains("cuda") {
        Class::Device
    } else if text == "N/A" {
        Class::Na
    } else {
        Class::Other
    }
}

/// Whether pandas would read a whole column of texts as int64 (all integer literals).
pub fn column_is_int(texts: &[String]) -> bool {
    texts.iter().all(|t| {
        let t = t.trim();
        let d = t.strip_prefix(['-', '+']).unwrap_or(t);
        !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()) && t.parse::<i64>().is_ok()
    })
}

/// Which pandas msprobe ran with: the statistics diff re-reads printed numbers with pandas'
/// parser, which pandas 3 made correctly rounded (pandas 2's keeps 17 digits, leading zeros
/// included), and pandas 3 also reports NaN against NaN as `Nan` instead of `0`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PandasCompat {
    /// pandas 2.x (the reference vectors: pandas 2.3.3).
    #[default]
    V2,
    /// pandas 3.x.
    V3,
}

/// Diff and relative-error texts of one statistic. `npu_text`/`bench_text` are the values as
/// their table column prints them; `int_columns` says both columns parse as integers.
pub fn stat_diff(
    npu: &Cell,
    bench: &Cell,
    npu_text: &str,
    bench_text: &str,
    int_columns: bool,
    compat: PandasCompat,
) -> (String, String) {
    if compat == PandasCompat::V3 && npu_text == "Nan" && bench_text == "Nan" {
        return ("Nan".into(), "Nan".into());
    }
    if npu_text == bench_text {
        return ("0".into(), "0".into());
    }
    use Class::*;
    let (a, b) = (classify(npu, npu_text), classify(bench, bench_text));
    let fixed = |s: &str| (s.to_string(), s.to_string());
    match (a, b) {
        (Num, Num) => {
            if int_columns {
                let (x, y) = (
                    npu_text.trim().parse::<i64>().unwrap_or(0),
                    bench_text.trim().parse::<i64>().unwrap_or(0),
                );
                let diff = x.wrapping_sub(y);
                let rel = if y != 0 {
                    format!("{}%", repr_f64((diff as f64 / y as f64 * 100.0).abs()))
                } else {
                    "inf".into()
                };
                (diff.to_string(), rel)
            } else {
                // msprobe re-reads the printed values with pandas' parser before subtracting.
                let parse = |t: &str| match compat {
                    PandasCompat::V2 => pandas_parse(t).or_else(|| parse_number(t)),
                    PandasCompat::V3 => parse_number(t),
                };
                let x = parse(npu_text).unwrap_or(f64::NAN);
                let y = parse(bench_text).unwrap_or(f64::NAN);
                let diff = x - y;
                let rel = if y != 0.0 {
                    format!("{}%", repr_f64((diff / y * 100.0).abs()))
                } else {
                    "inf".into()
                };
                (repr_f64(diff), rel)
            }
        }
        (Nan, Num | Nan | Inf | NegInf) | (Num | Inf | NegInf, Nan) => fixed("Nan"),
        (Inf, Num | NegInf) | (Num, NegInf) => fixed("inf"),
        (NegInf, Num | Inf) | (Num, Inf) => fixed("-inf"),
        (Na, _) | (_, Na) => fixed("N/A"),
        (Device, Device) => fixed("N/A"),
        (Device | Other, _) | (_, Device | Other) => fixed("Diff"),
        _ => fixed("N/A"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_rules() {
        let f = |x: f64| Cell::Float(x);
        assert_eq!(
            stat_diff(&f(1.5), &f(1.0), "1.5", "1.0", false, PandasCompat::V2),
            ("0.5".into(), "50.0%".into())
        );
        assert_eq!(
            stat_diff(&f(1.0), &f(0.0), "1.0", "0.0", false, PandasCompat::V2),
            ("1.0".into(), "inf".into())
        );
        assert_eq!(
            stat_diff(
                &Cell::s("Nan"),
                &Cell::s("Nan"),
                "Nan",
                "Nan",
                false,
                PandasCompat::V2
            ),
            ("0".into(), "0".into())
        );
        assert_eq!(
            stat_diff(
                &Cell::s("cpu"),
                &Cell::s("npu:0"),
                "cpu",
                "npu:0",
                false,
                PandasCompat::V2
            ),
            ("N/A".into(), "N/A".into())
        );
        assert_eq!(
            stat_diff(
                &Cell::Bool(true),
                &Cell::Bool(false),
                "True",
                "False",
                false,
                PandasCompat::V2
            ),
            ("Diff".into(), "Diff".into())
        );
        assert_eq!(
            stat_diff(
                &Cell::Int(3),
                &Cell::Int(1),
                "3",
                "1",
                true,
                PandasCompat::V2
            ),
            ("2".into(), "200.0%".into())
        );
    }
}

/// pandas 2.x's text-to-float parser (`precise_xstrtod`, used by `pd.to_numeric`): at most
/// 17 significant digits (leading zeros count) accumulated in a double, then one scaling by
/// a power of ten. Not correctly rounded; msprobe's statistics diffs carry its results.
pub fn pandas_parse(s: &str) -> Option<f64> {
    const MAX_DIGITS: i32 = 17;
    let b = s.as_bytes();
    let mut i = 0;
    let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    while i < b.len() && ws(b[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        negative = b[i] == b'-';
        i += 1;
    }
    let (mut number, mut exponent, mut num_digits) = (0.0f64, 0i64, 0i32);
    while i < b.len() && b[i].is_ascii_digit() {
        if num_digits < MAX_DIGITS {
            number = number * 10.0 + f64::from(b[i] - b'0');
            num_digits += 1;
        } else {
            exponent += 1;
        }
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let mut num_decimals = 0;
        while num_digits < MAX_DIGITS && i < b.len() && b[i].is_ascii_digit() {
            number = number * 10.0 + f64::from(b[i] - b'0');
            i += 1;
            num_digits += 1;
            num_decimals += 1;
        }
        if num_digits >= MAX_DIGITS {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
        exponent -= num_decimals;
    }
    if num_digits == 0 {
        return None;
    }
    if negative {
        number = -number;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        let mut neg_exp = false;
        if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
            neg_exp = b[j] == b'-';
            j += 1;
        }
        let (mut n, mut nd) = (0i64, 0);
        while nd < MAX_DIGITS && j < b.len() && b[j].is_ascii_digit() {
            n = n * 10 + i64::from(b[j] - b'0');
            nd += 1;
            j += 1;
        }
        if nd > 0 {
            exponent += if neg_exp { -n } else { n };
            i = j;
        }
    }
    while i < b.len() && ws(b[i]) {
        i += 1;
    }
    if i != b.len() || exponent > 308 {
        return None;
    }
    let p10 = |k: i64| -> f64 { format!("1e{k}").parse().unwrap_or(f64::INFINITY) };
    Some(if exponent > 0 {
        number * p10(exponent)
    } else if exponent < -308 {
        if exponent < -616 {
            0.0
        } else {
            number / p10(-308 - exponent) / p10(308)
        }
    } else {
        number / p10(-exponent)
    })
}

#[cfg(test)]
mod pandas_parse_tests {
    use super::pandas_parse;

    #[test]
    fn matches_pandas_on_known_texts() {
        // Values pd.to_numeric printed back (pandas 2.3.3).
        assert_eq!(
            pandas_parse("0.0012178421020507812"),
            Some(0.0012178421020507)
        );
        assert_eq!(
            pandas_parse("123456789.123456789"),
            Some(123456789.12345678)
        );
        assert_eq!(
            pandas_parse("-1.8808966888353391"),
            Some(-1.8808966888353391)
        );
        assert_eq!(pandas_parse("5e-324"), Some(5e-324));
        assert_eq!(pandas_parse("1e-05"), Some(1e-05));
        assert_eq!(pandas_parse("abc"), None);
        assert_eq!(pandas_parse("1.5x"), None);
    }
}
