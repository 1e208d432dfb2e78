//! `summary::compute` with `Exactness::TorchCpu` against torch 2.15's own CPU `torch.mean` /
//! `torch.norm` of bfloat16 and float16 tensors, recorded by
//! `testdata/torch_order/gen_torch_order.py` at one and two torch threads: lengths around
//! the kernels' vector widths, grain and thread split, and tensors found by search where
//! torch's result differs from float64 sums rounded once and from the float32 kernel's order
//! (next to a rounding tie): every value bit for bit.

use stats_gpu::summary::{self, Options};
use stats_gpu::{Backend, DType, Engine, Exactness, Flavour, Stat, TensorView, bf16, f16};

/// The generator's `bits()`: a random sign and mantissa, the exponent within `spread / 2`
/// binades of 1.0.
fn bits(seed: u64, n: usize, dtype: DType, spread: u64) -> Vec<u16> {
    let (mbits, bias) = match dtype {
        DType::BF16 => (7, 127),
        DType::F16 => (10, 15),
        other => panic!("{other:?}"),
    };
    let mut next = testsupport::lcg24(seed);
    (0..n)
        .map(|_| {
            let r = next();
            let e = next() % (spread + 1);
            let exp = (e as i64 - (spread / 2) as i64 + bias) as u64;
            ((r & 1) << 15 | exp << mbits | (r >> 1) & ((1 << mbits) - 1)) as u16
        })
        .collect()
}

fn cases() -> Vec<serde_json::Value> {
    let path = testsupport::testdata().join("torch_order/torch-2.15-cpu.json");
    let text = std::fs::read_to_string(&path).expect("recorded torch results");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    doc["cases"].as_array().expect("cases").clone()
}

/// The float32 bits of a record's Mean or Norm (a value of the tensor's dtype).
fn f32_bits(s: Option<Stat>) -> u32 {
    match s {
        Some(Stat::Float(x)) => (x as f32).to_bits(),
        other => panic!("{other:?}"),
    }
}

/// What the record would hold with float64 sums rounded once (the general path).
fn wide(words: &[u16], dt: DType) -> (u32, u32) {
    let xs: Vec<f64> = words
        .iter()
        .map(|&w| match dt {
            DType::BF16 => bf16::from_bits(w).to_f64(),
            _ => f16::from_bits(w).to_f64(),
        })
        .collect();
    let round = |x: f64| summary::round_to(x, dt) as f32;
    let mean = round(xs.iter().sum::<f64>() / xs.len() as f64);
    let norm = round(xs.iter().map(|x| x * x).sum::<f64>().sqrt());
    (mean.to_bits(), norm.to_bits())
}

#[test]
fn mean_and_norm_match_torch_bit_for_bit_at_one_and_two_threads() {
    let cases = cases();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let (mut checked, mut off_wide) = (0, 0);
    for c in &cases {
        let dt = match c["dtype"].as_str().unwrap() {
            "bfloat16" => DType::BF16,
            "float16" => DType::F16,
            other => panic!("{other}"),
        };
        let n = c["n"].as_u64().unwrap() as usize;
        let words = bits(
            c["seed"].as_u64().unwrap(),
            n,
            dt,
            c["spread"].as_u64().unwrap(),
        );
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let shape = [n];
        let view = TensorView::new(dt, &shape, &bytes).unwrap();
        for (threads, want) in c["mean_norm_bits"].as_object().unwrap() {
            let want: Vec<u32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let opts = Options {
                flavour: Flavour::PyTorch,
                exact: Exactness::TorchCpu {
                    threads: threads.parse().unwrap(),
                },
                backend: Backend::Cpu,
                ..Options::default()
            };
            let r = summary::compute(&view, &opts, &Engine::new()).unwrap();
            assert_eq!(
                vec![f32_bits(r.mean), f32_bits(r.norm)],
                want,
                "{c} at {threads} threads"
            );
            let (m, nr) = wide(&words, dt);
            off_wide += usize::from(vec![m, nr] != want);
            checked += 1;
        }
    }
    assert!(checked >= 2 * cases.len());
    // The recorded cases pin the order down: rounding float64 sums misses some of them.
    assert!(off_wide >= 10, "{off_wide} cases tell the orders apart");
}
