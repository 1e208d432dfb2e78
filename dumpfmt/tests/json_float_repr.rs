//! Floats in msprobe's JSON: the writer prints `repr(float)` (the digits themselves are pyrepr's,
//! checked there against recorded CPython output) with `json`'s `NaN`/`Infinity` spellings, and
//! the parser reads every printed double back bit for bit.

use dumpfmt::json::{self, Value};
use std::path::Path;

fn written(f: f64) -> String {
    String::from_utf8(json::to_python_bytes(&Value::Float(f))).expect("ASCII")
}

#[test]
fn writer_spells_floats_like_json_dumps() {
    for (f, s) in [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (3.0, "3.0"),
        (0.1, "0.1"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (1.5e16, "1.5e+16"),
        (1e15, "1000000000000000.0"),
        (3.3215508210560074e-06, "3.3215508210560074e-06"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "Infinity"),
        (f64::NEG_INFINITY, "-Infinity"),
    ] {
        assert_eq!(written(f), s);
    }
    let nested = Value::Array(vec![Value::Float(2.5), Value::Float(f64::NAN)]);
    assert_eq!(json::to_python_bytes(&nested), b"[\n 2.5,\n NaN\n]");
}

#[test]
fn printed_doubles_read_back_exactly() {
    // Deterministic spread over all exponents and signs (xorshift), plus float32 values widened,
    // whose short digits are where a writer/reader mismatch would show first.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..20_000 {
        let bits = next();
        let f = if i % 2 == 0 {
            f64::from_bits(bits)
        } else {
            f64::from(f32::from_bits(bits as u32))
        };
        let text = written(f);
        if f.is_finite() {
            assert_eq!(text, pyrepr::repr_f64(f), "bits {bits:016x}");
        }
        let back = json::parse(text.as_bytes(), Path::new("t.json")).expect("parses");
        match back {
            Value::Float(g) if f.is_nan() => assert!(g.is_nan()),
            Value::Float(g) => assert_eq!(g.to_bits(), f.to_bits(), "{text}"),
            other => panic!("{text} read back as {other:?}"),
        }
    }
}
