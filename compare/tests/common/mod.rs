//! Helpers shared by the vector and fixture tests.
#![allow(dead_code)]

use std::collections::HashMap;

use compare::cell::Cell;
use compare::table::TensorSource;
use dumpfmt::DType;
use dumpfmt::tensor::Tensor;
use serde_json::Value as J;
use testsupport::testdata;

pub fn vectors(name: &str) -> J {
    let p = testdata().join("vectors/accuracy").join(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// A vector's typed scalar `{"v", "t"}` as a table cell.
pub fn typed(v: &J) -> Cell {
    let t = v["t"].as_str().unwrap_or("");
    let x = &v["v"];
    match t {
        "str" => Cell::Str(x.as_str().unwrap().to_string()),
        "bool" | "np.bool_" => Cell::Bool(x.as_bool().unwrap()),
        "int" | "np.int64" => Cell::Int(x.as_i64().unwrap()),
        "none" => Cell::None,
        _ => Cell::Float(num(x)),
    }
}

pub fn num(x: &J) -> f64 {
    match x {
        J::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("not a number: {other}"),
        },
        J::Bool(b) => *b as u8 as f64,
        other => other.as_f64().unwrap(),
    }
}

/// A vectors dtype: numpy's name (`float32`, `bfloat16`) or descr (`<f4`).
pub fn dtype_of(name: &str) -> DType {
    DType::from_numpy_name(name)
        .or_else(|| DType::from_npy_descr(name))
        .unwrap_or_else(|| panic!("dtype {name}"))
}

pub fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size());
    for &v in values {
        match dtype {
            DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::F64 => out.extend(v.to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::I16 => out.extend((v as i16).to_le_bytes()),
            DType::I8 => out.push(v as i8 as u8),
            DType::U8 | DType::Bool => out.push(v as u8),
            other => panic!("no vectors of {other:?}"),
        }
    }
    out
}

/// An array of the vectors (`data` inline or `npy`) as (dtype, shape, bytes).
pub fn array(a: &J) -> ArrayBytes {
    let shape: Vec<usize> = a["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let dtype = dtype_of(a["dtype"].as_str().unwrap());
    if let Some(p) = a.get("npy").and_then(J::as_str) {
        let path = testdata().join("vectors/accuracy").join(p);
        let t = dumpfmt::npy::read(&path).unwrap_or_else(|e| panic!("{e}"));
        let (d, s) = (t.dtype(), t.shape().to_vec());
        // bfloat16 arrays are stored as their uint16 bit patterns (numpy has no bfloat16).
        if a.get("npy_storage").and_then(J::as_str) == Some("uint16_bits") {
            assert_eq!(d, DType::U16);
            return (DType::BF16, s, t.into_vec());
        }
        assert_eq!(d, dtype);
        return (d, s, t.into_vec());
    }
    let vals: Vec<f64> = a["data"].as_array().unwrap().iter().map(num).collect();
    (dtype, shape, encode(dtype, &vals))
}

/// Tensors of an e2e case, by side and file name.
/// (dtype, shape, bytes) of one tensor file.
pub type ArrayBytes = (DType, Vec<usize>, Vec<u8>);

pub struct MapSource(pub HashMap<(bool, String), ArrayBytes>);

impl TensorSource for MapSource {
    fn load(&self, npu: bool, name: &str) -> Result<Tensor, String> {
        let (d, s, b) = self
            .0
            .get(&(npu, name.to_string()))
            .ok_or_else(|| format!("{name} missing"))?;
        Tensor::from_vec(*d, s.clone(), b.clone()).map_err(|e| e.to_string())
    }
}

/// Parses CSV text (RFC 4180 quoting) into rows of fields.
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                field.push(c);
            }
        } else {
            match c {
                '"' => quoted = true,
                ',' => row.push(std::mem::take(&mut field)),
                '\n' => {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                '\r' => {}
                c => field.push(c),
            }
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

fn as_num(s: &str) -> Option<f64> {
    let t = s.trim().trim_end_matches('%');
    if t.is_empty()
        || t.chars()
            .any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
    {
        return None;
    }
    t.parse().ok()
}

/// Compares two CSV tables cell by cell: texts exactly, numbers within relative `tol` or
/// absolute `abs_tol` (cosine and Euclidean distance come from BLAS dot products).
pub fn assert_csv_eq(got: &str, want: &str, tol: f64, abs_tol: f64, ctx: &str) {
    let (g, w) = (parse_csv(got), parse_csv(want));
    assert_eq!(
        g.len(),
        w.len(),
        "{ctx}: row count\n--- got\n{got}\n--- want\n{want}"
    );
    assert_eq!(g[0], w[0], "{ctx}: header");
    for (r, (gr, wr)) in g.iter().zip(&w).enumerate() {
        assert_eq!(gr.len(), wr.len(), "{ctx}: row {r} width");
        for (c, (gc, wc)) in gr.iter().zip(wr).enumerate() {
            if gc == wc {
                continue;
            }
            let ok = match (as_num(gc), as_num(wc)) {
                (Some(a), Some(b)) => {
                    gc.ends_with('%') == wc.ends_with('%')
                        && ((a - b).abs() <= tol * b.abs() || (a - b).abs() <= abs_tol)
                }
                _ => false,
            };
            assert!(
                ok,
                "{ctx}: row {r} ({}) column {:?}: got {gc:?}, want {wc:?}",
                wr[0], w[0][c]
            );
        }
    }
}
