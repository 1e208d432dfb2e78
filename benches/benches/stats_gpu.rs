//! wgpu statistics kernel: resident data (kernel time from timestamp queries when the adapter
//! has them, else wall clock including the small readback) and end to end (upload through the
//! staging ring + kernel + readback), for f32, f16 and bf16 at 64 MiB (1 GiB with
//! `NUMPROBE_BENCH_HUGE=1`); and batches of 4096-element tensors (throughput in tensors).
//! Without an adapter it prints why and measures nothing.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stats_gpu::gpu::Gpu;
use stats_gpu::{ElemType, TensorView};

/// Deterministic values in [-2, 2) in the given dtype.
fn data(elem: ElemType, bytes: usize) -> Vec<u8> {
    let n = bytes / elem.size();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut out = Vec::with_capacity(n * elem.size());
    for _ in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let x = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
        match elem {
            ElemType::F16 => out.extend(half::f16::from_f32(x).to_le_bytes()),
            ElemType::BF16 => out.extend(half::bf16::from_f32(x).to_le_bytes()),
            _ => out.extend(x.to_le_bytes()),
        }
    }
    out
}

fn gpu() -> Option<&'static Gpu> {
    match Gpu::global() {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("stats_gpu benches skipped: {e}");
            None
        }
    }
}

const TYPES: [(&str, ElemType); 3] = [
    ("f32", ElemType::F32),
    ("f16", ElemType::F16),
    ("bf16", ElemType::BF16),
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

criterion_group!(benches, single, batches);
criterion_main!(benches);
