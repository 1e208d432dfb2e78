//! Call sites: the key of a call's stack (code objects and instruction offsets of its frames,
//! read without Python), the stack lines rendered once per site ([`StackFrames`]), and the
//! stack group each site has in the current session ([`SiteGroups`]). A recorded call looks
//! its site up by key ([`CallSites`]); only a site new to the process has its lines formatted
//! (by the recorder's `stack_at`, in Python), and only a site new to the session is journaled
//! with its lines rather than as a reference to its group.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Hashes call-site keys (a few hundred bytes each, looked up once per recorded call):
/// foldhash is several times faster than std's SipHash on them, and its per-map seed keeps
/// the maps' resistance to crafted keys.
type KeyMap<V> = HashMap<Vec<u8>, V, foldhash::fast::RandomState>;

/// A call stack's lines, rendered once for every step's journal and stack.json
/// (`capture::Frames`): what an adapter caches per call site.
#[pyclass(frozen, module = "numprobe._native")]
pub(crate) struct StackFrames(pub(crate) Arc<capture::Frames>);

#[pymethods]
impl StackFrames {
    #[new]
    fn new(lines: Vec<String>) -> StackFrames {
        StackFrames(Arc::new(capture::Frames::new(lines)))
    }

    /// The lines, as given.
    fn lines(&self) -> Vec<String> {
        self.0.lines().to_vec()
    }

    fn __len__(&self) -> usize {
        self.0.len()
    }
}

// Frame accessors of CPython's full API (3.9 on): the wheel is built for the limited API,
// whose headers leave them out, but every CPython the package supports exports them.
unsafe extern "C" {
    static mut PyFrame_Type: pyo3::ffi::PyTypeObject;
    fn PyFrame_GetBack(frame: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject;
    fn PyFrame_GetCode(frame: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject;
}

/// `int PyFrame_GetLasti(PyFrameObject *)` (CPython 3.11 on).
type GetLasti = unsafe extern "C" fn(*mut pyo3::ffi::PyObject) -> std::os::raw::c_int;

/// CPython's `PyFrame_GetLasti` where the interpreter exports it (3.11 on), found at run time
/// because the package also loads into 3.9 and 3.10; `None` there, and the key reads
/// `f_lasti` (a Python int per frame, the cost this saves).
fn frame_get_lasti() -> Option<GetLasti> {
    static FOUND: std::sync::OnceLock<Option<GetLasti>> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            unsafe extern "C" {
                fn dlsym(
                    handle: *mut std::ffi::c_void,
                    symbol: *const std::ffi::c_char,
                ) -> *mut std::ffi::c_void;
            }
            // SAFETY: RTLD_DEFAULT (null on Linux) searches the loaded objects; the symbol,
            // when present, is CPython's function of the signature above.
            unsafe {
                let p = dlsym(std::ptr::null_mut(), c"PyFrame_GetLasti".as_ptr());
                (!p.is_null()).then(|| std::mem::transmute::<*mut std::ffi::c_void, GetLasti>(p))
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    })
}

/// The call-site key of the stack from `frame` outwards (the recorder's stack cache,
/// capture/python/numprobe/pytorch/_stacks.py): `skip`, then each frame's code object address
/// and instruction offset (`f_lasti`), as 8-byte little-endian words. The same walk in Python
/// costs about 0.3 µs a frame, paid by every recorded API of a deep model. The offset fixes
/// the line (a code object's line table does not change) and is read in constant time, where
/// the line number scans the line table up to it (CPython 3.11's `_PyCode_CheckLineNumber`
/// was 6% of a recorded tiny Llama step); a line reached by two offsets only gets two keys
/// with equal frames.
#[pyfunction]
pub(crate) fn stack_key<'py>(
    py: Python<'py>,
    frame: &Bound<'py, PyAny>,
    skip: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &key_of(py, frame, skip)?))
}

/// [`stack_key`]'s bytes.
pub(crate) fn key_of(py: Python<'_>, frame: &Bound<'_, PyAny>, skip: usize) -> PyResult<Vec<u8>> {
    let ptr = frame.as_ptr();
    // SAFETY: reading the type of a live object; PyFrame_Type is CPython's frame type.
    if unsafe { pyo3::ffi::Py_TYPE(ptr) != std::ptr::addr_of_mut!(PyFrame_Type) } {
        return Err(PyTypeError::new_err("stack_key needs a frame object"));
    }
    let mut key: Vec<u8> = Vec::with_capacity(16 * 64 + 8);
    key.extend_from_slice(&(skip as u64).to_le_bytes());
    let lasti_name = pyo3::intern!(py, "f_lasti").as_ptr();
    let get_lasti = frame_get_lasti();
    // SAFETY: `f` is always a frame we hold a strong reference to (the caller's `frame`, then
    // each new reference PyFrame_GetBack returns); every new reference is released, on the
    // error path too.
    unsafe {
        let mut f = ptr;
        pyo3::ffi::Py_INCREF(f);
        while !f.is_null() {
            let code = PyFrame_GetCode(f);
            key.extend_from_slice(&(code as usize as u64).to_le_bytes());
            pyo3::ffi::Py_DECREF(code);
            let at = if let Some(get_lasti) = get_lasti {
                i64::from(get_lasti(f))
            } else {
                let lasti = pyo3::ffi::PyObject_GetAttr(f, lasti_name);
                if lasti.is_null() {
                    pyo3::ffi::Py_DECREF(f);
                    return Err(PyErr::fetch(py));
                }
                let at = pyo3::ffi::PyLong_AsLongLong(lasti);
                pyo3::ffi::Py_DECREF(lasti);
                if at == -1 && !pyo3::ffi::PyErr_Occurred().is_null() {
                    pyo3::ffi::Py_DECREF(f);
                    return Err(PyErr::fetch(py));
                }
                at
            };
            key.extend_from_slice(&at.to_le_bytes());
            let back = PyFrame_GetBack(f);
            pyo3::ffi::Py_DECREF(f);
            f = back;
        }
    }
    Ok(key)
}

/// The stack lines of each call site one recorder has seen, by key, kept with the code
/// objects of the site's frames: they keep the addresses in the key from being reused while
/// the key is here. Filled by the recorder's `stack_at` (which formats a site new to the
/// process); the native call path reads it without a call into Python.
#[pyclass(module = "numprobe._native")]
#[derive(Default)]
pub(crate) struct CallSites(KeyMap<(Py<StackFrames>, Py<PyAny>)>);

#[pymethods]
impl CallSites {
    #[new]
    fn new() -> CallSites {
        CallSites::default()
    }

    /// The lines of the site whose key (`stack_key`) is `key`, None for a site not seen yet.
    pub(crate) fn get(&self, py: Python<'_>, key: &[u8]) -> Option<Py<StackFrames>> {
        self.0.get(key).map(|(f, _)| f.clone_ref(py))
    }

    /// Keeps `frames` as the lines of site `key`, and `codes` (the code objects whose
    /// addresses the key holds) alive with them.
    fn insert(&mut self, key: Vec<u8>, frames: Py<StackFrames>, codes: Py<PyAny>) {
        self.0.insert(key, (frames, codes));
    }

    fn __len__(&self) -> usize {
        self.0.len()
    }
}

/// The stack group of each call site recorded in one session, by key (the session's own
/// groups: a new session journals a site's lines once again).
#[derive(Default)]
pub(crate) struct SiteGroups(KeyMap<usize>);

impl SiteGroups {
    pub(crate) fn get(&self, key: &[u8]) -> Option<usize> {
        self.0.get(key).copied()
    }

    pub(crate) fn insert(&mut self, key: Vec<u8>, group: usize) {
        self.0.insert(key, group);
    }
}
