//! `numprobe._native`: the Rust side of the Python adapter. Python hands over tensors as raw
//! pointers (`data_ptr`, byte length, dtype name, shape) of contiguous CPU memory; statistics
//! are computed in place with the GIL released, entries go to the crash-safe journal, and
//! tensor files are written on a background thread.

mod accuracy;
mod api_call;
mod call_sites;
mod cluster;
mod dlpack;
mod outfiles;
mod ptread;
mod stage_timers;
mod torch_shim;
mod walk;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capture::journal::{Fill, Meta, Record};
use capture::state::RenderedBody;
use capture::stats::{TensorInfo, pending_record, tensor_record_into, type_name};
use capture::stats_worker::{StatsJob, StatsWorker, fill_of};
use capture::tensors::{TensorJob, TensorWriter};
use dumpfmt::dump::TensorRecord;
use dumpfmt::json::{Map, Value};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use stage_timers::{Lap, Stage};
use stats_gpu::summary::{Flavour, Options, Precision, SummaryMode};
use walk::{Walk, Walker};

fn os_err(e: capture::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

fn summary_mode(s: &str) -> PyResult<SummaryMode> {
    Ok(match s {
        "statistics" => SummaryMode::Statistics,
        "md5" => SummaryMode::Md5,
        "xor" => SummaryMode::Xor,
        other => {
            return Err(PyValueError::new_err(format!(
                "summary_mode must be statistics, md5 or xor, not {other:?}"
            )));
        }
    })
}

/// Tensors below this many bytes are summarised without releasing the GIL.
const DETACH_MIN_BYTES: usize = 16 << 10;

/// A finished tensor record (opaque to Python; placed inside entry bodies).
#[pyclass(frozen, module = "numprobe._native")]
pub(crate) struct TensorRec {
    pub(crate) value: Value,
    /// The pending id of a placeholder whose statistics come later (`Session.fill`).
    pub(crate) pending: Option<u64>,
    /// The value's text as first written, and the nesting level it was written at: a record
    /// from the record cache is written again for every call that reads its tensor.
    rendered: OnceLock<(usize, Vec<u8>)>,
}

impl TensorRec {
    pub(crate) fn new(value: Value, pending: Option<u64>) -> TensorRec {
        TensorRec {
            value,
            pending,
            rendered: OnceLock::new(),
        }
    }

    /// [`TensorRec::new`] of a record whose text at `level` is known already.
    pub(crate) fn with_text(value: Value, level: usize, text: Vec<u8>) -> TensorRec {
        TensorRec {
            value,
            pending: None,
            rendered: OnceLock::from((level, text)),
        }
    }

    /// Writes the value `level` containers deep (as `json::write_python_at` does).
    pub(crate) fn write_python_at(&self, level: usize, out: &mut Vec<u8>) {
        if let Some((l, text)) = self.rendered.get()
            && *l == level
        {
            out.extend_from_slice(text);
            return;
        }
        let at = out.len();
        dumpfmt::json::write_python_at(&self.value, level, out);
        // A placeholder's text changes once its statistics come: never kept.
        if self.pending.is_none() {
            let _ = self.rendered.set((level, out[at..].to_vec()));
        }
    }
}

/// Borrows `nbytes` bytes at `ptr`.
///
/// # Safety
/// The caller (our Python code) passes the `data_ptr()` of a contiguous CPU tensor it keeps
/// alive for the duration of the call, and `nbytes = numel * element_size`.
pub(crate) unsafe fn borrow<'a>(ptr: usize, nbytes: usize) -> &'a [u8] {
    if nbytes == 0 || ptr == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(ptr as *const u8, nbytes) }
    }
}

/// The record of `info` with statistics of its `nbytes` bytes, read in place; the GIL is
/// released for the pass unless the tensor is small (releasing and taking it back costs more
/// than the pass then).
pub(crate) fn record_in_place(
    py: Python<'_>,
    info: &TensorInfo<'_>,
    opts: &Options,
    nbytes: usize,
) -> PyResult<TensorRecord> {
    let mut rec = TensorRecord::new("", "", Vec::new());
    record_in_place_into(py, info, opts, nbytes, &mut rec)?;
    Ok(rec)
}

/// [`record_in_place`] written over `rec` (see [`tensor_record_into`]).
pub(crate) fn record_in_place_into(
    py: Python<'_>,
    info: &TensorInfo<'_>,
    opts: &Options,
    nbytes: usize,
    rec: &mut TensorRecord,
) -> PyResult<()> {
    if nbytes < DETACH_MIN_BYTES {
        tensor_record_into(info, opts, rec)
    } else {
        py.detach(|| tensor_record_into(info, opts, rec))
    }
    .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `obj` as a JSON value; the pending ids of placeholder tensor records met on the way are
/// pushed to `pending`.
pub(crate) fn to_value(
    obj: &Bound<'_, PyAny>,
    depth: usize,
    pending: &mut Vec<u64>,
) -> PyResult<Value> {
    if depth > 400 {
        return Err(PyValueError::new_err("value nested deeper than 400 levels"));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(r) = obj.cast::<TensorRec>() {
        let r = r.get();
        pending.extend(r.pending);
        return Ok(r.value.clone());
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        return walk::int_value(i);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::from(s.to_cow()?.as_ref()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(Value::Object(dict_to_map(d, depth + 1, pending)?));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|x| to_value(&x, depth + 1, pending))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|x| to_value(&x, depth + 1, pending))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    Err(PyTypeError::new_err(format!(
        "cannot record a value of type {}",
        obj.get_type().name()?
    )))
}

fn dict_to_map(d: &Bound<'_, PyDict>, depth: usize, pending: &mut Vec<u64>) -> PyResult<Map> {
    let mut m = Map::with_capacity(d.len());
    for (k, v) in d.iter() {
        let k = k
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("entry keys must be str"))?
            .to_cow()?
            .into_owned();
        m.insert(k, to_value(&v, depth, pending)?);
    }
    Ok(m)
}

/// An entry body written key by key (each value at `capture::state::VALUE_LEVEL`) by a walk.
struct BodyText(RenderedBody);

impl BodyText {
    fn new() -> BodyText {
        // A tensor record renders to about 300 bytes: most bodies fit without growing.
        BodyText(RenderedBody {
            text: Vec::with_capacity(1024),
            parts: Vec::with_capacity(2),
        })
    }

    /// Key `key`, its value written by `write`.
    fn part(
        &mut self,
        key: &str,
        write: impl FnOnce(&mut Vec<u8>) -> PyResult<()>,
    ) -> PyResult<()> {
        let at = self.0.text.len();
        write(&mut self.0.text)?;
        self.0.parts.push((key.into(), at..self.0.text.len()));
        Ok(())
    }
}

/// The capture of one rank directory.
#[pyclass(module = "numprobe._native")]
struct Session {
    /// Declared before `owners`: dropping it finishes every job while their memory is held.
    worker: Option<StatsWorker>,
    /// What keeps each job's memory alive (the tensor's storage), until `reap` reports it.
    owners: HashMap<u64, Py<PyAny>>,
    /// Statistics of finished jobs, by pending id (an entry journaled later that reuses the
    /// placeholder gets its fill from here).
    finished: HashMap<u64, Fill>,
    /// Pending ids that appear in a journaled entry (a fill may only follow its entry).
    journaled: HashSet<u64>,
    inner: Option<capture::Session>,
    tensors: TensorWriter,
    opts: Options,
    /// torch's intra-op thread count: float32 Mean/Norm follow its summation order.
    torch_threads: Option<usize>,
    /// The id the next placeholder record gets (unique within the session's journal).
    next_pending: u64,
    /// `close` also fsyncs the journal and JSON files (NUMPROBE_FSYNC, read by the package).
    fsync: bool,
    /// A clean stop/close keeps the journal (NUMPROBE_KEEP_JOURNAL) instead of removing it.
    keep_journal: bool,
    /// Pause of the statistics thread before each job (tests only; see `StatsWorker::new`).
    stats_thread_delay: Option<Duration>,
    /// What the native walk of API values needs of torch (`set_walker`, see [`WalkerSpec`]).
    walker: Option<Arc<Walker>>,
    /// The stack group of each call site recorded in this session.
    sites: call_sites::SiteGroups,
}

impl Session {
    fn inner(&mut self) -> PyResult<&mut capture::Session> {
        self.inner
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("session is closed"))
    }

    /// A placeholder record under the next pending id (`pending_record`): for statistics
    /// computed on the tensor's device or on the statistics thread. `host`: the tensor's host
    /// bytes, which md5 mode's checksum needs.
    fn placeholder(
        &mut self,
        py: Python<'_>,
        dtype: &str,
        shape: &[usize],
        requires_grad: Option<bool>,
        data_name: Option<&str>,
        host: Option<&[u8]>,
    ) -> PyResult<(TensorRec, u64)> {
        let info = TensorInfo {
            type_name: type_name(self.opts.flavour),
            dtype,
            shape,
            bytes: host,
            requires_grad,
            data_name,
            torch_threads: None,
            torch_mean_norm: None,
            on_torch_threads: None,
        };
        let id = self.next_pending;
        let opts = self.opts;
        let value = py
            .detach(|| pending_record(&info, &opts, id))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        self.next_pending += 1;
        Ok((TensorRec::new(value, Some(id)), id))
    }

    /// Journals `body` into entry `name` (see `entry`); `pending`: the placeholder ids its
    /// records hold.
    fn commit(
        &mut self,
        name: String,
        body: Map,
        pending: Vec<u64>,
        reinsert: bool,
        stack_group: Option<usize>,
    ) -> PyResult<()> {
        if pending.is_empty() {
            let inner = self.inner()?;
            return match stack_group {
                Some(g) => {
                    let rec = Record::Entry {
                        name: name.clone(),
                        body,
                        reinsert,
                    };
                    inner.record_with_stack_ref(rec, name, g)
                }
                None => inner.record(Record::Entry {
                    name,
                    body,
                    reinsert,
                }),
            }
            .map_err(os_err);
        }
        let stack_name = stack_group.map(|g| (name.clone(), g));
        // Placeholders whose statistics thread job finished already get their fill now.
        let fills: Vec<Fill> = pending
            .iter()
            .filter_map(|id| self.finished.get(id).cloned())
            .collect();
        self.journaled.extend(pending.iter().copied());
        let rec = Record::PendingEntry {
            name,
            body,
            reinsert,
            pending,
        };
        let inner = self.inner()?;
        match stack_name {
            Some((n, g)) => inner.record_with_stack_ref(rec, n, g),
            None => inner.record(rec),
        }
        .map_err(os_err)?;
        inner.fill(fills).map_err(os_err)
    }

    /// [`Session::commit`] of a body a walk rendered: journaled as it is, unless it holds
    /// placeholders (their entries are kept as values until their statistics come).
    fn commit_rendered(
        &mut self,
        name: String,
        body: RenderedBody,
        pending: Vec<u64>,
        stack_group: Option<usize>,
    ) -> PyResult<()> {
        if !pending.is_empty() {
            return self.commit(name, body.to_map(), pending, false, stack_group);
        }
        self.inner()?
            .record_rendered(name, body, false, stack_group)
            .map_err(os_err)
    }

    /// A walk of one entry's values with the session's settings; no borrow of the session is
    /// held while it runs (the recorder's fallbacks call the session).
    fn walk<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        recorder: &Bound<'py, PyAny>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Walk<'py>> {
        let s = slf.borrow();
        if s.inner.is_none() {
            return Err(PyValueError::new_err("session is closed"));
        }
        let walker = s
            .walker
            .clone()
            .ok_or_else(|| PyValueError::new_err("set_walker was not called"))?;
        Ok(Walk {
            walker,
            opts: s.opts,
            torch_threads: s.torch_threads,
            recorder: recorder.clone(),
            entry: name.clone(),
            pending: Vec::new(),
            lazy_tf: lazy_tf.cloned(),
            tf: None,
        })
    }

    /// Takes the statistics thread's finished jobs (after completing `wait_for`, or all with
    /// `all`), journals the fills of those whose entry is journaled, and releases their memory.
    fn collect(
        &mut self,
        py: Python<'_>,
        wait_for: &[u64],
        all: bool,
    ) -> PyResult<Vec<(u64, Option<Value>)>> {
        let Some(worker) = &self.worker else {
            return Ok(Vec::new());
        };
        let done = py.detach(|| {
            if all {
                worker.complete_all();
            } else {
                for &id in wait_for {
                    worker.complete(id);
                }
            }
            worker.take_finished()
        });
        let mut fills = Vec::new();
        let mut out = Vec::with_capacity(done.len());
        for (id, result) in done {
            self.owners.remove(&id);
            // Inputs are checked at submission, so a failed job is not expected; its record
            // keeps null statistics, as a killed run's would.
            let record = result.ok();
            if let Some(r) = &record {
                let fill = fill_of(id, r);
                if self.journaled.contains(&id) {
                    fills.push(fill.clone());
                }
                self.finished.insert(id, fill);
            }
            out.push((id, record));
        }
        self.inner()?.fill(fills).map_err(os_err)?;
        Ok(out)
    }
}

impl Session {
    /// [`Session::api_input`] of an entry whose name the caller has as a Rust string too
    /// (the native call path made it: no conversion back from the Python string).
    #[allow(clippy::too_many_arguments)]
    fn api_input_named<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        owned: String,
        args: &Bound<'py, PyAny>,
        kwargs: &Bound<'py, PyDict>,
        recorder: &Bound<'py, PyAny>,
        stack_group: Option<usize>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<bool> {
        let at = (Stage::InputWalk, Stage::InputCommit);
        Session::walk_entry(
            slf,
            name,
            owned,
            recorder,
            lazy_tf,
            stack_group,
            at,
            |walk, body| {
                body.part("input_args", |out| walk.list(args, "input", out))?;
                body.part("input_kwargs", |out| walk.kwargs(kwargs, out))
            },
        )?;
        Ok(stack_group.is_some())
    }

    /// [`Session::api_output`] of an entry whose name the caller has as a Rust string too.
    fn api_output_named<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        owned: String,
        out: &Bound<'py, PyAny>,
        recorder: &Bound<'py, PyAny>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let at = (Stage::OutputWalk, Stage::OutputCommit);
        Session::walk_entry(
            slf,
            name,
            owned,
            recorder,
            lazy_tf,
            None,
            at,
            |walk, body| body.part("output", |o| walk.outputs(out, o)),
        )
    }

    /// Entry `name` (`owned`: the same name as a Rust string): its body written by `write`
    /// with a walk of the session's settings, then journaled; the two timed as `stages`.
    #[allow(clippy::too_many_arguments)]
    fn walk_entry<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        owned: String,
        recorder: &Bound<'py, PyAny>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
        stack_group: Option<usize>,
        stages: (Stage, Stage),
        write: impl FnOnce(&mut Walk<'py>, &mut BodyText) -> PyResult<()>,
    ) -> PyResult<()> {
        let mut lap = Lap::start();
        let mut walk = Session::walk(slf, name, recorder, lazy_tf)?;
        let mut body = BodyText::new();
        write(&mut walk, &mut body)?;
        lap.lap(stages.0);
        slf.borrow_mut()
            .commit_rendered(owned, body.0, walk.pending, stack_group)?;
        lap.lap(stages.1);
        Ok(())
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (
        dir, task, level, framework, dump_data_dir, extra_info, summary_mode, precision="low",
        torch_threads=None, *, fsync=false, stats_thread_delay_ms=None, keep_journal=false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dir: PathBuf,
        task: String,
        level: String,
        framework: String,
        dump_data_dir: Option<String>,
        extra_info: bool,
        summary_mode: &str,
        precision: &str,
        torch_threads: Option<usize>,
        fsync: bool,
        stats_thread_delay_ms: Option<u64>,
        keep_journal: bool,
    ) -> PyResult<Session> {
        let opts = Options {
            mode: self::summary_mode(summary_mode)?,
            precision: match precision {
                "low" => Precision::Low,
                "high" => Precision::High,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "precision must be low or high, not {other:?}"
                    )));
                }
            },
            // "mindspore": records of `asnumpy()` buffers under MindSpore's names and rules.
            flavour: match framework.as_str() {
                "mindspore" => Flavour::MindSpore,
                _ => Flavour::PyTorch,
            },
            // Backend and float32 order are decided per tensor by capture (CPU, torch_threads).
            ..Options::default()
        };
        let meta = Meta {
            task,
            level,
            framework,
            dump_data_dir,
            extra_info,
        };
        let inner = capture::Session::create(&dir, meta).map_err(os_err)?;
        Ok(Session {
            worker: None,
            owners: HashMap::new(),
            finished: HashMap::new(),
            journaled: HashSet::new(),
            inner: Some(inner),
            tensors: TensorWriter::new(),
            opts,
            torch_threads,
            next_pending: 0,
            fsync,
            keep_journal,
            stats_thread_delay: stats_thread_delay_ms.map(Duration::from_millis),
            walker: None,
            sites: call_sites::SiteGroups::default(),
        })
    }

    /// A tensor record with statistics read in place from `ptr` (contiguous CPU memory);
    /// `mean_norm`: float32 Mean/Norm torch computed (see `TensorInfo::torch_mean_norm`).
    ///
    /// A MindSpore session takes the MindSpore dtype name (`Float32`…) and the `asnumpy()`
    /// buffer (`arr.ctypes.data`, `arr.nbytes`; BFloat16/Float8 as their float32 copy), see
    /// `capture::stats::mindspore_record`.
    #[pyo3(signature = (ptr, nbytes, dtype, shape, requires_grad, data_name=None, stats=true, mean_norm=None))]
    #[allow(clippy::too_many_arguments)]
    fn tensor(
        &self,
        py: Python<'_>,
        ptr: usize,
        nbytes: usize,
        dtype: &str,
        shape: Vec<usize>,
        requires_grad: Option<bool>,
        data_name: Option<&str>,
        stats: bool,
        mean_norm: Option<(f64, f64)>,
    ) -> PyResult<TensorRec> {
        // SAFETY: see `borrow`.
        let bytes = unsafe { borrow(ptr, nbytes) };
        let info = TensorInfo {
            type_name: type_name(self.opts.flavour),
            dtype,
            shape: &shape,
            bytes: stats.then_some(bytes),
            requires_grad,
            data_name,
            torch_threads: self.torch_threads,
            torch_mean_norm: mean_norm,
            on_torch_threads: None,
        };
        let value = record_in_place(py, &info, &self.opts, nbytes)?.to_value();
        Ok(TensorRec::new(value, None))
    }

    /// A placeholder record of a statistics-mode PyTorch tensor whose statistics the
    /// statistics thread computes from `ptr` (contiguous CPU memory, as for `tensor`) while
    /// the caller goes on; returns it and its job id. `owner` (the tensor's storage) is held
    /// until `reap` reports the job; the caller must not let the memory be written before
    /// then (`reap(wait_for=[id])` first). See `capture::stats_worker`.
    #[allow(clippy::too_many_arguments)]
    fn tensor_async(
        &mut self,
        py: Python<'_>,
        ptr: usize,
        nbytes: usize,
        dtype: &str,
        shape: Vec<usize>,
        requires_grad: Option<bool>,
        owner: Py<PyAny>,
    ) -> PyResult<(TensorRec, u64)> {
        if self.opts.mode != SummaryMode::Statistics || self.opts.flavour != Flavour::PyTorch {
            return Err(PyValueError::new_err(
                "statistics on the statistics thread need a PyTorch session in statistics mode",
            ));
        }
        let dt = dumpfmt::DType::from_torch_name(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {dtype}")))?;
        let numel: usize = shape.iter().product();
        if numel.checked_mul(dt.size()) != Some(nbytes) || (nbytes > 0 && ptr == 0) {
            return Err(PyValueError::new_err(format!(
                "{dtype} {shape:?} needs {} bytes, got {nbytes}",
                numel.saturating_mul(dt.size())
            )));
        }
        if self.worker.is_none() {
            let worker = StatsWorker::new(self.opts, self.torch_threads, self.stats_thread_delay);
            self.worker = Some(worker.map_err(os_err)?);
        }
        let (rec, id) = self.placeholder(py, dtype, &shape, requires_grad, None, None)?;
        self.owners.insert(id, owner);
        // SAFETY: `owner` keeps the memory allocated until the job is reaped, and the adapter
        // completes the job before anything writes into it (method contract).
        let job =
            unsafe { StatsJob::new(id, ptr, nbytes, dtype.to_string(), shape, requires_grad) };
        let worker = self.worker.as_ref().expect("started above");
        py.detach(|| worker.submit(job));
        Ok((rec, id))
    }

    /// Jobs of `tensor_async` finished since the last call, as `(id, record)` (record None
    /// for a job that failed): their statistics are journaled and their memory released.
    /// `wait_for`: ids to complete first (a job not started runs on this thread); `all`:
    /// complete every job.
    #[pyo3(signature = (wait_for=None, all=false))]
    fn reap(
        &mut self,
        py: Python<'_>,
        wait_for: Option<Vec<u64>>,
        all: bool,
    ) -> PyResult<Vec<(u64, Option<TensorRec>)>> {
        let done = self.collect(py, wait_for.as_deref().unwrap_or(&[]), all)?;
        Ok(done
            .into_iter()
            .map(|(id, r)| (id, r.map(|value| TensorRec::new(value, None))))
            .collect())
    }

    /// A placeholder tensor record for statistics computed on the tensor's device: its
    /// statistic keys hold `null` until `fill` supplies the values under the returned id.
    /// `crc`: `(ptr, nbytes)` of the tensor's contiguous host bytes, for the CRC-32 of md5
    /// mode (the checksum needs the bytes on the host; same contract as `tensor`).
    #[pyo3(signature = (dtype, shape, requires_grad, data_name=None, crc=None))]
    fn pending_tensor(
        &mut self,
        py: Python<'_>,
        dtype: &str,
        shape: Vec<u64>,
        requires_grad: Option<bool>,
        data_name: Option<&str>,
        crc: Option<(usize, usize)>,
    ) -> PyResult<(TensorRec, u64)> {
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let host = crc.map(|(ptr, nbytes)| {
            // SAFETY: see `borrow`.
            unsafe { borrow(ptr, nbytes) }
        });
        self.placeholder(py, dtype, &shape, requires_grad, data_name, host)
    }

    /// Journals the statistics of placeholder records: `rows` of `(id, Max, Min, Mean,
    /// Norm)`, each statistic None, a bool, an int or a float.
    #[allow(clippy::type_complexity)]
    fn fill(
        &mut self,
        rows: Vec<(
            u64,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
        )>,
    ) -> PyResult<()> {
        let mut ignored = Vec::new();
        let mut fills = Vec::with_capacity(rows.len());
        for (id, max, min, mean, norm) in rows {
            let mut stat = |x: &Bound<'_, PyAny>| -> PyResult<Value> {
                let v = to_value(x, 0, &mut ignored)?;
                match v {
                    Value::Null
                    | Value::Bool(_)
                    | Value::Int(_)
                    | Value::BigInt(_)
                    | Value::Float(_) => Ok(v),
                    _ => Err(PyTypeError::new_err(format!(
                        "statistic of pending record {id} is not a scalar"
                    ))),
                }
            };
            fills.push(Fill {
                id,
                stats: [stat(&max)?, stat(&min)?, stat(&mean)?, stat(&norm)?],
            });
        }
        self.inner()?.fill(fills).map_err(os_err)
    }

    /// Number of placeholder records still waiting for their statistics.
    fn pending_count(&mut self) -> PyResult<usize> {
        Ok(self.inner()?.state().pending_len())
    }

    /// Copies the tensor's bytes and queues a file for the writer thread: `.npy` (as `np.save`
    /// writes it) when `path` ends in `.npy`, else `.pt`. `dtype` is a torch name
    /// (`torch.float32`) or a numpy array's `dtype.str` (`<f4`, `|b1`; little-endian only).
    /// `location`: the storage location a `.pt` file names (`cpu`, `cuda:0`...: where the
    /// tensor lived, as `torch.save` of a device tensor writes it).
    #[pyo3(signature = (path, ptr, nbytes, dtype, shape, location="cpu"))]
    fn save_tensor(
        &mut self,
        path: PathBuf,
        ptr: usize,
        nbytes: usize,
        dtype: &str,
        shape: Vec<usize>,
        location: &str,
    ) -> PyResult<()> {
        let dt = dumpfmt::DType::from_torch_name(dtype)
            .or_else(|| dumpfmt::DType::from_npy_descr(dtype))
            .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {dtype}")))?;
        // SAFETY: see `borrow`.
        let bytes = unsafe { borrow(ptr, nbytes) }.to_vec();
        let format = capture::tensors::TensorFormat::from_path(&path);
        self.tensors
            .submit(TensorJob {
                path,
                format,
                dtype: dt,
                shape,
                bytes,
                location: location.into(),
            })
            .map_err(os_err)
    }

    /// Merges `body` into entry `name` (moved to the end of `data` with `reinsert`). With
    /// `stack_group`, also records `name`'s call stack as that group's (as `stack_ref`), in
    /// the same journal write.
    #[pyo3(signature = (name, body, reinsert=false, stack_group=None))]
    fn entry(
        &mut self,
        name: String,
        body: &Bound<'_, PyDict>,
        reinsert: bool,
        stack_group: Option<usize>,
    ) -> PyResult<()> {
        let mut pending = Vec::new();
        let body = dict_to_map(body, 0, &mut pending)?;
        self.commit(name, body, pending, reinsert, stack_group)
    }

    /// The walker the native walk of API values (`api_input`, `api_output`, `lists_entry`)
    /// uses in this session (see [`WalkerSpec`]).
    fn set_walker(&mut self, walker: &WalkerSpec) {
        self.walker = Some(walker.0.clone());
    }

    /// Entry `name`'s inputs in one call: `{"input_args": [...], "input_kwargs": {...}}` of
    /// `args` and `kwargs`, each value recorded as `recorder.value` would (which records the
    /// values this walk leaves to it). `stack_group` as for `entry`; returns whether the stack
    /// reference was recorded. Call with torch functions disabled, or give `lazy_tf`
    /// (`torch._C.DisableTorchFunction`) when no mode is on the torch-function stack: the walk
    /// turns them off before it hands a value to the recorder (see [`Walk::lazy_tf`]).
    #[pyo3(signature = (name, args, kwargs, recorder, stack_group=None, lazy_tf=None))]
    #[allow(clippy::too_many_arguments)]
    fn api_input<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        args: &Bound<'py, PyAny>,
        kwargs: &Bound<'py, PyDict>,
        recorder: &Bound<'py, PyAny>,
        stack_group: Option<usize>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<bool> {
        let owned = name.to_cow()?.into_owned();
        Session::api_input_named(
            slf,
            name,
            owned,
            args,
            kwargs,
            recorder,
            stack_group,
            lazy_tf,
        )
    }

    /// Entry `name`'s output in one call: `{"output": [...]}` of an API's return value as
    /// msprobe lists it (a plain tuple's members, anything else as one member; other tuples
    /// as `recorder.outputs` makes them). Torch functions and `lazy_tf` as for `api_input`.
    #[pyo3(signature = (name, out, recorder, lazy_tf=None))]
    fn api_output<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        out: &Bound<'py, PyAny>,
        recorder: &Bound<'py, PyAny>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let owned = name.to_cow()?.into_owned();
        Session::api_output_named(slf, name, owned, out, recorder, lazy_tf)
    }

    /// Entry `name` of lists: `{key: [record of x for x in seq], ...}` for each `(key, seq)`
    /// of `lists` (`key` one of `input`, `output`: a backward's gradients, a collective's
    /// arguments after the call), members recorded as `recorder.value` would. Torch functions
    /// and `lazy_tf` as for `api_input`.
    #[pyo3(signature = (name, lists, recorder, lazy_tf=None))]
    fn lists_entry<'py>(
        slf: &Bound<'py, Self>,
        name: &Bound<'py, PyString>,
        lists: Vec<(String, Bound<'py, PyAny>)>,
        recorder: &Bound<'py, PyAny>,
        lazy_tf: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let mut walk = Session::walk(slf, name, recorder, lazy_tf)?;
        let mut body = BodyText::new();
        for (key, seq) in &lists {
            let path_name = match key.as_str() {
                "input" => "input",
                "output" => "output",
                other => {
                    return Err(PyValueError::new_err(format!(
                        "list key must be input or output, not {other:?}"
                    )));
                }
            };
            if body
                .0
                .parts
                .iter()
                .any(|(k, _)| k.as_str() == Some(path_name))
            {
                return Err(PyValueError::new_err(format!(
                    "list key {path_name} given twice"
                )));
            }
            body.part(path_name, |out| walk.list(seq, path_name, out))?;
        }
        let name = name.to_cow()?.into_owned();
        slf.borrow_mut()
            .commit_rendered(name, body.0, walk.pending, None)
    }

    fn remove(&mut self, name: String) -> PyResult<()> {
        self.inner()?
            .record(Record::Remove { name })
            .map_err(os_err)
    }

    /// Records `name`'s call stack (a [`call_sites::StackFrames`] kept per call site, or a
    /// list of lines); returns its stack group for [`Session::stack_ref`].
    fn stack(&mut self, name: String, frames: &Bound<'_, PyAny>) -> PyResult<usize> {
        let inner = self.inner()?;
        match frames.cast::<call_sites::StackFrames>() {
            Ok(f) => inner.stack_frames(name, &f.get().0),
            Err(_) => inner.stack(name, frames.extract()?),
        }
        .map_err(os_err)
    }

    /// Records `name`'s call stack as the frames of stack group `group` of this session.
    fn stack_ref(&mut self, name: String, group: usize) -> PyResult<()> {
        self.inner()?.stack_ref(name, group).map_err(os_err)
    }

    /// The stack group of the call site whose key (`stack_key`) is `key` in this session,
    /// None when no entry of it was recorded yet.
    fn site_group(&self, key: &[u8]) -> Option<usize> {
        self.sites.get(key)
    }

    /// Records `name`'s call stack as that of the call site `key`: a reference to the site's
    /// group when the session has one, else `frames` (a [`call_sites::StackFrames`]) as
    /// [`Session::stack`] records them. Returns the group.
    fn stack_site(
        &mut self,
        name: String,
        key: Vec<u8>,
        frames: &Bound<'_, call_sites::StackFrames>,
    ) -> PyResult<usize> {
        if let Some(g) = self.sites.get(&key) {
            self.stack_ref(name, g)?;
            return Ok(g);
        }
        let g = self
            .inner()?
            .stack_frames(name, &frames.get().0)
            .map_err(os_err)?;
        self.sites.insert(key, g);
        Ok(g)
    }

    #[pyo3(signature = (name, parent=None))]
    fn construct(&mut self, name: String, parent: Option<String>) -> PyResult<()> {
        self.inner()?
            .record(Record::Construct { name, parent })
            .map_err(os_err)
    }

    fn has_entry(&mut self, name: &str) -> PyResult<bool> {
        Ok(self.inner()?.state().contains_entry(name))
    }

    /// Writes dump.json / stack.json / construct.json from everything recorded so far, as a
    /// clean stop() does (both frameworks call it there): waits for the statistics thread and
    /// the tensor files, writes the JSON files durably and removes the journal (see
    /// `capture::Session::settle`); recording may go on afterwards. Returns whether the
    /// journal is gone.
    fn write_json(&mut self, py: Python<'_>) -> PyResult<bool> {
        self.inner()?;
        self.collect(py, &[], true)?;
        // The writer's thread ends with `finish`; later tensor files go to a new one.
        let mut tensors = std::mem::take(&mut self.tensors);
        let waited = py.detach(|| tensors.finish());
        let keep = self.keep_journal || waited.is_err();
        let gone = self.inner()?.settle(keep).map_err(os_err)?;
        waited.map_err(os_err)?;
        Ok(gone)
    }

    /// Waits for the tensor files, writes the JSON files and closes the journal: removed
    /// once the JSON files are durable (kept with `keep_journal`, or when a tensor file
    /// failed, so `numprobe recover` and `validate` see an unfinished run).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.inner.is_some() {
            self.collect(py, &[], true)?;
        }
        self.worker = None;
        self.owners.clear();
        let tensors = &mut self.tensors;
        let waited = py.detach(|| tensors.finish());
        if let Some(mut s) = self.inner.take() {
            if self.keep_journal || waited.is_err() {
                // A killed process loses nothing without fsync; `fsync` also guards the kept
                // journal against a power cut, at a few ms per step.
                if self.fsync {
                    s.finish().map_err(os_err)?;
                } else {
                    s.write_json().map_err(os_err)?;
                }
            } else {
                s.settle(false).map_err(os_err)?;
            }
        }
        waited.map_err(os_err)
    }
}

/// What the native walk of API values needs of torch, built once by the recorder and given
/// to each step's session (`Session.set_walker`): `torch.Tensor`, `torch.nn.Parameter`,
/// `torch.strided`, `torch.float32`, the `(dtype, str(dtype))` pairs, the size from which the
/// recorder caches records (`stats_cache`, shared with the walk), the size below which it takes
/// torch's float32 Mean/Norm (its own path takes those tensors), `torch.UntypedStorage`,
/// whether tensors may be recorded natively (not when the task saves tensor files), msprobe's
/// low precision, and the size from which float tensors go to the statistics thread (None when
/// it is off; its jobs stay with the recorder), `torch._C._to_dlpack` (a tensor's device,
/// shape, strides and data address in one call; None: read as attributes) with the DLPack
/// element types whose dtype it knows ([`dlpack_dtypes`]; the others have their dtype read as
/// an attribute), and numprobe's torch reader when one is built for this torch (`shim`, a
/// [`torch_shim::TorchShim`], with the `c10::ScalarType` value of each dtype it knows:
/// `shim_dtypes`; it replaces the reads above). Reading every dtype's size and name is done
/// once, not each time a step's capture opens (up to a third of that opening,
/// benches/RESULTS.md).
#[pyclass(frozen, name = "Walker", module = "numprobe._native")]
pub(crate) struct WalkerSpec(Arc<Walker>);

#[pymethods]
impl WalkerSpec {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (tensor, parameter, strided, float32, dtypes, cache_min_bytes,
        torch_order_below_bytes, storage, tensors, torch_order, async_min_bytes=None,
        to_dlpack=None, dlpack_dtypes=Vec::new(), shim=None, shim_dtypes=Vec::new()))]
    fn new(
        tensor: Py<PyType>,
        parameter: Py<PyType>,
        strided: Py<PyAny>,
        float32: Py<PyAny>,
        dtypes: Vec<(Bound<'_, PyAny>, String)>,
        cache_min_bytes: usize,
        torch_order_below_bytes: usize,
        storage: Py<PyAny>,
        tensors: bool,
        torch_order: bool,
        async_min_bytes: Option<usize>,
        to_dlpack: Option<Py<PyAny>>,
        dlpack_dtypes: Vec<(dlpack::DlType, usize)>,
        shim: Option<Py<torch_shim::TorchShim>>,
        shim_dtypes: Vec<(i32, usize)>,
    ) -> PyResult<WalkerSpec> {
        if dlpack_dtypes.iter().any(|&(_, i)| i >= dtypes.len()) {
            return Err(PyValueError::new_err(
                "dlpack_dtypes names a dtype not in dtypes",
            ));
        }
        if shim_dtypes.iter().any(|&(_, i)| i >= dtypes.len()) {
            return Err(PyValueError::new_err(
                "shim_dtypes names a dtype not in dtypes",
            ));
        }
        let dtypes = dtypes
            .into_iter()
            .map(|(d, name)| walk::Dtype::new(d, name))
            .collect::<PyResult<_>>()?;
        Ok(WalkerSpec(Arc::new(Walker {
            tensor,
            parameter,
            strided,
            float32,
            dtypes,
            cache_min_bytes,
            torch_order_below_bytes,
            storage,
            to_dlpack,
            dlpack_dtypes,
            shim,
            shim_dtypes,
            fast: tensors,
            torch_order,
            async_min_bytes,
        })))
    }
}

/// Which of `dtypes` each DLPack element type `(code, bits, lanes)` stands for, as
/// `(type, index in dtypes)`: learnt from torch's own exports of a one-element tensor of each
/// dtype made with `empty` (`torch.empty`); a type two dtypes share is left out. Once per
/// process (`walker_types`), for `Walker`.
#[pyfunction]
fn dlpack_dtypes(
    to_dlpack: &Bound<'_, PyAny>,
    empty: &Bound<'_, PyAny>,
    dtypes: Vec<Bound<'_, PyAny>>,
) -> Vec<(dlpack::DlType, usize)> {
    let objs: Vec<&Bound<'_, PyAny>> = dtypes.iter().collect();
    dlpack::dtype_table(to_dlpack, empty, &objs)
}

/// Which of `dtypes` each `c10::ScalarType` value of the torch reader `shim` stands for, as
/// `(value, index in dtypes)`, learnt as [`dlpack_dtypes`] learns DLPack's types. Once per
/// process (`_values.shim_dtypes`), for `Walker`.
#[pyfunction]
fn shim_dtypes(
    shim: &Bound<'_, torch_shim::TorchShim>,
    empty: &Bound<'_, PyAny>,
    dtypes: Vec<Bound<'_, PyAny>>,
) -> Vec<(i32, usize)> {
    let objs: Vec<&Bound<'_, PyAny>> = dtypes.iter().collect();
    let shim = shim.get();
    // Checked: `empty` is the caller's, and only a tensor object may reach the library.
    walk::dtype_table(empty, &objs, |t| {
        shim.checked_meta(t).ok().flatten().map(|m| m.scalar_type)
    })
}

/// Waits until the JSON files of every settled step are durable and their journals removed
/// (`capture::durable`); raises OSError naming a step whose files could not be made durable
/// (its journal stayed, so `numprobe recover` still has it). Called at exit; a script may
/// call it before it copies or checks a dump's directories.
#[pyfunction]
fn wait_durable(py: Python<'_>) -> PyResult<()> {
    py.detach(capture::durable::wait_all).map_err(os_err)
}

/// A cheap content sample of `nbytes` bytes at `ptr`: 64 evenly spaced 8-byte words plus the
/// last word, mixed. The recorder reuses the statistics of a large tensor it saw unchanged
/// (same object, version counter, storage and shape); this guards that reuse against writes
/// the version counter does not see (`.data`, numpy or DLPack views), with high probability
/// for any write that touches a sampled word.
///
/// # Safety (of the call)
/// Same contract as [`Session::tensor`]: `ptr` is the `data_ptr()` of a live contiguous CPU
/// tensor of at least `nbytes` bytes.
#[pyfunction]
fn fingerprint(py: Python<'_>, ptr: usize, nbytes: usize) -> u64 {
    // SAFETY: see `borrow`.
    let b = unsafe { borrow(ptr, nbytes) };
    py.detach(|| sample_hash(b))
}

pub(crate) fn sample_hash(b: &[u8]) -> u64 {
    const SAMPLES: usize = 64;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ b.len() as u64;
    let mut mix = |w: u64| {
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29);
    };
    if b.len() < 8 * SAMPLES {
        for c in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            mix(u64::from_le_bytes(w));
        }
        return h;
    }
    let words = b.len() / 8;
    for i in 0..SAMPLES {
        let at = (i * (words - 1) / (SAMPLES - 1)) * 8;
        mix(u64::from_le_bytes(
            b[at..at + 8].try_into().expect("8 bytes"),
        ));
    }
    mix(u64::from_le_bytes(
        b[b.len() - 8..].try_into().expect("8 bytes"),
    ));
    h
}

/// float32 `(mean, norm)` of `nbytes` bytes at `ptr` in PyTorch's CPU summation order for
/// `threads` torch threads (what `torch.mean`/`torch.norm` give; exposed for tests).
#[pyfunction]
fn torch_order_mean_norm(
    py: Python<'_>,
    ptr: usize,
    nbytes: usize,
    threads: usize,
) -> PyResult<(f32, f32)> {
    // SAFETY: see `borrow`.
    let b = unsafe { borrow(ptr, nbytes) };
    let xs = stats_gpu::torch_order::as_f32(b)
        .ok_or_else(|| PyValueError::new_err("not aligned float32 memory"))?;
    if xs.is_empty() {
        return Err(PyValueError::new_err("empty tensor"));
    }
    // The capture's own pass (`summary::compute` under torch's order reaches it).
    Ok(py.detach(|| {
        let f = stats_gpu::torch_order::fused_threads(xs, threads);
        (f.sum / xs.len() as f32, f.norm)
    }))
}

/// Rebuilds the JSON files below `dir` from journals; returns (rank dir, entries, ignored
/// bytes, tensor records whose device statistics never arrived). Raises OSError when a
/// journal would replace a dump.json with fewer entries (`numprobe recover --force` does).
#[pyfunction]
fn recover(dir: PathBuf) -> PyResult<Vec<(String, usize, u64, usize)>> {
    let r = capture::recover(&dir).map_err(os_err)?;
    for x in &r {
        if let capture::RecoverOutcome::Refused {
            previous,
            recovered,
        } = x.outcome
        {
            return Err(PyOSError::new_err(format!(
                "{}: the journal gives {recovered} entries, dump.json holds {previous}: not \
                 replaced ({} entries would be lost)",
                x.dir.display(),
                previous - recovered
            )));
        }
    }
    Ok(r.into_iter()
        .map(|x| {
            (
                x.dir.display().to_string(),
                x.entries,
                x.ignored_tail,
                x.unfilled,
            )
        })
        .collect())
}

/// Turns one iteration folder of a staged kernel-level dump into MindSpore's `statistic.csv`
/// and removes its `.npy` files (MindSpore writes no statistics on the CPU); returns the rows
/// added. `md5`: the MD5 column alone (msprobe's `summary_mode: md5`) instead of max, min,
/// avg and l2norm.
#[pyfunction]
#[pyo3(signature = (dir, md5 = false))]
fn kernel_statistics(py: Python<'_>, dir: PathBuf, md5: bool) -> PyResult<usize> {
    use capture::kernel_stats::SummaryMode;
    let mode = if md5 {
        SummaryMode::Md5
    } else {
        SummaryMode::Statistics
    };
    py.detach(|| {
        let engine = stats_gpu::Engine::new();
        capture::kernel_stats::summarize_step_dir(&dir, &engine, mode)
    })
    .map_err(os_err)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    accuracy::register(m)?;
    ptread::register(m)?;
    outfiles::register(m)?;
    cluster::register(m)?;
    m.add_class::<Session>()?;
    m.add_class::<TensorRec>()?;
    m.add_class::<WalkerSpec>()?;
    m.add_class::<call_sites::StackFrames>()?;
    m.add_class::<call_sites::CallSites>()?;
    m.add_class::<api_call::ApiCalls>()?;
    m.add_class::<torch_shim::TorchShim>()?;
    m.add_function(wrap_pyfunction!(api_call::busy, m)?)?;
    m.add_function(wrap_pyfunction!(stage_timers::stage_times, m)?)?;
    m.add_function(wrap_pyfunction!(api_call::set_busy, m)?)?;
    m.add_function(wrap_pyfunction!(api_call::backward_node, m)?)?;
    m.add_function(wrap_pyfunction!(walk::dense, m)?)?;
    m.add_function(wrap_pyfunction!(recover, m)?)?;
    m.add_function(wrap_pyfunction!(wait_durable, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack_dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(shim_dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(call_sites::stack_key, m)?)?;
    m.add_function(wrap_pyfunction!(torch_order_mean_norm, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_statistics, m)?)?;
    Ok(())
}
