//! Bandwidth of the wgpu statistics kernel against a device-to-device copy, for
//! `benches/device/h200_stats.sh` (and any other adapter).
//!
//! `gpu_bandwidth [--probe] [--mib N] [--reps R] [--batch T] [--workgroups W,W,..]`
//!
//! - `--probe`: print the adapter and exit (status 2 when there is none).
//! - Otherwise: times a copy of N MiB (default 1024) between two device buffers, then for f32,
//!   f16 and bf16 uploads N MiB of data, checks the GPU partials against the f64 CPU reference
//!   (counts, min and max exact; sums within 1e-6 relative), times the kernel on the resident
//!   data (timestamp queries; wall clock when the adapter has none) for each workgroup count
//!   tried, times end to end once (upload through the staging ring + kernel + readback), and
//!   times batches of T tensors of 4096 elements (default 16384). Prints a table; exits with
//!   status 1 if any check failed.
//!
//! - The (bench, device) pair kernel of the ULP and benchmark standards (`--pair-mib P`,
//!   default N; 0 skips it): a float32 bench of P MiB against an f32, f16 and bf16 device
//!   output (P/4 Mi elements, one chunk), checked against ulp's CPU fused pass (counts and
//!   maxima exact, sums within `PAIR_SUM_REL_TOL`), timed resident (back-to-back dispatches,
//!   wall clock); GB/s count both inputs, % of the measured copy's read+write rate.
//! - `--skip-stats`: only the copy and the pair kernel.
//!
//! GB/s are 10^9 bytes of input per second; a copy's GB/s count its read and its write.

use std::time::{Duration, Instant};

use half::{bf16, f16};
use stats_gpu::Elems;
use stats_gpu::gpu::{Gpu, GpuOptions, GpuTensor, PAIR_SUM_REL_TOL, PairPartials};
use stats_gpu::{Partials, TensorView, reference};
use ulp::elem::Work;
use ulp::fused::{FusedStats, Params, fused_stats};
use ulp::{DType, DeviceFamily};

const DATASHEET_GBS: f64 = 4800.0;

struct Args {
    probe: bool,
    mib: usize,
    reps: u32,
    batch: usize,
    workgroups: Option<Vec<u32>>,
    pair_mib: Option<usize>,
    skip_stats: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        probe: false,
        mib: 1024,
        reps: 20,
        batch: 16384,
        workgroups: None,
        pair_mib: None,
        skip_stats: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--probe" => a.probe = true,
            "--skip-stats" => a.skip_stats = true,
            "--pair-mib" => {
                a.pair_mib = Some(
                    value("--pair-mib")?
                        .parse()
                        .map_err(|e| format!("--pair-mib: {e}"))?,
                )
            }
            "--mib" => a.mib = value("--mib")?.parse().map_err(|e| format!("--mib: {e}"))?,
            "--reps" => {
                a.reps = value("--reps")?
                    .parse()
                    .map_err(|e| format!("--reps: {e}"))?
            }
            "--batch" => {
                a.batch = value("--batch")?
                    .parse()
                    .map_err(|e| format!("--batch: {e}"))?
            }
            "--workgroups" => {
                let list = value("--workgroups")?
                    .split(',')
                    .map(|w| w.trim().parse::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("--workgroups: {e}"))?;
                a.workgroups = Some(list);
            }
            "-h" | "--help" => {
                println!(
                    "gpu_bandwidth [--probe] [--mib N] [--reps R] [--batch T] [--workgroups W,W,..] [--pair-mib P] [--skip-stats]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Roughly normal values with a few NaN, ±inf, subnormal and large values sprinkled in, filled
/// by all cores (each with its own seed).
fn make_data(elem: DType, bytes: usize) -> Vec<u8> {
    let size = elem.size();
    let n = bytes / size;
    let mut out = vec![0u8; n * size];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, part) in out.chunks_mut(per * size).enumerate() {
            s.spawn(move || {
                let mut st = 0x9E37_79B9_7F4A_7C15u64 ^ ((t as u64 + 1) << 32);
                let mut next = || {
                    st ^= st << 13;
                    st ^= st >> 7;
                    st ^= st << 17;
                    (st >> 40) as f32 / (1u64 << 24) as f32
                };
                let big = if elem == DType::F16 { 6e4 } else { 1e30 };
                let tiny = if elem == DType::F16 { 1e-7 } else { 1e-40 };
                for (i, e) in part.chunks_exact_mut(size).enumerate() {
                    let x = match (i + t) % (1 << 20) {
                        17 => f32::NAN,
                        4242 => f32::INFINITY,
                        99_999 => f32::NEG_INFINITY,
                        123_456 => tiny,
                        654_321 => -big,
                        _ => (next() + next() + next() - 1.5) * 2.0,
                    };
                    match elem {
                        DType::F16 => e.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                        DType::BF16 => e.copy_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
                        _ => e.copy_from_slice(&x.to_le_bytes()),
                    }
                }
            });
        }
    });
    out
}

/// Reference partials and Σ|x| (finite values), on all cores.
fn cpu_reference(elem: DType, bytes: &[u8]) -> (Partials, f64) {
    let size = elem.size();
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let per = (bytes.len() / size).div_ceil(threads).max(1) * size;
    std::thread::scope(|s| {
        let handles: Vec<_> = bytes
            .chunks(per)
            .map(|part| {
                s.spawn(move || {
                    let shape = [part.len() / size];
                    let view = TensorView::new(elem, &shape, part).expect("whole elements");
                    let p = reference::partials(&view);
                    let abs: f64 = part
                        .chunks_exact(size)
                        .map(|w| match elem {
                            DType::F16 => half::f16::from_le_bytes([w[0], w[1]]).to_f64(),
                            DType::BF16 => half::bf16::from_le_bytes([w[0], w[1]]).to_f64(),
                            _ => f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                        })
                        .filter(|x| x.is_finite())
                        .map(f64::abs)
                        .sum();
                    (p, abs)
                })
            })
            .collect();
        handles
            .into_iter()
            .fold((Partials::EMPTY, 0.0), |(p, a), h| {
                let (q, b) = h.join().expect("reference thread");
                (p.merged(&q), a + b)
            })
    })
}

/// None when `got` matches the reference, else what differs.
fn mismatch(got: &Partials, want: &Partials, abs_sum: f64) -> Option<String> {
    let counts = |p: &Partials| (p.count, p.nan_count, p.pos_inf_count, p.neg_inf_count);
    if counts(got) != counts(want) {
        return Some(format!("counts {:?} vs {:?}", counts(got), counts(want)));
    }
    if got.min != want.min || got.max != want.max {
        return Some(format!(
            "min/max {} {} vs {} {}",
            got.min, got.max, want.min, want.max
        ));
    }
    if (got.sum - want.sum).abs() > 1e-6 * abs_sum {
        return Some(format!("sum {} vs {}", got.sum, want.sum));
    }
    if (got.sum_sq - want.sum_sq).abs() > 1e-6 * want.sum_sq {
        return Some(format!("sum_sq {} vs {}", got.sum_sq, want.sum_sq));
    }
    None
}

/// Best kernel time over `reps` timed runs (after two unmeasured ones), and the partials.
fn time_kernel(gpu: &Gpu, t: &GpuTensor, reps: u32) -> Result<(Duration, Partials), String> {
    let e = |e: stats_gpu::gpu::GpuError| e.to_string();
    gpu.partials_resident(t).map_err(e)?;
    gpu.partials_resident(t).map_err(e)?;
    let mut best = Duration::MAX;
    let mut last = Partials::EMPTY;
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        let (p, ts) = gpu.partials_resident_timed(t).map_err(e)?;
        best = best.min(ts.unwrap_or_else(|| start.elapsed()));
        last = p;
    }
    Ok((best, last))
}

fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn run(args: &Args) -> Result<bool, String> {
    let gpu = &Gpu::new(GpuOptions::default()).map_err(|e| e.to_string())?;
    let info = gpu.adapter_info();
    println!(
        "adapter: {} | {:?} | driver {} {} | chunk {} MiB | timestamps {}",
        info.name,
        info.device_type,
        info.driver,
        info.driver_info,
        gpu.chunk_bytes() >> 20,
        gpu.has_timestamps()
    );
    if args.probe {
        return Ok(true);
    }
    let bytes = (args.mib << 20) as u64;
    let copy = gpu
        .copy_bandwidth(bytes, args.reps)
        .map_err(|e| e.to_string())?;
    let copy_gbs = gbs(2 * copy.bytes, copy.best);
    println!(
        "copy {} MiB device->device: best {:.3} ms, mean {:.3} ms ({}), wall clock {:.3} ms per copy \
         = {:.1} GB/s read+write ({:.1} GB/s by wall clock)",
        args.mib,
        copy.best.as_secs_f64() * 1e3,
        copy.mean.as_secs_f64() * 1e3,
        if copy.timestamped {
            "timestamps"
        } else {
            "wall clock"
        },
        copy.wall.as_secs_f64() * 1e3,
        copy_gbs,
        gbs(2 * copy.bytes, copy.wall)
    );
    let mut ok = true;
    if !args.skip_stats {
        ok &= stats_section(args, gpu, bytes, copy_gbs)?;
    }
    let pair_mib = args.pair_mib.unwrap_or(args.mib);
    if pair_mib > 0 {
        ok &= pair_section(gpu, pair_mib, args.reps, copy_gbs)?;
    }
    Ok(ok)
}

fn stats_section(args: &Args, gpu: &Gpu, bytes: u64, copy_gbs: f64) -> Result<bool, String> {
    let info = gpu.adapter_info();
    let candidates: Vec<u32> = args.workgroups.clone().unwrap_or_else(|| {
        if info.device_type == stats_gpu::gpu::wgpu::DeviceType::Cpu {
            vec![8, 16, 32, 64]
        } else {
            // Multiples of 132 (H100/H200 SMs) and powers of two.
            vec![1056, 2112, 4096, 4224, 8448, 16896]
        }
    });
    let mut ok = true;
    let mut rows = Vec::new();
    for (name, elem) in [
        ("f32", DType::F32),
        ("f16", DType::F16),
        ("bf16", DType::BF16),
    ] {
        let t0 = Instant::now();
        let data = make_data(elem, bytes as usize);
        let (want, abs_sum) = cpu_reference(elem, &data);
        let shape = [data.len() / elem.size()];
        let view = TensorView::new(elem, &shape, &data).map_err(|e| e.to_string())?;
        let mut tensor = gpu.upload(&view).map_err(|e| e.to_string())?;
        let prep = t0.elapsed();
        let mut best: Option<(u32, Duration)> = None;
        let mut sweep = Vec::new();
        for &wg in &candidates {
            gpu.set_workgroups(&mut tensor, wg)
                .map_err(|e| e.to_string())?;
            let (t, p) = time_kernel(gpu, &tensor, args.reps)?;
            if let Some(m) = mismatch(&p, &want, abs_sum) {
                println!("CHECK FAILED {name} resident, {wg} workgroups: {m}");
                ok = false;
            }
            sweep.push(format!("{wg}:{:.3}", gbs(bytes, t)));
            if best.is_none_or(|(_, b)| t < b) {
                best = Some((wg, t));
            }
        }
        let (wg, t) = best.expect("at least one workgroup count");
        gpu.set_workgroups(&mut tensor, wg)
            .map_err(|e| e.to_string())?;
        let wall = gpu
            .time_resident_wall(&tensor, args.reps)
            .map_err(|e| e.to_string())?;
        drop(tensor);
        // End to end: upload through the staging ring, kernel, readback.
        let p = gpu.partials(&view).map_err(|e| e.to_string())?;
        if let Some(m) = mismatch(&p, &want, abs_sum) {
            println!("CHECK FAILED {name} streamed: {m}");
            ok = false;
        }
        let start = Instant::now();
        gpu.partials(&view).map_err(|e| e.to_string())?;
        let e2e = start.elapsed();
        println!(
            "{name}: sweep GB/s by workgroups [{}] (data + reference + upload {:.1} s)",
            sweep.join(" "),
            prep.as_secs_f64()
        );
        rows.push((name, wg, t, wall, e2e));
    }
    println!();
    println!(
        "| dtype | MiB | workgroups | kernel ms | GB/s | % of copy | % of 4.8 TB/s | wall-clock GB/s | end-to-end GB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, wg, t, wall, e2e) in &rows {
        let g = gbs(bytes, *t);
        println!(
            "| {name} | {} | {wg} | {:.3} | {:.2} | {:.1} % | {:.1} % | {:.2} | {:.2} |",
            args.mib,
            t.as_secs_f64() * 1e3,
            g,
            100.0 * g / copy_gbs,
            100.0 * g / DATASHEET_GBS,
            gbs(bytes, *wall),
            gbs(bytes, *e2e)
        );
    }
    println!();
    println!("| batch of 4096-element tensors | tensors | best ms | tensors/s | GB/s | check |");
    println!("|---|---|---|---|---|---|");
    for (name, elem) in [
        ("f32", DType::F32),
        ("f16", DType::F16),
        ("bf16", DType::BF16),
    ] {
        let n = args.batch;
        let all = make_data(elem, n * 4096 * elem.size());
        let shape = [4096usize];
        let views: Vec<TensorView> = all
            .chunks_exact(4096 * elem.size())
            .map(|b| TensorView::new(elem, &shape, b).expect("whole tensors"))
            .collect();
        let got = gpu.partials_batch(&views).map_err(|e| e.to_string())?;
        let mut bad = 0;
        for (p, v) in got.iter().zip(&views).step_by(97) {
            let (want, abs) = cpu_reference(elem, v.bytes());
            if let Some(m) = mismatch(p, &want, abs) {
                if bad == 0 {
                    println!("CHECK FAILED {name} batch: {m}");
                }
                bad += 1;
                ok = false;
            }
        }
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            gpu.partials_batch(&views).map_err(|e| e.to_string())?;
            best = best.min(start.elapsed());
        }
        println!(
            "| {name} | {n} | {:.2} | {:.0} | {:.3} | {} |",
            best.as_secs_f64() * 1e3,
            n as f64 / best.as_secs_f64(),
            gbs(all.len() as u64, best),
            if bad == 0 { "ok" } else { "FAILED" }
        );
    }
    Ok(ok)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu_bandwidth: {e}");
            std::process::exit(64);
        }
    };
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("gpu_bandwidth: {e}");
            std::process::exit(if e.starts_with("no GPU adapter") {
                2
            } else {
                1
            });
        }
    }
}

/// A bench and a device output near it: relative errors around every threshold, a few
/// zeros, tiny, huge and non-finite values; filled on all cores.
fn make_pair(n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut bench = vec![0f32; n];
    let mut device = vec![0f32; n];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (k, (b, d)) in bench
            .chunks_mut(per)
            .zip(device.chunks_mut(per))
            .enumerate()
        {
            s.spawn(move || {
                let mut x =
                    0x9e37_79b9_7f4a_7c15u64 ^ (k as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                for (bv, dv) in b.iter_mut().zip(d.iter_mut()) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                    let v = ((x >> 3) & 0xff) as u32;
                    let base = ((u - 0.5) * 8.0) as f32;
                    let (bb, dd) = match v {
                        0 => (0.0, 1e-6),
                        1 => (1e-7 * base, 2e-7),
                        2 => (f32::INFINITY, f32::INFINITY),
                        3 => (base, f32::NAN),
                        4 => (3e5 * base, 3e5 * base * (1.0 + 1e-3)),
                        _ => {
                            let r = [1e-6f32, 5e-5, 2e-4, 9e-4, 3e-3, 2e-2][(v % 6) as usize];
                            (base, base * (1.0 + r * ((u * 7.0) as f32 - 3.0)))
                        }
                    };
                    *bv = bb;
                    *dv = dd;
                }
            });
        }
    });
    (bench, device)
}

/// Mismatches between the GPU partials and the CPU fused statistics.
fn pair_mismatch<U: Work>(g: &PairPartials, c: &FusedStats<f32, U>) -> Vec<String> {
    let mut bad = ulp::gpu::count_mismatches(g, c);
    let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
    let maxima = [
        ("max_abs_err", g.max_abs_err, f64::from(c.max_abs_err)),
        ("max_rel", g.max_rel, f64::from(c.max_rel)),
        (
            "max_ulp",
            U::from_f64(g.max_ulp).to_f64(),
            c.max_ulp.to_f64(),
        ),
        ("max_abs_device", g.max_abs_device, c.max_abs_device),
        ("max_abs_bench", g.max_abs_bench, c.max_abs_bench),
    ];
    for (name, a, b) in maxima {
        if !same(a, b) {
            bad.push(format!("{name} {a:e} vs {b:e}"));
        }
    }
    let close =
        |a: f64, b: f64| same(a, b) || (a - b).abs() <= PAIR_SUM_REL_TOL * a.abs().max(b.abs());
    let sums = [
        ("sum_sq", g.sum_sq, f64::from(c.sum_sq)),
        ("rel_sum", g.rel_sum, c.rel_sum_f64),
        ("sum_ulp", g.sum_ulp, c.sum_ulp.to_f64()),
    ];
    for (name, a, b) in sums {
        if !close(a, b) {
            bad.push(format!("{name} {a:e} vs {b:e}"));
        }
    }
    bad
}

fn pair_section(gpu: &Gpu, mib: usize, reps: u32, copy_gbs: f64) -> Result<bool, String> {
    let n = (mib << 20) / 4;
    let t0 = Instant::now();
    let (bench, device) = make_pair(n);
    println!();
    println!(
        "pair kernel (ULP + benchmark standards), float32 bench of {mib} MiB ({n} elements; data {:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    println!(
        "| device dtype | MiB read | workgroups | kernel ms | GB/s (both inputs) | % of copy | % of 4.8 TB/s | CPU check |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut ok = true;
    for (name, family) in [
        ("f32", DeviceFamily::F32),
        ("f16", DeviceFamily::F16),
        ("bf16", DeviceFamily::BF16),
    ] {
        let params = ulp::gpu::pair_params(family, 0).map_err(|e| e.to_string())?;
        let e = |e: stats_gpu::gpu::GpuError| e.to_string();
        let (timing, bad) = match family {
            DeviceFamily::F32 => {
                let t = gpu
                    .pair_resident_timing(Elems::F32(&bench), Elems::F32(&device), &params, reps)
                    .map_err(e)?;
                let p = Params::new(family, DType::F32, DType::F32);
                let c = fused_stats::<f32, f32, f32, f64>(&bench, &device, &p);
                let bad = pair_mismatch(&t.partials, &c);
                (t, bad)
            }
            DeviceFamily::F16 => {
                let d: Vec<f16> = device.iter().map(|&x| f16::from_f32(x)).collect();
                let t = gpu
                    .pair_resident_timing(Elems::F32(&bench), Elems::F16(&d), &params, reps)
                    .map_err(e)?;
                let p = Params::new(family, DType::F32, DType::F16);
                let c = fused_stats::<f32, f16, f32, f32>(&bench, &d, &p);
                let bad = pair_mismatch(&t.partials, &c);
                (t, bad)
            }
            _ => {
                let d: Vec<bf16> = device.iter().map(|&x| bf16::from_f32(x)).collect();
                let t = gpu
                    .pair_resident_timing(Elems::F32(&bench), Elems::BF16(&d), &params, reps)
                    .map_err(e)?;
                // msprobe hands bf16 to numpy as float32 values.
                let d32: Vec<f32> = d.iter().map(|x| x.to_f32()).collect();
                let p = Params::new(family, DType::F32, DType::F32);
                let c = fused_stats::<f32, f32, f32, f32>(&bench, &d32, &p);
                let bad = pair_mismatch(&t.partials, &c);
                (t, bad)
            }
        };
        let g = gbs(timing.bytes, timing.best);
        println!(
            "| {name} | {:.0} | {} | {:.3} | {:.2} | {:.1} % | {:.1} % | {} |",
            timing.bytes as f64 / (1u64 << 20) as f64,
            timing.workgroups,
            timing.best.as_secs_f64() * 1e3,
            g,
            100.0 * g / copy_gbs,
            100.0 * g / DATASHEET_GBS,
            if bad.is_empty() {
                "ok".to_string()
            } else {
                format!("FAILED: {}", bad.join("; "))
            }
        );
        ok &= bad.is_empty();
    }
    Ok(ok)
}
