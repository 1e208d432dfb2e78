//! Tensor files: dtype, shape and C-contiguous little-endian bytes of a `.pt` ([`crate::pt`]) or
//! `.npy` ([`crate::npy`]) file.
//!
//! * [`read_info`] reads only what is needed to know dtype and shape (the npy header, or the zip
//!   directory and the pickle of a `.pt`) and checks that the payload has exactly the size the
//!   shape asks for. [`inspect`] is the same but also reports numpy string arrays (which PyTorch
//!   dumps save as `.npy`) as [`FileInfo::NpyText`] instead of failing.
//! * [`read_tensor`] returns a [`Tensor`]. When the file's payload already is C-contiguous (every
//!   `np.save` output, every normal `torch.save` output) the tensor borrows it from a memory map of
//!   the file (large files) or from one read of the whole file (small files, where a map costs
//!   more than the copy): no per-element work. Strided `.pt` views (msprobe's sliced saves) are
//!   gathered into C order.
//! * Writers take a borrowed [`TensorView`]: [`crate::npy::write`] and [`crate::pt::write`]
//!   produce the bytes `np.save` / `torch.save` produce.
//!
//! Alignment: payloads of `np.save` (header padded to 64 bytes) and `torch.save` (64-byte aligned
//! zip entries) start on a 64-byte boundary of the file, and both backings keep the file's start
//! 64-byte aligned, so [`Tensor::bytes`] can be cast to `&[f32]` etc. with
//! `bytemuck::try_cast_slice` for such files. Hand-made files may not be aligned; cast with the
//! fallible functions.
//!
//! A memory-mapped file must not be truncated by another process while the tensor is alive (the
//! usual caveat of memory maps).

use std::io::Read;
use std::path::Path;

use crate::{DType, Error, Result, TensorView};
use numprobe_tensor::{Element, ViewError};

/// Files up to this size are read into memory; larger ones are memory-mapped. Below it a map
/// (mmap + page faults + munmap) costs more than copying the bytes once.
pub(crate) const MAP_THRESHOLD: u64 = 256 * 1024;

/// Header-level facts about a numeric tensor file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// `numel × dtype.size()`: the size of [`Tensor::bytes`], not of the file.
    pub nbytes: u64,
}

impl TensorInfo {
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }
}

/// What [`inspect`] finds in a tensor file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileInfo {
    /// A numeric tensor (every `.pt`, every MindSpore `.npy`).
    Tensor(TensorInfo),
    /// A numpy string array (`<U…` or `|S…`): what msprobe's PyTorch dumps write for numpy string
    /// arguments. It has a valid header and payload size but no numeric dtype.
    NpyText {
        /// numpy descr, e.g. `<U5`.
        descr: String,
        shape: Vec<usize>,
        /// Payload size in bytes.
        nbytes: u64,
    },
}

/// Like [`read_info`], but a numpy string array is a valid result ([`FileInfo::NpyText`]) rather
/// than an error.
pub fn inspect(path: &Path) -> Result<FileInfo> {
    match Format::of(path)? {
        Format::Npy => crate::npy::inspect(path),
        Format::Pt => crate::pt::read_info(path).map(FileInfo::Tensor),
        Format::RawKernel => crate::kernel::raw_info_beside(path).map(FileInfo::Tensor),
    }
}

/// dtype, shape and payload size of a `.pt` or `.npy` file, from its header only; checks that the
/// payload size matches `shape × itemsize`. A numpy string array is an error here (see [`inspect`]).
pub fn read_info(path: &Path) -> Result<TensorInfo> {
    match inspect(path)? {
        FileInfo::Tensor(info) => Ok(info),
        FileInfo::NpyText { descr, .. } => Err(Error::tensor(
            path,
            0,
            format!("numpy string array (descr {descr:?}), not a numeric tensor"),
        )),
    }
}

/// Reads a `.pt` or `.npy` file (chosen by extension; other extensions by the file's magic bytes,
/// a MindSpore kernel dump's raw file by its name).
pub fn read_tensor(path: &Path) -> Result<Tensor> {
    match Format::of(path)? {
        Format::Npy => crate::npy::read(path),
        Format::Pt => crate::pt::read(path),
        Format::RawKernel => crate::kernel::read_raw_beside(path),
    }
}

/// Opens a `.pt` or `.npy` file without gathering a strided `.pt` view (see
/// [`crate::pt::open`]); `.npy` files are always C-contiguous.
pub fn open_tensor(path: &Path) -> Result<crate::pt::Stored> {
    match Format::of(path)? {
        Format::Npy => crate::npy::read(path).map(crate::pt::Stored::Dense),
        Format::Pt => crate::pt::open(path),
        Format::RawKernel => crate::kernel::read_raw_beside(path).map(crate::pt::Stored::Dense),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Npy,
    Pt,
    /// A MindSpore kernel dump's raw file: no header, named by [`crate::kernel::KernelFileName`].
    RawKernel,
}

impl Format {
    fn of(path: &Path) -> Result<Format> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("npy") => return Ok(Format::Npy),
            Some("pt") | Some("pth") => return Ok(Format::Pt),
            _ => {}
        }
        // Named before sniffed: a raw file's first bytes are data and may spell anything.
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| crate::kernel::KernelFileName::parse_raw(n).is_some())
        {
            return Ok(Format::RawKernel);
        }
        let mut magic = [0u8; 6];
        let mut f = crate::fsio::open_regular(path)?;
        let n = read_up_to(&mut f, &mut magic).map_err(|e| Error::io(path, e))?;
        if magic[..n].starts_with(b"\x93NUMPY") {
            Ok(Format::Npy)
        } else if magic[..n].starts_with(b"PK\x03\x04") {
            Ok(Format::Pt)
        } else {
            Err(Error::tensor(
                path,
                0,
                "neither a .npy file nor a torch.save zip archive",
            ))
        }
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Number of elements of `shape`, `None` on overflow.
pub(crate) fn checked_numel(shape: &[usize]) -> Option<u64> {
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
}

/// A tensor with C-contiguous little-endian bytes.
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Data,
}

enum Data {
    /// A byte range of a file's contents (mapped or read whole).
    File {
        file: FileBytes,
        start: usize,
        len: usize,
    },
    Owned(Vec<u8>),
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("nbytes", &self.bytes().len())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl Tensor {
    /// A tensor owning `bytes` (C order, little-endian); fails when the length disagrees with the
    /// shape.
    pub fn from_vec(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Result<Tensor> {
        TensorView::new(dtype, &shape, &bytes)
            .map_err(|e| Error::tensor("<memory>", 0, e.to_string()))?;
        Ok(Tensor {
            dtype,
            shape,
            data: Data::Owned(bytes),
        })
    }

    /// A tensor borrowing `len` bytes at `start` of a file's contents; the caller has checked
    /// that the range lies inside and matches the shape.
    pub(crate) fn from_file(
        dtype: DType,
        shape: Vec<usize>,
        file: FileBytes,
        start: usize,
        len: usize,
    ) -> Tensor {
        debug_assert!(start + len <= file.bytes().len());
        Tensor {
            dtype,
            shape,
            data: Data::File { file, start, len },
        }
    }

    pub(crate) fn from_owned_unchecked(dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Tensor {
        Tensor {
            dtype,
            shape,
            data: Data::Owned(bytes),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements (1 for a 0-dim tensor).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements in C order, little-endian, `numel × dtype.size()` bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::File { file, start, len } => &file.bytes()[*start..*start + *len],
            Data::Owned(v) => v,
        }
    }

    /// Whether [`Tensor::bytes`] borrows a memory map of the file (zero copy).
    pub fn is_mapped(&self) -> bool {
        matches!(
            &self.data,
            Data::File {
                file: FileBytes::Map(_),
                ..
            }
        )
    }

    /// The tensor as a borrowed view (no copy; a memory-mapped file stays mapped).
    pub fn view(&self) -> TensorView<'_> {
        TensorView::new(self.dtype, &self.shape, self.bytes())
            .expect("a Tensor's bytes match its shape")
    }

    /// The elements as an `ndarray` view (no copy). `T` must be the tensor's dtype; a
    /// hand-made file whose payload is not aligned for `T` gives [`ViewError::Misaligned`].
    pub fn array<T: Element>(
        &self,
    ) -> std::result::Result<numprobe_tensor::ndarray::ArrayViewD<'_, T>, ViewError> {
        self.view().to_ndarray()
    }

    pub fn info(&self) -> TensorInfo {
        TensorInfo {
            dtype: self.dtype,
            shape: self.shape.clone(),
            nbytes: self.bytes().len() as u64,
        }
    }

    /// The bytes as an owned vector (copies unless the tensor already owns them).
    pub fn into_vec(self) -> Vec<u8> {
        match self.data {
            Data::Owned(v) => v,
            Data::File { .. } => self.bytes().to_vec(),
        }
    }
}

/// 64-byte aligned block, so that a file read into memory is as aligned as a mapped one.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Block(pub(crate) [u8; 64]);

/// The contents of a file: a read-only memory map or a 64-byte aligned heap copy.
pub(crate) enum FileBytes {
    Map(memmap2::Mmap),
    Heap { blocks: Vec<Block>, len: usize },
}

impl FileBytes {
    /// For header-only reads: a large file's pages are faulted in only where touched.
    pub(crate) fn open(path: &Path) -> Result<FileBytes> {
        Self::open_with(path, false)
    }

    /// For whole-tensor reads: a large file's map is populated up front, which costs less than
    /// faulting its pages in one by one.
    pub(crate) fn open_populated(path: &Path) -> Result<FileBytes> {
        Self::open_with(path, true)
    }

    fn open_with(path: &Path, populate: bool) -> Result<FileBytes> {
        let mut f = crate::fsio::open_regular(path)?;
        let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
        if len > MAP_THRESHOLD {
            let mut opts = memmap2::MmapOptions::new();
            if populate {
                opts.populate();
            }
            // SAFETY: the map is read-only; a concurrent truncation of the file by another
            // process is the documented caveat of this module.
            let map = unsafe { opts.map(&f) }.map_err(|e| Error::io(path, e))?;
            return Ok(FileBytes::Map(map));
        }
        let len = len as usize;
        let mut blocks = vec![Block([0; 64]); len.div_ceil(64)];
        let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut blocks);
        let n = read_up_to(&mut f, &mut buf[..len]).map_err(|e| Error::io(path, e))?;
        if n != len {
            return Err(Error::tensor(
                path,
                n as u64,
                "file shrank while being read",
            ));
        }
        Ok(FileBytes::Heap { blocks, len })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            FileBytes::Map(m) => m,
            FileBytes::Heap { blocks, len } => &bytemuck::cast_slice(blocks)[..*len],
        }
    }
}

/// bfloat16 → f32: the bf16 bits are the top half of the f32 (NaN payloads kept).
pub(crate) fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vec_checks_length() {
        assert!(Tensor::from_vec(DType::F32, vec![2, 3], vec![0; 24]).is_ok());
        assert!(Tensor::from_vec(DType::F32, vec![2, 3], vec![0; 23]).is_err());
        let t = Tensor::from_vec(DType::I64, vec![], vec![1; 8]).unwrap();
        assert_eq!(t.numel(), 1);
        assert_eq!(t.bytes().len(), 8);
        assert!(Tensor::from_vec(DType::F32, vec![usize::MAX, 2], vec![]).is_err());
    }
}
