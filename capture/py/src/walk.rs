//! The records of an API call's arguments and outputs, written as dump.json text in one
//! native call per entry.
//!
//! The recorder's Python walk (`_values.py`) costs a few microseconds per value: a Python frame
//! per level, a dict per record, then a second walk here to turn the dicts into JSON values.
//! Small ops are most of a real model's calls, so that cost is most of a recorded step. This
//! walk takes the values msprobe records the same way every time (None, bools, ints, floats,
//! strings, plain lists and tuples, contiguous CPU tensors (large ones through the recorder's
//! record cache, `stats_cache`), float32 transposes under torch's order, and with the torch
//! reader float32 views with gaps and tensors under 8 elements, whose Mean/Norm it asks torch
//! for) and hands everything else to the recorder's own `value` / `outputs`, so the records are
//! those of the Python walk, value for value. It writes each record's text at its place in the
//! entry (`PyContainer`, `TensorRecord::write_python_at`) instead of building JSON values to
//! render afterwards; a record of the record cache keeps its text for the next call that reads
//! its tensor. Everything the walk reads of a tensor comes from numprobe's torch reader in one
//! call when one is built for the running torch (`torch_shim.rs`); else its device, shape,
//! strides, data address and (for the dtypes DLPack tells apart) dtype come from torch's DLPack
//! export in one call (`dlpack.rs`), its negative and conjugate bits and requires_grad from its
//! attributes ([`Facts`]).
//!
//! Torch functions are off while it runs (`torch._C.DisableTorchFunction`): the tensor
//! attributes read here would otherwise go through the recorder's own mode. With no mode on
//! the torch-function stack the native path leaves them on (the exact tensors read here
//! dispatch to nothing) and the walk turns them off before it hands a value to the recorder
//! (`Walk::lazy_tf`): entering and leaving the context costs more than reading a tensor.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use capture::state::VALUE_LEVEL;
use capture::stats::{TensorInfo, type_name};
use dumpfmt::dump::TensorRecord;
use dumpfmt::json::{self, PyContainer, Value};
use numprobe_tensor::layout;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use stats_gpu::summary::{Options, SummaryMode};

use crate::dlpack::{self, Placement};
use crate::stage_timers::{Lap, Stage};
use crate::torch_shim::TorchShim;
use crate::{TensorRec, borrow, record_in_place_into, sample_hash, to_value};
use stats_gpu::torch_order::TorchThreads;

thread_local! {
    /// Calls of this thread's walks into the recorder (`value`, `outputs`). Only those can
    /// queue device statistics, so a caller whose walk made none skips the recorder's check
    /// of the queue (`api_call::entry_done`): an attribute read per entry saved.
    static RECORDER_CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many calls this thread's walks have made into the recorder so far.
pub(crate) fn recorder_calls() -> u64 {
    RECORDER_CALLS.with(Cell::get)
}

fn count_recorder_call() {
    RECORDER_CALLS.with(|c| c.set(c.get().wrapping_add(1)));
}

/// `torch._C.DisableTorchFunction` entered for a scope, left at its end.
pub(crate) struct NoTorchFunction<'py>(Bound<'py, PyAny>);

impl<'py> NoTorchFunction<'py> {
    pub(crate) fn enter(ty: &Bound<'py, PyAny>) -> PyResult<NoTorchFunction<'py>> {
        let ctx = ty.call0()?;
        ctx.call_method0(intern!(ty.py(), "__enter__"))?;
        Ok(NoTorchFunction(ctx))
    }
}

impl Drop for NoTorchFunction<'_> {
    fn drop(&mut self) {
        let py = self.0.py();
        let none = py.None();
        if let Err(e) = self
            .0
            .call_method1(intern!(py, "__exit__"), (&none, &none, &none))
        {
            // Leaving the context cannot fail in torch; should it, say so rather than lose it.
            e.write_unraisable(py, Some(&self.0));
        }
    }
}

/// Nesting msprobe's records go no deeper than (the Python walk's limit too), nor the search
/// for an output's first tensor (`api_call.rs`).
pub(crate) const MAX_DEPTH: usize = 400;

/// What the walk needs to know of torch, given once per session by the recorder.
pub(crate) struct Walker {
    /// `torch.Tensor` and `torch.nn.Parameter`: the exact types read natively (a subclass may
    /// override attributes, so it takes the recorder's path).
    pub(crate) tensor: Py<PyType>,
    pub(crate) parameter: Py<PyType>,
    pub(crate) strided: Py<PyAny>,
    pub(crate) float32: Py<PyAny>,
    /// torch's dtype objects (singletons), each with its name and element size.
    pub(crate) dtypes: Vec<Dtype>,
    /// Tensors at least this large go to the recorder's own path, which caches their records
    /// (`_CACHE_MIN_BYTES` in `_values.py`).
    pub(crate) cache_min_bytes: usize,
    /// Under msprobe's low precision, float32 tensors below this many bytes take torch's own
    /// Mean/Norm on the recorder's path (`_TORCH_ORDER_BELOW_BYTES`).
    pub(crate) torch_order_below_bytes: usize,
    /// `torch.UntypedStorage` (whose weak references the record cache holds).
    pub(crate) storage: Py<PyAny>,
    /// `torch._C._to_dlpack`, which gives a tensor's place in memory in one call
    /// ([`dlpack`]); without it (another torch) the walk reads the attributes.
    pub(crate) to_dlpack: Option<Py<PyAny>>,
    /// DLPack element types and the index in `dtypes` of the one torch dtype each stands for
    /// ([`dlpack::dtype_table`]).
    pub(crate) dlpack_dtypes: Vec<(dlpack::DlType, usize)>,
    /// numprobe's torch reader built for the running torch, when there is one
    /// ([`TorchShim`]): every fact of a tensor in one call, instead of the reads above.
    pub(crate) shim: Option<Py<TorchShim>>,
    /// `c10::ScalarType` values and the index in `dtypes` of the torch dtype each stands for,
    /// learnt from torch's own tensors when the reader was loaded.
    pub(crate) shim_dtypes: Vec<(i32, usize)>,
    /// Whether tensors may be recorded here: not when the task saves tensor files (their
    /// names and writes belong to the recorder).
    pub(crate) fast: bool,
    /// msprobe's low precision: small float32 tensors take torch's own Mean/Norm.
    pub(crate) torch_order: bool,
    /// Float tensors from this size go to the statistics thread (the recorder's path); None
    /// when it is off.
    pub(crate) async_min_bytes: Option<usize>,
}

/// A torch dtype as the walk reads it: the object (a singleton, compared by identity), its
/// name as `str(dtype)` gives it (also as the Python string the record cache keys on) and its
/// element size (a tensor's `nbytes` is its element count times this).
pub(crate) struct Dtype {
    pub(crate) obj: Py<PyAny>,
    pub(crate) name: String,
    pub(crate) py_name: Py<PyString>,
    pub(crate) itemsize: usize,
}

impl Dtype {
    pub(crate) fn new(obj: Bound<'_, PyAny>, name: String) -> PyResult<Dtype> {
        let py = obj.py();
        Ok(Dtype {
            itemsize: obj.getattr(intern!(py, "itemsize"))?.extract()?,
            py_name: PyString::new(py, &name).unbind(),
            obj: obj.unbind(),
            name,
        })
    }
}

/// One walk: the session's settings copied out, so that the recorder's fallbacks may call
/// the session (its statistics thread, its device placeholders) while the walk runs.
pub(crate) struct Walk<'py> {
    pub(crate) walker: Arc<Walker>,
    pub(crate) opts: Options,
    pub(crate) torch_threads: Option<usize>,
    /// The recorder (`value(v, entry, path, kwname, depth)` and `outputs(out, entry)`).
    pub(crate) recorder: Bound<'py, PyAny>,
    pub(crate) entry: Bound<'py, PyString>,
    /// Pending ids of placeholder records the recorder returned (see `to_value`).
    pub(crate) pending: Vec<u64>,
    /// `torch._C.DisableTorchFunction` when the caller left torch functions on (no mode on
    /// the torch-function stack: the exact tensors read here dispatch to none); entered
    /// before the first value is handed to the recorder, whose values may be tensor
    /// subclasses with a `__torch_function__` of their own, and left with the walk.
    pub(crate) lazy_tf: Option<Bound<'py, PyAny>>,
    pub(crate) tf: Option<NoTorchFunction<'py>>,
}

/// A step of the path from the entry to a value (the tensor file name of the recorder's path).
enum Step<'py> {
    Name(&'static str),
    Index(usize),
    Key(Bound<'py, PyAny>),
}

/// `{"type": type_name, "value": ...}` (msprobe's record of a scalar) `level` containers deep,
/// its value written by `write` (at the member level).
fn write_record(
    out: &mut Vec<u8>,
    level: usize,
    type_name: &str,
    write: impl FnOnce(&mut Vec<u8>, usize),
) {
    let mut c = PyContainer::object(out, level);
    let inner = c.member_level();
    json::write_python_text(type_name, c.key("type"));
    write(c.key("value"), inner);
    c.end();
}

/// A Python int as JSON: beyond i64, its decimal text (Python's json writes big ints whole).
pub(crate) fn int_value(i: &Bound<'_, PyInt>) -> PyResult<Value> {
    Ok(match i.extract::<i64>() {
        Ok(v) => Value::Int(v),
        Err(_) => Value::BigInt(i.str()?.to_string().into()),
    })
}

/// Whether a tensor of `shape` and `strides` fills its memory exactly once: its strides,
/// smallest first, are those of a contiguous tensor of its sizes in some order (a transpose
/// or permute; not a slice with steps nor an expanded view). The recorder's Python path asks
/// the same (`_values.py`).
#[pyfunction]
pub(crate) fn dense(shape: Vec<usize>, strides: Vec<usize>) -> bool {
    is_dense(&shape, &strides)
}

fn is_dense(shape: &[usize], strides: &[usize]) -> bool {
    let mut dims: Vec<(usize, usize)> = strides
        .iter()
        .zip(shape)
        .filter(|&(_, &n)| n != 1)
        .map(|(&st, &n)| (st, n))
        .collect();
    dims.sort_unstable();
    let mut want = 1usize;
    for (stride, size) in dims {
        if stride != want {
            return false;
        }
        want = want.saturating_mul(size);
    }
    true
}

/// Which of `dtypes` each key stands for, learnt from torch itself: a one-element CPU tensor
/// of each dtype made with `empty` (`torch.empty`), keyed by `key_of` (its DLPack element
/// type, or its `c10::ScalarType` through the torch reader). A key two dtypes share (or none
/// gives) is left out, so the walk never guesses between them; a dtype listed under two names
/// counts once.
pub(crate) fn dtype_table<K: PartialEq>(
    empty: &Bound<'_, PyAny>,
    dtypes: &[&Bound<'_, PyAny>],
    key_of: impl Fn(&Bound<'_, PyAny>) -> Option<K>,
) -> Vec<(K, usize)> {
    let py = empty.py();
    let mut seen: Vec<(K, Option<usize>)> = Vec::new();
    for (i, d) in dtypes.iter().enumerate() {
        // On the CPU whatever the default device (a `torch.device("meta")` context).
        let kwargs = PyDict::new(py);
        if kwargs.set_item("dtype", d).is_err() || kwargs.set_item("device", "cpu").is_err() {
            continue;
        }
        let Ok(t) = empty.call((1,), Some(&kwargs)) else {
            continue;
        };
        let Some(key) = key_of(&t) else {
            continue;
        };
        match seen.iter_mut().find(|(k, _)| *k == key) {
            // The same dtype under another name (`torch.float` and `torch.float32`).
            Some((_, Some(j))) if dtypes[*j].is(d) => {}
            Some((_, owner)) => *owner = None,
            None => seen.push((key, Some(i))),
        }
    }
    seen.into_iter()
        .filter_map(|(k, owner)| owner.map(|i| (k, i)))
        .collect()
}

/// What the walk reads of a tensor before it decides how to record it: from torch's C++ API
/// when the torch reader is loaded ([`facts_native`], one call), else from its Python
/// attributes and DLPack export ([`facts_python`]); reads that only some tensors need are
/// left to the walk there (`None` below).
struct Facts {
    /// Index in the walker's `dtypes`.
    dtype: usize,
    shape: Vec<usize>,
    /// In elements.
    strides: Option<Vec<usize>>,
    ptr: Option<usize>,
    contiguous: bool,
    requires_grad: Option<bool>,
    /// The record cache's identity of the tensor's memory.
    ids: Option<StorageIds>,
}

/// How [`Walk::summarise`] reads a tensor's bytes.
#[derive(Clone, Copy, Default)]
struct Read {
    /// torch's own float32 Mean/Norm, which replace the pass's (`TensorInfo::torch_mean_norm`).
    mean_norm: Option<(f64, f64)>,
    /// The bytes are numprobe's copy, written on this thread: not read on torch's threads.
    own_copy: bool,
}

/// What [`Walk::strided_copy`] needs of a view's [`Facts`] besides its shape and strides.
struct View {
    dtype: usize,
    requires_grad: Option<bool>,
    ids: Option<StorageIds>,
}

/// Floats of a strided view's copy kept for the next one (4 MiB); a larger copy is freed.
const COPY_KEPT_FLOATS: usize = 1 << 20;

/// A tensor's storage as torch's C++ API gives it.
#[derive(Clone, Copy)]
struct StorageIds {
    /// The StorageImpl (`untyped_storage()._cdata`); 0 without storage.
    storage: u64,
    /// Its bytes: the walk reads only inside them.
    data: usize,
    nbytes: usize,
    /// `_version`; None for an inference tensor.
    version: Option<i64>,
}

impl StorageIds {
    /// Whether the `nbytes` bytes at `ptr` lie inside the storage.
    fn holds(&self, ptr: usize, nbytes: usize) -> bool {
        nbytes == 0
            || (ptr >= self.data
                && ptr
                    .checked_add(nbytes)
                    .is_some_and(|end| end <= self.data.saturating_add(self.nbytes)))
    }
}

/// What the walk needs of a record-cache candidate that it has read already.
struct Known {
    requires_grad: Option<bool>,
    ids: Option<StorageIds>,
}

/// The facts of `v` (exactly a `torch.Tensor` or `Parameter`) through the torch reader, or
/// None for the recorder's path: not a strided CPU tensor, a negative or conjugate view, a
/// dtype the loader did not learn, or a read torch refused.
fn facts_native(w: &Walker, shim: &TorchShim, v: &Bound<'_, PyAny>) -> Option<Facts> {
    let m = shim.meta(v)?;
    if m.strided == 0 || m.cpu == 0 || m.neg != 0 || m.conj != 0 {
        return None;
    }
    let dtype = w
        .shim_dtypes
        .iter()
        .find(|(k, _)| *k == m.scalar_type)
        .map(|&(_, i)| i)?;
    let (shape, strides) = m.shape_strides()?;
    Some(Facts {
        dtype,
        shape,
        strides: Some(strides),
        ptr: Some(usize::try_from(m.data_ptr).ok()?),
        contiguous: m.contiguous != 0,
        requires_grad: Some(m.requires_grad != 0),
        ids: Some(StorageIds {
            storage: m.storage,
            data: usize::try_from(m.storage_data).ok()?,
            nbytes: usize::try_from(m.storage_nbytes).ok()?,
            version: (m.version >= 0).then_some(m.version),
        }),
    })
}

/// The facts of `v` (exactly a `torch.Tensor` or `Parameter`) through its Python attributes
/// and torch's DLPack export, or None for the recorder's path.
fn facts_python(w: &Walker, v: &Bound<'_, PyAny>) -> PyResult<Option<Facts>> {
    let py = v.py();
    if !v.getattr(intern!(py, "layout"))?.is(w.strided.bind(py)) {
        return Ok(None);
    }
    let placement = match &w.to_dlpack {
        Some(f) => dlpack::placement(f.bind(py), v),
        None => Placement::Unknown,
    };
    let layout = match placement {
        Placement::Cpu(l) => Some(l),
        Placement::Elsewhere => return Ok(None),
        Placement::Unknown if !v.getattr(intern!(py, "is_cpu"))?.extract::<bool>()? => {
            return Ok(None);
        }
        Placement::Unknown => None,
    };
    if v.call_method0(intern!(py, "is_neg"))?.extract::<bool>()? {
        return Ok(None);
    }
    let contiguous = match &layout {
        Some(l) => dlpack::is_contiguous(&l.shape, &l.strides),
        None => v
            .call_method0(intern!(py, "is_contiguous"))?
            .extract::<bool>()?,
    };
    let known = layout.as_ref().and_then(|l| {
        w.dlpack_dtypes
            .iter()
            .find(|(k, _)| *k == l.dtype)
            .map(|&(_, i)| i)
    });
    let dtype = match known {
        Some(i) => i,
        None => {
            let dtype = v.getattr(intern!(py, "dtype"))?;
            match w.dtypes.iter().position(|d| d.obj.bind(py).is(&dtype)) {
                Some(i) => i,
                None => return Ok(None),
            }
        }
    };
    // Only complex tensors carry a conjugate bit.
    if w.dtypes[dtype].name.contains("complex")
        && v.call_method0(intern!(py, "is_conj"))?.extract::<bool>()?
    {
        return Ok(None);
    }
    let (shape, strides, ptr) = match layout {
        Some(l) => (l.shape, Some(l.strides), Some(l.ptr)),
        None => {
            let shape: Vec<usize> = v.getattr(intern!(py, "shape"))?.extract()?;
            (shape, None, None)
        }
    };
    Ok(Some(Facts {
        dtype,
        shape,
        strides,
        ptr,
        contiguous,
        requires_grad: None,
        ids: None,
    }))
}

impl<'py> Walk<'py> {
    /// Torch functions off from here to the end of the walk (see `lazy_tf`).
    fn torch_functions_off(&mut self) -> PyResult<()> {
        if self.tf.is_none()
            && let Some(ty) = &self.lazy_tf
        {
            self.tf = Some(NoTorchFunction::enter(ty)?);
        }
        Ok(())
    }

    /// The recorder's record of `v` (its `value` method), written `level` containers deep.
    #[allow(clippy::too_many_arguments)]
    fn fallback(
        &mut self,
        v: &Bound<'py, PyAny>,
        path: &[Step<'py>],
        kwname: Option<&Bound<'py, PyString>>,
        depth: usize,
        level: usize,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        let py = v.py();
        let steps = path.iter().map(|s| -> PyResult<Bound<'py, PyAny>> {
            Ok(match s {
                Step::Name(n) => PyString::new(py, n).into_any(),
                Step::Index(i) => i.into_pyobject(py)?.into_any(),
                Step::Key(k) => k.clone(),
            })
        });
        let path = PyTuple::new(py, steps.collect::<PyResult<Vec<_>>>()?)?;
        self.torch_functions_off()?;
        count_recorder_call();
        let rec = self
            .recorder
            .call_method1(intern!(py, "value"), (v, &self.entry, path, kwname, depth))?;
        self.write_py(&rec, level, out)
    }

    /// A value the recorder made (a record, or lists and dicts of them), written `level`
    /// containers deep; a record object is written as it is, without a copy.
    fn write_py(
        &mut self,
        rec: &Bound<'py, PyAny>,
        level: usize,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        if let Ok(r) = rec.cast::<TensorRec>() {
            let r = r.get();
            self.pending.extend(r.pending);
            r.write_python_at(level, out);
            return Ok(());
        }
        let value = to_value(rec, 0, &mut self.pending)?;
        json::write_python_at(&value, level, out);
        Ok(())
    }

    /// The record of `v` at `path`, as the recorder's `value` gives it, written `level`
    /// containers deep.
    #[allow(clippy::too_many_arguments)]
    fn value(
        &mut self,
        v: &Bound<'py, PyAny>,
        path: &mut Vec<Step<'py>>,
        kwname: Option<&Bound<'py, PyString>>,
        depth: usize,
        level: usize,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        let py = v.py();
        if v.is_none() {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        if let Ok(b) = v.cast_exact::<PyBool>() {
            let b = b.is_true();
            write_record(out, level, "bool", |o, _| json::write_python_bool(b, o));
            return Ok(());
        }
        if let Ok(i) = v.cast_exact::<PyInt>() {
            let i = int_value(i)?;
            write_record(out, level, "int", |o, l| json::write_python_at(&i, l, o));
            return Ok(());
        }
        if let Ok(f) = v.cast_exact::<PyFloat>() {
            let f = f.value();
            write_record(out, level, "float", |o, _| json::write_python_float(f, o));
            return Ok(());
        }
        if let Ok(s) = v.cast_exact::<PyString>() {
            let device = kwname.is_some_and(|k| k.to_cow().is_ok_and(|k| k == "device"));
            let t = if device { "torch.device" } else { "str" };
            let text = s.to_cow()?;
            write_record(out, level, t, |o, _| json::write_python_text(&text, o));
            return Ok(());
        }
        let ty = v.get_type();
        let walker = Arc::clone(&self.walker);
        if ty.is(walker.tensor.bind(py)) || ty.is(walker.parameter.bind(py)) {
            if self.tensor(v, level, out)? {
                return Ok(());
            }
            return self.fallback(v, path, kwname, depth, level, out);
        }
        let list = v.cast_exact::<PyList>().ok();
        let tuple = v.cast_exact::<PyTuple>().ok();
        if list.is_some() || tuple.is_some() {
            if depth >= MAX_DEPTH {
                return Err(PyValueError::new_err("value nested deeper than 400 levels"));
            }
            let items: Vec<Bound<'py, PyAny>> = match (list, tuple) {
                (Some(l), _) => l.iter().collect(),
                (_, Some(t)) => t.iter().collect(),
                _ => unreachable!("one of them is set"),
            };
            let mut c = PyContainer::array(out, level);
            let inner = c.member_level();
            for (i, x) in items.iter().enumerate() {
                path.push(Step::Index(i));
                let r = self.value(x, path, None, depth + 1, inner, c.item());
                path.pop();
                r?;
            }
            c.end();
            return Ok(());
        }
        self.fallback(v, path, kwname, depth, level, out)
    }

    /// Writes the record of a plain tensor whose bytes can be read in place `level`
    /// containers deep and returns true, or writes nothing and returns false for the
    /// recorder's path (another device or layout, other strides, cached sizes, saved tensors).
    /// Read in place: a contiguous tensor, and under torch's order a float32 permutation of
    /// a contiguous layout (a transpose), which torch reduces in memory order (`_values.py`).
    fn tensor(&mut self, v: &Bound<'py, PyAny>, level: usize, out: &mut Vec<u8>) -> PyResult<bool> {
        let py = v.py();
        let walker = Arc::clone(&self.walker);
        let w = &*walker;
        if !w.fast {
            return Ok(false);
        }
        let facts = match &w.shim {
            Some(shim) => facts_native(w, shim.get(), v),
            None => facts_python(w, v)?,
        };
        let Some(f) = facts else {
            return Ok(false);
        };
        let dt = &w.dtypes[f.dtype];
        let dname = &dt.name;
        let f32 = dt.obj.bind(py).is(w.float32.bind(py));
        let contiguous = f.contiguous;
        // Strided: float32 under torch's order, in statistics mode (a dense permutation read
        // in place, any other view copied) and md5 mode (copied: the CRC is of the copy).
        let strided = f32
            && w.torch_order
            && matches!(self.opts.mode, SummaryMode::Statistics | SummaryMode::Md5);
        if !(contiguous || strided) {
            return Ok(false);
        }
        let shape = f.shape;
        let data_ptr = |v: &Bound<'py, PyAny>| -> PyResult<usize> {
            match f.ptr {
                Some(p) => Ok(p),
                None => v.call_method0(intern!(py, "data_ptr"))?.extract(),
            }
        };
        let numel: usize = shape.iter().product();
        let nbytes: usize = if contiguous {
            // torch's `nbytes` is numel times the element size: no attribute read for it.
            let nbytes = numel.saturating_mul(dt.itemsize);
            if nbytes >= w.cache_min_bytes {
                let async_float = w.async_min_bytes.is_some_and(|m| nbytes >= m)
                    && matches!(
                        dname.as_str(),
                        "torch.float32" | "torch.float16" | "torch.bfloat16"
                    );
                if async_float {
                    return Ok(false);
                }
                let ptr = data_ptr(v)?;
                if f.ids.is_some_and(|ids| !ids.holds(ptr, nbytes)) {
                    return Ok(false);
                }
                let known = Known {
                    requires_grad: f.requires_grad,
                    ids: f.ids,
                };
                self.cached(v, ptr, &shape, dt, nbytes, known, level, out)?;
                return Ok(true);
            }
            nbytes
        } else {
            let strides: Vec<usize> = match f.strides {
                Some(s) => s,
                None => v.call_method0(intern!(py, "stride"))?.extract()?,
            };
            // No record cache on this path (the recorder caches contiguous tensors only).
            if numel * 4 < w.torch_order_below_bytes
                || !is_dense(&shape, &strides)
                || self.opts.mode != SummaryMode::Statistics
            {
                // A view with gaps (a slice of a fused projection, as `chunk` and `split`
                // make them), under 8 elements, or in md5 mode: torch's own Mean/Norm,
                // Max/Min (and the CRC) of a copy.
                let view = View {
                    dtype: f.dtype,
                    requires_grad: f.requires_grad,
                    ids: f.ids,
                };
                return self.strided_copy(v, data_ptr(v)?, view, &shape, &strides, level, out);
            }
            numel * 4
        };
        let mut mean_norm = None;
        if contiguous
            && nbytes > 0
            && nbytes < w.torch_order_below_bytes
            && w.torch_order
            && !shape.is_empty()
            && f32
        {
            // Under 8 elements torch's norm takes a kernel whose order was not pinned down
            // (stats_gpu::torch_order): torch's own Mean/Norm, through the torch reader.
            match w.shim.as_ref().and_then(|s| s.get().mean_norm(v)) {
                Some(mn) => mean_norm = Some(mn),
                None => return Ok(false),
            }
        }
        let ptr: usize = if nbytes > 0 { data_ptr(v)? } else { 0 };
        if f.ids.is_some_and(|ids| !ids.holds(ptr, nbytes)) {
            return Ok(false);
        }
        let requires_grad = match f.requires_grad {
            Some(rg) => rg,
            None => v.getattr(intern!(py, "requires_grad"))?.extract::<bool>()?,
        };
        // SAFETY: `v` is a live CPU tensor whose elements fill the `nbytes` bytes at `ptr`
        // exactly once (contiguous, or a dense permutation: checked above), held by the
        // caller's arguments for the whole call.
        let bytes = unsafe { borrow(ptr, nbytes) };
        let read = Read {
            mean_norm,
            own_copy: false,
        };
        self.summarise(py, bytes, dname, &shape, requires_grad, read, |r| {
            r.write_python_at(level, out)
        })?;
        Ok(true)
    }

    /// The record of a float32 strided tensor that cannot be read in place under torch's
    /// order (statistics or md5 mode; the caller checked): its elements copied in order (what
    /// `contiguous()` makes) for Max/Min and the CRC, its Mean/Norm torch's own through the
    /// torch reader (torch reduces a strided tensor in an order set by its strides). Writes nothing and
    /// returns false for the recorder's path: no torch reader, no storage bounds to check the
    /// view against, a view reaching outside its storage, or one of more elements than the
    /// memory it spans (its copy would be larger than what it views).
    #[allow(clippy::too_many_arguments)]
    fn strided_copy(
        &mut self,
        v: &Bound<'py, PyAny>,
        ptr: usize,
        f: View,
        shape: &[usize],
        strides: &[usize],
        level: usize,
        out: &mut Vec<u8>,
    ) -> PyResult<bool> {
        let (Some(shim), Some(ids)) = (self.walker.shim.as_ref(), f.ids) else {
            return Ok(false);
        };
        let size: Vec<u64> = shape.iter().map(|&n| n as u64).collect();
        let stride: Vec<u64> = strides.iter().map(|&n| n as u64).collect();
        let Some(numel) = numprobe_tensor::checked_numel(shape) else {
            return Ok(false);
        };
        // The bytes from the first element to the last, which must lie in the storage; a view
        // of more elements than that (expanded, unfolded) would copy more than it views: left
        // to the recorder.
        let span = layout::last_offset(&size, &stride)
            .and_then(|last| last.checked_add(1))
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| numel <= n)
            .and_then(|n| n.checked_mul(4));
        let Some(span) = span.filter(|&bytes| ptr != 0 && ids.holds(ptr, bytes)) else {
            return Ok(false);
        };
        let Some(mean_norm) = shim.get().mean_norm(v) else {
            return Ok(false);
        };
        let requires_grad = match f.requires_grad {
            Some(rg) => rg,
            None => v
                .getattr(intern!(v.py(), "requires_grad"))?
                .extract::<bool>()?,
        };
        let dname = &self.walker.dtypes[f.dtype].name;
        thread_local! {
            // Floats, not bytes: the statistics read the copy as f32, which needs their
            // alignment (a byte buffer's is the allocator's to give).
            static COPY: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
        }
        // SAFETY: the `span` bytes at `ptr` lie inside the tensor's storage (checked above),
        // which the caller's arguments hold alive for the whole call; no Python code runs
        // meanwhile.
        let viewed = unsafe { borrow(ptr, span) };
        COPY.with_borrow_mut(|copy| -> PyResult<()> {
            // Every element is written by the gather: only a buffer that grows is zeroed.
            if copy.len() < numel {
                copy.resize(numel, 0.0);
            }
            let bytes = bytemuck::cast_slice_mut::<f32, u8>(&mut copy[..numel]);
            layout::gather_into(viewed, 4, 0, &size, &stride, bytes);
            let read = Read {
                mean_norm: Some(mean_norm),
                own_copy: true,
            };
            self.summarise(v.py(), bytes, dname, shape, requires_grad, read, |r| {
                r.write_python_at(level, out)
            })?;
            // A large view's copy is not kept for the rest of the run.
            if copy.capacity() > COPY_KEPT_FLOATS {
                *copy = Vec::new();
            }
            Ok(())
        })?;
        Ok(true)
    }

    /// The record of a tensor whose elements are `bytes`, in the session's summary mode,
    /// handed to `then`. It is this thread's one scratch record, written over for each tensor
    /// (a walk writes hundreds a step: their strings and shapes need no allocation each).
    #[allow(clippy::too_many_arguments)]
    fn summarise<T>(
        &self,
        py: Python<'_>,
        bytes: &[u8],
        dname: &str,
        shape: &[usize],
        requires_grad: bool,
        read: Read,
        then: impl FnOnce(&TensorRecord) -> T,
    ) -> PyResult<T> {
        thread_local! {
            static SCRATCH: RefCell<TensorRecord> =
                RefCell::new(TensorRecord::new("", "", Vec::new()));
        }
        let mut lap = Lap::start();
        let info = TensorInfo {
            type_name: type_name(self.opts.flavour),
            dtype: dname,
            shape,
            bytes: Some(bytes),
            requires_grad: Some(requires_grad),
            data_name: None,
            torch_threads: self.torch_threads,
            torch_mean_norm: read.mean_norm,
            // With the torch reader, each thread chunk of a large float32 tensor is read on
            // the torch thread that wrote it (the chunks of torch's elementwise operators);
            // numprobe's own copy was written here.
            on_torch_threads: if read.own_copy {
                None
            } else {
                self.walker
                    .shim
                    .as_ref()
                    .map(|s| s.get() as &dyn TorchThreads)
            },
        };
        // No Python code runs while it is borrowed (the pass may release the GIL, but runs
        // no Python on this thread), so no walk on this thread can ask for it meanwhile.
        SCRATCH.with_borrow_mut(|rec| {
            record_in_place_into(py, &info, &self.opts, bytes.len(), rec)?;
            lap.lap(Stage::Statistics);
            Ok(then(rec))
        })
    }

    /// The record of a large contiguous tensor, reused while its memory is unchanged (the
    /// recorder's `_cached_tensor`, on its cache: an API's output is the next one's input,
    /// a parameter is read by several calls). Unchanged: the same live storage, data
    /// pointer, shape, dtype, requires_grad, version counter and content sample.
    #[allow(clippy::too_many_arguments)]
    fn cached(
        &mut self,
        v: &Bound<'py, PyAny>,
        ptr: usize,
        shape: &[usize],
        dt: &Dtype,
        nbytes: usize,
        known: Known,
        level: usize,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        let py = v.py();
        let dname = dt.name.as_str();
        let rg = match known.requires_grad {
            Some(rg) => rg,
            None => v.getattr(intern!(py, "requires_grad"))?.extract::<bool>()?,
        };
        // SAFETY: `v` is a live contiguous CPU tensor of `nbytes` bytes at `ptr` (checked by
        // the caller), held by the caller's arguments for the whole call.
        let bytes = unsafe { borrow(ptr, nbytes) };
        let uncached = |walk: &Self, out: &mut Vec<u8>| -> PyResult<()> {
            walk.summarise(py, bytes, dname, shape, rg, Read::default(), |r| {
                r.write_python_at(level, out)
            })
        };
        // Inference tensors have no version counter: not cached.
        let (version, storage, cdata) = match known.ids {
            Some(StorageIds {
                version: Some(version),
                storage,
                ..
            }) if storage != 0 => (
                version.into_pyobject(py)?.into_any(),
                None,
                storage.into_pyobject(py)?.into_any(),
            ),
            Some(_) => return uncached(self, out),
            None => {
                let version = match v.getattr(intern!(py, "_version")) {
                    Ok(x) => x,
                    Err(e) if e.is_instance_of::<PyRuntimeError>(py) => {
                        return uncached(self, out);
                    }
                    Err(e) => return Err(e),
                };
                let storage = match v.call_method0(intern!(py, "untyped_storage")) {
                    Ok(x) => x,
                    Err(e) if e.is_instance_of::<PyRuntimeError>(py) => {
                        return uncached(self, out);
                    }
                    Err(e) => return Err(e),
                };
                let cdata = storage.getattr(intern!(py, "_cdata"))?;
                (version, Some(storage), cdata)
            }
        };
        let storage_type = self.walker.storage.bind(py);
        let key = PyTuple::new(
            py,
            [
                cdata,
                ptr.into_pyobject(py)?.into_any(),
                // Equal to the `torch.Size` the recorder's path keys with (a tuple subclass).
                PyTuple::new(py, shape)?.into_any(),
                dt.py_name.bind(py).clone().into_any(),
                PyBool::new(py, rg).to_owned().into_any(),
            ],
        )?;
        let cache_obj = self.recorder.getattr(intern!(py, "stats_cache"))?;
        let cache = cache_obj.cast::<PyDict>()?;
        // 65 words: cheaper than releasing and taking back the GIL around them.
        let sample = sample_hash(bytes);
        if let Some(hit) = cache.get_item(&key)? {
            let hit = hit.cast::<PyTuple>()?;
            let wref = hit.get_item(0)?;
            let expired = storage_type
                .call_method1(intern!(py, "_expired"), (&wref,))?
                .is_truthy()?;
            if !expired
                && hit.get_item(1)?.eq(&version)?
                && hit.get_item(2)?.extract::<u64>()? == sample
            {
                let rec = hit.get_item(3)?;
                return self.write_py(&rec, level, out);
            }
            storage_type.call_method1(intern!(py, "_free_weak_ref"), (&wref,))?;
            cache.del_item(&key)?;
        }
        let at = out.len();
        let value = self.summarise(py, bytes, dname, shape, rg, Read::default(), |r| {
            r.write_python_at(level, out);
            r.to_value()
        })?;
        let rec = Bound::new(py, TensorRec::with_text(value, level, out[at..].to_vec()))?;
        // Read through the torch reader, the storage object is made only for a new entry.
        let storage = match storage {
            Some(s) => s,
            None => v.call_method0(intern!(py, "untyped_storage"))?,
        };
        let wref = storage.call_method0(intern!(py, "_weak_ref"))?;
        cache.set_item(key, (wref, version, sample, rec))?;
        Ok(())
    }

    /// `[record of x for x in seq]`, the path of each member being `(path_name, i)`, written
    /// as an entry body's value (at `VALUE_LEVEL`).
    pub(crate) fn list(
        &mut self,
        seq: &Bound<'py, PyAny>,
        path_name: &'static str,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        let items: Vec<Bound<'py, PyAny>> = seq.try_iter()?.collect::<PyResult<_>>()?;
        let mut path = vec![Step::Name(path_name)];
        let mut c = PyContainer::array(out, VALUE_LEVEL);
        let inner = c.member_level();
        for (i, x) in items.iter().enumerate() {
            path.push(Step::Index(i));
            let r = self.value(x, &mut path, None, 0, inner, c.item());
            path.pop();
            r?;
        }
        c.end();
        Ok(())
    }

    /// `{k: record of v}` of keyword arguments, the path of each being `("kwargs", k)`,
    /// written as an entry body's value.
    pub(crate) fn kwargs(
        &mut self,
        kwargs: &Bound<'py, PyDict>,
        out: &mut Vec<u8>,
    ) -> PyResult<()> {
        let mut c = PyContainer::object(out, VALUE_LEVEL);
        let inner = c.member_level();
        for (k, v) in kwargs.iter() {
            let name = k.cast::<PyString>()?.clone();
            let key = name.to_cow()?;
            let mut path = vec![Step::Name("kwargs"), Step::Key(k.clone())];
            self.value(&v, &mut path, Some(&name), 0, inner, c.key(&key))?;
        }
        c.end();
        Ok(())
    }

    /// The `output` list of an API call as msprobe makes it: a plain tuple's members, any
    /// other tuple (a namedtuple, `torch.return_types`, `torch.Size`) as the recorder makes it,
    /// anything else as one member; written as an entry body's value.
    pub(crate) fn outputs(&mut self, v: &Bound<'py, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
        let py = v.py();
        if v.is_exact_instance_of::<PyTuple>() {
            return self.list(v, "output", out);
        }
        if v.is_instance_of::<PyTuple>() {
            self.torch_functions_off()?;
            count_recorder_call();
            let rec = self
                .recorder
                .call_method1(intern!(py, "outputs"), (v, &self.entry))?;
            return self.write_py(&rec, VALUE_LEVEL, out);
        }
        let mut path = vec![Step::Name("output"), Step::Index(0)];
        let mut c = PyContainer::array(out, VALUE_LEVEL);
        let inner = c.member_level();
        self.value(v, &mut path, None, 0, inner, c.item())?;
        c.end();
        Ok(())
    }
}
