//! `repr(float)` as CPython prints it: a hand-written table plus ~8k doubles whose Python output
//! was recorded once in `data/python_float_repr.txt` (random bit patterns, float32/float16
//! values widened to double, powers of ten and their neighbours).

use dumpfmt::json::{self, Value};

#[test]
fn hand_written_table() {
    for (f, s) in [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (3.0, "3.0"),
        (0.1, "0.1"),
        (0.30000000000000004, "0.30000000000000004"),
        (1e-5, "1e-05"),
        (1.5e-5, "1.5e-05"),
        (0.0001, "0.0001"),
        (0.00012345, "0.00012345"),
        (1e16, "1e+16"),
        (1.5e16, "1.5e+16"),
        (9999999999999998.0, "9999999999999998.0"),
        (1e15, "1000000000000000.0"),
        (123456789.0, "123456789.0"),
        (1e22, "1e+22"),
        (1e-300, "1e-300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
        (3.3215508210560074e-06, "3.3215508210560074e-06"),
        (0.10000000149011612, "0.10000000149011612"),
        (-2.25, "-2.25"),
        (2.2499999925494194, "2.2499999925494194"),
    ] {
        assert_eq!(json::python_float_repr(f), s);
    }
    assert_eq!(json::python_float_repr(f64::NAN), "nan");
    assert_eq!(json::python_float_repr(f64::NEG_INFINITY), "-inf");
    let mut out = Vec::new();
    json::write_float(f64::INFINITY, &mut out);
    assert_eq!(out, b"Infinity");
}

#[test]
fn recorded_python_table() {
    let text = include_str!("data/python_float_repr.txt");
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (bits, repr) = line.split_once(' ').expect("bits repr");
        let f = f64::from_bits(u64::from_str_radix(bits, 16).expect("hex"));
        assert_eq!(json::python_float_repr(f), repr, "bits {bits}");
        // And the JSON writer prints the same text; the parser reads it back bit-exactly.
        let bytes = json::to_python_bytes(&Value::Float(f));
        assert_eq!(bytes, repr.as_bytes());
        let back = json::parse(&bytes, std::path::Path::new("t")).unwrap();
        assert_eq!(back, Value::Float(f));
        n += 1;
    }
    assert!(n > 8000, "table has {n} rows");
}
