//! Tensor files (`.pt`) written on a background thread so the training step does not wait
//! for the disk.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use dumpfmt::DType;

use crate::error::{Error, Result};

/// One file to write.
pub struct TensorJob {
    pub path: PathBuf,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// A copy of the contiguous bytes (the tensor may change after the call returns).
    pub bytes: Vec<u8>,
    pub location: String,
}

/// A writer thread fed through a channel; errors are kept and reported by [`finish`].
///
/// [`finish`]: TensorWriter::finish
pub struct TensorWriter {
    tx: Option<Sender<TensorJob>>,
    handle: Option<JoinHandle<()>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Default for TensorWriter {
    fn default() -> Self {
        TensorWriter::new()
    }
}

impl TensorWriter {
    pub fn new() -> TensorWriter {
        let (tx, rx): (Sender<TensorJob>, Receiver<TensorJob>) = mpsc::channel();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let errs = Arc::clone(&errors);
        let handle = std::thread::Builder::new()
            .name("numprobe-tensor-writer".into())
            .spawn(move || {
                for job in rx {
                    if let Err(e) = dumpfmt::pt::write(
                        &job.path,
                        job.dtype,
                        &job.shape,
                        &job.bytes,
                        &job.location,
                    ) && let Ok(mut v) = errs.lock()
                    {
                        v.push(e.to_string());
                    }
                }
            })
            .ok();
        TensorWriter {
            tx: Some(tx),
            handle,
            errors,
        }
    }

    /// Queues a file; written synchronously when no thread could be started.
    pub fn submit(&self, job: TensorJob) -> Result<()> {
        if self.handle.is_some()
            && let Some(tx) = &self.tx
        {
            return tx
                .send(job)
                .map_err(|_| Error::Tensor("tensor writer thread has stopped".into()));
        }
        dumpfmt::pt::write(&job.path, job.dtype, &job.shape, &job.bytes, &job.location)?;
        Ok(())
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
