//! Statistics-mode kernel dumps where MindSpore will not write them.
//!
//! MindSpore refuses `saved_data: "statistic"` on the CPU ("storing statistic dump is only
//! supported on GPU and Ascend"). The level-L2 recorder then has MindSpore dump tensors instead,
//! and [`summarize_step_dir`] turns each finished iteration folder into MindSpore's
//! `statistic.csv` (its columns; numprobe's statistics kernels, MindSpore's rules) and deletes
//! the tensor files, so the staged data never exceeds one step.

use std::path::Path;

use dumpfmt::kernel::{self, KernelFileName, STATISTIC_FIXED_COLUMNS};
use md5::{Digest, Md5};
use stats_gpu::summary::{Flavour, Options, Stat};

use crate::error::{Error, Result};

fn stat_text(s: Option<Stat>) -> String {
    match s {
        None | Some(Stat::Null) => "null".into(),
        Some(Stat::Bool(b)) => if b { "True" } else { "False" }.into(),
        Some(Stat::Int(i)) => i.to_string(),
        Some(Stat::Float(x)) => pyrepr::repr_f64(x),
    }
}

/// Which statistics a `statistic.csv` holds: msprobe's `summary_mode`, which it turns into
/// MindSpore's `statistic_category` (`statistics` → max, min, avg, l2norm; `md5` → the hash
/// alone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SummaryMode {
    #[default]
    Statistics,
    Md5,
}

impl SummaryMode {
    /// The table's header: MindSpore's fixed columns, then its names of the chosen statistics
    /// (`MD5` for `hash:md5`, and for `md5` up to MindSpore 2.7.0).
    pub fn header(self) -> Vec<&'static str> {
        match self {
            SummaryMode::Statistics => kernel::statistic_header(false),
            SummaryMode::Md5 => {
                let mut h = STATISTIC_FIXED_COLUMNS.to_vec();
                h.push("MD5");
                h
            }
        }
    }
}

/// MD5 of a tensor's bytes as stored (little-endian elements, bfloat16 as its 2-byte words),
/// in lowercase hex.
pub fn md5_hex(bytes: &[u8]) -> String {
    let digest = Md5::digest(bytes);
    let mut s = String::with_capacity(32);
    for b in digest {
        s.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        s.push(char::from_digit(u32::from(b & 15), 16).unwrap_or('0'));
    }
    s
}

/// Summarizes the `.npy` files of one iteration folder into its `statistic.csv` (rows of an
/// existing file are kept, new rows appended in time order), written atomically; then removes
/// those `.npy` files. Returns the number of rows added. Files whose names are not kernel dump
/// names are left alone. An existing table with other columns than `mode`'s is an error
/// (a folder summarized twice with different settings).
pub fn summarize_step_dir(
    dir: &Path,
    engine: &stats_gpu::Engine,
    mode: SummaryMode,
) -> Result<usize> {
    let mut files: Vec<(KernelFileName, std::path::PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let ty = e.file_type().map_err(|err| Error::io(&e.path(), err))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !ty.is_file() {
            continue;
        }
        if let Some(parsed) = KernelFileName::parse(name) {
            files.push((parsed, e.path()));
        }
    }
    if files.is_empty() {
        return Ok(0);
    }
    files.sort_by(|a, b| (a.0.timestamp, &a.1).cmp(&(b.0.timestamp, &b.1)));

    let csv_path = dir.join("statistic.csv");
    let mut out = String::new();
    if std::fs::symlink_metadata(&csv_path).is_ok() {
        // Keep what earlier calls wrote, checked by the reader (a damaged file or a link is an
        // error) and read once.
        out = kernel::read_statistic_csv_text(&csv_path)?.1;
        let want = pyrepr::csv_record(mode.header(), "\n");
        if !out.starts_with(&want) {
            return Err(Error::Dump(dumpfmt::Error::tensor(
                &csv_path,
                0,
                format!(
                    "its header is not {:?}: the folder was summarized with other statistics",
                    want.trim_end()
                ),
            )));
        }
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        pyrepr::write_csv_record(mode.header(), "\n", &mut out);
    }
    let opts = Options {
        flavour: Flavour::MindSpore,
        ..Options::default()
    };
    for (name, path) in &files {
        let tensor = dumpfmt::tensor::read_tensor(path)?;
        let shape = pyrepr::shape_tuple(tensor.shape());
        let mut cells = vec![
            name.op_type.clone(),
            name.op_name.clone(),
            name.task_id.to_string(),
            name.stream_id.to_string(),
            name.timestamp.to_string(),
            name.io.to_string(),
            name.slot.to_string(),
            tensor.bytes().len().to_string(),
            tensor.dtype().numpy_name().to_string(),
            shape,
        ];
        match mode {
            SummaryMode::Statistics => {
                let rec = engine.compute(&tensor.view(), &opts)?;
                cells.extend([rec.max, rec.min, rec.mean, rec.norm].map(stat_text));
            }
            SummaryMode::Md5 => cells.push(md5_hex(tensor.bytes())),
        }
        pyrepr::write_csv_record(cells.iter(), "\n", &mut out);
    }
    dumpfmt::outfile::write(&csv_path, out.as_bytes())?;
    // Only once the table is durable under its name are the staged tensors let go.
    for (_, path) in &files {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    }
    Ok(files.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dumpfmt::{DType, Tensor};

    #[test]
    fn summarizes_and_removes_the_staged_tensors() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let vals: Vec<f32> = vec![1.5, -2.0, 0.25, 3.0];
        let t =
            Tensor::from_vec(DType::F32, vec![2, 2], bytemuck::cast_slice(&vals).to_vec()).unwrap();
        dumpfmt::npy::write(
            &d.join("MatMul.Default_fc_MatMul-op0.0.0.100.output.0.DefaultFormat.Float32.npy"),
            t.view(),
        )
        .unwrap();
        dumpfmt::npy::write(
            &d.join("MatMul.Default_fc_MatMul-op0.0.0.90.input.0.DefaultFormat.Float32.npy"),
            t.view(),
        )
        .unwrap();
        std::fs::write(d.join("notes.txt"), "kept").unwrap();
        let engine = stats_gpu::Engine::new();
        assert_eq!(
            summarize_step_dir(d, &engine, SummaryMode::Statistics).unwrap(),
            2
        );
        let rows = kernel::read_statistic_csv(&d.join("statistic.csv")).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].io, kernel::Io::Input, "time order");
        assert_eq!(rows[0].shape, [2, 2]);
        assert_eq!(rows[0].data_size, 16);
        assert_eq!(rows[0].value("Max Value"), Some(3.0));
        assert_eq!(rows[0].value("Min Value"), Some(-2.0));
        assert_eq!(rows[0].value("Avg Value"), Some(0.6875));
        let norm = rows[0].value("L2Norm Value").unwrap();
        assert!((norm - (1.5f64 * 1.5 + 4.0 + 0.0625 + 9.0).sqrt()).abs() < 1e-6);
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!left.iter().any(|n| n.ends_with(".npy")), "{left:?}");
        // A later call appends to the table.
        dumpfmt::npy::write(
            &d.join("ReLU.Default_ReLU-op0.0.0.200.output.0.DefaultFormat.Float32.npy"),
            t.view(),
        )
        .unwrap();
        assert_eq!(
            summarize_step_dir(d, &engine, SummaryMode::Statistics).unwrap(),
            1
        );
        assert_eq!(
            kernel::read_statistic_csv(&d.join("statistic.csv"))
                .unwrap()
                .len(),
            3
        );
    }
}
