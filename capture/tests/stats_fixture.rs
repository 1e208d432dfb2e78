//! Tensor records computed from tensor files equal the records msprobe wrote for them.

mod common;

use capture::stats::{TensorInfo, tensor_record};
use dumpfmt::dump::DumpFile;
use dumpfmt::json::{Map, Value};

/// Keys and every value equal, except Mean/Norm: msprobe takes them from torch's float32
/// reductions, stats-gpu rounds an f64 result once, so they may differ in the last ulps
/// (spec §3.1, §10.4).
fn assert_close(got: &Value, want: &Map, at: &str) {
    let got = got.as_object().unwrap();
    let gk: Vec<_> = got.keys().collect();
    let wk: Vec<_> = want.keys().collect();
    assert_eq!(gk, wk, "{at}");
    for (k, w) in want.iter() {
        let g = got.get(k.as_str().unwrap()).unwrap();
        if k == "Mean" || k == "Norm" {
            let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
            // float32 accumulation in torch: error grows with cancellation, so relative 1e-5
            // or absolute 1e-7 (values here are O(1)).
            let tol = (1e-5 * g.abs().max(w.abs())).max(1e-7);
            assert!((g - w).abs() <= tol, "{at}.{k}: {g} vs {w}");
        } else {
            assert_eq!(g, w, "{at}.{k}");
        }
    }
}
use stats_gpu::summary::Options;

#[test]
fn statistics_of_fixture_tensors_match_msprobe() {
    let step = common::fixtures().join("pt_tiny_f32_tensor_L1/dump/step0");
    let rank = std::fs::read_dir(&step)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let dump = DumpFile::open(&rank.join("dump.json")).unwrap();
    let mut checked = 0;
    for e in dump.entries().take(12) {
        for t in e.tensors() {
            let Some(name) = &t.record.data_name else {
                continue;
            };
            let file = rank.join("dump_tensor_data").join(name);
            let tensor = dumpfmt::pt::read(&file).unwrap();
            let info = TensorInfo {
                type_name: &t.record.type_name,
                dtype: &t.record.dtype,
                shape: tensor.shape(),
                bytes: Some(tensor.bytes()),
                requires_grad: t.record.requires_grad,
                data_name: Some(name),
                torch_threads: None,
                torch_mean_norm: None,
                on_torch_threads: None,
            };
            let got = tensor_record(&info, &Options::default()).unwrap();
            assert_close(&got, t.value, &t.json_path);
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} tensors checked");
}
