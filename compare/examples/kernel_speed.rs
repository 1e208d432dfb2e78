//! Tensor-metric kernel throughput per dtype, in bytes of input per CPU-second of the process
//! (so a loaded machine still gives a meaningful figure):
//! `RAYON_NUM_THREADS=1 cargo run -p compare --release --example kernel_speed [MI_ELEMENTS]`.

use compare::tensor::compare_tensors;
use dumpfmt::{DType, TensorView};

fn cpu_seconds() -> f64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }
    #[cfg(not(unix))]
    {
        0.0
    }
}

fn main() {
    let mi: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let n = mi << 20;
    for dt in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        let enc = |v: f32| -> Vec<u8> {
            match dt {
                DType::F32 => v.to_le_bytes().to_vec(),
                DType::BF16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                DType::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                _ => f64::from(v).to_le_bytes().to_vec(),
            }
        };
        let a: Vec<u8> = (0..n).flat_map(|i| enc((i as f32).sin())).collect();
        let b: Vec<u8> = (0..n).flat_map(|i| enc((i as f32).sin() * 1.001)).collect();
        let shape = [n];
        let (mut best_cpu, mut best_wall) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            let (c0, t0) = (cpu_seconds(), std::time::Instant::now());
            let r = compare_tensors(
                &TensorView::new(dt, &shape, &a).unwrap(),
                &TensorView::new(dt, &shape, &b).unwrap(),
            );
            best_cpu = best_cpu.min(cpu_seconds() - c0);
            best_wall = best_wall.min(t0.elapsed().as_secs_f64());
            std::hint::black_box(r);
        }
        let gb = (a.len() + b.len()) as f64 / 1e9;
        println!(
            "{dt:?}: {:.2} GB/s of input per CPU-second; {:.2} GB/s wall on {} threads",
            gb / best_cpu,
            gb / best_wall,
            rayon::current_num_threads()
        );
    }
}
