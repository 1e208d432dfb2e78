//! Python's rounding of numbers as msprobe's CSVs carry them
//! (`float("{:.12f}".format(x))`); `repr` of floats and strings is `pyrepr`'s.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(fmt12(0.003738317871466279), 0.003738317871);
        assert_eq!(round_places(0.99999949, 6), 0.999999);
    }
}
