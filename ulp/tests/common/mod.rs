//! Shared helpers for the vector tests: reading the vectors and their arrays.
#![allow(dead_code)]

use half::f16;
use serde_json::Value;
use testsupport::{DType, read_npy, testdata};
use ulp::{Elems, PyVal, TensorView};

pub fn vectors(name: &str) -> Value {
    let path = testdata().join("vectors/accuracy").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("vector JSON")
}

/// A JSON number or "nan"/"inf"/"-inf".
pub fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("not a number: {other}"),
        },
        Value::Bool(b) => *b as u8 as f64,
        other => panic!("not a number: {other}"),
    }
}

/// An owned array decoded from a vector input.
pub enum Owned {
    F16(Vec<f16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Owned {
    pub fn elems(&self) -> Elems<'_> {
        match self {
            Owned::F16(a) => Elems::F16(a),
            Owned::F32(a) => Elems::F32(a),
            Owned::F64(a) => Elems::F64(a),
            Owned::Bool(a) => Elems::Bool(a),
            Owned::U8(a) => Elems::U8(a),
            Owned::I8(a) => Elems::I8(a),
            Owned::I32(a) => Elems::I32(a),
            Owned::I64(a) => Elems::I64(a),
        }
    }
    /// The array with `shape` as a view.
    pub fn view<'a>(&'a self, shape: &'a [usize]) -> TensorView<'a> {
        self.elems()
            .view(shape)
            .expect("the vector's shape fits its data")
    }
    pub fn as_f64(&self) -> Vec<f64> {
        match self {
            Owned::F16(a) => a.iter().map(|x| x.to_f64()).collect(),
            Owned::F32(a) => a.iter().map(|&x| x as f64).collect(),
            Owned::F64(a) => a.clone(),
            _ => panic!("not float"),
        }
    }
}

/// Decodes an input array object; bfloat16 arrives as float32 values (as msprobe hands it to numpy).
pub fn array(v: &Value) -> (Owned, Vec<usize>) {
    let dtype = v["dtype"].as_str().unwrap();
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    if let Some(rel) = v.get("npy").and_then(|p| p.as_str()) {
        let (descr, npy_shape, raw) = read_npy(&testdata().join("vectors/accuracy").join(rel));
        assert_eq!(npy_shape, shape);
        let owned = match descr {
            DType::F16 => Owned::F16(
                raw.chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            DType::F32 => Owned::F32(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            DType::F64 => Owned::F64(
                raw.chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            DType::U16 if dtype == "bfloat16" => Owned::F32(
                raw.chunks_exact(2)
                    .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
                    .collect(),
            ),
            other => panic!("npy dtype {other:?}"),
        };
        return (owned, shape);
    }
    let data = v["data"].as_array().unwrap();
    let owned = match dtype {
        "float16" => Owned::F16(data.iter().map(|x| f16::from_f64(num(x))).collect()),
        "float32" | "bfloat16" => Owned::F32(data.iter().map(|x| num(x) as f32).collect()),
        "float64" => Owned::F64(data.iter().map(num).collect()),
        "bool" => Owned::Bool(data.iter().map(|x| x.as_bool().unwrap()).collect()),
        "uint8" => Owned::U8(data.iter().map(|x| x.as_u64().unwrap() as u8).collect()),
        "int8" => Owned::I8(data.iter().map(|x| x.as_i64().unwrap() as i8).collect()),
        "int32" => Owned::I32(data.iter().map(|x| x.as_i64().unwrap() as i32).collect()),
        "int64" => Owned::I64(data.iter().map(|x| x.as_i64().unwrap()).collect()),
        other => panic!("dtype {other}"),
    };
    (owned, shape)
}

/// Compares a typed cell with a vector `{"v", "t"}` value; `rel_tol` applies to floats.
pub fn cell_matches(got: &PyVal, want: &Value, rel_tol: f64) -> Result<(), String> {
    let t = want["t"].as_str().unwrap();
    let v = &want["v"];
    if t == "tuple" {
        let dims: Vec<usize> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let text = pyrepr::shape_tuple(&dims);
        return if got == &PyVal::Str(text.clone()) {
            Ok(())
        } else {
            Err(format!("shape {got:?} vs {text}"))
        };
    }
    if got.type_name() != t {
        return Err(format!(
            "type {} vs {t} (value {got:?} vs {v})",
            got.type_name()
        ));
    }
    match got {
        PyVal::Str(s) => {
            if v.as_str() == Some(s.as_str()) {
                Ok(())
            } else {
                Err(format!("{s:?} vs {v}"))
            }
        }
        _ => {
            let g = got.as_f64().unwrap();
            let w = num(v);
            let ok = if g.is_nan() || w.is_nan() {
                g.is_nan() && w.is_nan()
            } else if rel_tol == 0.0 {
                g == w
            } else {
                g == w || (g - w).abs() <= rel_tol * w.abs().max(g.abs())
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{g:e} vs {w:e}"))
            }
        }
    }
}
