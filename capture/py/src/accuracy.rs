//! Accuracy metrics of the `ulp` crate for the Python replay (`numprobe.pytorch.run_ut`).
//!
//! Python hands each output over as the `data_ptr` of a contiguous CPU tensor it keeps alive,
//! with its element count, numpy dtype name, shape and the torch dtype msprobe reports for it.
//! The metrics run on that memory in place, with the GIL released, either in the call or on a
//! metrics thread while Python goes on (`check_output_async`, or `check_outputs_async` for
//! the outputs of several APIs in one hand-over).

use std::sync::{Arc, Condvar, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use ulp::check::DETAIL_KEYS;
use ulp::{CheckOptions, DType, DetailRow, Output, PyVal, Routing, TensorView};

/// The dtype of host memory numpy would see as `numpy_dtype`: floats, bool and integers.
fn host_dtype(numpy_dtype: &str) -> PyResult<DType> {
    DType::from_numpy_name(numpy_dtype)
        .filter(|&d| matches!(d, DType::F16 | DType::F32 | DType::F64 | DType::Bool) || d.is_int())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unsupported host dtype {numpy_dtype:?} for the accuracy check"
            ))
        })
}

/// Checks that `numel` elements of `dtype` at `ptr` can be borrowed as a typed slice.
fn check_memory(ptr: usize, numel: usize, dtype: DType) -> PyResult<()> {
    // Every host dtype's alignment is its size.
    let align = dtype.size();
    if numel != 0 && (ptr == 0 || !ptr.is_multiple_of(align)) {
        return Err(PyValueError::new_err(format!(
            "tensor memory at {ptr:#x} is null or not aligned to {align} bytes"
        )));
    }
    Ok(())
}

/// A view of `shape` elements of `dtype` at `ptr`.
///
/// # Safety
/// `ptr` is the `data_ptr()` of a contiguous CPU tensor of that many elements, checked by
/// [`check_memory`], that the caller keeps alive (and unmodified) while the view is used.
unsafe fn view<'a>(ptr: usize, dtype: DType, shape: &'a [usize]) -> PyResult<TensorView<'a>> {
    let len = shape.iter().product::<usize>() * dtype.size();
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
    };
    // torch.bool is one byte per element holding 0 or 1, like Rust's bool.
    TensorView::new(dtype, shape, bytes).map_err(|e| PyValueError::new_err(e.to_string()))
}

fn torch_dtype(name: &str) -> PyResult<DType> {
    DType::from_torch_name(name)
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
    host_dtype: DType,
    shape: Vec<usize>,
    torch_dtype: DType,
}

impl Side {
    /// # Safety
    /// See [`view`]: the memory must stay alive and unmodified while the result is used.
    unsafe fn output(&self) -> PyResult<Output<'_>> {
        let view = unsafe { view(self.ptr, self.host_dtype, &self.shape)? };
        Ok(Output::with_dtype(view, self.torch_dtype))
    }
}

/// One comparison, owned, so it can run on another thread.
struct Comparison {
    api_name: String,
    bench: Side,
    device: Side,
    opts: CheckOptions,
}

impl Comparison {
    fn new(
        api_name: &str,
        bench: SideTuple,
        device: SideTuple,
        fp8_input: bool,
        routing: &str,
    ) -> PyResult<Self> {
        let opts = CheckOptions {
            routing: self::routing(routing)?,
            fp8_input,
            ..CheckOptions::default()
        };
        let (bt, dt) = (torch_dtype(&bench.4)?, torch_dtype(&device.4)?);
        for t in [&bench, &device] {
            let expected: usize = t.3.iter().product();
            if expected != t.1 {
                return Err(PyValueError::new_err(format!(
                    "shape {:?} holds {expected} elements, but numel is {}",
                    t.3, t.1
                )));
            }
        }
        // Dtype names and alignment, checked here so that `run` cannot fail on them later.
        let side = |t: SideTuple, torch_dtype| -> PyResult<Side> {
            let host_dtype = host_dtype(&t.2)?;
            check_memory(t.0, t.1, host_dtype)?;
            Ok(Side {
                ptr: t.0,
                host_dtype,
                shape: t.3,
                torch_dtype,
            })
        };
        let (bench, device) = (side(bench, bt)?, side(device, dt)?);
        Ok(Comparison {
            api_name: api_name.to_string(),
            bench,
            device,
            opts,
        })
    }

    /// # Safety
    /// Both sides' memory is alive and unmodified for the duration of the call.
    unsafe fn run(&self) -> PyResult<DetailRow> {
        let (b, d) = unsafe { (self.bench.output()?, self.device.output()?) };
        ulp::check_output(&self.api_name, b, d, self.opts)
            .map(|verdict| verdict.row)
            .map_err(|e| PyValueError::new_err(e.to_string()))
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
    let cmp = Comparison::new(api_name, bench, device, fp8_input, routing)?;
    // SAFETY: the Python caller passes data_ptr/numel of contiguous CPU tensors it holds.
    let row = py.detach(|| unsafe { cmp.run() })?;
    Ok(PyDetailRow { row })
}

/// `(status, message, CSV record after the name cell)` of one detail row.
type RowTexts = (String, String, String);

/// The detail rows of all the outputs of one API in one call (the replay's common case: every
/// output a plain CPU tensor small enough to judge inline), so that Python pays one call and no
/// row objects. `pairs` holds `(bench, device)` side tuples as [`check_output`] takes them.
///
/// Returns the rolled-up status of the rows (as `rollup_statuses`) and per output
/// `(status, message, tail)`, where `tail` is the CSV record after its API Name cell (the
/// leading comma included, `\r\n`-terminated): the record is the quoted row name followed by
/// `tail`. Raises on the first pair `check_output` would raise on, before computing any row.
#[pyfunction]
#[pyo3(signature = (api_name, pairs, fp8_input=false, routing="26.2"))]
fn check_outputs(
    py: Python<'_>,
    api_name: &str,
    pairs: Vec<(SideTuple, SideTuple)>,
    fp8_input: bool,
    routing: &str,
) -> PyResult<(&'static str, Vec<RowTexts>)> {
    let cmps = comparisons(api_name, pairs, fp8_input, routing)?;
    // SAFETY: the Python caller passes data_ptr/numel of contiguous CPU tensors it holds for
    // the duration of the call.
    py.detach(|| unsafe { run_all(&cmps) })
}

fn comparisons(
    api_name: &str,
    pairs: Vec<(SideTuple, SideTuple)>,
    fp8_input: bool,
    routing: &str,
) -> PyResult<Vec<Comparison>> {
    pairs
        .into_iter()
        .map(|(b, d)| Comparison::new(api_name, b, d, fp8_input, routing))
        .collect()
}

/// The rolled-up status and row texts of one API's comparisons.
///
/// # Safety
/// As [`Comparison::run`], for every comparison.
unsafe fn run_all(cmps: &[Comparison]) -> PyResult<(&'static str, Vec<RowTexts>)> {
    let rows = cmps
        .iter()
        .map(|c| unsafe { c.run() })
        .collect::<PyResult<Vec<_>>>()?;
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    let status = ulp::rollup_statuses(&statuses);
    let out = rows
        .into_iter()
        .map(|row| {
            let tail = csv_tail(&row);
            (row.status, row.message, tail)
        })
        .collect();
    Ok((status, out))
}

/// `row.csv_line("")`, the record after its (empty) API Name cell, written straight into one
/// string: the same text without a string per cell (the replay writes one per output).
fn csv_tail(row: &DetailRow) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(320);
    let str_cell = |out: &mut String, cell: &str| {
        out.push(',');
        if cell.contains([',', '"', '\r', '\n']) {
            out.push('"');
            out.push_str(&cell.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(cell);
        }
    };
    str_cell(&mut out, &row.bench_dtype);
    str_cell(&mut out, &row.device_dtype);
    let metrics = [
        &row.shape,
        &row.cosine,
        &row.max_abs_err,
        &row.rel_err_hundredth,
        &row.rel_err_thousandth,
        &row.rel_err_ten_thousandth,
        &row.error_rate,
        &row.eb,
        &row.rmse,
        &row.small_value_err_ratio,
        &row.max_rel_error,
        &row.mean_rel_error,
        &row.inf_nan_error_ratio,
        &row.rel_err_ratio,
        &row.abs_err_ratio,
        &row.max_ulp_error,
        &row.mean_ulp_error,
        &row.ulp_error_proportion,
    ];
    for cell in metrics {
        match cell {
            PyVal::Str(text) => str_cell(&mut out, text),
            // Finite floats as `"{:.14f}"` (digits and signs never need quotes); the rest as
            // their own CSV text.
            PyVal::F64 { v, .. } if v.is_finite() => {
                let _ = write!(out, ",{v:.14}");
            }
            PyVal::Int { v, .. } => {
                let _ = write!(out, ",{v}");
            }
            other => str_cell(&mut out, &other.csv_text()),
        }
    }
    str_cell(&mut out, &row.status);
    str_cell(&mut out, &row.message);
    out.push_str(ulp::pyfmt::CSV_LINE_END);
    out
}

/// Where the metrics thread leaves a result.
enum State<T> {
    Running,
    Done(Box<T>),
    Taken,
}

type Slot<T> = Arc<(Mutex<State<T>>, Condvar)>;

fn new_slot<T>() -> Slot<T> {
    Arc::new((Mutex::new(State::Running), Condvar::new()))
}

/// Leaves `result` in `slot` and wakes its waiters.
fn fill<T>(slot: &Slot<T>, result: T) {
    let (lock, done) = &**slot;
    *lock.lock().unwrap_or_else(|e| e.into_inner()) = State::Done(Box::new(result));
    done.notify_all();
}

/// Takes the result out of `slot`, waiting for it without the GIL; `None` if already taken.
fn take<T: Send>(py: Python<'_>, slot: &Slot<T>) -> Option<T> {
    match py.detach(|| std::mem::replace(&mut *wait_done(slot), State::Taken)) {
        State::Done(result) => Some(*result),
        State::Taken | State::Running => None,
    }
}

/// Whether the result is in `slot` (or was taken).
fn is_done<T>(slot: &Slot<T>) -> bool {
    let (lock, _) = &**slot;
    let state = lock.lock().unwrap_or_else(|e| e.into_inner());
    !matches!(*state, State::Running)
}

/// A detail row computed on numprobe's metrics thread (see [`check_output_async`]); it holds
/// the two tensors whose memory the thread reads until the row is done.
#[pyclass(name = "PendingRow", module = "numprobe._native")]
struct PendingRow {
    slot: Slot<PyResult<DetailRow>>,
    /// The tensors (or any owners of the memory) passed as `keep`: released only once the
    /// metrics thread is done with them.
    keep: Option<Py<PyAny>>,
}

/// Blocks until the metrics thread has left its result in `slot`.
fn wait_done<T>(slot: &Slot<T>) -> std::sync::MutexGuard<'_, State<T>> {
    let (lock, done) = &**slot;
    // A poisoned lock still holds a valid state: it is only ever replaced whole.
    let mut guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    while matches!(*guard, State::Running) {
        guard = done.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
    guard
}

#[pymethods]
impl PendingRow {
    /// Waits for the row (without the GIL). Raises what `check_output` would have raised; a
    /// second call raises RuntimeError.
    fn wait(&mut self, py: Python<'_>) -> PyResult<PyDetailRow> {
        let row = take(py, &self.slot);
        self.keep = None;
        match row {
            Some(row) => Ok(PyDetailRow { row: row? }),
            None => Err(PyRuntimeError::new_err("row already taken")),
        }
    }

    /// Whether the row is ready (`wait` would not block).
    fn done(&self) -> bool {
        is_done(&self.slot)
    }
}

impl Drop for PendingRow {
    fn drop(&mut self) {
        if self.keep.is_some() {
            // The metrics thread may still read the kept tensors' memory: wait for it before
            // they are released. It never takes the GIL, so waiting with it cannot deadlock.
            drop(wait_done(&self.slot));
        }
    }
}

/// [`check_output`] on numprobe's metrics thread: returns at once with a `PendingRow` whose
/// `wait()` gives the row. Rows are computed one at a time, in the order asked, on one core,
/// so a caller can judge one API while torch runs the next. `keep` is held until the row is
/// done: pass the tensors (or a tuple of them) whose `data_ptr`s `bench` and `device` hold.
/// Argument errors are raised here, as `check_output` raises them.
#[pyfunction]
#[pyo3(signature = (api_name, bench, device, keep, fp8_input=false, routing="26.2"))]
fn check_output_async(
    api_name: &str,
    bench: SideTuple,
    device: SideTuple,
    keep: Py<PyAny>,
    fp8_input: bool,
    routing: &str,
) -> PyResult<PendingRow> {
    let cmp = Comparison::new(api_name, bench, device, fp8_input, routing)?;
    let slot = new_slot();
    let filled = slot.clone();
    ulp::fused::spawn_on_one_thread(move || {
        // SAFETY: the PendingRow holding `keep` (the owners of this memory) waits for this
        // job before releasing them, also when it is dropped unread.
        let row = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { cmp.run() }))
            .unwrap_or_else(|_| Err(panicked()));
        fill(&filled, row);
    });
    Ok(PendingRow {
        slot,
        keep: Some(keep),
    })
}

fn panicked() -> PyErr {
    PyRuntimeError::new_err("the accuracy metrics panicked on this output")
}

/// One API's outputs in [`check_outputs_async`]: its bare name, `(bench, device)` side pairs
/// and whether an input was fp8.
type BatchItem = (String, Vec<(SideTuple, SideTuple)>, bool);

/// What [`PendingBatch::wait`] gives per API: what `check_outputs` returns, or the error it
/// raised.
type BatchResult = PyResult<(&'static str, Vec<RowTexts>)>;

/// The rows of several APIs computed on the metrics thread (see [`check_outputs_async`]);
/// holds the tensors whose memory the thread reads until they are done.
#[pyclass(name = "PendingBatch", module = "numprobe._native")]
struct PendingBatch {
    slot: Slot<Vec<BatchResult>>,
    keep: Option<Py<PyAny>>,
}

#[pymethods]
impl PendingBatch {
    /// Waits for the batch (without the GIL): per API in the order given, `(True, status,
    /// rows)` as `check_outputs` returns them, or `(False, message, [])` where it would have
    /// raised ValueError or RuntimeError. A second call raises RuntimeError.
    fn wait(&mut self, py: Python<'_>) -> PyResult<Vec<(bool, String, Vec<RowTexts>)>> {
        let results = take(py, &self.slot);
        self.keep = None;
        let results = results.ok_or_else(|| PyRuntimeError::new_err("batch already taken"))?;
        Ok(results
            .into_iter()
            .map(|r| match r {
                Ok((status, rows)) => (true, status.to_string(), rows),
                Err(e) => (false, e.value(py).to_string(), Vec::new()),
            })
            .collect())
    }

    /// Whether the batch is done (`wait` would not block).
    fn done(&self) -> bool {
        is_done(&self.slot)
    }
}

impl Drop for PendingBatch {
    fn drop(&mut self) {
        if self.keep.is_some() {
            // As PendingRow: the kept tensors outlive the thread's reads.
            drop(wait_done(&self.slot));
        }
    }
}

/// [`check_outputs`] for several APIs in one job on numprobe's metrics thread: returns at once
/// with a `PendingBatch`. One hand-over for many small outputs (waking the thread costs about
/// what judging one small output does). An API whose sides `check_outputs` would reject gets
/// its error in the batch; the others are computed. `keep` is held until the batch is done:
/// the owners of every `data_ptr` in `items`.
#[pyfunction]
#[pyo3(signature = (items, keep, routing="26.2"))]
fn check_outputs_async(
    items: Vec<BatchItem>,
    keep: Py<PyAny>,
    routing: &str,
) -> PyResult<PendingBatch> {
    let jobs: Vec<PyResult<Vec<Comparison>>> = items
        .into_iter()
        .map(|(api_name, pairs, fp8_input)| comparisons(&api_name, pairs, fp8_input, routing))
        .collect();
    let slot = new_slot();
    let filled = slot.clone();
    ulp::fused::spawn_on_one_thread(move || {
        let results = jobs
            .into_iter()
            .map(|job| {
                let cmps = job?;
                // SAFETY: as in check_output_async: the PendingBatch holding `keep` waits for
                // this job before releasing the memory.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { run_all(&cmps) }))
                    .unwrap_or_else(|_| Err(panicked()))
            })
            .collect();
        fill(&filled, results);
    });
    Ok(PendingBatch {
        slot,
        keep: Some(keep),
    })
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
    m.add_class::<PendingRow>()?;
    m.add_class::<PendingBatch>()?;
    m.add_function(wrap_pyfunction!(check_output, m)?)?;
    m.add_function(wrap_pyfunction!(check_output_async, m)?)?;
    m.add_function(wrap_pyfunction!(check_outputs, m)?)?;
    m.add_function(wrap_pyfunction!(check_outputs_async, m)?)?;
    m.add_function(wrap_pyfunction!(rollup_statuses, m)?)?;
    m.add_function(wrap_pyfunction!(standard_for, m)?)?;
    m.add_function(wrap_pyfunction!(bare_api_name, m)?)?;
    m.add_function(wrap_pyfunction!(detail_header, m)?)?;
    Ok(())
}
