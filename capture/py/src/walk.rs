//! The records of an API call's arguments and outputs, built in one native call per entry.
//!
//! The recorder's Python walk (`_values.py`) costs a few microseconds per value: a Python
//! frame per level, a dict per record, then a second walk here to turn the dicts into JSON
//! values. Small ops are most of a real model's calls, so that cost is most of a recorded
//! step. This walk takes the values msprobe records the same way every time (None, bools,
//! ints, floats, strings, plain lists and tuples, and contiguous CPU tensors below the size
//! whose records the recorder caches) and hands everything else to the recorder's own
//! `value` / `outputs`, so the records are those of the Python walk, value for value.
//!
//! The caller runs it with torch functions disabled (`torch._C.DisableTorchFunction`): the
//! tensor attributes read here would otherwise go through the recorder's own mode.

use std::sync::Arc;

use capture::stats::{TensorInfo, type_name};
use dumpfmt::json::{Map, Value};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use stats_gpu::summary::Options;

use crate::{borrow, record_in_place, to_value};

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
    /// torch's dtype objects (singletons) and their names as `str(dtype)` gives them.
    pub(crate) dtypes: Vec<(Py<PyAny>, String)>,
    /// Tensors at least this large go to the recorder's own path, which caches their records
    /// (`_CACHE_MIN_BYTES` in `_values.py`).
    pub(crate) cache_min_bytes: usize,
    /// Under msprobe's low precision, float32 tensors below this many bytes take torch's own
    /// Mean/Norm on the recorder's path (`_TORCH_ORDER_BELOW_BYTES`).
    pub(crate) torch_order_below_bytes: usize,
    /// Whether tensors may be recorded here: not when the task saves tensor files (their
    /// names and writes belong to the recorder).
    pub(crate) fast: bool,
    /// msprobe's low precision: small float32 tensors take torch's own Mean/Norm.
    pub(crate) torch_order: bool,
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
}

/// A step of the path from the entry to a value (the tensor file name of the recorder's path).
enum Step<'py> {
    Name(&'static str),
    Index(usize),
    Key(Bound<'py, PyAny>),
}

fn record(type_name: &str, value: Value) -> Value {
    Value::Object(Map::new().with("type", type_name).with("value", value))
}

/// A Python int as JSON: beyond i64, its decimal text (Python's json writes big ints whole).
pub(crate) fn int_value(i: &Bound<'_, PyInt>) -> PyResult<Value> {
    Ok(match i.extract::<i64>() {
        Ok(v) => Value::Int(v),
        Err(_) => Value::BigInt(i.str()?.to_string().into()),
    })
}

impl<'py> Walk<'py> {
    /// The recorder's record of `v` (its `value` method).
    fn fallback(
        &mut self,
        v: &Bound<'py, PyAny>,
        path: &[Step<'py>],
        kwname: Option<&Bound<'py, PyString>>,
        depth: usize,
    ) -> PyResult<Value> {
        let py = v.py();
        let steps = path.iter().map(|s| -> PyResult<Bound<'py, PyAny>> {
            Ok(match s {
                Step::Name(n) => PyString::new(py, n).into_any(),
                Step::Index(i) => i.into_pyobject(py)?.into_any(),
                Step::Key(k) => k.clone(),
            })
        });
        let path = PyTuple::new(py, steps.collect::<PyResult<Vec<_>>>()?)?;
        let rec = self
            .recorder
            .call_method1(intern!(py, "value"), (v, &self.entry, path, kwname, depth))?;
        to_value(&rec, 0, &mut self.pending)
    }

    /// The record of `v` at `path`, as the recorder's `value` gives it.
    fn value(
        &mut self,
        v: &Bound<'py, PyAny>,
        path: &mut Vec<Step<'py>>,
        kwname: Option<&Bound<'py, PyString>>,
        depth: usize,
    ) -> PyResult<Value> {
        let py = v.py();
        if v.is_none() {
            return Ok(Value::Null);
        }
        if let Ok(b) = v.cast_exact::<PyBool>() {
            return Ok(record("bool", Value::Bool(b.is_true())));
        }
        if let Ok(i) = v.cast_exact::<PyInt>() {
            return Ok(record("int", int_value(i)?));
        }
        if let Ok(f) = v.cast_exact::<PyFloat>() {
            return Ok(record("float", Value::Float(f.value())));
        }
        if let Ok(s) = v.cast_exact::<PyString>() {
            let device = kwname.is_some_and(|k| k.to_cow().is_ok_and(|k| k == "device"));
            let t = if device { "torch.device" } else { "str" };
            return Ok(record(t, Value::from(s.to_cow()?.as_ref())));
        }
        let ty = v.get_type();
        let walker = Arc::clone(&self.walker);
        if ty.is(walker.tensor.bind(py)) || ty.is(walker.parameter.bind(py)) {
            if let Some(rec) = self.tensor(v)? {
                return Ok(rec);
            }
            return self.fallback(v, path, kwname, depth);
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
            let mut out = Vec::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                path.push(Step::Index(i));
                let r = self.value(x, path, None, depth + 1);
                path.pop();
                out.push(r?);
            }
            return Ok(Value::Array(out));
        }
        self.fallback(v, path, kwname, depth)
    }

    /// The record of a plain tensor whose bytes can be read in place, or `None` for the
    /// recorder's path (another device, layout or stride, cached sizes, saved tensors).
    fn tensor(&mut self, v: &Bound<'py, PyAny>) -> PyResult<Option<Value>> {
        let py = v.py();
        let w = &*self.walker;
        if !w.fast {
            return Ok(None);
        }
        let direct = v.getattr(intern!(py, "is_cpu"))?.extract::<bool>()?
            && v.getattr(intern!(py, "layout"))?.is(w.strided.bind(py))
            && v.call_method0(intern!(py, "is_contiguous"))?
                .extract::<bool>()?
            && !v.call_method0(intern!(py, "is_neg"))?.extract::<bool>()?;
        if !direct {
            return Ok(None);
        }
        let nbytes: usize = v.getattr(intern!(py, "nbytes"))?.extract()?;
        if nbytes >= w.cache_min_bytes {
            return Ok(None);
        }
        let dtype = v.getattr(intern!(py, "dtype"))?;
        let Some((_, dname)) = w.dtypes.iter().find(|(d, _)| d.bind(py).is(&dtype)) else {
            return Ok(None);
        };
        // Only complex tensors carry a conjugate bit.
        if dname.contains("complex") && v.call_method0(intern!(py, "is_conj"))?.extract::<bool>()? {
            return Ok(None);
        }
        let shape_obj = v.getattr(intern!(py, "shape"))?;
        let shape_t = shape_obj.cast::<PyTuple>()?;
        let mut shape = Vec::with_capacity(shape_t.len());
        for d in shape_t.iter() {
            shape.push(d.extract::<usize>()?);
        }
        if nbytes > 0
            && nbytes < w.torch_order_below_bytes
            && w.torch_order
            && !shape.is_empty()
            && dtype.is(w.float32.bind(py))
        {
            return Ok(None);
        }
        let ptr: usize = if nbytes > 0 {
            v.call_method0(intern!(py, "data_ptr"))?.extract()?
        } else {
            0
        };
        let requires_grad = v.getattr(intern!(py, "requires_grad"))?.extract::<bool>()?;
        // SAFETY: `v` is a live contiguous CPU tensor of `nbytes` bytes at `ptr` (checked
        // above), held by the caller's arguments for the whole call.
        let bytes = unsafe { borrow(ptr, nbytes) };
        let info = TensorInfo {
            type_name: type_name(self.opts.flavour),
            dtype: dname,
            shape: &shape,
            bytes: Some(bytes),
            requires_grad: Some(requires_grad),
            data_name: None,
            torch_threads: self.torch_threads,
            torch_mean_norm: None,
        };
        Ok(Some(record_in_place(py, &info, &self.opts, nbytes)?))
    }

    /// `[record of x for x in seq]`, the path of each member being `(path_name, i)`.
    pub(crate) fn list(
        &mut self,
        seq: &Bound<'py, PyAny>,
        path_name: &'static str,
    ) -> PyResult<Value> {
        let items: Vec<Bound<'py, PyAny>> = seq.try_iter()?.collect::<PyResult<_>>()?;
        let mut path = vec![Step::Name(path_name)];
        let mut out = Vec::with_capacity(items.len());
        for (i, x) in items.iter().enumerate() {
            path.push(Step::Index(i));
            let r = self.value(x, &mut path, None, 0);
            path.pop();
            out.push(r?);
        }
        Ok(Value::Array(out))
    }

    /// `{k: record of v}` of keyword arguments, the path of each being `("kwargs", k)`.
    pub(crate) fn kwargs(&mut self, kwargs: &Bound<'py, PyDict>) -> PyResult<Value> {
        let mut m = Map::with_capacity(kwargs.len());
        for (k, v) in kwargs.iter() {
            let name = k.cast::<PyString>()?.clone();
            let mut path = vec![Step::Name("kwargs"), Step::Key(k.clone())];
            let r = self.value(&v, &mut path, Some(&name), 0)?;
            m.insert(name.to_cow()?.into_owned(), r);
        }
        Ok(Value::Object(m))
    }

    /// The `output` list of an API call as msprobe makes it: a plain tuple's members, any
    /// other tuple (a namedtuple, `torch.return_types`, `torch.Size`) as the recorder makes it,
    /// anything else as one member.
    pub(crate) fn outputs(&mut self, out: &Bound<'py, PyAny>) -> PyResult<Value> {
        let py = out.py();
        if out.is_exact_instance_of::<PyTuple>() {
            return self.list(out, "output");
        }
        if out.is_instance_of::<PyTuple>() {
            let rec = self
                .recorder
                .call_method1(intern!(py, "outputs"), (out, &self.entry))?;
            return to_value(&rec, 0, &mut self.pending);
        }
        let mut path = vec![Step::Name("output"), Step::Index(0)];
        Ok(Value::Array(vec![self.value(out, &mut path, None, 0)?]))
    }
}
