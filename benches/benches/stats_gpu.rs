//! wgpu statistics kernel: resident data (kernel time from timestamp queries when the adapter
//! has them, else wall clock including the small readback) and end to end (upload through the
//! staging ring + kernel + readback), for f32, f16 and bf16 at 64 MiB (1 GiB with
//! `NUMPROBE_BENCH_HUGE=1`); batches of 4096-element tensors (throughput in tensors); the
//! embedding call (`Engine::statistics` of an ndarray array with `Backend::Gpu`, 16 MiB); and
//! the (bench, device) pair kernel (`Gpu::pair_partials`, 16 MiB of f32 bench).
//! Without an adapter it prints why and measures nothing.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stats_gpu::gpu::{Gpu, GpuOptions, PairParams};
use stats_gpu::{Backend, DType, Elems, Engine, Options, SummaryMode, TensorView, bf16};

/// Deterministic values in [-2, 2) in the given dtype.
fn data(elem: DType, bytes: usize) -> Vec<u8> {
    let n = bytes / elem.size();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut out = Vec::with_capacity(n * elem.size());
    for _ in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let x = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
        match elem {
            DType::F16 => out.extend(half::f16::from_f32(x).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f32(x).to_le_bytes()),
            _ => out.extend(x.to_le_bytes()),
        }
    }
    out
}

/// The bench binary's Gpu (best adapter, default chunk), opened once.
fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| match Gpu::new(GpuOptions::default()) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("stats_gpu benches skipped: {e}");
            None
        }
    })
    .as_ref()
}

const TYPES: [(&str, DType); 3] = [
    ("f32", DType::F32),
    ("f16", DType::F16),
    ("bf16", DType::BF16),
];

fn single(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    eprintln!(
        "adapter: {} ({:?}), chunk {} MiB, timestamps: {}",
        gpu.adapter_info().name,
        gpu.adapter_info().device_type,
        gpu.chunk_bytes() >> 20,
        gpu.has_timestamps()
    );
    let mut sizes = vec![("64MiB", 64usize << 20)];
    if std::env::var_os("NUMPROBE_BENCH_HUGE").is_some_and(|s| s == "1") {
        sizes.push(("1GiB", 1 << 30));
    }
    for (name, elem) in TYPES {
        let mut g = c.benchmark_group(format!("stats_gpu/{name}"));
        g.sample_size(10);
        for &(label, bytes) in &sizes {
            let buf = data(elem, bytes);
            let shape = [buf.len() / elem.size()];
            let view = TensorView::new(elem, &shape, &buf).expect("sized to the shape");
            g.throughput(Throughput::Bytes(bytes as u64));
            let resident = gpu.upload(&view).expect("upload");
            // The first run over fresh buffers is slow (page faults): keep it out.
            gpu.partials_resident(&resident).expect("warm-up");
            g.bench_function(BenchmarkId::new("resident_kernel", label), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let (p, t) = gpu.partials_resident_timed(&resident).expect("kernel");
                        total += t.unwrap_or_else(|| start.elapsed());
                        black_box(p);
                    }
                    total
                })
            });
            drop(resident);
            gpu.partials(&view).expect("warm-up");
            g.bench_with_input(BenchmarkId::new("end_to_end", label), &view, |b, v| {
                b.iter(|| gpu.partials(black_box(v)).expect("partials"))
            });
        }
        g.finish();
    }
}

fn batches(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let mut g = c.benchmark_group("stats_gpu/batch_4096");
    g.sample_size(10);
    for (name, elem) in TYPES {
        let count = 4096;
        let bufs: Vec<Vec<u8>> = (0..count).map(|_| data(elem, 4096 * elem.size())).collect();
        let shape = [4096usize];
        let views: Vec<TensorView> = bufs
            .iter()
            .map(|b| TensorView::new(elem, &shape, b).expect("sized"))
            .collect();
        gpu.partials_batch(&views).expect("warm-up");
        g.throughput(Throughput::Elements(count as u64));
        g.bench_with_input(BenchmarkId::new("tensors", name), &views, |b, v| {
            b.iter(|| gpu.partials_batch(black_box(v)).expect("batch"))
        });
    }
    g.finish();
}

/// What an embedding tool calls: msprobe's record of an ndarray array on the GPU.
fn statistics(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let engine = Engine::with_gpu(gpu);
    let n = (16 << 20) / 4;
    let f32s = ndarray::Array1::from_iter(
        data(DType::F32, n * 4)
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
    );
    let bf16s = f32s.mapv(bf16::from_f32);
    let mut g = c.benchmark_group("stats_gpu/statistics_16MiB");
    g.sample_size(10);
    for (label, mode) in [
        ("stats", SummaryMode::Statistics),
        ("md5", SummaryMode::Md5),
    ] {
        let opts = Options {
            mode,
            backend: Backend::Gpu,
            ..Options::default()
        };
        engine.statistics(&f32s, &opts).expect("warm-up");
        g.throughput(Throughput::Bytes(n as u64 * 4));
        g.bench_function(BenchmarkId::new("f32", label), |b| {
            b.iter(|| engine.statistics(black_box(&f32s), &opts).expect("record"))
        });
        g.throughput(Throughput::Bytes(n as u64 * 2));
        g.bench_function(BenchmarkId::new("bf16", label), |b| {
            b.iter(|| engine.statistics(black_box(&bf16s), &opts).expect("record"))
        });
    }
    g.finish();
}

/// The pair kernel of the accuracy standards and compare's tensor metrics, end to end.
fn pair(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let n = (16 << 20) / 4;
    let to_f32 = |b: Vec<u8>| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    };
    let bench = to_f32(data(DType::F32, n * 4));
    let device: Vec<f32> = bench.iter().map(|x| x * (1.0 + 1e-4)).collect();
    let device_bf16: Vec<bf16> = device.iter().map(|&x| bf16::from_f32(x)).collect();
    let params = PairParams::for_compare(0);
    let mut g = c.benchmark_group("stats_gpu/pair_16MiB");
    g.sample_size(10);
    for (label, dev) in [
        ("f32_f32", Elems::F32(&device)),
        ("f32_bf16", Elems::BF16(&device_bf16)),
    ] {
        gpu.pair_partials(Elems::F32(&bench), dev, &params)
            .expect("warm-up");
        g.throughput(Throughput::Bytes((n * 4 + dev.bytes().len()) as u64));
        g.bench_function(label, |b| {
            b.iter(|| {
                gpu.pair_partials(Elems::F32(black_box(&bench)), dev, &params)
                    .expect("pair")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, single, batches, statistics, pair);
criterion_main!(benches);
