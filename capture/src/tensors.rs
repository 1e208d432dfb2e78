//! Tensor files (`.pt`, or `.npy` for MindSpore) written on a background thread so the training
//! step does not wait for the disk.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use dumpfmt::DType;
use dumpfmt::TensorView;

use crate::error::{Error, Result};

/// The file format of a tensor file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorFormat {
    /// `torch.save` zip archive (msprobe's PyTorch dumps).
    Pt,
    /// `np.save` file, byte-identical to what numpy 1.x writes (msprobe's MindSpore dumps).
    Npy,
}

impl TensorFormat {
    /// `.npy` for a path ending in `.npy`, else `.pt`.
    pub fn from_path(path: &Path) -> TensorFormat {
        match path.extension() {
            Some(ext) if ext == "npy" => TensorFormat::Npy,
            _ => TensorFormat::Pt,
        }
    }
}

/// One file to write.
pub struct TensorJob {
    pub path: PathBuf,
    pub format: TensorFormat,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// A copy of the contiguous bytes (the tensor may change after the call returns).
    pub bytes: Vec<u8>,
    /// The storage location `.pt` files record (`cpu`); unused for `.npy`.
    pub location: String,
}

impl TensorJob {
    /// Writes the file now, on the calling thread.
    pub fn write(&self) -> Result<()> {
        let view = TensorView::new(self.dtype, &self.shape, &self.bytes)
            .map_err(|e| dumpfmt::Error::tensor(&self.path, 0, e.to_string()))?;
        let written = match self.format {
            TensorFormat::Pt => dumpfmt::pt::write(&self.path, view, &self.location),
            TensorFormat::Npy => dumpfmt::npy::write(&self.path, view),
        };
        if written.is_err()
            && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_file())
        {
            // A full disk leaves a torn file under the final name: remove it, so a reader
            // finds the file missing (the run has failed) rather than damaged.
            let _ = std::fs::remove_file(&self.path);
        }
        written?;
        Ok(())
    }
}

/// A writer thread fed through a channel; errors are kept and reported by [`finish`].
/// The thread starts with the first file: a statistics run writes none, and its
/// sessions (one per step) start no thread.
///
/// [`finish`]: TensorWriter::finish
#[derive(Default)]
pub struct TensorWriter {
    tx: Option<Sender<TensorJob>>,
    handle: Option<JoinHandle<()>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl TensorWriter {
    pub fn new() -> TensorWriter {
        TensorWriter::default()
    }

    fn start(&mut self) {
        let (tx, rx): (Sender<TensorJob>, Receiver<TensorJob>) = mpsc::channel();
        let errs = Arc::clone(&self.errors);
        self.handle = std::thread::Builder::new()
            .name("numprobe-tensor-writer".into())
            .spawn(move || {
                for job in rx {
                    if let Err(e) = job.write()
                        && let Ok(mut v) = errs.lock()
                    {
                        v.push(e.to_string());
                    }
                }
            })
            .ok();
        if self.handle.is_some() {
            self.tx = Some(tx);
        }
    }

    /// Queues a file; written synchronously when no thread could be started.
    pub fn submit(&mut self, job: TensorJob) -> Result<()> {
        if self.handle.is_none() {
            self.start();
        }
        if let Some(tx) = &self.tx {
            return tx
                .send(job)
                .map_err(|_| Error::Tensor("tensor writer thread has stopped".into()));
        }
        job.write()
    }

    /// Waits for every queued file; returns the first write error, if any.
    pub fn finish(&mut self) -> Result<()> {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            h.join()
                .map_err(|_| Error::Tensor("tensor writer thread panicked".into()))?;
        }
        let errs = self.errors.lock().map(|v| v.clone()).unwrap_or_default();
        match errs.first() {
            Some(e) => Err(Error::Tensor(format!(
                "{} tensor file(s) failed; first: {e}",
                errs.len()
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for TensorWriter {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Deterministic bytes that are valid elements of `dtype` (bool only 0/1).
    fn sample_bytes(dtype: DType, numel: usize) -> Vec<u8> {
        let n = numel * dtype.size();
        (0..n)
            .map(|i| match dtype {
                DType::Bool => (i % 3 == 0) as u8,
                _ => (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8,
            })
            .collect()
    }

    // (dtype, shape): every dtype MindSpore's `asnumpy()` hands over (bfloat16 as itself too, to
    // check the float32 conversion), 0-d, empty and long-first-axis arrays.
    fn cases() -> Vec<(DType, Vec<usize>)> {
        let mut v = Vec::new();
        // Every dtype numpy has (not float8).
        for dt in DType::ALL
            .into_iter()
            .filter(|d| !matches!(d, DType::F8E4M3FN | DType::F8E5M2))
        {
            v.push((dt, vec![2, 3]));
            v.push((dt, vec![]));
            v.push((dt, vec![0]));
        }
        v.push((DType::F32, vec![3, 0, 2]));
        v.push((DType::F32, vec![123_457]));
        v.push((
            DType::I64,
            vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2],
        ));
        v.push((DType::F16, vec![5, 7, 11]));
        v
    }

    #[test]
    fn npy_files_match_np_save_byte_for_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let ours = tmp.path().join("ours");
        let raw = tmp.path().join("raw");
        std::fs::create_dir_all(&ours).unwrap();
        std::fs::create_dir_all(&raw).unwrap();
        let mut manifest = String::new();
        let mut writer = TensorWriter::new();
        for (i, (dt, shape)) in cases().into_iter().enumerate() {
            let bytes = sample_bytes(dt, shape.iter().product());
            std::fs::write(raw.join(format!("{i}.bin")), &bytes).unwrap();
            let path = ours.join(format!("{i}.npy"));
            assert_eq!(TensorFormat::from_path(&path), TensorFormat::Npy);
            writer
                .submit(TensorJob {
                    path,
                    format: TensorFormat::Npy,
                    dtype: dt,
                    shape: shape.clone(),
                    bytes,
                    location: "cpu".into(),
                })
                .unwrap();
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            manifest.push_str(&format!("{i} {} {}\n", dt.npy_descr(), dims.join(",")));
        }
        writer.finish().unwrap();
        std::fs::write(tmp.path().join("manifest.txt"), manifest).unwrap();

        // numpy writes the reference files from the same raw bytes (bfloat16 widened to float32
        // as MindSpore's float32 copy would be).
        let script = r#"
import sys, os, numpy as np
root = sys.argv[1]
os.makedirs(os.path.join(root, "np"))
for line in open(os.path.join(root, "manifest.txt")):
    i, descr, dims = (line.rstrip("\n").split(" ") + [""])[:3]
    shape = tuple(int(d) for d in dims.split(",") if d)
    raw = open(os.path.join(root, "raw", i + ".bin"), "rb").read()
    if descr == "<V2":
        a = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
    else:
        a = np.frombuffer(raw, descr)
    np.save(os.path.join(root, "np", i + ".npy"), a.reshape(shape))
"#;
        let py = testsupport::python();
        let out = Command::new(&py)
            .arg("-c")
            .arg(script)
            .arg(tmp.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", py.display()));
        assert!(
            out.status.success(),
            "numpy reference failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (i, (dt, shape)) in cases().into_iter().enumerate() {
            let a = std::fs::read(ours.join(format!("{i}.npy"))).unwrap();
            let b = std::fs::read(tmp.path().join("np").join(format!("{i}.npy"))).unwrap();
            assert!(a == b, "{dt:?} {shape:?}: differs from np.save");
        }
    }

    #[test]
    fn pt_jobs_still_write_torch_zip_files() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.pt");
        assert_eq!(TensorFormat::from_path(&path), TensorFormat::Pt);
        let job = TensorJob {
            path: path.clone(),
            format: TensorFormat::Pt,
            dtype: DType::F32,
            shape: vec![2],
            bytes: 1.5f32
                .to_le_bytes()
                .into_iter()
                .chain(2.5f32.to_le_bytes())
                .collect(),
            location: "cpu".into(),
        };
        job.write().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..2], b"PK");
    }

    #[test]
    fn bad_byte_count_is_reported_by_finish() {
        let tmp = tempfile::tempdir().unwrap();
        let mut writer = TensorWriter::new();
        writer
            .submit(TensorJob {
                path: tmp.path().join("bad.npy"),
                format: TensorFormat::Npy,
                dtype: DType::F32,
                shape: vec![3],
                bytes: vec![0; 5],
                location: "cpu".into(),
            })
            .unwrap();
        let err = writer.finish().unwrap_err().to_string();
        assert!(err.contains("bad.npy"), "{err}");
    }
}
