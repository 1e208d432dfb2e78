//! `.pt` files as `torch.save(tensor, path)` writes them (spec §6.1): a zip archive of STORED
//! entries holding `data.pkl` (see [`crate::pickle`]) and the raw storage `data/<key>`.
//!
//! Reading ([`read`], [`read_info`], [`read_meta`]): the zip directory is read by [`zipdir`]
//! (strict, hand-written: see there why not the `zip` crate); entries are found by suffix (`…/data.pkl` names the archive prefix, then
//! `{prefix}data/<key>`, `{prefix}byteorder`, `{prefix}version` or `{prefix}.data/version`), so the
//! archive name need not match the file name. Checked: every needed entry is STORED and inside the
//! file; `byteorder` (when present; older torch omits it) is `little`; a `version` record exists;
//! the CRC-32 of `data.pkl` and of the small records; the pickle (strict allow-list); the storage
//! entry is exactly as large as the pickle says; offset, size and stride stay inside the storage.
//! The storage payload's CRC is not checked (torch does not check it either, and it would cost a
//! pass over the data). Legacy (pre-1.6, non-zip) `torch.save` files are refused.
//!
//! A C-contiguous view (every normal save; any storage offset) borrows its bytes from the file
//! (memory-mapped when large). A strided view (msprobe's sliced saves keep the whole clone's
//! storage) is read through its strides by [`open`] ([`StridedTensor::for_each_chunk`], one
//! bounded chunk at a time), or gathered by [`read`] into a new C-order buffer at most
//! [`MAX_VIEW_GROWTH`] bytes larger than the storage (a stride-0 view of a 1 KB file can ask for
//! terabytes).
//!
//! Writing ([`write()`], [`write_to`]) reproduces `torch.save` byte for byte (torch 2.x,
//! miniz-based `PyTorchStreamWriter`): entries `data.pkl`, `.format_version`, `.storage_alignment`,
//! `byteorder`, `data/0`, `version`, `.data/serialization_id` in that order; flags 0x0808, zero
//! dates, version-needed 0 (flags 0x0800 and no descriptor for an empty entry); each entry's data aligned to 64 bytes by an `FB` extra field of `Z`s;
//! 16-byte data descriptors; central directory, ZIP64 end record and locator, classic end record.
//! Only the random 40-digit serialization id differs between two saves of the same tensor.
//! Archives needing ZIP64 entry fields (an entry or offset at or above 4 GiB) are refused by the
//! writer; the reader accepts them.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub mod zipdir;

use crate::pickle::{TensorMeta, parse_tensor_pickle, write_tensor_pickle};
use crate::tensor::{FileBytes, Tensor, TensorInfo};
use crate::{DType, TensorView};
use crate::{Error, Result};
use numprobe_tensor::layout::is_contiguous;

/// A parsed archive: the pickle's description and where the storage lies in the file.
struct Parsed {
    meta: TensorMeta,
    shape: Vec<usize>,
    storage_start: usize,
}

struct Entry {
    start: usize,
    len: usize,
    crc: u32,
}

/// The pickle's description of the tensor in a `.pt` file (dtype, size, stride, offset,
/// location), after all of [`read_info`]'s checks.
pub fn read_meta(path: &Path) -> Result<TensorMeta> {
    let file = FileBytes::open(path)?;
    parse(file.bytes(), path).map(|p| p.meta)
}

/// dtype and shape of a `.pt` file, from its zip directory and pickle.
pub fn read_info(path: &Path) -> Result<TensorInfo> {
    let file = FileBytes::open(path)?;
    let p = parse(file.bytes(), path)?;
    let nbytes = numel(&p.meta.size) * p.meta.dtype.size() as u64;
    Ok(TensorInfo {
        dtype: p.meta.dtype,
        shape: p.shape,
        nbytes,
    })
}

/// How many bytes a strided view may grow beyond its storage when [`read`] gathers it into C
/// order: 1 GiB. A sliced or transposed view is never larger than its storage; only broadcast
/// (stride-0) views are, and a 1 KB file can describe one of terabytes
/// (`torch.zeros(1).expand(2**40)`). [`read_with_growth`] takes another bound.
pub const MAX_VIEW_GROWTH: u64 = 1 << 30;

/// Reads the tensor of a `.pt` file; a strided view is gathered only up to its storage's size
/// plus [`MAX_VIEW_GROWTH`] (larger is an [`Error::Tensor`] naming the file). [`open`] reads
/// any view through its strides instead, a chunk at a time.
pub fn read(path: &Path) -> Result<Tensor> {
    read_with_growth(path, MAX_VIEW_GROWTH)
}

/// [`read`] with another bound on how far a gathered view may outgrow its storage.
pub fn read_with_growth(path: &Path, max_growth: u64) -> Result<Tensor> {
    match open(path)? {
        Stored::Dense(t) => Ok(t),
        Stored::Strided(s) => s.materialize(max_growth),
    }
}

/// A `.pt` tensor as its file holds it: C-contiguous bytes, or a strided view of a storage.
pub enum Stored {
    /// C-contiguous: borrowed from the file like [`read`]'s result.
    Dense(Tensor),
    /// Any other view (sliced, transposed, broadcast with stride 0): read through its
    /// strides with [`StridedTensor::for_each_chunk`], in memory bounded by the chunk.
    Strided(StridedTensor),
}

impl Stored {
    pub fn dtype(&self) -> DType {
        match self {
            Stored::Dense(t) => t.dtype(),
            Stored::Strided(s) => s.dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            Stored::Dense(t) => t.shape(),
            Stored::Strided(s) => &s.shape,
        }
    }
}

/// Opens the tensor of a `.pt` file without gathering a strided view.
pub fn open(path: &Path) -> Result<Stored> {
    let file = FileBytes::open_populated(path)?;
    let p = parse(file.bytes(), path)?;
    let m = &p.meta;
    let item = m.dtype.size();
    let nbytes = (numel(&m.size) as usize) * item;
    if nbytes == 0 {
        return Ok(Stored::Dense(Tensor::from_owned_unchecked(
            m.dtype,
            p.shape,
            Vec::new(),
        )));
    }
    if is_contiguous(m.size.iter().copied().zip(m.stride.iter().copied())) {
        let first = p.storage_start + m.storage_offset as usize * item;
        return Ok(Stored::Dense(Tensor::from_file(
            m.dtype, p.shape, file, first, nbytes,
        )));
    }
    Ok(Stored::Strided(StridedTensor {
        path: path.to_path_buf(),
        dtype: m.dtype,
        shape: p.shape,
        file,
        storage_start: p.storage_start,
        layout: Layout {
            item,
            storage_nbytes: m.storage_nbytes,
            offset: m.storage_offset,
            size: m.size.clone(),
            stride: m.stride.clone(),
        },
    }))
}

/// Where a view's elements lie in its storage (checked by the parser to stay inside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per element.
    pub item: usize,
    pub storage_nbytes: u64,
    /// In elements.
    pub offset: u64,
    pub size: Vec<u64>,
    /// In elements; 0 for a broadcast dimension.
    pub stride: Vec<u64>,
}

impl Layout {
    pub fn numel(&self) -> u64 {
        numel(&self.size)
    }

    /// The same elements without the broadcast (stride-0) dimensions, and how many times each
    /// of them is repeated in the full view: statistics that do not depend on order need only
    /// the distinct elements.
    pub fn without_broadcast(&self) -> (Layout, u64) {
        let mut repeat = 1u64;
        let (mut size, mut stride) = (Vec::new(), Vec::new());
        for (&n, &s) in self.size.iter().zip(&self.stride) {
            if s == 0 {
                repeat = repeat.saturating_mul(n);
            } else {
                size.push(n);
                stride.push(s);
            }
        }
        let l = Layout {
            size,
            stride,
            ..self.clone()
        };
        (l, repeat)
    }
}

/// A strided `.pt` view: the file, and where its elements lie in the storage.
pub struct StridedTensor {
    path: std::path::PathBuf,
    dtype: DType,
    shape: Vec<usize>,
    file: FileBytes,
    storage_start: usize,
    layout: Layout,
}

/// Elements [`StridedTensor::for_each_chunk`] gathers at a time by default: 4 MiB of float32.
pub const CHUNK_ELEMS: usize = 1 << 20;

impl StridedTensor {
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn storage(&self) -> &[u8] {
        let start = self.storage_start;
        &self.file.bytes()[start..start + self.layout.storage_nbytes as usize]
    }

    /// Calls `f` with the view's elements in C order, `max_elems` (at least 8) at a time as
    /// 1-d views; every chunk but the last holds a multiple of 8 elements, so byte-wise
    /// checksums that work on 8-byte words can be combined chunk by chunk.
    pub fn for_each_chunk<E>(
        &self,
        max_elems: usize,
        f: impl FnMut(TensorView<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.for_each_chunk_of(&self.layout, max_elems, f)
    }

    /// [`StridedTensor::for_each_chunk`] over another layout of the same storage (e.g.
    /// [`Layout::without_broadcast`] of this one).
    pub fn for_each_chunk_of<E>(
        &self,
        layout: &Layout,
        max_elems: usize,
        mut f: impl FnMut(TensorView<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let storage = self.storage();
        let item = layout.item;
        let cap = max_elems.max(8) / 8 * 8;
        let mut buf: Vec<u8> = Vec::with_capacity(cap * item);
        let mut emit = |buf: &mut Vec<u8>| -> std::result::Result<(), E> {
            let shape = [buf.len() / item];
            let view = TensorView::new(self.dtype, &shape, buf).expect("whole elements");
            f(view)?;
            buf.clear();
            Ok(())
        };
        let n = numel(&layout.size);
        if n == 0 {
            return Ok(());
        }
        let Some((&inner_n, outer)) = layout.size.split_last() else {
            let at = layout.offset as usize * item;
            buf.extend_from_slice(&storage[at..at + item]);
            return emit(&mut buf);
        };
        let inner_stride = layout.stride[layout.size.len() - 1] as usize;
        let mut idx = vec![0u64; outer.len()];
        let mut base = layout.offset as usize;
        let rows = n / inner_n;
        for _ in 0..rows {
            let mut j = 0usize;
            while j < inner_n as usize {
                let room = cap - buf.len() / item;
                let take = room.min(inner_n as usize - j);
                if inner_stride == 1 {
                    let at = (base + j) * item;
                    buf.extend_from_slice(&storage[at..at + take * item]);
                } else {
                    for k in j..j + take {
                        let at = (base + k * inner_stride) * item;
                        buf.extend_from_slice(&storage[at..at + item]);
                    }
                }
                j += take;
                if buf.len() / item == cap {
                    emit(&mut buf)?;
                }
            }
            for d in (0..outer.len()).rev() {
                idx[d] += 1;
                base += layout.stride[d] as usize;
                if idx[d] < layout.size[d] {
                    break;
                }
                base -= (layout.size[d] * layout.stride[d]) as usize;
                idx[d] = 0;
            }
        }
        if !buf.is_empty() {
            emit(&mut buf)?;
        }
        Ok(())
    }

    /// Elements `range` of the view in C order, into `out` (cleared first): the random-access
    /// form of [`StridedTensor::for_each_chunk`], so paired chunks of two views (or of a view and
    /// a C-contiguous tensor) can be read in lockstep and in parallel, each in memory bounded by
    /// the range. Panics when the range reaches past the view's elements.
    pub fn read_range(&self, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        out.clear();
        let l = &self.layout;
        assert!(
            range.start <= range.end && range.end as u64 <= l.numel(),
            "range {range:?} outside a view of {} elements",
            l.numel()
        );
        if range.is_empty() {
            return;
        }
        let (storage, item) = (self.storage(), l.item);
        out.reserve(range.len() * item);
        let Some((&inner_n, outer)) = l.size.split_last() else {
            let at = l.offset as usize * item;
            out.extend_from_slice(&storage[at..at + item]);
            return;
        };
        let inner_n = inner_n as usize;
        let inner_stride = l.stride[outer.len()] as usize;
        // The multi-index of the first element: its row over the outer dimensions, and where
        // in the row it lies.
        let (mut row, mut j) = (range.start / inner_n, range.start % inner_n);
        let mut idx = vec![0u64; outer.len()];
        let mut base = l.offset as usize;
        for d in (0..outer.len()).rev() {
            idx[d] = row as u64 % l.size[d];
            row /= l.size[d] as usize;
            base += (idx[d] * l.stride[d]) as usize;
        }
        let mut left = range.len();
        loop {
            let take = (inner_n - j).min(left);
            let first = (base + j * inner_stride) * item;
            match inner_stride {
                1 => out.extend_from_slice(&storage[first..first + take * item]),
                // Broadcast: one element, repeated.
                0 => {
                    let e = &storage[first..first + item];
                    for _ in 0..take {
                        out.extend_from_slice(e);
                    }
                }
                s => {
                    for k in 0..take {
                        let at = first + k * s * item;
                        out.extend_from_slice(&storage[at..at + item]);
                    }
                }
            }
            left -= take;
            if left == 0 {
                return;
            }
            j = 0;
            for d in (0..outer.len()).rev() {
                idx[d] += 1;
                base += l.stride[d] as usize;
                if idx[d] < l.size[d] {
                    break;
                }
                base -= (l.size[d] * l.stride[d]) as usize;
                idx[d] = 0;
            }
        }
    }

    /// A strided view of `storage` (a 1-d tensor's bytes) held in memory, with the checks a
    /// file's view gets (inside the storage, size within bounds); `name` stands for the file
    /// in messages.
    pub fn from_storage(
        name: &str,
        dtype: DType,
        storage: &[u8],
        view: &ViewOf,
    ) -> Result<StridedTensor> {
        let err = |m: String| Error::tensor(name, 0, m);
        let item = dtype.size();
        if !storage.len().is_multiple_of(item) || view.size.len() != view.stride.len() {
            return Err(err("storage or view does not match the dtype".into()));
        }
        let meta = TensorMeta {
            dtype,
            storage_key: "0".into(),
            location: "cpu".into(),
            storage_nbytes: storage.len() as u64,
            storage_offset: view.offset,
            size: view.size.clone(),
            stride: view.stride.clone(),
            requires_grad: false,
        };
        let shape = check_view(&meta).map_err(err)?;
        let mut blocks = vec![crate::tensor::Block([0; 64]); storage.len().div_ceil(64)];
        bytemuck::cast_slice_mut::<_, u8>(&mut blocks)[..storage.len()].copy_from_slice(storage);
        Ok(StridedTensor {
            path: name.into(),
            dtype,
            shape,
            file: FileBytes::Heap {
                blocks,
                len: storage.len(),
            },
            storage_start: 0,
            layout: Layout {
                item,
                storage_nbytes: storage.len() as u64,
                offset: view.offset,
                size: view.size.clone(),
                stride: view.stride.clone(),
            },
        })
    }

    /// The view gathered into C order, refused (naming the file and the bound) when that
    /// takes more than the storage's size plus `max_growth` bytes.
    pub fn materialize(&self, max_growth: u64) -> Result<Tensor> {
        let l = &self.layout;
        let nbytes = l.numel() as usize * l.item;
        // Bound what a few bytes of pickle can make us allocate: the storage is in the file, the
        // gathered copy is not.
        let limit = l.storage_nbytes.saturating_add(max_growth);
        if nbytes as u64 > limit {
            return Err(Error::ViewTooLarge {
                file: self.path.clone(),
                size: l.size.clone(),
                stride: l.stride.clone(),
                nbytes: nbytes as u64,
                storage_nbytes: l.storage_nbytes,
                max_growth,
            });
        }
        let out = gather(self.storage(), l.item, l.offset, &l.size, &l.stride, nbytes).ok_or_else(
            || {
                Error::tensor(
                    &self.path,
                    self.storage_start as u64,
                    format!("cannot allocate {nbytes} bytes for the strided view"),
                )
            },
        )?;
        Ok(Tensor::from_owned_unchecked(
            self.dtype,
            self.shape.clone(),
            out,
        ))
    }
}

fn numel(size: &[u64]) -> u64 {
    size.iter().product()
}

/// Copies a strided view (bounds already checked) into C order
/// ([`numprobe_tensor::layout::gather_into`]); None when the copy cannot be allocated.
fn gather(
    storage: &[u8],
    item: usize,
    offset: u64,
    size: &[u64],
    stride: &[u64],
    nbytes: usize,
) -> Option<Vec<u8>> {
    // A failed allocation is an error for this file, not an abort of the whole process.
    let mut out = Vec::new();
    out.try_reserve_exact(nbytes).ok()?;
    out.resize(nbytes, 0);
    numprobe_tensor::layout::gather_into(storage, item, offset, size, stride, &mut out);
    Some(out)
}

fn parse(bytes: &[u8], path: &Path) -> Result<Parsed> {
    let err = |off: usize, msg: String| Error::tensor(path, off as u64, msg);
    if !bytes.starts_with(b"PK\x03\x04") {
        let msg = if bytes.starts_with(b"\x80") {
            "legacy (pre-zip) torch.save format is not supported"
        } else {
            "not a torch.save zip archive"
        };
        return Err(err(0, msg.into()));
    }
    let entries =
        zipdir::entries(bytes).map_err(|(off, msg)| err(off as usize, format!("zip: {msg}")))?;
    let pkl_names: Vec<&[u8]> = entries
        .iter()
        .map(|e| &e.name[..])
        .filter(|n| *n == b"data.pkl" || n.ends_with(b"/data.pkl"))
        .collect();
    let pkl_name = match pkl_names.as_slice() {
        [one] => one.to_vec(),
        [] => return Err(err(0, "archive has no data.pkl".into())),
        _ => return Err(err(0, "archive has more than one data.pkl".into())),
    };
    let prefix = pkl_name[..pkl_name.len() - b"data.pkl".len()].to_vec();
    let named = |suffix: &str| [&prefix[..], suffix.as_bytes()].concat();
    let entry = |name: &[u8]| -> Result<Option<Entry>> {
        let mut found = entries.iter().filter(|e| e.name == name);
        let (Some(e), None) = (found.next(), found.next()) else {
            return match entries.iter().any(|e| e.name == name) {
                true => Err(err(
                    0,
                    format!("zip entry {} appears twice", String::from_utf8_lossy(name)),
                )),
                false => Ok(None),
            };
        };
        Ok(Some(Entry {
            start: e.data.start,
            len: e.data.len(),
            crc: e.crc32,
        }))
    };
    let checked = |e: Entry, what: &str| -> Result<&[u8]> {
        let data = &bytes[e.start..e.start + e.len];
        if crc32fast::hash(data) != e.crc {
            return Err(err(e.start, format!("{what}: CRC-32 mismatch")));
        }
        Ok(data)
    };
    let pkl = entry(&pkl_name)?.expect("listed above");
    let pkl_start = pkl.start;
    let pkl = checked(pkl, "data.pkl")?;
    if let Some(e) = entry(&named("byteorder"))? {
        let at = e.start;
        if checked(e, "byteorder")? != b"little" {
            return Err(err(at, "byteorder is not \"little\"".into()));
        }
    }
    let version = match entry(&named(".data/version"))? {
        Some(e) => Some(e),
        None => entry(&named("version"))?,
    };
    let Some(version) = version else {
        return Err(err(0, "archive has no version record".into()));
    };
    let at = version.start;
    let v = checked(version, "version")?;
    let digits = v.strip_suffix(b"\n").unwrap_or(v);
    if digits.is_empty() || digits.len() > 3 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(err(at, "version record is not a number".into()));
    }
    let meta = parse_tensor_pickle(pkl).map_err(|e| {
        err(
            pkl_start + e.offset,
            format!("data.pkl byte {}: {}", e.offset, e.msg),
        )
    })?;
    let Some(storage) = entry(&named(&format!("data/{}", meta.storage_key)))? else {
        return Err(err(
            pkl_start,
            format!("archive has no storage entry data/{}", meta.storage_key),
        ));
    };
    if storage.len as u64 != meta.storage_nbytes {
        return Err(err(
            storage.start,
            format!(
                "storage data/{} has {} bytes, the pickle says {}",
                meta.storage_key, storage.len, meta.storage_nbytes
            ),
        ));
    }
    let shape = check_view(&meta).map_err(|m| err(pkl_start, m))?;
    Ok(Parsed {
        meta,
        shape,
        storage_start: storage.start,
    })
}

/// Checks that the view lies inside its storage; returns the shape.
fn check_view(m: &TensorMeta) -> std::result::Result<Vec<usize>, String> {
    let shape = m
        .size
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} too large")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let item = m.dtype.size() as u128;
    let n = m
        .size
        .iter()
        .try_fold(1u128, |a, &d| a.checked_mul(d as u128));
    let n = n.ok_or_else(|| format!("size {:?} overflows", m.size))?;
    if n * item > usize::MAX as u128 / 2 {
        return Err(format!("size {:?} is too large", m.size));
    }
    if n == 0 {
        return Ok(shape);
    }
    let last = m
        .size
        .iter()
        .zip(&m.stride)
        .map(|(&d, &s)| (d as u128 - 1) * s as u128)
        .sum::<u128>()
        + m.storage_offset as u128;
    let storage_elems = m.storage_nbytes as u128 / item;
    if last >= storage_elems {
        return Err(format!(
            "view (offset {}, size {:?}, stride {:?}) reaches element {last} of a {storage_elems}-element storage",
            m.storage_offset, m.size, m.stride
        ));
    }
    Ok(shape)
}

/// The archive name torch gives a file: its base name without the last extension.
pub fn archive_name(path: &Path) -> String {
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match base.rfind('.') {
        Some(i) => base[..i].to_owned(),
        None => base,
    }
}

/// A fresh 40-digit serialization id (two zero-padded 64-bit random numbers, as torch makes it).
pub fn new_serialization_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut parts = [0u64; 2];
    for p in &mut parts {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        h.write_u32(std::process::id());
        *p = h.finish();
    }
    format!("{:020}{:020}", parts[0], parts[1])
}

/// Row-major strides as torch computes them (the tensor crate's, kept under this path).
pub use numprobe_tensor::layout::contiguous_strides;

const ALIGN: u64 = 64;
const LOCAL_HEADER: u64 = 30;
const DESCRIPTOR: u64 = 16;

/// Writes `t` as `torch.save(t, f)` would into an archive named `archive` (the file's base name
/// without extension), with the given device `location` and 40-digit `serialization_id`.
pub fn write_to(
    w: &mut impl Write,
    archive: &str,
    t: TensorView<'_>,
    location: &str,
    serialization_id: &str,
) -> std::io::Result<()> {
    let size: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let view = ViewOf {
        offset: 0,
        size,
        stride: contiguous_strides(t.shape()),
    };
    write_view_to(w, archive, t, &view, location, serialization_id)
}

/// Where a view lies in its storage, for [`write_view`]: offset, size and stride in elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewOf {
    pub offset: u64,
    pub size: Vec<u64>,
    pub stride: Vec<u64>,
}

/// Writes what `torch.save(view, f)` writes for a view of the 1-d `storage` (torch saves the
/// whole storage and the view's offset, size and stride): a view outside the storage is
/// refused (`InvalidInput`).
pub fn write_view_to(
    w: &mut impl Write,
    archive: &str,
    storage: TensorView<'_>,
    view: &ViewOf,
    location: &str,
    serialization_id: &str,
) -> std::io::Result<()> {
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    let t = storage;
    let meta = TensorMeta {
        dtype: t.dtype(),
        storage_key: "0".into(),
        location: location.into(),
        storage_nbytes: t.bytes().len() as u64,
        storage_offset: view.offset,
        size: view.size.clone(),
        stride: view.stride.clone(),
        requires_grad: false,
    };
    if view.size.len() != view.stride.len() {
        return Err(invalid("size and stride differ in length".into()));
    }
    check_view(&meta).map_err(invalid)?;
    let pkl = write_tensor_pickle(&meta);
    let entries: [(&str, &[u8]); 7] = [
        ("data.pkl", &pkl),
        (".format_version", b"1"),
        (".storage_alignment", b"64"),
        ("byteorder", b"little"),
        ("data/0", t.bytes()),
        ("version", b"3\n"),
        (".data/serialization_id", serialization_id.as_bytes()),
    ];
    // Lay out first so that an archive needing ZIP64 entries is refused before writing.
    let mut cursor = 0u64;
    let mut layout = Vec::with_capacity(entries.len());
    for (name, data) in &entries {
        let full = format!("{archive}/{name}");
        let start = cursor + LOCAL_HEADER + full.len() as u64 + 4;
        let pad = (ALIGN - start % ALIGN) % ALIGN;
        if cursor >= u32::MAX as u64 || data.len() as u64 >= u32::MAX as u64 {
            return Err(invalid(
                "archives with entries or offsets at or above 4 GiB are not supported".into(),
            ));
        }
        layout.push((full, cursor, pad));
        // miniz writes no data descriptor (and clears flag bit 3) for an empty entry.
        let descriptor = if data.is_empty() { 0 } else { DESCRIPTOR };
        cursor = start + pad + data.len() as u64 + descriptor;
    }
    let mut central = Vec::new();
    for ((_, data), (full, offset, pad)) in entries.iter().zip(&layout) {
        let crc = crc32fast::hash(data);
        let size = data.len() as u32;
        let flags: u8 = if data.is_empty() { 0x00 } else { 0x08 };
        let mut h = Vec::with_capacity(LOCAL_HEADER as usize + full.len() + 4 + *pad as usize);
        h.extend_from_slice(b"PK\x03\x04");
        h.extend_from_slice(&[0, 0, flags, 0x08, 0, 0, 0, 0, 0, 0]); // version, flags, method, time, date
        h.extend_from_slice(&[0; 12]); // crc and sizes follow in the data descriptor
        h.extend_from_slice(&(full.len() as u16).to_le_bytes());
        h.extend_from_slice(&(*pad as u16 + 4).to_le_bytes());
        h.extend_from_slice(full.as_bytes());
        h.extend_from_slice(b"FB");
        h.extend_from_slice(&(*pad as u16).to_le_bytes());
        h.extend(std::iter::repeat_n(b'Z', *pad as usize));
        w.write_all(&h)?;
        w.write_all(data)?;
        if !data.is_empty() {
            let mut d = Vec::with_capacity(16);
            d.extend_from_slice(b"PK\x07\x08");
            d.extend_from_slice(&crc.to_le_bytes());
            d.extend_from_slice(&size.to_le_bytes());
            d.extend_from_slice(&size.to_le_bytes());
            w.write_all(&d)?;
        }

        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&[0, 0, 0, 0, flags, 0x08, 0, 0, 0, 0, 0, 0]); // made by, needed, flags, method, time, date
        central.extend_from_slice(&crc.to_le_bytes());
        central.extend_from_slice(&size.to_le_bytes());
        central.extend_from_slice(&size.to_le_bytes());
        central.extend_from_slice(&(full.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 12]); // extra, comment, disk, internal attr, external attr
        central.extend_from_slice(&(*offset as u32).to_le_bytes());
        central.extend_from_slice(full.as_bytes());
    }
    let cd_offset = cursor;
    let cd_size = central.len() as u64;
    let n = entries.len() as u64;
    let eocd64_offset = cd_offset + cd_size;
    if eocd64_offset >= u32::MAX as u64 {
        return Err(invalid("archives above 4 GiB are not supported".into()));
    }
    let mut end = central;
    end.extend_from_slice(b"PK\x06\x06");
    end.extend_from_slice(&44u64.to_le_bytes());
    end.extend_from_slice(&[0x1e, 0x03, 0x2d, 0x00]); // made by 3.30 (unix), needed 4.5
    end.extend_from_slice(&[0; 8]); // disk numbers
    end.extend_from_slice(&n.to_le_bytes());
    end.extend_from_slice(&n.to_le_bytes());
    end.extend_from_slice(&cd_size.to_le_bytes());
    end.extend_from_slice(&cd_offset.to_le_bytes());
    end.extend_from_slice(b"PK\x06\x07");
    end.extend_from_slice(&0u32.to_le_bytes());
    end.extend_from_slice(&eocd64_offset.to_le_bytes());
    end.extend_from_slice(&1u32.to_le_bytes());
    end.extend_from_slice(b"PK\x05\x06");
    end.extend_from_slice(&[0; 4]);
    end.extend_from_slice(&(n as u16).to_le_bytes());
    end.extend_from_slice(&(n as u16).to_le_bytes());
    end.extend_from_slice(&(cd_size as u32).to_le_bytes());
    end.extend_from_slice(&(cd_offset as u32).to_le_bytes());
    end.extend_from_slice(&[0, 0]);
    w.write_all(&end)
}

/// Writes a tensor to `path` as `torch.save` would (archive named after the file, fresh
/// serialization id). `location` is the device string recorded for the storage (`cpu`,
/// `cuda:0`, `npu:0`); it does not change the bytes of the data.
pub fn write(path: &Path, t: TensorView<'_>, location: &str) -> Result<()> {
    let f = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    write_to(
        &mut w,
        &archive_name(path),
        t,
        location,
        &new_serialization_id(),
    )
    .map_err(|e| Error::io(path, e))?;
    w.flush().map_err(|e| Error::io(path, e))
}

/// Writes a view of the 1-d `storage` to `path` as `torch.save(view, path)` would (see
/// [`write_view_to`]): how strided and broadcast (stride-0) views reach a dump.
pub fn write_view(
    path: &Path,
    storage: TensorView<'_>,
    view: &ViewOf,
    location: &str,
) -> Result<()> {
    let f = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    write_view_to(
        &mut w,
        &archive_name(path),
        storage,
        view,
        location,
        &new_serialization_id(),
    )
    .map_err(|e| Error::io(path, e))?;
    w.flush().map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_strided_views() {
        // storage 0..24 as (4, 6); view [1:3, ::2] → offset 6, size (2, 3), stride (6, 2).
        let storage: Vec<u8> = (0..24).collect();
        let got = gather(&storage, 1, 6, &[2, 3], &[6, 2], 6).unwrap();
        assert_eq!(got, vec![6, 8, 10, 12, 14, 16]);
        // transpose of (2, 3): size (3, 2), stride (1, 3).
        let got = gather(&storage, 1, 0, &[3, 2], &[1, 3], 6).unwrap();
        assert_eq!(got, vec![0, 3, 1, 4, 2, 5]);
        // 0-dim at offset 5.
        assert_eq!(gather(&storage, 1, 5, &[], &[], 1).unwrap(), vec![5]);
        // two-byte elements, inner run copy.
        let got = gather(&storage, 2, 1, &[2, 2], &[4, 1], 8).unwrap();
        assert_eq!(got, vec![2, 3, 4, 5, 10, 11, 12, 13]);
    }

    proptest::proptest! {
        /// gather agrees with a naive per-element walk for any in-bounds view.
        #[test]
        fn gather_matches_naive(
            dims in proptest::collection::vec((1u64..5, 0u64..7), 0..4),
            offset in 0u64..5,
            item in proptest::sample::select(vec![1usize, 2, 4, 8, 16]),
        ) {
            let size: Vec<u64> = dims.iter().map(|d| d.0).collect();
            let stride: Vec<u64> = dims.iter().map(|d| d.1).collect();
            let last = offset + size.iter().zip(&stride).map(|(n, s)| (n - 1) * s).sum::<u64>();
            let storage: Vec<u8> = (0..(last as usize + 1) * item).map(|i| (i * 7 % 251) as u8).collect();
            let n: usize = size.iter().product::<u64>() as usize;
            let mut want = Vec::new();
            for flat in 0..n {
                let (mut rem, mut elem) = (flat as u64, offset);
                for d in (0..size.len()).rev() {
                    elem += (rem % size[d]) * stride[d];
                    rem /= size[d];
                }
                want.extend_from_slice(&storage[elem as usize * item..(elem as usize + 1) * item]);
            }
            proptest::prop_assert_eq!(gather(&storage, item, offset, &size, &stride, n * item).unwrap(), want);
        }
    }

    #[test]
    fn archive_names() {
        assert_eq!(
            archive_name(Path::new("/a/Torch.abs.0.forward.input.0.pt")),
            "Torch.abs.0.forward.input.0"
        );
        assert_eq!(archive_name(Path::new("x")), "x");
        assert_eq!(new_serialization_id().len(), 40);
        assert_ne!(new_serialization_id(), new_serialization_id());
    }
}
