//! Times the fused CPU pass (`ulp::fused::fused_stats`) per device dtype, and prints a digest of
//! its full result on edge-heavy inputs so two builds can be checked for bit-identical output.
//!
//! Usage:
//! - `fused_speed time [MI] [REPEATS]`: ns/element (median of REPEATS) for fp32/fp16/bf16
//!   devices on MI Mi elements (default 4), on one thread and on all threads, gathering every
//!   standard's metrics and only the benchmark standard's (run_ut's default routing).
//! - `fused_speed sizes [REPEATS]`: µs per call (median of REPEATS, default 200) for an fp32
//!   device against a float64 bench, benchmark standard only, from 32 to 262144 elements:
//!   the per-call costs of partial blocks, one full block and a few blocks.
//! - `fused_speed digest`: one line per (case, size) with every field of the result (`{:?}`
//!   prints shortest round-trip floats, so equal text means equal bits up to NaN payloads).
//!
//! `FUSED_SPEED_SIMD=baseline|avx2` caps the kernel's instruction set (`Params::simd`) for
//! `time`, to time the narrower kernels on a wide machine.

#[path = "../tests/common/edges.rs"]
mod edges;
use std::time::Instant;

use half::f16;
use ulp::DType;
use ulp::elem::{Elem, Work};
use ulp::fused::{DeviceFamily, FusedStats, Params, Scope, Simd, fused_stats};

/// xorshift64: deterministic uniform values in [0, 1).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        let s = &mut self.0;
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        (*s >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The criterion bench's data: roughly normal bench values, device with ~1e-3 relative noise.
fn smooth(n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| {
            let b = (r.next() + r.next() + r.next() - 1.5) * 2.0;
            (b, b * (1.0 + (r.next() - 0.5) * 2e-3))
        })
        .unzip()
}

/// Smooth data with edge values sprinkled in at rate `1/every` (both sides, independently).
fn nasty(n: usize, seed: u64, every: usize) -> (Vec<f64>, Vec<f64>) {
    let sp = edges::edge_values();
    let (mut b, mut d) = smooth(n, seed);
    let mut r = Rng(seed ^ 0x5555);
    for i in 0..n {
        let pick = (r.next() * (every as f64)) as usize;
        let which = (r.next() * sp.len() as f64) as usize;
        let scale = 2f64.powi((r.next() * 60.0) as i32 - 30);
        match pick {
            0 => b[i] = sp[which],
            1 => d[i] = sp[which],
            2 => {
                b[i] = sp[which];
                d[i] = sp[which] * (1.0 + (r.next() - 0.5) * 1e-2);
            }
            3 => {
                b[i] *= scale;
                d[i] *= scale;
            }
            4 => d[i] = b[i],
            _ => {}
        }
    }
    (b, d)
}

fn digest<B: Elem, D: Elem, W: Work, U: Work>(
    name: &str,
    b: &[B],
    d: &[D],
    fam: DeviceFamily,
) -> String {
    let p = Params::new(fam, B::DTYPE, D::DTYPE);
    let s: FusedStats<W, U> = fused_stats(b, d, &p);
    format!("{name} n={} {:?} mean_rel={:?}", b.len(), s, s.mean_rel())
}

/// The three device dtypes as msprobe hands them to numpy: fp32 device vs float64 bench,
/// fp16 device vs float32 bench, bf16 device (as float32 data) vs float32 bench.
struct Case {
    b64: Vec<f64>,
    d32: Vec<f32>,
    b32: Vec<f32>,
    d16: Vec<f16>,
    dbf: Vec<f32>,
    d64: Vec<f64>,
    b16: Vec<f16>,
}

fn case(b: &[f64], d: &[f64]) -> Case {
    Case {
        b64: b.to_vec(),
        d32: d.iter().map(|&x| x as f32).collect(),
        b32: b.iter().map(|&x| x as f32).collect(),
        d16: d.iter().map(|&x| f16::from_f64(x)).collect(),
        dbf: d
            .iter()
            .map(|&x| half::bf16::from_f64(x).to_f32())
            .collect(),
        d64: d.to_vec(),
        b16: b.iter().map(|&x| f16::from_f64(x)).collect(),
    }
}

fn digest_all(c: &Case, tag: &str) -> Vec<String> {
    use DeviceFamily::*;
    vec![
        digest::<f64, f32, f64, f64>(&format!("{tag} fp32"), &c.b64, &c.d32, F32),
        digest::<f32, f16, f32, f32>(&format!("{tag} fp16"), &c.b32, &c.d16, F16),
        digest::<f32, f32, f32, f32>(&format!("{tag} bf16"), &c.b32, &c.dbf, BF16),
        digest::<f32, f32, f32, f64>(&format!("{tag} f32f32"), &c.b32, &c.d32, F32),
        digest::<f64, f64, f64, f64>(&format!("{tag} f64f64"), &c.b64, &c.d64, Other),
        digest::<f32, f64, f64, f64>(&format!("{tag} f32f64"), &c.b32, &c.d64, Other),
        digest::<f16, f16, f32, f32>(&format!("{tag} f16f16"), &c.b16, &c.d16, F16),
        digest::<f16, f32, f32, f32>(&format!("{tag} f16f32bf"), &c.b16, &c.dbf, BF16),
        digest::<f64, f16, f64, f32>(&format!("{tag} f64f16"), &c.b64, &c.d16, F16),
        digest::<f64, f32, f64, f32>(&format!("{tag} f64bf16"), &c.b64, &c.dbf, BF16),
    ]
}

fn run_digest() {
    // The last two span several windows of the multi-block pass (32+ blocks each).
    let sizes = [
        1usize, 7, 8, 9, 63, 129, 1000, 8191, 8192, 8193, 20000, 100_003, 300_001, 2_300_000,
    ];
    for (k, &n) in sizes.iter().enumerate() {
        for every in [0usize, 6, 40] {
            let (b, d) = if every == 0 {
                smooth(n, 17 + k as u64)
            } else {
                nasty(n, 91 + k as u64 * 7 + every as u64, every)
            };
            for line in digest_all(&case(&b, &d), &format!("e{every}")) {
                println!("{line}");
            }
        }
    }
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// CPU seconds of this process (all threads), so figures hold up on a loaded machine.
fn process_cpu_s() -> f64 {
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec (two i64 fields on 64-bit Linux).
    let rc = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The instruction-set cap `FUSED_SPEED_SIMD` asks for (none: the widest the CPU has).
fn simd_cap() -> Simd {
    match std::env::var("FUSED_SPEED_SIMD").as_deref() {
        Ok("baseline") => Simd::Baseline,
        Ok("avx2") => Simd::Avx2,
        _ => Simd::Avx512,
    }
}

fn time_one<B: Elem, D: Elem, W: Work, U: Work>(
    b: &[B],
    d: &[D],
    fam: DeviceFamily,
    scope: Scope,
    reps: usize,
) -> (f64, f64) {
    let p = Params::new(fam, B::DTYPE, D::DTYPE)
        .with_scope(scope)
        .with_simd(simd_cap());
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (t0, c0) = (Instant::now(), process_cpu_s());
        let s: FusedStats<W, U> = fused_stats(b, d, &p);
        std::hint::black_box(&s);
        wall.push(t0.elapsed().as_secs_f64() * 1e9 / b.len() as f64);
        cpu.push((process_cpu_s() - c0) * 1e9 / b.len() as f64);
    }
    (median(wall), median(cpu))
}

fn run_time(mi: usize, reps: usize) {
    let n = mi << 20;
    let (b, d) = smooth(n, 0x9E37_79B9_7F4A_7C15);
    let c = case(&b, &d);
    drop((b, d));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("n={n} reps={reps} loadavg: {}", load.trim());
    let threads_list: Vec<usize> = match std::env::var("FUSED_SPEED_THREADS") {
        Ok(t) => t.split(',').filter_map(|x| x.parse().ok()).collect(),
        Err(_) => vec![1, 0],
    };
    for (threads, scope) in threads_list
        .iter()
        .flat_map(|&t| [(t, Scope::AllStandards), (t, Scope::Benchmark)])
    {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        pool.install(|| {
            let nt = rayon::current_num_threads();
            // FUSED_SPEED_ONLY=fp32|fp16|bf16 times one case (for profiling).
            let only = std::env::var("FUSED_SPEED_ONLY").unwrap_or_default();
            let on = |name: &str| only.is_empty() || only == name;
            let fp32 = if on("fp32") {
                time_one::<f64, f32, f64, f64>(&c.b64, &c.d32, DeviceFamily::F32, scope, reps)
            } else {
                (f64::NAN, f64::NAN)
            };
            let fp16 = if on("fp16") {
                time_one::<f32, f16, f32, f32>(&c.b32, &c.d16, DeviceFamily::F16, scope, reps)
            } else {
                (f64::NAN, f64::NAN)
            };
            let bf16 = if on("bf16") {
                time_one::<f32, f32, f32, f32>(&c.b32, &c.dbf, DeviceFamily::BF16, scope, reps)
            } else {
                (f64::NAN, f64::NAN)
            };
            println!(
                "threads={nt} {scope:?}: ns/elem wall (cpu): fp32 {:.2} ({:.2}), fp16 {:.2} ({:.2}), bf16 {:.2} ({:.2})",
                fp32.0, fp32.1, fp16.0, fp16.1, bf16.0, bf16.1
            );
        });
    }
}

fn run_sizes(reps: usize) {
    let p = Params::new(DeviceFamily::F32, DType::F64, DType::F32).with_scope(Scope::Benchmark);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "reps={reps} threads={} loadavg: {}",
        rayon::current_num_threads(),
        load.trim()
    );
    for n in [
        32usize, 256, 1024, 4096, 8191, 8192, 8193, 16384, 32768, 65536, 131072, 262144,
    ] {
        let (b, d) = smooth(n, 0x5DEE_CE66 + n as u64);
        let d: Vec<f32> = d.iter().map(|&x| x as f32).collect();
        let mut us = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            let s: FusedStats<f64, f64> = fused_stats(&b, &d, &p);
            std::hint::black_box(&s);
            us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let m = median(us);
        println!("n={n:7}: {m:8.1} us ({:.2} ns/elem)", m * 1e3 / n as f64);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("digest") => run_digest(),
        Some("time") => {
            let mi = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
            let reps = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
            run_time(mi, reps);
        }
        Some("sizes") => run_sizes(args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200)),
        _ => eprintln!("usage: fused_speed digest | time [MI] [REPEATS] | sizes [REPEATS]"),
    }
}
