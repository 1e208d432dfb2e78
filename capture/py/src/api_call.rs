//! One recorded API call in one native call, for the configuration most runs use (level L1,
//! every data mode, no `scope`/`list`, no tensor files): the counter and entry name, msprobe's
//! risk filter, the call-site key of the stack, the input entry, the call itself, the output
//! entry, and the backward hook on the output's gradient function (a [`BackwardHook`], which
//! records the gradients when autograd calls it). Everything else (the formatting of a new
//! call site's frames, values the native walk leaves to the recorder, device statistics) calls
//! back into the recorder, so the dump is the recorder's own.
//!
//! The namespace wrappers of `_api_hooks.py` call [`ApiCalls::call`] when the recorder has one;
//! its Python `call_api` stays the path of every other configuration and of the mode.

use std::cell::Cell;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyList, PyString, PyTuple, PyType};

use crate::Session;
use crate::call_sites::{self, CallSites, StackFrames};
use crate::stage_timers::{Lap, Stage};
use crate::torch_shim::TorchShim;
use crate::walk::{self, MAX_DEPTH, NoTorchFunction};

thread_local! {
    /// Set while numprobe itself runs on this thread (recording values, or a recorded API's
    /// own torch calls): calls made meanwhile are not the script's (`_reentry.py`).
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Whether numprobe is running on this thread (see `_reentry.py`).
#[pyfunction]
pub(crate) fn busy() -> bool {
    BUSY.with(Cell::get)
}

/// Sets or clears this thread's busy flag.
#[pyfunction]
pub(crate) fn set_busy(v: bool) {
    BUSY.with(|b| b.set(v));
}

/// The busy flag set for a scope and cleared at its end, on the error path too (the Python
/// code's `set_busy(True) ... finally: set_busy(False)`).
struct Busy;

impl Busy {
    fn set() -> Busy {
        set_busy(true);
        Busy
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        set_busy(false);
    }
}

/// msprobe's risk level filter (`risk.py`).
enum Risk {
    All,
    /// Only these names.
    Core(Py<PyFrozenSet>),
    /// All but these names.
    Focus(Py<PyFrozenSet>),
}

/// `(DisableTorchFunction, _len_torch_function_stack, _get_function_stack_at,
/// _pop_torch_function_stack, _push_on_torch_function_stack, is_grad_enabled,
/// nn.Parameter)` of torch.
type TorchC = (
    Py<PyAny>,
    Py<PyAny>,
    Py<PyAny>,
    Py<PyAny>,
    Py<PyAny>,
    Py<PyAny>,
    Py<PyAny>,
);

/// The native path of one recorder's API calls (see the module docs).
#[pyclass(frozen, module = "numprobe._native")]
pub(crate) struct ApiCalls {
    recorder: Py<PyAny>,
    counters: Py<PyDict>,
    extra_info: bool,
    risk: Risk,
    device_stats_bound: usize,
    /// `torch.Tensor` (an output of this exact type that needs no gradient needs no hook).
    tensor: Py<PyType>,
    /// `torch.nn.Parameter`.
    parameter: Py<PyAny>,
    /// `torch._C.DisableTorchFunction`, and the torch-function mode stack's accessors.
    no_torch_function: Py<PyAny>,
    mode_len: Py<PyAny>,
    mode_at: Py<PyAny>,
    mode_pop: Py<PyAny>,
    mode_push: Py<PyAny>,
    grad_enabled: Py<PyAny>,
    /// The recorder's call sites (its `stack_cache`): their stack lines by key.
    sites: Py<CallSites>,
    /// numprobe's torch reader, when one is built for this torch: grad mode and an output's
    /// requires_grad without a Python call.
    shim: Option<Py<TorchShim>>,
}

/// Torch functions during a walk: off from the start when a mode is on the torch-function
/// stack (each tensor attribute the walk reads would go through it); else left on, and
/// turned off by the walk before it hands a value to the recorder (`Walk::lazy_tf`), which
/// saves entering and leaving `DisableTorchFunction` twice per recorded call.
enum TorchFunctions<'py> {
    /// Held for its `Drop`, which turns them back on.
    Off(#[allow(dead_code)] NoTorchFunction<'py>),
    Lazy(Bound<'py, PyAny>),
}

impl<'py> TorchFunctions<'py> {
    /// `mode_len`: `torch._C._len_torch_function_stack`; `ty`: `DisableTorchFunction`.
    fn for_walk(mode_len: &Bound<'py, PyAny>, ty: &Bound<'py, PyAny>) -> PyResult<Self> {
        if mode_len.call0()?.extract::<usize>()? > 0 {
            return Ok(TorchFunctions::Off(NoTorchFunction::enter(ty)?));
        }
        Ok(TorchFunctions::Lazy(ty.clone()))
    }

    /// The walk's `lazy_tf`.
    fn lazy(&self) -> Option<&Bound<'py, PyAny>> {
        match self {
            TorchFunctions::Off(_) => None,
            TorchFunctions::Lazy(ty) => Some(ty),
        }
    }

    /// Off for a scope when they are still on and `v` may dispatch (anything but a plain
    /// tensor or parameter, whose attributes go to no `__torch_function__` while no mode is
    /// on the stack).
    fn off_for(
        &self,
        v: Option<&Bound<'py, PyAny>>,
        tensor: &Bound<'py, PyType>,
        parameter: &Bound<'py, PyAny>,
    ) -> PyResult<Option<NoTorchFunction<'py>>> {
        let TorchFunctions::Lazy(ty) = self else {
            return Ok(None);
        };
        let plain = v.is_none_or(|v| {
            let t = v.get_type();
            t.is(tensor) || t.is(parameter)
        });
        if plain {
            return Ok(None);
        }
        Ok(Some(NoTorchFunction::enter(ty)?))
    }
}

#[pymethods]
impl ApiCalls {
    /// `risk`: msprobe's `risk_level` with the names it keeps (`CORE`) or drops (`FOCUS`);
    /// `torch_c`: `(DisableTorchFunction, _len_torch_function_stack,
    /// _get_function_stack_at, _pop_torch_function_stack, _push_on_torch_function_stack,
    /// is_grad_enabled, nn.Parameter)`; `sites`: the recorder's call sites (its
    /// `stack_cache`, which its `stack_at` fills); `shim`: numprobe's torch reader or None.
    #[new]
    #[pyo3(signature = (recorder, counters, extra_info, risk_level, core, low_risk,
        device_stats_bound, tensor, torch_c, sites, shim=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        recorder: Py<PyAny>,
        counters: Py<PyDict>,
        extra_info: bool,
        risk_level: &str,
        core: Py<PyFrozenSet>,
        low_risk: Py<PyFrozenSet>,
        device_stats_bound: usize,
        tensor: Py<PyType>,
        torch_c: TorchC,
        sites: Py<CallSites>,
        shim: Option<Py<TorchShim>>,
    ) -> ApiCalls {
        let risk = match risk_level {
            "ALL" => Risk::All,
            "CORE" => Risk::Core(core),
            _ => Risk::Focus(low_risk),
        };
        let (no_torch_function, mode_len, mode_at, mode_pop, mode_push, grad_enabled, parameter) =
            torch_c;
        ApiCalls {
            recorder,
            counters,
            extra_info,
            risk,
            device_stats_bound,
            tensor,
            parameter,
            no_torch_function,
            mode_len,
            mode_at,
            mode_pop,
            mode_push,
            grad_enabled,
            sites,
            shim,
        }
    }

    /// Records a call of API `prefix.name` (`key`, made once by the wrapper) whose original is
    /// `orig`, and returns its result (what the recorder's `call_api` does, for this
    /// configuration). `code`: the original's `__code__` or None (its frame is left out of
    /// the stack), looked up once by the wrapper.
    /// The caller checked that recording is on, this thread is not busy, and no
    /// statistics-thread job is pending.
    #[allow(clippy::too_many_arguments)]
    fn call<'py>(
        &self,
        py: Python<'py>,
        orig: &Bound<'py, PyAny>,
        code: &Bound<'py, PyAny>,
        prefix: &Bound<'py, PyString>,
        name: &Bound<'py, PyString>,
        key: &Bound<'py, PyString>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut lap = Lap::start();
        let rec = self.recorder.bind(py);
        // The wrapper's own string: its hash is computed once, not per call.
        let counters = self.counters.bind(py);
        let n: u64 = match counters.get_item(key)? {
            Some(v) => v.extract()?,
            None => 0,
        };
        counters.set_item(key, n + 1)?;
        if cfg!(feature = "calls-unrecorded") || !self.selected(py, name)? {
            return self.run(py, rec, orig, args, kwargs);
        }
        // After the filter: under `abi3` each conversion copies the text into a bytes object.
        let key = key.to_cow()?;
        let entry_name = format!("{key}.{n}.forward");
        let entry = PyString::new(py, &entry_name);
        let session_obj = rec.getattr(intern!(py, "session"))?;
        let session = session_obj.cast::<Session>()?;
        {
            let _busy = Busy::set();
            // The call site: the wrapper's frame outwards, as the recorder's `stack` keys it.
            let mut site = None;
            let mut group = None;
            if self.extra_info {
                // SAFETY: called from the wrapper's Python frame, so a current frame exists;
                // the borrowed pointer is turned into an owned reference at once.
                let frame = unsafe {
                    let f = pyo3::ffi::PyEval_GetFrame();
                    if f.is_null() {
                        None
                    } else {
                        Some(Bound::from_borrowed_ptr(
                            py,
                            f.cast::<pyo3::ffi::PyObject>(),
                        ))
                    }
                };
                if let Some(frame) = frame {
                    let skey = call_sites::key_of(py, &frame, code.as_ptr() as usize)?;
                    group = session.borrow().site_group(&skey);
                    site = Some((frame, skey));
                }
            }
            lap.lap(Stage::Head);
            let calls = walk::recorder_calls();
            {
                let tf = TorchFunctions::for_walk(
                    self.mode_len.bind(py),
                    self.no_torch_function.bind(py),
                )?;
                let lazy = tf.lazy();
                Session::api_input_named(
                    session,
                    &entry,
                    entry_name.clone(),
                    args.as_any(),
                    kwargs,
                    rec,
                    group,
                    lazy,
                )?;
            }
            lap = Lap::start();
            entry_done(py, rec, self.device_stats_bound, calls)?;
            if let (Some((frame, skey)), None) = (site, group) {
                // The first call from this site in this session: its frames (formatted once
                // per process) go to the stack.
                let known = self.sites.bind(py).borrow().get(py, &skey);
                let frames = match known {
                    Some(f) => f.into_bound(py),
                    None => {
                        // Formats the site's lines and keeps them in `sites`.
                        let key = PyBytes::new(py, &skey);
                        let (_, frames) = rec
                            .call_method1(intern!(py, "stack_at"), (frame, code, key))?
                            .extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
                        frames.cast_into::<StackFrames>()?
                    }
                };
                session
                    .borrow_mut()
                    .stack_site(entry_name.clone(), skey, &frames)?;
            }
        }
        lap.lap(Stage::StackRecord);
        let out = self.run(py, rec, orig, args, kwargs)?;
        lap.lap(Stage::Run);
        let _busy = Busy::set();
        let tf = TorchFunctions::for_walk(self.mode_len.bind(py), self.no_torch_function.bind(py))?;
        let calls = walk::recorder_calls();
        Session::api_output_named(session, &entry, entry_name, &out, rec, tf.lazy())?;
        let mut lap = Lap::start();
        entry_done(py, rec, self.device_stats_bound, calls)?;
        let grad_enabled = match &self.shim {
            Some(shim) => shim.get().grad_enabled(),
            None => self.grad_enabled.bind(py).call0()?.is_truthy()?,
        };
        if grad_enabled {
            let first = first_tensor(&out, self.tensor.bind(py), 0)?;
            let _off = tf.off_for(
                first.as_ref(),
                self.tensor.bind(py),
                self.parameter.bind(py),
            )?;
            self.hook_backward(py, &key, n, prefix, name, &out, args, kwargs)?;
        }
        lap.lap(Stage::HookRegister);
        Ok(out)
    }
}

impl ApiCalls {
    fn selected(&self, py: Python<'_>, name: &Bound<'_, PyString>) -> PyResult<bool> {
        Ok(match &self.risk {
            Risk::All => true,
            Risk::Core(core) => core.bind(py).contains(name)?,
            Risk::Focus(low) => !low.bind(py).contains(name)?,
        })
    }

    /// Runs the original with the busy flag set, and with the recorder's mode taken off the
    /// torch-function stack when it is on top (what `_run` does: torch runs a mode's function
    /// the same way, and the API's inner torch calls need no round trip through the mode).
    fn run<'py>(
        &self,
        py: Python<'py>,
        rec: &Bound<'py, PyAny>,
        orig: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kw = if kwargs.is_empty() {
            None
        } else {
            Some(kwargs)
        };
        // Recording the inputs may have handed tensors to the statistics thread: the call
        // must not write into them before their statistics are taken (`_guard_writes`), and
        // the mode stays on the stack to guard the API's inner calls too.
        let pending = rec.getattr(intern!(py, "async_storages"))?;
        if pending.is_truthy()? {
            rec.call_method1(intern!(py, "_guard_writes"), (orig, args, kwargs))?;
            let _busy = Busy::set();
            return orig.call(args, kw);
        }
        let _busy = Busy::set();
        let mut mode = rec.getattr(intern!(py, "mode"))?;
        if !mode.is_none() {
            // On the stack for the opt-in, or left there by a job done meanwhile.
            rec.call_method0(intern!(py, "_drop_mode"))?;
            mode = rec.getattr(intern!(py, "mode"))?;
        }
        if !mode.is_none() {
            let n: usize = self.mode_len.bind(py).call0()?.extract()?;
            if n > 0 && self.mode_at.bind(py).call1((n - 1,))?.is(&mode) {
                self.mode_pop.bind(py).call0()?;
                let out = orig.call(args, kw);
                self.mode_push.bind(py).call1((&mode,))?;
                return out;
            }
        }
        orig.call(args, kw)
    }

    /// Hooks the backward entry `{key}.{n}.backward` on the gradient function of `out`'s
    /// first tensor (what the recorder's `_hook_backward` does for this configuration):
    /// nothing when that tensor needs no gradient, nor for a dropout of probability 0
    /// (msprobe records none). Called with torch functions disabled.
    #[allow(clippy::too_many_arguments)]
    fn hook_backward<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        n: u64,
        prefix: &Bound<'py, PyString>,
        name: &Bound<'py, PyString>,
        out: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<()> {
        let parameter = self.parameter.bind(py);
        let shim = self.shim.as_ref().map(|s| (s.get(), parameter));
        let Some(t) = hooked_tensor(
            out,
            self.tensor.bind(py),
            prefix,
            name,
            args.as_any(),
            kwargs,
            shim,
        )?
        else {
            return Ok(());
        };
        let hook = Bound::new(
            py,
            BackwardHook {
                recorder: self.recorder.clone_ref(py),
                entry: PyString::new(py, &format!("{key}.{n}.backward")).unbind(),
                no_torch_function: self.no_torch_function.clone_ref(py),
                mode_len: self.mode_len.clone_ref(py),
                device_stats_bound: self.device_stats_bound,
            },
        )?;
        // Through torch's C++ API when the reader is loaded: no hook handle and dictionary
        // made in Python per registration.
        if let Some((shim, _)) = shim {
            let ty = t.get_type();
            if (ty.is(self.tensor.bind(py)) || ty.is(parameter))
                && shim.add_post_hook(&t, hook.as_any()).is_some()
            {
                return Ok(());
            }
        }
        let grad_fn = t.getattr(intern!(py, "grad_fn"))?;
        if grad_fn.is_none() {
            return Ok(());
        }
        grad_fn.call_method1(intern!(py, "register_hook"), (hook,))?;
        Ok(())
    }
}

/// The gradient function a backward entry of `out` hooks: that of its first tensor (itself,
/// or the first found depth-first in its lists and tuples) when that tensor requires a
/// gradient; none for a dropout of probability 0, which msprobe gives no backward entry.
/// Both paths of a recorded call take it from here (`ApiCalls::hook_backward`, and the
/// recorder's `_hook_backward`); `tensor` is `torch.Tensor`. Call with torch functions
/// disabled.
#[pyfunction]
pub(crate) fn backward_node<'py>(
    out: &Bound<'py, PyAny>,
    tensor: &Bound<'py, PyType>,
    prefix: &Bound<'py, PyString>,
    name: &Bound<'py, PyString>,
    args: &Bound<'py, PyAny>,
    kwargs: &Bound<'py, PyDict>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(t) = hooked_tensor(out, tensor, prefix, name, args, kwargs, None)? else {
        return Ok(None);
    };
    let grad_fn = t.getattr(intern!(out.py(), "grad_fn"))?;
    Ok((!grad_fn.is_none()).then_some(grad_fn))
}

/// The tensor whose gradient function a backward entry of `out` hooks (see
/// [`backward_node`]), before that function is read: `out`'s first tensor when it requires
/// a gradient, but not for a dropout of probability 0. `requires_grad` of a plain tensor or
/// parameter (`shim`'s second member is `nn.Parameter`) is read by numprobe's torch reader
/// when there is one.
fn hooked_tensor<'py>(
    out: &Bound<'py, PyAny>,
    tensor: &Bound<'py, PyType>,
    prefix: &Bound<'py, PyString>,
    name: &Bound<'py, PyString>,
    args: &Bound<'py, PyAny>,
    kwargs: &Bound<'py, PyDict>,
    shim: Option<(&TorchShim, &Bound<'py, PyAny>)>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = out.py();
    let Some(t) = first_tensor(out, tensor, 0)? else {
        return Ok(None);
    };
    // A subclass may define requires_grad itself: read through Python.
    let native = shim.and_then(|(shim, parameter)| {
        let ty = t.get_type();
        if ty.is(tensor) || ty.is(parameter) {
            shim.meta(&t).map(|m| m.requires_grad != 0)
        } else {
            None
        }
    });
    let requires_grad = match native {
        Some(rg) => rg,
        None => t.getattr(intern!(py, "requires_grad"))?.is_truthy()?,
    };
    if !requires_grad {
        return Ok(None);
    }
    // Compared as Python strings: no conversion of every call's names (see `call`).
    if name.as_any().eq(intern!(py, "dropout"))? && prefix.as_any().eq(intern!(py, "Functional"))? {
        let p = if args.len()? > 1 {
            Some(args.get_item(1)?)
        } else {
            kwargs.get_item(intern!(py, "p"))?
        };
        if let Some(p) = p
            && p.eq(0)?
        {
            return Ok(None);
        }
    }
    Ok(Some(t))
}

fn first_tensor<'py>(
    v: &Bound<'py, PyAny>,
    tensor: &Bound<'py, PyType>,
    depth: usize,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if v.is_instance(tensor)? {
        return Ok(Some(v.clone()));
    }
    if depth < MAX_DEPTH && (v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()) {
        for x in v.try_iter()? {
            if let Some(t) = first_tensor(&x?, tensor, depth + 1)? {
                return Ok(Some(t));
            }
        }
    }
    Ok(None)
}

/// The backward entry of one recorded API call, registered on its output's gradient
/// function: records the gradients as the recorder's own hook does for the configuration
/// of [`ApiCalls`] (`grad_outputs` as `input`, `grad_inputs` as `output`).
#[pyclass(frozen, module = "numprobe._native")]
pub(crate) struct BackwardHook {
    recorder: Py<PyAny>,
    entry: Py<PyString>,
    no_torch_function: Py<PyAny>,
    mode_len: Py<PyAny>,
    device_stats_bound: usize,
}

#[pymethods]
impl BackwardHook {
    fn __call__(
        &self,
        py: Python<'_>,
        grad_inputs: Bound<'_, PyAny>,
        grad_outputs: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let mut lap = Lap::start();
        let rec = self.recorder.bind(py);
        if !rec.getattr(intern!(py, "enabled"))?.is_truthy()? {
            return Ok(());
        }
        let session_obj = rec.getattr(intern!(py, "session"))?;
        if session_obj.is_none() {
            return Ok(());
        }
        let session = session_obj.cast::<Session>()?;
        let _busy = Busy::set();
        let tf = TorchFunctions::for_walk(self.mode_len.bind(py), self.no_torch_function.bind(py))?;
        let lists = vec![
            ("input".to_owned(), grad_outputs),
            ("output".to_owned(), grad_inputs),
        ];
        let calls = walk::recorder_calls();
        Session::lists_entry(session, self.entry.bind(py), lists, rec, tf.lazy())?;
        entry_done(py, rec, self.device_stats_bound, calls)?;
        lap.lap(Stage::BackwardHook);
        Ok(())
    }
}

/// Device statistics pending past the bound are read back once the entries holding them
/// are journaled (the recorder's `_entry_done`). `calls`: [`walk::recorder_calls`] before
/// the entry's walk; a walk that never called the recorder queued nothing (device tensors
/// take the recorder's path), and the queue was checked after the entry before.
/// (It turns torch functions off itself.)
fn entry_done(py: Python<'_>, rec: &Bound<'_, PyAny>, bound: usize, calls: u64) -> PyResult<()> {
    if walk::recorder_calls() == calls {
        return Ok(());
    }
    let pending: usize = rec.getattr(intern!(py, "_dev_count"))?.extract()?;
    if pending >= bound && pending > 0 {
        rec.call_method0(intern!(py, "flush_device_stats"))?;
    }
    Ok(())
}
