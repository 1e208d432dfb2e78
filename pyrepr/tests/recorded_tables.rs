//! Outputs recorded once from CPython 3.11.7 and numpy 1.26 (see each file's header): `repr()`
//! of ~8k doubles (random bit patterns, float32/float16 values widened to double, powers of ten
//! and their neighbours), of 1.5k exact ties, and numpy's `str()` of ~1.5k float32 values.

use pyrepr::{NonFinite, repr_f64, str_f32, write_repr_f64};

fn rows(text: &str) -> impl Iterator<Item = (u64, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (bits, want) = line.split_once(' ').expect("bits and text");
            (u64::from_str_radix(bits, 16).expect("hex bits"), want)
        })
}

fn check_f64_table(text: &str) -> usize {
    let mut n = 0;
    let mut json = Vec::new();
    for (bits, want) in rows(text) {
        let x = f64::from_bits(bits);
        assert_eq!(repr_f64(x), want, "bits {bits:016x}");
        json.clear();
        write_repr_f64(x, NonFinite::Json, &mut json);
        if x.is_finite() {
            assert_eq!(json, want.as_bytes(), "bits {bits:016x}");
            assert_eq!(want.parse::<f64>().map(f64::to_bits), Ok(bits));
        }
        n += 1;
    }
    n
}

#[test]
fn cpython_repr_table() {
    let n = check_f64_table(include_str!("data/python_float_repr.txt"));
    assert!(n > 8000, "table has {n} rows");
}

#[test]
fn cpython_repr_ties_round_half_even() {
    let n = check_f64_table(include_str!("data/python_float_repr_ties.txt"));
    assert!(n >= 1500, "table has {n} rows");
}

#[test]
fn numpy_float32_str_table() {
    let mut n = 0;
    for (bits, want) in rows(include_str!("data/numpy_float32_str.txt")) {
        let x = f32::from_bits(u32::try_from(bits).expect("32-bit pattern"));
        assert_eq!(str_f32(x), want, "bits {bits:08x}");
        n += 1;
    }
    assert!(n > 1400, "table has {n} rows");
}
