//! A tensor's place in memory (device, shape, strides, data address) and its element type
//! from one call: torch's DLPack export, `torch._C._to_dlpack`.
//!
//! Read as Python attributes those facts take five calls a tensor (`is_cpu`,
//! `is_contiguous()`, `shape`, `data_ptr()`, `dtype`; torch's argument parser or a new Python
//! object each). The export gives them in one C struct whose layout the DLPack standard fixes
//! (`DLTensor`, the same in every DLPack version); the capsule is dropped unconsumed, so
//! torch's own destructor frees the export. Measured: 2–3% of a recorded step of small ops
//! (benches/RESULTS.md, 2026-12-03). Which torch dtype an element type stands for is learnt
//! from torch's own exports ([`dtype_table`]); the negative and conjugate bits, which the
//! export ignores, and `requires_grad` are still read from the tensor.

use std::ffi::c_void;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;

#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// DLPack's `DLTensor`, the first member of the `DLManagedTensor` a `"dltensor"` capsule holds.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    /// In elements; null means compact row-major.
    strides: *const i64,
    byte_offset: u64,
}

/// `kDLCPU`.
const DL_CPU: i32 = 1;

/// Dimensions beyond this are left to the attribute path (no torch model comes near).
const MAX_DIMS: usize = 1024;

/// DLPack's type of an element: code, bits, lanes.
pub(crate) type DlType = (u8, u8, u16);

/// Where a CPU tensor's elements are.
#[derive(Debug, PartialEq)]
pub(crate) struct CpuLayout {
    /// The export's element type; which torch dtype it stands for is learnt once per process
    /// from torch's own exports ([`dtype_table`]), never assumed.
    pub(crate) dtype: DlType,
    pub(crate) shape: Vec<usize>,
    /// In elements.
    pub(crate) strides: Vec<usize>,
    /// The address of the first element (`data_ptr()`).
    pub(crate) ptr: usize,
}

/// What the export says of a tensor.
#[derive(Debug, PartialEq)]
pub(crate) enum Placement {
    Cpu(CpuLayout),
    /// On another device.
    Elsewhere,
    /// No answer (torch refused the export, or gave something this reader does not take): the
    /// caller reads the attributes.
    Unknown,
}

/// The placement of tensor `t` through `to_dlpack` (`torch._C._to_dlpack`).
pub(crate) fn placement(to_dlpack: &Bound<'_, PyAny>, t: &Bound<'_, PyAny>) -> Placement {
    // A tensor without storage (meta, sparse) is refused with an exception; the attribute
    // path decides about it as it always did.
    let Ok(cap) = to_dlpack.call1((t,)) else {
        return Placement::Unknown;
    };
    let Ok(cap) = cap.cast_into::<PyCapsule>() else {
        return Placement::Unknown;
    };
    let name = c"dltensor";
    if !cap.is_valid_checked(Some(name)) {
        return Placement::Unknown;
    }
    let Ok(p) = cap.pointer_checked(Some(name)) else {
        return Placement::Unknown;
    };
    // SAFETY: a valid "dltensor" capsule holds a DLManagedTensor, whose first member is a
    // DLTensor; it lives until the capsule is freed, and `cap` is held until this function
    // returns, with no Python code run in between.
    let d = unsafe { p.cast::<DlTensor>().as_ref() };
    if d.device.device_type != DL_CPU {
        return Placement::Elsewhere;
    }
    let Ok(ndim) = usize::try_from(d.ndim) else {
        return Placement::Unknown;
    };
    if ndim > MAX_DIMS || (ndim > 0 && d.shape.is_null()) {
        return Placement::Unknown;
    }
    let read = |p: *const i64| -> Option<Vec<usize>> {
        if ndim == 0 {
            return Some(Vec::new());
        }
        // SAFETY: DLPack's `shape` and non-null `strides` hold `ndim` values, alive with
        // the capsule (see above).
        let xs = unsafe { std::slice::from_raw_parts(p, ndim) };
        xs.iter().map(|&x| usize::try_from(x).ok()).collect()
    };
    let Some(shape) = read(d.shape) else {
        return Placement::Unknown;
    };
    // Null strides (compact row-major in DLPack's terms) never come from torch.
    if ndim > 0 && d.strides.is_null() {
        return Placement::Unknown;
    }
    let Some(strides) = read(d.strides) else {
        return Placement::Unknown;
    };
    let Some(ptr) = (d.data as usize).checked_add(d.byte_offset as usize) else {
        return Placement::Unknown;
    };
    Placement::Cpu(CpuLayout {
        dtype: (d.dtype.code, d.dtype.bits, d.dtype.lanes),
        shape,
        strides,
        ptr,
    })
}

/// Which of `dtypes` each DLPack element type stands for, learnt from torch's own exports
/// ([`crate::walk::dtype_table`]); a type two dtypes share is left out, so a tensor of it has
/// its dtype read as an attribute.
pub(crate) fn dtype_table(
    to_dlpack: &Bound<'_, PyAny>,
    empty: &Bound<'_, PyAny>,
    dtypes: &[&Bound<'_, PyAny>],
) -> Vec<(DlType, usize)> {
    crate::walk::dtype_table(empty, dtypes, |t| match placement(to_dlpack, t) {
        Placement::Cpu(l) => Some(l.dtype),
        _ => None,
    })
}

/// torch's `is_contiguous()` (the default memory format) of these sizes and strides.
pub(crate) fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    numprobe_tensor::layout::is_contiguous(
        shape
            .iter()
            .zip(strides)
            .map(|(&n, &s)| (n as u64, s as u64)),
    )
}
