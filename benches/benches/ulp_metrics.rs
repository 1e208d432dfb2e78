//! Fused accuracy metrics (`ulp::all_metrics`: every standard of msprobe's accuracy checker in
//! one read of the pair) for an fp32 device output (float64 benchmark, the speed target of the
//! issue), an fp16 and a bf16 one (float32 benchmark), at 64 Ki, 1 Mi and 16 Mi elements
//! (64 Mi with `NUMPROBE_BENCH_HUGE=1`); plus the plain reference implementation at 64 Ki for
//! scale. Throughput is elements per second. The side-by-side ratio against msprobe's own numpy
//! code is printed by `benches/peers/ulp_msprobe.py`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::f16;
use ulp::elem::FloatKind;
use ulp::reference::{self, Pair};
use ulp::{DeviceFamily, FloatData, all_metrics};

/// Deterministic, roughly normal benchmark values and a device copy with ~1e-3 relative noise.
fn pair(n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let b = (next() + next() + next() - 1.5) * 2.0;
            (b, b * (1.0 + (next() - 0.5) * 2e-3))
        })
        .unzip()
}

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
        let cases: [(&str, FloatData<'_>, FloatData<'_>, DeviceFamily); 3] = [
            (
                "fp32_device",
                FloatData::F64(&b),
                FloatData::F32(&d32),
                DeviceFamily::F32,
            ),
            (
                "fp16_device",
                FloatData::F32(&b32),
                FloatData::F16(&d16),
                DeviceFamily::F16,
            ),
            (
                "bf16_device",
                FloatData::F32(&b32),
                FloatData::F32(&dbf),
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
        bench_kind: FloatKind::F64,
        device: &d32,
        device_kind: FloatKind::F32,
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

criterion_group!(benches, fused, plain_reference);
criterion_main!(benches);
