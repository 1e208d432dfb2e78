//! Python's text forms of numbers and strings, as msprobe's CSVs carry them
//! (`str(list)`, `float("{:.12f}".format(x))`); `repr(float)` itself is `pyrepr::repr_f64`.

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
    fn rounding_and_str_repr() {
        assert_eq!(fmt12(0.003738317871466279), 0.003738317871);
        assert_eq!(round_places(0.99999949, 6), 0.999999);
        assert_eq!(str_repr("a'b"), "\"a'b\"");
        assert_eq!(str_repr("File x, line 1"), "'File x, line 1'");
    }
}
