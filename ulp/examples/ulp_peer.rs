//! Times the fused accuracy metrics on raw arrays written by `benches/peers/ulp_msprobe.py`.
//!
//! Usage: `ulp_peer BENCH.raw BENCH_DTYPE DEVICE.raw DEVICE_DTYPE [REPEATS]` where the files hold
//! little-endian elements (`float32`/`float64`/`float16`; a bfloat16 device is given as float32
//! data with DEVICE_DTYPE `bfloat16`). Prints one JSON line: best wall time and the metrics.

use std::time::Instant;

use half::f16;
use ulp::{DeviceFamily, Elems, all_metrics};

enum Owned {
    F16(Vec<f16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

fn load(path: &str, dtype: &str) -> Result<Owned, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    Ok(match dtype {
        "float16" => Owned::F16(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        "float32" | "bfloat16" => Owned::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "float64" => Owned::F64(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        other => return Err(format!("unsupported dtype {other}")),
    })
}

fn view(o: &Owned) -> Elems<'_> {
    match o {
        Owned::F16(a) => Elems::F16(a),
        Owned::F32(a) => Elems::F32(a),
        Owned::F64(a) => Elems::F64(a),
    }
}

/// CPU seconds this process has used (user + system), from /proc; None elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        return Err(
            "usage: ulp_peer BENCH.raw BENCH_DTYPE DEVICE.raw DEVICE_DTYPE [REPEATS]".into(),
        );
    }
    let bench = load(&args[1], &args[2])?;
    let device = load(&args[3], &args[4])?;
    let family = match args[4].as_str() {
        "float16" => DeviceFamily::F16,
        "bfloat16" => DeviceFamily::BF16,
        "float32" => DeviceFamily::F32,
        _ => DeviceFamily::Other,
    };
    let repeats: usize = args.get(5).and_then(|r| r.parse().ok()).unwrap_or(5);
    let (b, d) = (view(&bench), view(&device));
    if b.len() != d.len() {
        return Err("bench and device lengths differ".into());
    }
    let mut best = f64::INFINITY;
    let mut metrics = None;
    let cpu0 = cpu_seconds();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        let m = all_metrics(b, d, family).map_err(|e| e.to_string())?;
        best = best.min(t.elapsed().as_secs_f64());
        metrics = Some(m);
    }
    let cpu_per_run = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) => Some((b - a) / repeats.max(1) as f64),
        _ => None,
    };
    let m = metrics.ok_or("no run")?;
    let text = |v: &ulp::PyVal| v.csv_text();
    let bm = m.benchmark.as_ref().ok_or("empty input")?;
    let mut out = serde_json::json!({
        "n": m.n,
        "threads": rayon::current_num_threads(),
        "fused_s": best,
        "fused_cpu_s": cpu_per_run,
        "small_value_err_ratio": text(&bm.small_value_err_ratio),
        "max_rel_error": text(&bm.max_rel_error),
        "mean_rel_error": text(&bm.mean_rel_error),
        "rmse": text(&bm.rmse),
        "eb": text(&bm.eb),
    });
    if let Some(u) = &m.ulp {
        out["max_ulp_error"] = text(&u.max_ulp_error).into();
        out["mean_ulp_error"] = text(&u.mean_ulp_error).into();
        out["ulp_error_proportion"] = text(&u.ulp_error_proportion).into();
    }
    println!("{out}");
    Ok(())
}
