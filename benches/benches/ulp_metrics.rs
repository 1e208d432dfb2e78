//! ulp's public entry points:
//!
//! * `fused`: `ulp::all_metrics` (every standard of msprobe's accuracy checker in one read of
//!   the pair) for an fp32 device output (float64 benchmark, the speed target of the issue), an
//!   fp16 and a bf16 one (float32 benchmark), at 64 Ki, 1 Mi and 16 Mi elements (64 Mi with
//!   `NUMPROBE_BENCH_HUGE=1`), and `metrics_in_scope` with the benchmark standard only (what
//!   run_ut's routing needs) for the fp32 device.
//! * `check`: the one-call verdict on `ndarray` arrays (`ulp::check`: fp32 and bf16 device
//!   arrays, the bf16 one widened as msprobe does) and on borrowed views (`ulp::check_output`),
//!   at 4 Ki (run_ut's many small outputs: the per-call cost) and 1 Mi elements.
//! * `fp8_ulp_errors` at 1 Mi elements; `precision_compare::compare_texts` on two 2000-row
//!   detail CSVs; the plain reference implementation at 64 Ki for scale.
//!
//! Throughput is elements (rows for precision_compare) per second. The side-by-side ratio
//! against msprobe's own numpy code is printed by `benches/peers/ulp_msprobe.py`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::{bf16, f16};
use ulp::fused::Scope;
use ulp::metrics::metrics_in_scope;
use ulp::ndarray::Array1;
use ulp::reference::{self, Pair};
use ulp::{
    CheckOptions, DType, DeviceFamily, Elems, Output, Routing, TensorView, all_metrics,
    fp8_ulp_errors,
};

use numprobe_benches::noisy_pair as pair;

fn sizes() -> Vec<(&'static str, usize)> {
    let mut v = vec![("64Ki", 64 << 10), ("1Mi", 1 << 20), ("16Mi", 16 << 20)];
    if std::env::var_os("NUMPROBE_BENCH_HUGE").is_some_and(|s| s == "1") {
        v.push(("64Mi", 64 << 20));
    }
    v
}

fn fused(c: &mut Criterion) {
    for (label, n) in sizes() {
        let (b, d) = pair(n);
        let b32: Vec<f32> = b.iter().map(|&x| x as f32).collect();
        let d32: Vec<f32> = d.iter().map(|&x| x as f32).collect();
        let d16: Vec<f16> = d.iter().map(|&x| f16::from_f64(x)).collect();
        let dbf: Vec<f32> = d
            .iter()
            .map(|&x| half::bf16::from_f64(x).to_f32())
            .collect();
        let cases: [(&str, Elems<'_>, Elems<'_>, DeviceFamily); 3] = [
            (
                "fp32_device",
                Elems::F64(&b),
                Elems::F32(&d32),
                DeviceFamily::F32,
            ),
            (
                "fp16_device",
                Elems::F32(&b32),
                Elems::F16(&d16),
                DeviceFamily::F16,
            ),
            (
                "bf16_device",
                Elems::F32(&b32),
                Elems::F32(&dbf),
                DeviceFamily::BF16,
            ),
        ];
        for (name, bench, device, family) in cases {
            let mut g = c.benchmark_group(format!("ulp_metrics/{name}"));
            g.throughput(Throughput::Elements(n as u64));
            if n >= 16 << 20 {
                g.sample_size(10);
            }
            g.bench_function(BenchmarkId::new("fused", label), |bch| {
                bch.iter(|| all_metrics(black_box(bench), black_box(device), family))
            });
            if name == "fp32_device" {
                g.bench_function(BenchmarkId::new("fused_benchmark_scope", label), |bch| {
                    bch.iter(|| {
                        let (b, d) = (black_box(bench), black_box(device));
                        metrics_in_scope(b, d, family, false, Scope::Benchmark)
                    })
                });
            }
            g.finish();
        }
    }
}

fn plain_reference(c: &mut Criterion) {
    let n = 64 << 10;
    let (b, d) = pair(n);
    let d32: Vec<f64> = d.iter().map(|&x| x as f32 as f64).collect();
    let p = Pair {
        bench: &b,
        bench_dtype: DType::F64,
        device: &d32,
        device_dtype: DType::F32,
        family: DeviceFamily::F32,
    };
    let mut g = c.benchmark_group("ulp_metrics/fp32_device");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(
        BenchmarkId::new("reference_benchmark_and_ulp", "64Ki"),
        |bch| {
            bch.iter(|| {
                (
                    reference::benchmark(black_box(&p)),
                    reference::ulp(black_box(&p)),
                )
            })
        },
    );
    g.finish();
}

/// The verdict in one call: ndarray arrays (`check`) and borrowed views (`check_output`).
fn check(c: &mut Criterion) {
    let opts = CheckOptions::default();
    for (label, n) in [("4Ki", 4 << 10), ("1Mi", 1 << 20)] {
        let (b, d) = pair(n);
        let bench = Array1::from(b);
        let device = Array1::from_iter(d.iter().map(|&x| x as f32));
        let device_bf16 = Array1::from_iter(d.iter().map(|&x| bf16::from_f64(x)));
        let bench32 = bench.mapv(|x| x as f32);
        let mut g = c.benchmark_group("ulp_check");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("ndarray_fp32_device", label), |bch| {
            bch.iter(|| ulp::check("add", black_box(&bench), black_box(&device), opts))
        });
        g.bench_function(BenchmarkId::new("ndarray_bf16_device", label), |bch| {
            bch.iter(|| ulp::check("add", black_box(&bench32), black_box(&device_bf16), opts))
        });
        let shape = [n];
        let bv = TensorView::from_slice(&shape, bench.as_slice().unwrap()).unwrap();
        let dv = TensorView::from_slice(&shape, device.as_slice().unwrap()).unwrap();
        g.bench_function(BenchmarkId::new("views_fp32_device", label), |bch| {
            bch.iter(|| {
                let (b, d) = (Output::new(black_box(bv)), Output::new(black_box(dv)));
                ulp::check_output("add", b, d, opts)
            })
        });
        g.finish();
    }
}

fn fp8(c: &mut Criterion) {
    let n = 1 << 20;
    let (b, d) = pair(n);
    let mut g = c.benchmark_group("ulp_fp8_ulp_errors");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("1Mi", |bch| {
        bch.iter(|| fp8_ulp_errors(black_box(&b), black_box(&d)))
    });
    g.finish();
}

/// Two acc_check detail CSVs (NPU and GPU runs of the same 2000 fp16 outputs, the NPU's
/// noisier), as api_precision_compare reads them.
fn detail_csvs(rows: usize) -> (String, String) {
    // No header cell needs quoting.
    let header = ulp::DETAIL_HEADER.join(",") + ulp::pyfmt::CSV_LINE_END;
    let (mut npu, mut gpu) = (header.clone(), header);
    let (b, _) = pair(256 * rows);
    for (k, chunk) in b.chunks(256).enumerate() {
        let bench: Vec<f32> = chunk.iter().map(|&x| x as f32).collect();
        let noisy = |scale: f64| -> Vec<f16> {
            let d = chunk.iter().enumerate();
            d.map(|(i, &x)| f16::from_f64(x * (1.0 + scale * ((i * 7 + k) % 13) as f64)))
                .collect()
        };
        let name = format!("Torch.add.{k}.forward.output.0");
        let shape = [bench.len()];
        let bv = Output::new(TensorView::from_slice(&shape, &bench).unwrap());
        for (out, scale) in [(&mut npu, 2e-4), (&mut gpu, 1e-4)] {
            let d = noisy(scale);
            let dv = Output::new(TensorView::from_slice(&shape, &d).unwrap());
            let verdict = ulp::check_output("add", bv, dv, CheckOptions::default()).unwrap();
            out.push_str(&verdict.csv_line(&name));
        }
    }
    (npu, gpu)
}

fn precision_compare(c: &mut Criterion) {
    let rows = 2000;
    let (npu, gpu) = detail_csvs(rows);
    let texts = ulp::precision_compare::compare_texts(&npu, &gpu, Routing::V26_2).unwrap();
    assert!(texts.aborted.is_none() && texts.details_csv.lines().count() > rows);
    let mut g = c.benchmark_group("ulp_precision_compare");
    g.throughput(Throughput::Elements(rows as u64));
    g.bench_function("compare_texts_2000_rows", |bch| {
        bch.iter(|| {
            ulp::precision_compare::compare_texts(black_box(&npu), black_box(&gpu), Routing::V26_2)
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    fused,
    check,
    fp8,
    precision_compare,
    plain_reference
);
criterion_main!(benches);
