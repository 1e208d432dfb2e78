//! Generates a tensor-mode dump pair of a given size and compares it, reporting throughput and
//! peak resident memory: `cargo run -p compare --release --example bigpair -- GB [DIR]`.
//!
//! Each side gets `dump.json` (MindSpore-style, `.npy` tensor files of 256 MiB float32) with
//! one forward call per tensor; the target equals the golden except one API made to diverge
//! (relative noise 1e-3), so the summary has a producer to report.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

fn write_npy(
    path: &Path,
    n: usize,
    seed: u64,
    scale: impl Fn(usize) -> f32,
) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(path)?);
    f.write_all(&dumpfmt::npy::header_bytes(dumpfmt::DType::F32, &[n]))?;
    let mut state = seed;
    let mut buf = Vec::with_capacity(1 << 20);
    for i in 0..n {
        // xorshift: cheap, deterministic values in [-1, 1).
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let v = ((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0;
        buf.extend_from_slice(&(v * scale(i)).to_le_bytes());
        if buf.len() >= 1 << 20 {
            f.write_all(&buf)?;
            buf.clear();
        }
    }
    f.write_all(&buf)?;
    f.flush()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let gb: f64 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1.0);
    let tmp = tempfile::tempdir()?;
    let root = args
        .get(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let per_tensor: usize = 64 << 20; // 64 Mi elements = 256 MiB per file
    let total_per_side = (gb * 1e9 / 2.0) as usize;
    let tensors = (total_per_side / (per_tensor * 4)).max(1);
    let t0 = Instant::now();
    // An existing pair of the same size is reused (compare it again with a warm page cache).
    let reuse = root.join("target/dump.json").is_file()
        && std::fs::read_dir(root.join("target/dump_tensor_data"))
            .map(|d| d.count())
            .unwrap_or(0)
            == tensors;
    for (side, npu) in [("target", true), ("golden", false)] {
        if reuse {
            break;
        }
        let dir = root.join(side);
        std::fs::create_dir_all(dir.join("dump_tensor_data"))?;
        let mut data = String::new();
        for t in 0..tensors {
            let key = format!("Functional.op{t}.0.forward");
            let name = format!("{key}.output.0.npy");
            let seed = 0x9e3779b97f4a7c15u64 ^ t as u64;
            let diverge = npu && t == tensors / 2;
            write_npy(
                &dir.join("dump_tensor_data").join(&name),
                per_tensor,
                seed,
                |i| {
                    if diverge {
                        1.0 + ((i % 13) as f32 - 6.0) * 1e-3
                    } else {
                        1.0
                    }
                },
            )?;
            if !data.is_empty() {
                data.push_str(",\n");
            }
            data.push_str(&format!(
                "  \"{key}\": {{\"input_args\": [], \"input_kwargs\": {{}}, \"output\": [{{\"type\": \"mindspore.Tensor\", \"dtype\": \"Float32\", \"shape\": [{per_tensor}], \"Max\": 1.0, \"Min\": -1.0, \"Mean\": 0.0, \"Norm\": 1.0, \"data_name\": \"{name}\"}}]}}"
            ));
        }
        std::fs::write(
            dir.join("dump.json"),
            format!(
                "{{\n \"task\": \"tensor\",\n \"level\": \"L1\",\n \"framework\": \"mindspore\",\n \"dump_data_dir\": null,\n \"data\": {{\n{data}\n }}\n}}\n"
            ),
        )?;
    }
    let bytes = 2 * tensors * per_tensor * 4;
    eprintln!(
        "generated {} tensors per side, {:.2} GB in {:.1}s",
        tensors,
        bytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );

    let opts = compare::CompareOptions {
        target: root.join("target"),
        golden: root.join("golden"),
        out_dir: root.join("out"),
        timestamp: Some("20000101000000".into()),
        ..Default::default()
    };
    let t1 = Instant::now();
    let outcome = compare::run(&opts, &())?;
    let secs = t1.elapsed().as_secs_f64();
    let threads = rayon::current_num_threads();
    println!(
        "compared {:.2} GB in {:.2}s: {:.2} GB/s on {} threads ({:.2} GB/s per thread); peak RSS {:.0} MiB",
        bytes as f64 / 1e9,
        secs,
        bytes as f64 / 1e9 / secs,
        threads,
        bytes as f64 / 1e9 / secs / threads as f64,
        peak_rss_kib() as f64 / 1024.0
    );
    println!("{}", outcome.summary_text);
    Ok(())
}
