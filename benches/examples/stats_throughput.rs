//! In-process throughput of the fused statistics on one file, for the numpy peer script.
//!
//! `stats_throughput DTYPE FILE [REPEATS]` reads FILE (raw little-endian elements; a `.npy`
//! header is skipped) into memory, runs the fast CPU path REPEATS times (default 5) and the
//! f64 reference once, measures single-core read bandwidth (XOR of the words on one thread)
//! and prints one JSON line with the best time and GB/s (10⁹ B/s) of each.

use std::time::Instant;

use stats_gpu::{DType, TensorView, checksum, fast, reference};

fn elem(name: &str) -> Option<DType> {
    Some(match name {
        "f32" | "float32" => DType::F32,
        "f16" | "float16" => DType::F16,
        "bf16" | "bfloat16" => DType::BF16,
        "f64" | "float64" => DType::F64,
        "i32" | "int32" => DType::I32,
        "i64" | "int64" => DType::I64,
        "u8" | "uint8" => DType::U8,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// Offset of the data in a `.npy` file (magic, version, little-endian header length).
fn npy_data_offset(b: &[u8]) -> Option<usize> {
    if !b.starts_with(b"\x93NUMPY") || b.len() < 12 {
        return None;
    }
    Some(match b[6] {
        1 => 10 + u16::from_le_bytes([b[8], b[9]]) as usize,
        _ => 12 + u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize,
    })
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: stats_throughput DTYPE FILE [REPEATS]";
    let dtype = args.get(1).ok_or(usage)?;
    let path = args.get(2).ok_or(usage)?;
    let repeats: usize = args
        .get(3)
        .map_or(Ok(5), |s| s.parse())
        .map_err(|e| format!("REPEATS: {e}"))?;
    let elem = elem(dtype).ok_or_else(|| format!("unknown dtype {dtype}"))?;
    let raw = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let data = &raw[npy_data_offset(&raw).unwrap_or(0)..];
    let data = &data[..data.len() / elem.size() * elem.size()];
    let shape = [data.len() / elem.size()];
    let view = TensorView::new(elem, &shape, data).map_err(|e| e.to_string())?;

    let time = |f: &dyn Fn() -> f64, n: usize| {
        let mut best = f64::INFINITY;
        let mut check = 0.0;
        for _ in 0..n.max(1) {
            let t = Instant::now();
            check = f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        (best, check)
    };
    let gbps = |s: f64| data.len() as f64 / s / 1e9;
    let (fast_s, fast_sum) = time(&|| std::hint::black_box(fast::partials(&view)).sum, repeats);
    let (crc_s, _) = time(
        &|| std::hint::black_box(fast::partials_and_crc32(&view)).1 as f64,
        repeats,
    );
    // Single-core read bandwidth: XOR of the words, 1 MiB at a time on this thread only.
    let (read_s, _) = time(
        &|| {
            let x = data.chunks(1 << 20).fold(0u64, |a, c| a ^ checksum::xor(c));
            std::hint::black_box(x) as f64
        },
        repeats,
    );
    let (ref_s, ref_sum) = time(&|| std::hint::black_box(reference::partials(&view)).sum, 1);
    println!(
        "{{\"dtype\": \"{dtype}\", \"bytes\": {}, \"threads\": {}, \"fast_s\": {fast_s:.6}, \"fast_gbps\": {:.3}, \
         \"fast_crc32_s\": {crc_s:.6}, \"fast_crc32_gbps\": {:.3}, \"reference_s\": {ref_s:.6}, \
         \"reference_gbps\": {:.3}, \"read_1core_gbps\": {:.3}, \"sum_fast\": {fast_sum:e}, \"sum_reference\": {ref_sum:e}}}",
        data.len(),
        rayon_threads(),
        gbps(fast_s),
        gbps(crc_s),
        gbps(ref_s),
        gbps(read_s),
    );
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
