//! Accuracy metrics of the `ulp` crate for the Python replay (`numprobe.pytorch.run_ut`).
//!
//! Python hands each output over as the `data_ptr` of a contiguous CPU tensor it keeps alive,
//! with its element count, numpy dtype name, shape and the torch dtype msprobe reports for it.
//! The metrics run on that memory in place, with the GIL released.

use half::f16;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use ulp::check::DETAIL_KEYS;
use ulp::{ArrayData, CheckOptions, DetailRow, Routing, TensorRef, TorchDtype};

/// Borrows `len` elements of `T` at `ptr`.
///
/// # Safety
/// `ptr` is the `data_ptr()` of a contiguous CPU tensor with `len` elements of type `T` that
/// the caller keeps alive (and unmodified) for the duration of the call.
unsafe fn borrow_elems<'a, T>(ptr: usize, len: usize) -> PyResult<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr == 0 || !ptr.is_multiple_of(std::mem::align_of::<T>()) {
        return Err(PyValueError::new_err(format!(
            "tensor memory at {ptr:#x} is null or not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const T, len) })
}

/// # Safety
/// See [`borrow_elems`].
unsafe fn array<'a>(ptr: usize, len: usize, numpy_dtype: &str) -> PyResult<ArrayData<'a>> {
    unsafe {
        Ok(match numpy_dtype {
            "float16" => ArrayData::F16(borrow_elems::<f16>(ptr, len)?),
            "float32" => ArrayData::F32(borrow_elems::<f32>(ptr, len)?),
            "float64" => ArrayData::F64(borrow_elems::<f64>(ptr, len)?),
            // torch.bool is one byte per element holding 0 or 1, like Rust's bool.
            "bool" => ArrayData::Bool(borrow_elems::<bool>(ptr, len)?),
            "uint8" => ArrayData::U8(borrow_elems::<u8>(ptr, len)?),
            "int8" => ArrayData::I8(borrow_elems::<i8>(ptr, len)?),
            "int16" => ArrayData::I16(borrow_elems::<i16>(ptr, len)?),
            "uint16" => ArrayData::U16(borrow_elems::<u16>(ptr, len)?),
            "int32" => ArrayData::I32(borrow_elems::<i32>(ptr, len)?),
            "uint32" => ArrayData::U32(borrow_elems::<u32>(ptr, len)?),
            "int64" => ArrayData::I64(borrow_elems::<i64>(ptr, len)?),
            "uint64" => ArrayData::U64(borrow_elems::<u64>(ptr, len)?),
            other => {
                return Err(PyValueError::new_err(format!(
                    "unsupported host dtype {other:?} for the accuracy check"
                )));
            }
        })
    }
}

fn torch_dtype(name: &str) -> PyResult<TorchDtype> {
    TorchDtype::parse(name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown torch dtype {name:?}")))
}

fn routing(name: &str) -> PyResult<Routing> {
    match name {
        "26.2" | "v26_2" => Ok(Routing::V26_2),
        "list" | "list_driven" => Ok(Routing::ListDriven),
        other => Err(PyValueError::new_err(format!(
            "routing must be \"26.2\" or \"list\", not {other:?}"
        ))),
    }
}

/// The detail row of one output (`accuracy_checking_details_*.csv`).
#[pyclass(frozen, name = "DetailRow", module = "numprobe._native")]
struct PyDetailRow {
    row: DetailRow,
}

#[pymethods]
impl PyDetailRow {
    #[getter]
    fn status(&self) -> &str {
        &self.row.status
    }
    #[getter]
    fn message(&self) -> &str {
        &self.row.message
    }
    /// The 22 cells after the API Name column, as msprobe's CSV writer prints them.
    fn cells(&self) -> Vec<String> {
        self.row.cells().iter().map(|c| c.csv_text()).collect()
    }
    /// The exact CSV record (`\r\n`-terminated, no BOM) with `row_name` in the API Name column.
    fn csv_line(&self, row_name: &str) -> String {
        self.row.csv_line(row_name)
    }
    /// `{key: cell text}` in CSV column order (keys as in the reference vectors).
    fn as_dict(&self) -> Vec<(&'static str, String)> {
        DETAIL_KEYS
            .iter()
            .copied()
            .zip(self.row.cells().iter().map(|c| c.csv_text()))
            .collect()
    }
    fn __repr__(&self) -> String {
        format!("DetailRow(status={:?})", self.row.status)
    }
}

/// One side of a comparison as Python passes it.
#[derive(FromPyObject)]
struct SideTuple(usize, usize, String, Vec<usize>, String);

struct Side {
    ptr: usize,
    numel: usize,
    numpy_dtype: String,
    shape: Vec<usize>,
    torch_dtype: String,
}

impl From<SideTuple> for Side {
    fn from(t: SideTuple) -> Self {
        Side {
            ptr: t.0,
            numel: t.1,
            numpy_dtype: t.2,
            shape: t.3,
            torch_dtype: t.4,
        }
    }
}

/// Compares one bench/device output pair as msprobe's run_ut does.
///
/// `bench` and `device` are `(data_ptr, numel, numpy_dtype, shape, torch_dtype)` tuples of
/// contiguous CPU tensors the caller keeps alive; `numpy_dtype` is how numpy would see the
/// memory (bf16 outputs are passed already widened to float32, with torch_dtype `torch.bfloat16`).
#[pyfunction]
#[pyo3(signature = (api_name, bench, device, fp8_input=false, routing="26.2"))]
fn check_output(
    py: Python<'_>,
    api_name: &str,
    bench: SideTuple,
    device: SideTuple,
    fp8_input: bool,
    routing: &str,
) -> PyResult<PyDetailRow> {
    let (bench, device) = (Side::from(bench), Side::from(device));
    let opts = CheckOptions {
        routing: self::routing(routing)?,
        fp8_input,
    };
    let (bt, dt) = (
        torch_dtype(&bench.torch_dtype)?,
        torch_dtype(&device.torch_dtype)?,
    );
    for side in [&bench, &device] {
        let expected: usize = side.shape.iter().product();
        if expected != side.numel {
            return Err(PyValueError::new_err(format!(
                "shape {:?} holds {expected} elements, but numel is {}",
                side.shape, side.numel
            )));
        }
    }
    // SAFETY: the Python caller passes data_ptr/numel of contiguous CPU tensors it holds.
    let (b, d) = unsafe {
        (
            array(bench.ptr, bench.numel, &bench.numpy_dtype)?,
            array(device.ptr, device.numel, &device.numpy_dtype)?,
        )
    };
    let row = py.detach(|| {
        ulp::check_output(
            api_name,
            TensorRef {
                data: b,
                shape: &bench.shape,
                torch_dtype: bt,
            },
            TensorRef {
                data: d,
                shape: &device.shape,
                torch_dtype: dt,
            },
            opts,
        )
    });
    Ok(PyDetailRow { row })
}

/// run_ut's order-dependent roll-up of several output statuses (a later warning overrides an
/// earlier error).
#[pyfunction]
fn rollup_statuses(statuses: Vec<String>) -> &'static str {
    ulp::rollup_statuses(&statuses)
}

/// The accuracy standard msprobe applies to an output (`benchmark`, `absolute_threshold`, ...).
#[pyfunction]
#[pyo3(signature = (api_name, out_dtype, in_dtype="torch.float32", routing="26.2"))]
fn standard_for(
    api_name: &str,
    out_dtype: &str,
    in_dtype: &str,
    routing: &str,
) -> PyResult<&'static str> {
    Ok(ulp::standard_for(api_name, out_dtype, in_dtype, self::routing(routing)?).as_str())
}

/// The bare API name of `Torch.matmul.0` (`matmul`) or `Torch.linalg.inv.0` (`linalg.inv`).
#[pyfunction]
fn bare_api_name(full: &str) -> Option<String> {
    ulp::bare_api_name(full)
}

/// The detail CSV header.
#[pyfunction]
fn detail_header() -> Vec<&'static str> {
    ulp::DETAIL_HEADER.to_vec()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDetailRow>()?;
    m.add_function(wrap_pyfunction!(check_output, m)?)?;
    m.add_function(wrap_pyfunction!(rollup_statuses, m)?)?;
    m.add_function(wrap_pyfunction!(standard_for, m)?)?;
    m.add_function(wrap_pyfunction!(bare_api_name, m)?)?;
    m.add_function(wrap_pyfunction!(detail_header, m)?)?;
    Ok(())
}
