//! Fused CPU statistics: the f64 reference loop against the fast SIMD + rayon path, for f32,
//! f16 and bf16 at 4 KiB, 1 MiB and 64 MiB (1 GiB with `NUMPROBE_BENCH_HUGE=1`), plus a batch
//! of 10 000 tensors of 4096 f32 elements; the float32 pass in PyTorch's order
//! (`torch_order`); and the embedding call, `stats_gpu::statistics` of an ndarray array on the
//! CPU (torch order and rounded, md5 mode, bf16, f16), at 1 MiB and 16 MiB; and the float16
//! norm's chain (torch's order for float16) as written and by grid blocks. Throughput is
//! input bytes per second.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stats_gpu::{
    Backend, DType, Exactness, Options, SummaryMode, TensorView, bf16, fast, reference, statistics,
    torch_order,
};

/// Deterministic, roughly normal-looking values (sum of uniforms) in the given dtype.
fn data(elem: DType, bytes: usize) -> Vec<u8> {
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
            DType::F16 => out.extend(half::f16::from_f32(x).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f32(x).to_le_bytes()),
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
        ("f32", DType::F32),
        ("f16", DType::F16),
        ("bf16", DType::BF16),
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
    let buf = data(DType::F32, TENSORS * ELEMS * 4);
    let shape = [ELEMS];
    let views: Vec<TensorView> = buf
        .chunks_exact(ELEMS * 4)
        .map(|c| TensorView::new(DType::F32, &shape, c).expect("sized to the shape"))
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

/// f32 values of `data`, as an array.
fn f32_array(bytes: usize) -> ndarray::Array1<f32> {
    data(DType::F32, bytes)
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

const API_SIZES: [(&str, usize); 2] = [("1MiB", 1 << 20), ("16MiB", 16 << 20)];

/// The float32 pass in torch's summation order (one thread) and torch's multi-thread sum.
fn torch_order(c: &mut Criterion) {
    let mut g = c.benchmark_group("stats_cpu/torch_order_f32");
    for (label, bytes) in API_SIZES {
        let xs = f32_array(bytes).to_vec();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_with_input(BenchmarkId::new("fused", label), &xs, |b, xs| {
            b.iter(|| torch_order::fused(black_box(xs)))
        });
        g.bench_with_input(BenchmarkId::new("fused_crc32", label), &xs, |b, xs| {
            b.iter(|| torch_order::fused_crc32(black_box(xs)))
        });
        g.bench_with_input(
            BenchmarkId::new("torch_sum_4_threads", label),
            &xs,
            |b, xs| b.iter(|| torch_order::torch_sum(black_box(xs), 4)),
        );
    }
    g.finish();
}

/// `stats_gpu::statistics` of an ndarray array on the CPU, as an embedding tool calls it.
fn api(c: &mut Criterion) {
    let mut g = c.benchmark_group("stats_cpu/statistics");
    let cpu = Options {
        backend: Backend::Cpu,
        ..Options::default()
    };
    let cases = [
        ("f32_torch_order", cpu),
        (
            "f32_rounded",
            Options {
                exact: Exactness::Rounded,
                ..cpu
            },
        ),
        (
            "f32_torch_order_md5",
            Options {
                mode: SummaryMode::Md5,
                ..cpu
            },
        ),
    ];
    for (label, bytes) in API_SIZES {
        let xs = f32_array(bytes);
        g.throughput(Throughput::Bytes(bytes as u64));
        for (name, opts) in cases {
            g.bench_with_input(BenchmarkId::new(name, label), &xs, |b, xs| {
                b.iter(|| statistics(black_box(xs), &opts).expect("record"))
            });
        }
        let bf = xs.mapv(bf16::from_f32);
        g.throughput(Throughput::Bytes(bytes as u64 / 2));
        g.bench_with_input(BenchmarkId::new("bf16", label), &bf, |b, xs| {
            b.iter(|| statistics(black_box(xs), &cpu).expect("record"))
        });
        let f16s = xs.mapv(half::f16::from_f32);
        g.bench_with_input(BenchmarkId::new("f16", label), &f16s, |b, xs| {
            b.iter(|| statistics(black_box(xs), &cpu).expect("record"))
        });
        let rounded = Options {
            exact: Exactness::Rounded,
            ..cpu
        };
        g.bench_with_input(BenchmarkId::new("f16_rounded", label), &f16s, |b, xs| {
            b.iter(|| statistics(black_box(xs), &rounded).expect("record"))
        });
    }
    g.finish();
}

/// The float16 norm's chain of single float32 additions (torch's order for float16): as
/// written, and by blocks on the accumulator's grid (`torch_order::torch_norm_in`), beside the
/// float32 order's vector pass over the same values.
fn float16_norm(c: &mut Criterion) {
    let mut g = c.benchmark_group("stats_cpu/float16_norm");
    for (label, bytes) in API_SIZES {
        let xs: Vec<f32> = f32_array(bytes)
            .iter()
            .map(|&x| half::f16::from_f32(x).to_f32())
            .collect();
        g.throughput(Throughput::Bytes(bytes as u64 / 2));
        g.bench_with_input(BenchmarkId::new("one_by_one", label), &xs, |b, xs| {
            b.iter(|| black_box(xs).iter().fold(0f32, |a, &x| a + x * x).sqrt())
        });
        g.bench_with_input(BenchmarkId::new("grid_blocks", label), &xs, |b, xs| {
            b.iter(|| torch_order::torch_norm_in(black_box(xs), torch_order::NormOrder::Float16, 1))
        });
        g.bench_with_input(
            BenchmarkId::new("float32_order_pass", label),
            &xs,
            |b, xs| b.iter(|| torch_order::fused(black_box(xs))),
        );
    }
    g.finish();
}

criterion_group!(benches, single, batch, torch_order, api, float16_norm);
criterion_main!(benches);
