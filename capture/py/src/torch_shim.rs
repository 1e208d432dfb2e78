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

use std::ffi::{CStr, c_char, c_int};
use std::path::PathBuf;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

/// The layout of [`Meta`] this module reads (`NUMPROBE_SHIM_ABI` in the C++ file).
const ABI: u32 = 2;

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

/// A loaded library; never unloaded (its functions are called for the life of the process).
#[pyclass(frozen, module = "numprobe._native")]
pub(crate) struct TorchShim {
    meta_of: MetaOf,
    grad_enabled: GradEnabled,
    add_post_hook: AddPostHook,
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
            // The functions outlive any handle: the library stays loaded for the process.
            std::mem::forget(lib);
            Ok(TorchShim {
                meta_of,
                grad_enabled,
                add_post_hook,
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

    /// torch.is_grad_enabled() of this thread, as the library reads it.
    #[pyo3(name = "grad_enabled")]
    fn py_grad_enabled(&self) -> bool {
        self.grad_enabled()
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

    /// torch.is_grad_enabled() of this thread.
    pub(crate) fn grad_enabled(&self) -> bool {
        // SAFETY: a thread-local read in libc10, no arguments.
        unsafe { (self.grad_enabled)() != 0 }
    }
}
