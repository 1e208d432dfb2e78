//! Saved `.pt` tensors for the Python replay (`numprobe.pytorch.run_ut`), read by dumpfmt's
//! strict reader instead of `torch.load`: no unpickler of torch's, the file's zip directory,
//! pickle and bounds checked, and a fraction of torch.load's per-file cost on a dump of many
//! small tensors. The files are found by the dump's `data_name`s under dumpfmt's rule.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

/// `(torch dtype name, shape, C-order bytes)` of the tensor a `.pt` file holds. The bytes are
/// a fresh bytearray, so `torch.frombuffer` can take them without a copy and write to them.
/// An unreadable file raises OSError, a malformed one ValueError, both naming the file (and
/// the byte offset of the damage where there is one).
#[pyfunction]
fn read_pt(py: Python<'_>, path: PathBuf) -> PyResult<(&'static str, Vec<usize>, Py<PyByteArray>)> {
    let tensor = py
        .detach(|| dumpfmt::pt::read(&path))
        .map_err(|e| match e {
            dumpfmt::Error::Io { .. } => PyOSError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        })?;
    let bytes = PyByteArray::new(py, tensor.bytes()).unbind();
    Ok((tensor.dtype().torch_name(), tensor.shape().to_vec(), bytes))
}

/// The file `data_name` (a record's name, from the dump) names in `tensor_dir`, by dumpfmt's
/// rule for every reader ([`dumpfmt::layout::resolve_data_name`]: a plain file name, inside
/// the directory, a regular file); `None` when no such file is there. A name the rule refuses
/// (absolute, `..`, a link out of the directory, a FIFO) raises ValueError naming it, an
/// unreadable directory OSError.
#[pyfunction]
fn resolve_data_name(tensor_dir: PathBuf, data_name: &str) -> PyResult<Option<PathBuf>> {
    match dumpfmt::layout::resolve_data_name(&tensor_dir, data_name) {
        Ok(p) => Ok(Some(p)),
        Err(dumpfmt::Error::DataName {
            problem: dumpfmt::DataNameProblem::Missing,
            ..
        }) => Ok(None),
        Err(e @ dumpfmt::Error::Io { .. }) => Err(PyOSError::new_err(e.to_string())),
        Err(e) => Err(PyValueError::new_err(e.to_string())),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_pt, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_data_name, m)?)?;
    Ok(())
}
