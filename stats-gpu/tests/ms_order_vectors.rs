//! `ms_order` and `summary::compute` with `Exactness::MindSporeCpu` against MindSpore 2.7.1's
//! own CPU `mint.mean` / `ops.norm`, recorded by `testdata/ms_order/gen_ms_order.py` with 1, 2
//! and 4 runtime threads over 1-D to 3-D shapes of 1 to 300,000 elements, float32 and float16,
//! with magnitudes spread up to 2^40 so that the summation order shows: every value bit for bit.

use stats_gpu::summary::{self, Options};
use stats_gpu::{Backend, DType, Engine, Exactness, Flavour, Stat, TensorView, f16, ms_order};

/// The generator's `values()`: (2u - 1) * 2^(e - spread/2).
fn values(seed: u64, n: usize, spread: u64) -> Vec<f64> {
    let mut next = testsupport::lcg24(seed);
    (0..n)
        .map(|_| {
            let u = next() as f64 / (1u64 << 24) as f64;
            let e = (next() % (spread + 1)) as i32 - (spread / 2) as i32;
            (2.0 * u - 1.0) * 2f64.powi(e)
        })
        .collect()
}

fn cases() -> Vec<serde_json::Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/ms_order/mindspore-2.7.1-cpu.json"
    );
    let text = std::fs::read_to_string(path).expect("recorded MindSpore results");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    doc["cases"].as_array().expect("cases").clone()
}

#[test]
fn mean_and_norm_match_mindspore_bit_for_bit_at_every_thread_count() {
    let cases = cases();
    assert!(cases.len() > 250, "{} cases", cases.len());
    let mut checked = 0;
    for c in &cases {
        let shape: Vec<usize> = c["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let n: usize = shape.iter().product();
        let xs = values(
            c["seed"].as_u64().unwrap(),
            n,
            c["spread"].as_u64().unwrap(),
        );
        let dtype = c["dtype"].as_str().unwrap();
        let (bytes, dt, mean, norm): (Vec<u8>, DType, u32, u32) = if dtype == "float32" {
            let v: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
            let (m, nr) = ms_order::mean_norm_f32(&v, &shape);
            (
                bytemuck::cast_slice(&v).to_vec(),
                DType::F32,
                m.to_bits(),
                nr.to_bits(),
            )
        } else {
            let v: Vec<f16> = xs.iter().map(|&x| f16::from_f64(x)).collect();
            let (m, nr) = ms_order::mean_norm_f16(&v);
            let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            (b, DType::F16, m.to_bits() as u32, nr.to_bits() as u32)
        };
        // The record path gives the same values as the kernels.
        let view = TensorView::new(dt, &shape, &bytes).unwrap();
        let opts = Options {
            flavour: Flavour::MindSpore,
            exact: Exactness::MindSporeCpu,
            backend: Backend::Cpu,
            ..Options::default()
        };
        let r = summary::compute(&view, &opts, &Engine::new()).unwrap();
        let as_bits = |s: Option<Stat>| match s {
            Some(Stat::Float(x)) if dt == DType::F32 => (x as f32).to_bits(),
            Some(Stat::Float(x)) => f16::from_f64(x).to_bits() as u32,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (as_bits(r.mean), as_bits(r.norm)),
            (mean, norm),
            "record of {c}"
        );
        for (threads, want) in c["mean_norm_bits"].as_object().unwrap() {
            let want: Vec<u32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(
                vec![mean, norm],
                want,
                "{dtype} {shape:?} seed {} threads {threads}",
                c["seed"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 3 * cases.len());
}

#[test]
fn float64_and_integer_tensors_take_the_float32_copy_order() {
    // MindSpore casts these to float32 before reducing; the copy follows the float32 rule.
    let xs: Vec<f64> = values(99, 1000, 40);
    let view = TensorView::new(DType::F64, &[10, 100], bytemuck::cast_slice(&xs)).unwrap();
    let opts = Options {
        flavour: Flavour::MindSpore,
        exact: Exactness::MindSporeCpu,
        backend: Backend::Cpu,
        ..Options::default()
    };
    let r = summary::compute(&view, &opts, &Engine::new()).unwrap();
    let f: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let (m, n) = ms_order::mean_norm_f32(&f, &[10, 100]);
    assert_eq!(r.mean, Some(Stat::Float(m as f64)));
    assert_eq!(r.norm, Some(Stat::Float(n as f64)));
}
