//! numprobe's optional reader of torch tensors through torch's C++ API
//! (`numprobe/pytorch/torch_shim.cpp`), loaded when one built for the running torch exists.
//!
//! The walk's reads of a tensor through Python's C API (`layout`, torch's DLPack export,
//! `is_neg()`, `requires_grad`, and for the record cache `_version` and the storage) cost
//! 0.3–0.6 µs a tensor; the library gives all of them in one call of about 15 ns
//! (benches/RESULTS.md, 2026-12-05). torch's C++ ABI differs between releases, so the library
//! is compiled on the user's machine against the installed torch (`_torch_shim.py`) and names
//! that torch; [`TorchShim::load`] refuses one that names another torch, was built for another
//! layout of [`Meta`], or lacks a symbol, and the walk then reads tensors as it does without.

use std::any::Any;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use stats_gpu::torch_order::TorchThreads;

/// The layout of [`Meta`] this module reads (`NUMPROBE_SHIM_ABI` in the C++ file).
const ABI: u32 = 4;

/// `numprobe_tensor_meta`: what the walk needs of one tensor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    sizes: *const i64,
    strides: *const i64,
    ndim: i64,
    /// The first element's address; 0 without elements or storage data.
    pub(crate) data_ptr: u64,
    /// The StorageImpl (`untyped_storage()._cdata`); 0 without storage.
    pub(crate) storage: u64,
    /// The storage's bytes (address 0 without data); the walk reads only inside them.
    pub(crate) storage_data: u64,
    pub(crate) storage_nbytes: u64,
    /// `_version`; -1 for an inference tensor, which has no version counter.
    pub(crate) version: i64,
    /// c10::ScalarType's value (its torch dtype is learnt from torch: `shim_dtypes` in lib.rs).
    pub(crate) scalar_type: i32,
    pub(crate) strided: u8,
    pub(crate) cpu: u8,
    pub(crate) neg: u8,
    pub(crate) conj: u8,
    pub(crate) requires_grad: u8,
    /// `is_contiguous()` (strided tensors only).
    pub(crate) contiguous: u8,
}

impl Default for Meta {
    fn default() -> Meta {
        Meta {
            sizes: std::ptr::null(),
            strides: std::ptr::null(),
            ndim: 0,
            data_ptr: 0,
            storage: 0,
            storage_data: 0,
            storage_nbytes: 0,
            version: -1,
            scalar_type: -1,
            strided: 0,
            cpu: 0,
            neg: 0,
            conj: 0,
            requires_grad: 0,
            contiguous: 0,
        }
    }
}

/// Dimensions beyond this are left to the Python path (no torch model comes near).
const MAX_DIMS: i64 = 1024;

impl Meta {
    /// The sizes and strides (in elements), or None when one is negative or the dimensions
    /// are out of bounds (the Python path then decides).
    pub(crate) fn shape_strides(&self) -> Option<(Vec<usize>, Vec<usize>)> {
        if !(0..=MAX_DIMS).contains(&self.ndim) {
            return None;
        }
        let n = self.ndim as usize;
        if n == 0 {
            return Some((Vec::new(), Vec::new()));
        }
        if self.sizes.is_null() || self.strides.is_null() {
            return None;
        }
        // SAFETY: the library filled `sizes` and `strides` with `ndim` values of the tensor's
        // own metadata, which live as long as the tensor the caller holds, with no Python
        // code run between the read and this copy.
        let (sizes, strides) = unsafe {
            (
                std::slice::from_raw_parts(self.sizes, n),
                std::slice::from_raw_parts(self.strides, n),
            )
        };
        let conv = |xs: &[i64]| -> Option<Vec<usize>> {
            xs.iter().map(|&x| usize::try_from(x).ok()).collect()
        };
        Some((conv(sizes)?, conv(strides)?))
    }
}

type MetaOf = unsafe extern "C" fn(*mut pyo3::ffi::PyObject, *mut Meta) -> c_int;
type GradEnabled = unsafe extern "C" fn() -> c_int;
type AddPostHook =
    unsafe extern "C" fn(*mut pyo3::ffi::PyObject, *mut pyo3::ffi::PyObject) -> c_int;
type ChunkFn = unsafe extern "C" fn(*mut c_void, i64, i64);
type ParallelFor = unsafe extern "C" fn(i64, i64, ChunkFn, *mut c_void) -> c_int;
type MeanNorm = unsafe extern "C" fn(*mut pyo3::ffi::PyObject, *mut f64, *mut f64) -> c_int;

/// A loaded library; never unloaded (its functions are called for the life of the process).
#[pyclass(frozen, module = "numprobe._native")]
pub(crate) struct TorchShim {
    meta_of: MetaOf,
    grad_enabled: GradEnabled,
    add_post_hook: AddPostHook,
    parallel_for: ParallelFor,
    mean_norm: MeanNorm,
    path: PathBuf,
    /// `torch._C.TensorBase`: every Python tensor object is an instance (a THPVariable).
    tensor_base: Py<PyType>,
}

#[pymethods]
impl TorchShim {
    /// Loads the library at `path` and checks that it was built for `built_for` (the running
    /// torch as `_torch_shim.identity()` names it) and for this module's [`Meta`]; raises
    /// OSError saying what does not match. Call after `import torch` (the library resolves
    /// its symbols against the torch already loaded); `tensor_base` is `torch._C.TensorBase`.
    #[staticmethod]
    fn load(path: PathBuf, built_for: &str, tensor_base: Py<PyType>) -> PyResult<TorchShim> {
        let fail = |what: String| PyOSError::new_err(format!("{}: {what}", path.display()));
        // SAFETY: loading runs the library's initialisers: those of numprobe's own C++ file
        // and of the torch headers it includes, built by `_torch_shim.py` for this torch.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| fail(e.to_string()))?;
        // SAFETY: each symbol is looked up with the signature the C++ file defines it with
        // (`extern "C"`, noexcept); a missing one is an error, not a call.
        unsafe {
            let abi: libloading::Symbol<unsafe extern "C" fn() -> u32> = lib
                .get(b"numprobe_shim_abi\0")
                .map_err(|e| fail(e.to_string()))?;
            let got = abi();
            if got != ABI {
                return Err(fail(format!(
                    "built for layout {got}, this numprobe reads {ABI}"
                )));
            }
            let size: libloading::Symbol<unsafe extern "C" fn() -> u32> = lib
                .get(b"numprobe_shim_meta_size\0")
                .map_err(|e| fail(e.to_string()))?;
            let got = size() as usize;
            if got != std::mem::size_of::<Meta>() {
                return Err(fail(format!(
                    "its tensor record is {got} bytes, this numprobe's {}",
                    std::mem::size_of::<Meta>()
                )));
            }
            let names: libloading::Symbol<unsafe extern "C" fn() -> *const c_char> = lib
                .get(b"numprobe_shim_built_for\0")
                .map_err(|e| fail(e.to_string()))?;
            let p = names();
            if p.is_null() {
                return Err(fail("names no torch".to_owned()));
            }
            let theirs = CStr::from_ptr(p).to_string_lossy();
            if theirs != built_for {
                return Err(fail(format!(
                    "built for {theirs:?}, the running torch is {built_for:?}"
                )));
            }
            let meta_of: MetaOf = *lib
                .get::<MetaOf>(b"numprobe_tensor_meta_of\0")
                .map_err(|e| fail(e.to_string()))?;
            let grad_enabled: GradEnabled = *lib
                .get::<GradEnabled>(b"numprobe_grad_enabled\0")
                .map_err(|e| fail(e.to_string()))?;
            let add_post_hook: AddPostHook = *lib
                .get::<AddPostHook>(b"numprobe_add_post_hook\0")
                .map_err(|e| fail(e.to_string()))?;
            let parallel_for: ParallelFor = *lib
                .get::<ParallelFor>(b"numprobe_parallel_for\0")
                .map_err(|e| fail(e.to_string()))?;
            let mean_norm: MeanNorm = *lib
                .get::<MeanNorm>(b"numprobe_mean_norm\0")
                .map_err(|e| fail(e.to_string()))?;
            // The functions outlive any handle: the library stays loaded for the process.
            std::mem::forget(lib);
            Ok(TorchShim {
                meta_of,
                grad_enabled,
                add_post_hook,
                parallel_for,
                mean_norm,
                path,
                tensor_base,
            })
        }
    }

    /// The library's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// What the library reads of tensor `t` as a dict (None when it could not, or `t` is no
    /// tensor): for tests against torch's own attributes.
    fn read<'py>(&self, t: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(m) = self.checked_meta(t)? else {
            return Ok(None);
        };
        let py = t.py();
        let d = PyDict::new(py);
        if m.strided != 0
            && let Some((shape, strides)) = m.shape_strides()
        {
            d.set_item("shape", shape)?;
            d.set_item("strides", strides)?;
        }
        d.set_item("data_ptr", m.data_ptr)?;
        d.set_item("storage", m.storage)?;
        d.set_item("storage_data", m.storage_data)?;
        d.set_item("storage_nbytes", m.storage_nbytes)?;
        d.set_item("version", (m.version >= 0).then_some(m.version))?;
        d.set_item("scalar_type", m.scalar_type)?;
        for (k, v) in [
            ("strided", m.strided),
            ("cpu", m.cpu),
            ("neg", m.neg),
            ("conj", m.conj),
            ("requires_grad", m.requires_grad),
            ("contiguous", m.contiguous),
        ] {
            d.set_item(k, v != 0)?;
        }
        Ok(Some(d))
    }

    /// Adds `hook` as a post hook of the gradient function of tensor `t` as the native path
    /// registers its backward entries: True when added, False when `t` has no gradient
    /// function, None when `t` is no tensor or torch refused.
    #[pyo3(name = "add_post_hook")]
    fn py_add_post_hook(
        &self,
        t: &Bound<'_, PyAny>,
        hook: &Bound<'_, PyAny>,
    ) -> PyResult<Option<bool>> {
        if !t.is_instance(self.tensor_base.bind(t.py()))? {
            return Ok(None);
        }
        Ok(self.add_post_hook(t, hook))
    }

    /// torch's own float32 `(mean, norm)` of tensor `t` through the library (`torch.mean(t)`,
    /// `torch.linalg.vector_norm(t)`); None when `t` is no tensor or torch refused.
    #[pyo3(name = "mean_norm")]
    fn py_mean_norm(&self, t: &Bound<'_, PyAny>) -> PyResult<Option<(f64, f64)>> {
        if !t.is_instance(self.tensor_base.bind(t.py()))? {
            return Ok(None);
        }
        Ok(self.mean_norm(t))
    }

    /// torch.is_grad_enabled() of this thread, as the library reads it.
    #[pyo3(name = "grad_enabled")]
    fn py_grad_enabled(&self) -> bool {
        self.grad_enabled()
    }

    /// The chunks `at::parallel_for(0, n, grain)` gives through the library, in order, each
    /// with whether it ran on the calling thread: for tests of where the statistics read a
    /// large tensor. The GIL is released meanwhile.
    fn chunks_on_threads(
        &self,
        py: Python<'_>,
        n: usize,
        grain: usize,
    ) -> Vec<(usize, usize, bool)> {
        let caller = std::thread::current().id();
        let seen = Mutex::new(Vec::new());
        py.detach(|| {
            self.parallel_for(n, grain, &|b, e| {
                let here = std::thread::current().id() == caller;
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((b, e, here));
            })
        });
        let mut seen = seen.into_inner().unwrap_or_else(|e| e.into_inner());
        seen.sort_unstable();
        seen
    }

    fn __repr__(&self) -> String {
        format!("TorchShim({:?})", self.path.display().to_string())
    }
}

impl TorchShim {
    /// [`meta`](TorchShim::meta) of `t` when it is a tensor object, None for anything else.
    pub(crate) fn checked_meta(&self, t: &Bound<'_, PyAny>) -> PyResult<Option<Meta>> {
        if !t.is_instance(self.tensor_base.bind(t.py()))? {
            return Ok(None);
        }
        Ok(self.meta(t))
    }

    /// What the library reads of `t`, or None when torch refused a read. The caller checks
    /// that `t` is a tensor object (an instance of `torch._C.TensorBase`, which the library
    /// reads as a THPVariable); the walk reads exact `torch.Tensor`s and `Parameter`s only.
    pub(crate) fn meta(&self, t: &Bound<'_, PyAny>) -> Option<Meta> {
        let mut m = Meta::default();
        // SAFETY: `t` is a live torch tensor object held by the caller, with the GIL; the
        // function writes one Meta and catches every C++ exception.
        let rc = unsafe { (self.meta_of)(t.as_ptr(), &mut m) };
        (rc == 0).then_some(m)
    }

    /// Adds `hook` as a post hook of the gradient function of `t` (a tensor object, checked by
    /// the caller): called as `hook(grad_inputs, grad_outputs)` when autograd has run that
    /// function, its result ignored. Some(true) when added, Some(false) when `t` has no
    /// gradient function, None when torch refused (register it through Python then).
    pub(crate) fn add_post_hook(
        &self,
        t: &Bound<'_, PyAny>,
        hook: &Bound<'_, PyAny>,
    ) -> Option<bool> {
        // SAFETY: `t` is a live tensor object and `hook` a live object, both held by the
        // caller with the GIL; the library takes its own reference to `hook` and catches
        // every C++ exception.
        match unsafe { (self.add_post_hook)(t.as_ptr(), hook.as_ptr()) } {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        }
    }

    /// torch's own `(mean, norm)` of `t` (a tensor object, checked by the caller): the
    /// float32 Mean/Norm msprobe records where the statistics pass does not follow torch's
    /// order. None when torch refused (the Python path then computes them).
    pub(crate) fn mean_norm(&self, t: &Bound<'_, PyAny>) -> Option<(f64, f64)> {
        let (mut mean, mut norm) = (0f64, 0f64);
        // SAFETY: `t` is a live tensor object held by the caller with the GIL; the library
        // writes two doubles and catches every C++ exception.
        let rc = unsafe { (self.mean_norm)(t.as_ptr(), &mut mean, &mut norm) };
        (rc == 0).then_some((mean, norm))
    }

    /// torch.is_grad_enabled() of this thread.
    pub(crate) fn grad_enabled(&self) -> bool {
        // SAFETY: a thread-local read in libc10, no arguments.
        unsafe { (self.grad_enabled)() != 0 }
    }
}

/// What one `numprobe_parallel_for` call hands each chunk: the work, and the first panic of
/// a chunk (raised again on the calling thread; a panic must not unwind into C++).
struct Chunks<'a> {
    work: &'a (dyn Fn(usize, usize) + Sync),
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

unsafe extern "C" fn run_chunk(ctx: *mut c_void, begin: i64, end: i64) {
    // SAFETY: `ctx` is the `Chunks` that `parallel_for` below passed, alive until the
    // library's call returns, which is after every chunk's.
    let chunks = unsafe { &*(ctx as *const Chunks<'_>) };
    let (Ok(b), Ok(e)) = (usize::try_from(begin), usize::try_from(end)) else {
        return;
    };
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| (chunks.work)(b, e))) {
        chunks
            .panic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(p);
    }
}

impl TorchThreads for TorchShim {
    /// `at::parallel_for(0, n, grain, work)` through the library: each chunk on the torch
    /// thread that runs it in torch's own operators.
    fn parallel_for(&self, n: usize, grain: usize, work: &(dyn Fn(usize, usize) + Sync)) {
        let (Ok(n), Ok(grain)) = (i64::try_from(n), i64::try_from(grain)) else {
            return;
        };
        let chunks = Chunks {
            work,
            panic: Mutex::new(None),
        };
        // SAFETY: `run_chunk` matches the library's callback type and reads `chunks` only
        // while the call runs; the library catches torch's exceptions. torch's threads run
        // no Python code here, so the GIL (held or not by the caller) is not needed.
        // A refusal (-1) leaves chunks uncalled, which the caller reads itself.
        let _ = unsafe {
            (self.parallel_for)(
                n,
                grain,
                run_chunk,
                &chunks as *const Chunks<'_> as *mut c_void,
            )
        };
        if let Some(p) = chunks.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            resume_unwind(p);
        }
    }
}
