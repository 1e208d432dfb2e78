//! What the CPU statistics task of level L2 adds to a tensor-mode kernel dump:
//! `cargo run -p capture --profile wheel --example kernel_stats_speed -- [MIB_PER_TENSOR] [TENSORS] [DIR]`.
//!
//! Writes one iteration folder of float32 `.npy` files with MindSpore's names, as MindSpore's
//! tensor dump does (timed: the cost tensor mode already pays, written and fsynced), then
//! summarizes it into `statistic.csv` and removes the files, as the statistics task does after
//! each step (timed). Best of three for each; prints both and their ratio.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

fn write_step(dir: &Path, tensors: usize, n: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for k in 0..tensors {
        let path = dir.join(format!(
            "MatMul.Default_network-Net_fc{k}-Dense_MatMul-op{k}.0.0.{}.output.0.DefaultFormat.Float32.npy",
            1_796_000_000_000_000u64 + k as u64
        ));
        let mut f = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(&path)?);
        f.write_all(&dumpfmt::npy::header_bytes(dumpfmt::DType::F32, &[n]))?;
        let mut buf = Vec::with_capacity(1 << 20);
        for i in 0..n {
            buf.extend_from_slice(&(((i % 4093) as f32) * 0.37).sin().to_le_bytes());
            if buf.len() >= 1 << 20 {
                f.write_all(&buf)?;
                buf.clear();
            }
        }
        f.write_all(&buf)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let tensors: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let tmp = tempfile::tempdir().expect("temporary folder");
    let root = args
        .get(3)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let n = mib << 18;
    let engine = stats_gpu::Engine::new();
    let (mut best_write, mut best_stats) = (f64::MAX, f64::MAX);
    for i in 0..3 {
        let dir = root.join(format!("rank_0/Net/0/{i}"));
        let t0 = Instant::now();
        write_step(&dir, tensors, n).expect("write the tensor files");
        best_write = best_write.min(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        let rows = capture::kernel_stats::summarize_step_dir(
            &dir,
            &engine,
            capture::kernel_stats::SummaryMode::Statistics,
        )
        .expect("summarize");
        best_stats = best_stats.min(t0.elapsed().as_secs_f64());
        assert_eq!(rows, tensors);
    }
    let gb = (tensors * n * 4) as f64 / 1e9;
    println!(
        "{tensors} x {mib} MiB float32 per step ({gb:.2} GB): writing the tensor files \
         {best_write:.3} s ({:.2} GB/s); statistics task (read, summarize, remove) \
         {best_stats:.3} s ({:.2} GB/s), {:.0}% on top of writing them",
        gb / best_write,
        gb / best_stats,
        100.0 * best_stats / best_write
    );
}
