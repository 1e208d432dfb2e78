//! dumpfmt's safe output files for numprobe's Python tools (`numprobe/_outfiles.py`), so the
//! Python writers follow the one rule the Rust writers follow (`dumpfmt::outfile`) instead of
//! a copy of it.

use std::path::PathBuf;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

fn os_error(e: dumpfmt::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// Writes `data` to `path` whole (`dumpfmt::outfile::write`): a temporary file beside it,
/// fsynced, renamed over it; a link, directory or FIFO at `path` raises OSError naming it.
#[pyfunction]
fn write_file(py: Python<'_>, path: PathBuf, data: &[u8]) -> PyResult<()> {
    py.detach(|| dumpfmt::outfile::write(&path, data))
        .map_err(os_error)
}

/// OSError naming `path` when it exists and is not a regular file (`outfile::check_target`).
#[pyfunction]
fn check_target(path: PathBuf) -> PyResult<()> {
    dumpfmt::outfile::check_target(&path).map_err(os_error)
}

/// Makes `out/rel` (`outfile::create_dir_below`): `out` may be reached through links, a
/// directory below it that is a link or a file raises OSError naming it.
#[pyfunction]
fn create_dir_below(out: PathBuf, rel: PathBuf) -> PyResult<PathBuf> {
    dumpfmt::outfile::create_dir_below(&out, &rel).map_err(os_error)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(write_file, m)?)?;
    m.add_function(wrap_pyfunction!(check_target, m)?)?;
    m.add_function(wrap_pyfunction!(create_dir_below, m)?)?;
    Ok(())
}
