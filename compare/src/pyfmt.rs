//! Python's text forms of numbers and strings, as msprobe's CSVs carry them
//! (`repr(float)`, `str(list)`, `float("{:.12f}".format(x))`).

/// `repr(x)` of a Python float: shortest round-trip digits, fixed notation for
/// decimal exponents in [-4, 16), scientific (`1e-05`, `1.5e+16`) elsewhere.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digit count, e.g. "-1.2345e-5"; Python then
    // takes the closest decimal of that length, ties to even (an exact tie such as
    // 1.54972076416015625e-06 prints ...562e-06 in Python, where `{:e}` gives ...563e-6), so
    // re-round exactly at that length.
    let shortest = format!("{x:e}");
    let n_digits = shortest
        .split('e')
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .count();
    let tied = format!("{x:.prec$e}", prec = n_digits.saturating_sub(1));
    // Only a genuine tie differs, and then both candidates read back as `x`; otherwise the
    // exactly rounded text may fall outside `x`'s interval (next to a power of two).
    let sci = if tied.parse::<f64>() == Ok(x) {
        tied
    } else {
        shortest
    };
    let (mant, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    }
    out
}

/// `round(x, places)` the way Python does it: correctly rounded decimal text, parsed back.
pub fn round_places(x: f64, places: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.places$}").parse().unwrap_or(x)
}

/// msprobe's `format_value`: `float("{:.12f}".format(x))`.
pub fn fmt12(x: f64) -> f64 {
    round_places(x, 12)
}

/// `repr(s)` of a Python str (used inside `str(list)`).
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e16, "1.5e+16"),
            (1e16, "1e+16"),
            (123456789012345.6, "123456789012345.6"),
            (-2e-30, "-2e-30"),
            (2e30, "2e+30"),
            (0.00013724157925198988, "0.00013724157925198988"),
            (-3.9488619722083396e-05, "-3.9488619722083396e-05"),
            (4503599627370496.0, "4503599627370496.0"),
            (1.0891359221954608e16, "1.0891359221954608e+16"),
            (-0.0, "-0.0"),
            (1.5497207641601562e-06, "1.5497207641601562e-06"),
            (2f64.powi(-24), "5.960464477539063e-08"),
            (f64::INFINITY, "inf"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(*x), *want, "{x:e}");
        }
    }

    #[test]
    fn rounding_and_str_repr() {
        assert_eq!(fmt12(0.003738317871466279), 0.003738317871);
        assert_eq!(round_places(0.99999949, 6), 0.999999);
        assert_eq!(str_repr("a'b"), "\"a'b\"");
        assert_eq!(str_repr("File x, line 1"), "'File x, line 1'");
    }
}
