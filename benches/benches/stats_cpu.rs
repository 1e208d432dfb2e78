//! Fused CPU statistics: the f64 reference loop against the fast SIMD + rayon path, for f32,
//! f16 and bf16 at 4 KiB, 1 MiB and 64 MiB (1 GiB with `NUMPROBE_BENCH_HUGE=1`), plus a batch
//! of 10 000 tensors of 4096 f32 elements. Throughput is input bytes per second.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stats_gpu::{ElemType, TensorView, fast, reference};

/// Deterministic, roughly normal-looking values (sum of uniforms) in the given dtype.
fn data(elem: ElemType, bytes: usize) -> Vec<u8> {
    let n = bytes / elem.size();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut out = Vec::with_capacity(n * elem.size());
    for _ in 0..n {
        let x = (next() + next() + next() - 1.5) * 2.0;
        match elem {
            ElemType::F16 => out.extend(half::f16::from_f32(x).to_le_bytes()),
            ElemType::BF16 => out.extend(half::bf16::from_f32(x).to_le_bytes()),
            _ => out.extend(x.to_le_bytes()),
        }
    }
    out
}

fn sizes() -> Vec<(&'static str, usize)> {
    let mut v = vec![("4KiB", 4 << 10), ("1MiB", 1 << 20), ("64MiB", 64 << 20)];
    if std::env::var_os("NUMPROBE_BENCH_HUGE").is_some_and(|s| s == "1") {
        v.push(("1GiB", 1 << 30));
    }
    v
}

fn single(c: &mut Criterion) {
    for (name, elem) in [
        ("f32", ElemType::F32),
        ("f16", ElemType::F16),
        ("bf16", ElemType::BF16),
    ] {
        let mut g = c.benchmark_group(format!("stats_cpu/{name}"));
        for (label, bytes) in sizes() {
            let buf = data(elem, bytes);
            let shape = [buf.len() / elem.size()];
            let view = TensorView::new(elem, &shape, &buf).expect("sized to the shape");
            g.throughput(Throughput::Bytes(bytes as u64));
            if bytes >= 64 << 20 {
                g.sample_size(10);
            }
            g.bench_with_input(BenchmarkId::new("fast", label), &view, |b, v| {
                b.iter(|| fast::partials(black_box(v)))
            });
            g.bench_with_input(BenchmarkId::new("fast_crc32", label), &view, |b, v| {
                b.iter(|| fast::partials_and_crc32(black_box(v)))
            });
            // The plain loop is slow; at 1 GiB it would dominate the run.
            if bytes <= 64 << 20 {
                g.bench_with_input(BenchmarkId::new("reference", label), &view, |b, v| {
                    b.iter(|| reference::partials(black_box(v)))
                });
            }
        }
        g.finish();
    }
}

fn batch(c: &mut Criterion) {
    const TENSORS: usize = 10_000;
    const ELEMS: usize = 4096;
    let buf = data(ElemType::F32, TENSORS * ELEMS * 4);
    let shape = [ELEMS];
    let views: Vec<TensorView> = buf
        .chunks_exact(ELEMS * 4)
        .map(|c| TensorView::new(ElemType::F32, &shape, c).expect("sized to the shape"))
        .collect();
    let mut g = c.benchmark_group("stats_cpu/batch_10k_x_4096_f32");
    g.throughput(Throughput::Bytes(buf.len() as u64));
    g.sample_size(10);
    g.bench_function("fast_batch", |b| {
        b.iter(|| fast::partials_batch(black_box(&views)))
    });
    g.bench_function("fast_each", |b| {
        b.iter(|| {
            views
                .iter()
                .map(|v| fast::partials(black_box(v)))
                .collect::<Vec<_>>()
        })
    });
    g.bench_function("reference_each", |b| {
        b.iter(|| {
            views
                .iter()
                .map(|v| reference::partials(black_box(v)))
                .collect::<Vec<_>>()
        })
    });
    g.finish();
}

criterion_group!(benches, single, batch);
criterion_main!(benches);
