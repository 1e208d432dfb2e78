//! Throughput of `numprobe compare` on two MindSpore kernel-level (L2) dumps of float32 tensors:
//! `cargo run -p compare --release --example kernel_dump_speed -- [MIB_PER_TENSOR] [TENSORS] [DIR]`.
//!
//! Writes a pair of kernel-dump trees (`rank_0/Net/0/0/*.npy` with MindSpore's file names; the
//! target is the golden times 1 + 1e-3), then times `compare::kernel::run_kernel_compare` on it,
//! best of three, and prints input bytes (both sides) per wall second and per CPU second.

use std::io::Write;
use std::path::Path;

fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn write_npy(path: &Path, n: usize, scale: f32) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(path)?);
    f.write_all(&dumpfmt::npy::header_bytes(dumpfmt::DType::F32, &[n]))?;
    let mut buf = Vec::with_capacity(1 << 20);
    for i in 0..n {
        buf.extend_from_slice(&(((i % 4093) as f32 * 0.37).sin() * scale).to_le_bytes());
        if buf.len() >= 1 << 20 {
            f.write_all(&buf)?;
            buf.clear();
        }
    }
    f.write_all(&buf)?;
    f.flush()
}

fn write_side(root: &Path, tensors: usize, n: usize, scale: f32) -> std::io::Result<()> {
    let rank = root.join("rank_0");
    std::fs::create_dir_all(rank.join("execution_order"))?;
    let step = rank.join("Net/0/0");
    std::fs::create_dir_all(&step)?;
    for k in 0..tensors {
        let name = format!(
            "MatMul.Default_network-Net_fc{k}-Dense_MatMul-op{k}.0.0.{}.output.0.DefaultFormat.Float32.npy",
            1_796_000_000_000_000u64 + k as u64
        );
        write_npy(&step.join(name), n, scale)?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let tensors: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let tmp = tempfile::tempdir().expect("temporary folder");
    let dir = args
        .get(3)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let n = mib << 18; // float32 elements per tensor
    write_side(&dir.join("target"), tensors, n, 1.001).expect("write target");
    write_side(&dir.join("golden"), tensors, n, 1.0).expect("write golden");
    let bytes = 2.0 * tensors as f64 * (n * 4) as f64;
    let (mut best_wall, mut best_cpu) = (f64::MAX, f64::MAX);
    for i in 0..3 {
        let out = dir.join(format!("out{i}"));
        let (c0, t0) = (cpu_seconds(), std::time::Instant::now());
        let o = compare::kernel::run_kernel_compare(
            &dir.join("target"),
            &dir.join("golden"),
            &out,
            &compare::kernel::KernelCompareOptions::default(),
            Some("20261202000000"),
            0.0,
        )
        .expect("compare");
        best_wall = best_wall.min(t0.elapsed().as_secs_f64());
        best_cpu = best_cpu.min(cpu_seconds() - c0);
        assert_eq!(o.tables[0].0.rows.len(), tensors);
    }
    println!(
        "kernel compare, float32: {tensors} x {mib} MiB per side ({:.2} GB input): \
         best wall {best_wall:.3} s ({:.2} GB/s), CPU {best_cpu:.3} s ({:.2} GB/s per CPU-second)",
        bytes / 1e9,
        bytes / 1e9 / best_wall,
        bytes / 1e9 / best_cpu
    );
}
