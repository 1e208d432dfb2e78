//! compare's public tensor entry point, `compare::tensor::compare_tensors_on` (msprobe's
//! tensor-mode cells of one NPU/bench pair: cosine, max and relative errors, one-thousandth
//! and five-thousandths ratios), on the CPU backend, for a bf16 NPU tensor against a float32
//! bench and for a float32 pair, at 4 Ki (a model's many small tensors: the per-pair cost),
//! 1 Mi and 16 Mi elements. Whole runs over dump directories are timed by the `bigpair`
//! example of compare (GB/s, in benches/RESULTS.md).

use std::hint::black_box;

use compare::tensor::gpu::Backend;
use compare::tensor::{Engine, compare_tensors_on};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dumpfmt::TensorView;
use half::bf16;

/// The pair of the accuracy benches, as float32 (bench, NPU).
fn pair(n: usize) -> (Vec<f32>, Vec<f32>) {
    let (b, d) = numprobe_benches::noisy_pair(n);
    (
        b.iter().map(|&x| x as f32).collect(),
        d.iter().map(|&x| x as f32).collect(),
    )
}

fn bench(c: &mut Criterion) {
    let engine = Engine::new(Backend::Cpu);
    let mut g = c.benchmark_group("compare_tensors");
    for (label, n) in [("4Ki", 4usize << 10), ("1Mi", 1 << 20), ("16Mi", 16 << 20)] {
        let (bench, npu) = pair(n);
        let npu_bf16: Vec<bf16> = npu.iter().map(|&x| bf16::from_f32(x)).collect();
        let shape = [n];
        let b = TensorView::from_slice(&shape, &bench[..]).expect("bench view");
        let n32 = TensorView::from_slice(&shape, &npu[..]).expect("npu view");
        let n16 = TensorView::from_slice(&shape, &npu_bf16[..]).expect("npu view");
        g.throughput(Throughput::Elements(n as u64));
        if n >= 16 << 20 {
            g.sample_size(10);
        }
        g.bench_function(BenchmarkId::new("bf16_vs_f32", label), |bch| {
            bch.iter(|| black_box(compare_tensors_on(&n16, &b, &engine)))
        });
        g.bench_function(BenchmarkId::new("f32_vs_f32", label), |bch| {
            bch.iter(|| black_box(compare_tensors_on(&n32, &b, &engine)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
