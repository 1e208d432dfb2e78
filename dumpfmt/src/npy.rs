//! `.npy` files (NPY format 1.0, 2.0, 3.0), as MindSpore dumps write them with `np.save`.
//!
//! Reading is strict. The header dict is parsed as the Python literal it is (single or double
//! quoted strings, `True`/`False`, int tuples, optional trailing commas, whitespace between
//! tokens) and must hold exactly the keys `descr`, `fortran_order` and `shape`. Accepted: every
//! numeric little-endian descr numpy writes (`|b1 |u1 |i1 <i2 <i4 <i8 <u2 <u4 <u8 <f2 <f4 <f8
//! <c8 <c16`; `<`, `|` and `=` all mean little-endian here), and `<E2`, the bfloat16 descr of
//! MindSpore's kernel-level dumps ([`crate::kernel`]), which numpy itself cannot load. Rejected with
//! [`crate::Error::Tensor`]: big-endian data, `fortran_order: True` (msprobe never
//! writes it), object arrays (they need pickle), structured dtypes, and a payload whose size is not
//! exactly `numel × itemsize`. numpy string arrays (`<U…`, `|S…`, which PyTorch dumps save as
//! `.npy`) are valid files but not tensors: [`inspect`] reports them as
//! [`FileInfo::NpyText`], [`read`] and [`crate::tensor::read_info`] refuse them.
//!
//! Writing produces the bytes of current numpy's `np.save` (checked byte for byte against numpy
//! 1.26): version 1.0, header `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`
//! followed by numpy's 21-digit growth allowance for the first axis, padded with spaces to a
//! 64-byte boundary and ended by `\n`. numpy has no bfloat16 or float8: like MindSpore's dump
//! (spec §6.2), [`write()`] stores `BF16`, `F8E4M3FN` and `F8E5M2` tensors as float32 (exact
//! conversions, NaN bits as torch's `.float()` gives them).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use crate::TensorView;
use crate::tensor::{FileBytes, FileInfo, Tensor, TensorInfo, checked_numel};
use crate::{DType, Error, Result};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy's `ARRAY_ALIGN`.
const ALIGN: usize = 64;
/// numpy's `GROWTH_AXIS_MAX_DIGITS`: room left after the header for the first dimension to grow.
const GROWTH_DIGITS: usize = 21;
/// Headers above this size are refused (numpy itself refuses more than 10 000 bytes by default).
const MAX_HEADER: usize = 1 << 20;

/// The element type named by a header's `descr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NpyDescr {
    Numeric(DType),
    /// `<U{n}` (UCS-4, `4n` bytes per element) or `|S{n}` (`n` bytes per element).
    Text {
        descr: String,
        itemsize: usize,
    },
}

impl NpyDescr {
    pub fn itemsize(&self) -> usize {
        match self {
            NpyDescr::Numeric(d) => d.size(),
            NpyDescr::Text { itemsize, .. } => *itemsize,
        }
    }
}

/// A parsed `.npy` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// (major, minor) format version.
    pub version: (u8, u8),
    pub descr: NpyDescr,
    pub shape: Vec<usize>,
    /// File offset of the first payload byte.
    pub data_offset: usize,
}

impl NpyHeader {
    /// Payload size `numel × itemsize`, `None` on overflow.
    pub fn nbytes(&self) -> Option<u64> {
        checked_numel(&self.shape)?.checked_mul(self.descr.itemsize() as u64)
    }
}

/// Parses the header at the start of `bytes` (which need only hold the header). `file` names the
/// file in errors.
pub fn parse_header(bytes: &[u8], file: &Path) -> Result<NpyHeader> {
    let err = |off: usize, msg: String| Error::tensor(file, off as u64, msg);
    if bytes.len() < 10 {
        return Err(err(bytes.len(), "truncated .npy magic/version".into()));
    }
    if &bytes[..6] != MAGIC {
        return Err(err(0, "not a .npy file (bad magic)".into()));
    }
    let version = (bytes[6], bytes[7]);
    let (len_end, hlen) = match version {
        (1, 0) => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        (2, 0) | (3, 0) => {
            if bytes.len() < 12 {
                return Err(err(bytes.len(), "truncated .npy header length".into()));
            }
            (
                12,
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            )
        }
        (a, b) => return Err(err(6, format!("unsupported .npy format version {a}.{b}"))),
    };
    if hlen > MAX_HEADER {
        return Err(err(8, format!("header length {hlen} is implausibly large")));
    }
    let data_offset = len_end + hlen;
    if bytes.len() < data_offset {
        return Err(err(
            bytes.len(),
            format!("truncated header ({hlen} bytes announced)"),
        ));
    }
    let raw = &bytes[len_end..data_offset];
    let text: String = if version.0 == 3 {
        std::str::from_utf8(raw)
            .map_err(|e| err(len_end + e.valid_up_to(), "header is not UTF-8".into()))?
            .to_owned()
    } else {
        // latin-1: every byte is one char; only ASCII can be valid in the literal anyway.
        raw.iter().map(|&b| b as char).collect()
    };
    if !text.ends_with('\n') {
        return Err(err(
            data_offset.saturating_sub(1),
            "header does not end with a newline".into(),
        ));
    }
    let dict = HeaderParser {
        s: text.as_bytes(),
        pos: 0,
        base: len_end,
    }
    .parse()
    .map_err(|(off, msg)| err(off, msg))?;
    let descr = classify_descr(&dict.descr).map_err(|msg| err(len_end, msg))?;
    if dict.fortran_order {
        return Err(err(
            len_end,
            "fortran_order True is not supported (msprobe writes C order)".into(),
        ));
    }
    Ok(NpyHeader {
        version,
        descr,
        shape: dict.shape,
        data_offset,
    })
}

fn classify_descr(descr: &str) -> std::result::Result<NpyDescr, String> {
    let (order, body) = match descr.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => (descr.as_bytes()[0], &descr[1..]),
        _ => (b'=', descr),
    };
    let bad = || format!("unsupported numpy dtype {descr:?}");
    if let Some(kind @ ('U' | 'S')) = body.chars().next() {
        let n = &body[1..];
        if n.is_empty()
            || !n.bytes().all(|b| b.is_ascii_digit())
            || (n.len() > 1 && n.starts_with('0'))
        {
            return Err(bad());
        }
        let n: usize = n.parse().map_err(|_| bad())?;
        if kind == 'U' && order == b'>' {
            return Err(format!("big-endian dtype {descr:?} is not supported"));
        }
        let itemsize = if kind == 'U' {
            n.checked_mul(4).ok_or_else(bad)?
        } else {
            n
        };
        return Ok(NpyDescr::Text {
            descr: descr.to_owned(),
            itemsize,
        });
    }
    if body == "O" {
        return Err("object array (needs pickle; np.load(allow_pickle=False) refuses it)".into());
    }
    // MindSpore's kernel dumps write bfloat16 with the descr `'<E2'` (numpy has no bfloat16 and
    // refuses the header); the payload is the raw 2-byte words.
    let known = if body == "E2" {
        Some(DType::BF16)
    } else {
        DType::from_npy_descr(body)
    };
    match known {
        Some(d) if order == b'>' && d.size() > 1 => {
            Err(format!("big-endian dtype {descr:?} is not supported"))
        }
        Some(d) => Ok(NpyDescr::Numeric(d)),
        None => Err(bad()),
    }
}

struct HeaderDict {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A parser for the header's Python dict literal; errors carry absolute file offsets.
struct HeaderParser<'a> {
    s: &'a [u8],
    pos: usize,
    base: usize,
}

type PResult<T> = std::result::Result<T, (usize, String)>;

enum Lit {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

impl HeaderParser<'_> {
    fn fail<T>(&self, msg: impl Into<String>) -> PResult<T> {
        Err((self.base + self.pos, msg.into()))
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> PResult<()> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            self.fail(format!("expected {:?} in header", c as char))
        }
    }

    fn parse(mut self) -> PResult<HeaderDict> {
        self.expect(b'{')?;
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        loop {
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key_pos = self.base + self.pos;
            let key = match self.literal()? {
                Lit::Str(k) => k,
                _ => return Err((key_pos, "header key is not a string".into())),
            };
            self.expect(b':')?;
            let val_pos = self.base + self.pos;
            let val = self.literal()?;
            let dup = || (key_pos, format!("duplicate header key {key:?}"));
            match (key.as_str(), val) {
                ("descr", Lit::Str(s)) => descr.replace(s).map_or(Ok(()), |_| Err(dup()))?,
                ("fortran_order", Lit::Bool(b)) => {
                    fortran.replace(b).map_or(Ok(()), |_| Err(dup()))?
                }
                ("shape", Lit::Tuple(t)) => shape.replace(t).map_or(Ok(()), |_| Err(dup()))?,
                ("descr" | "fortran_order" | "shape", _) => {
                    return Err((
                        val_pos,
                        format!("header value of {key:?} has the wrong type"),
                    ));
                }
                _ => return Err((key_pos, format!("unexpected header key {key:?}"))),
            }
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return self.fail("expected ',' or '}' in header"),
            }
        }
        self.skip_ws();
        if self.pos != self.s.len() {
            return self.fail("unexpected text after the header dict");
        }
        match (descr, fortran, shape) {
            (Some(descr), Some(fortran_order), Some(shape)) => Ok(HeaderDict {
                descr,
                fortran_order,
                shape,
            }),
            _ => Err((
                self.base,
                "header lacks descr, fortran_order or shape".into(),
            )),
        }
    }

    fn literal(&mut self) -> PResult<Lit> {
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => {
                self.pos += 1;
                let start = self.pos;
                while self.pos < self.s.len() && self.s[self.pos] != q {
                    if self.s[self.pos] == b'\\' || self.s[self.pos] == b'\n' {
                        return self.fail("escapes and newlines are not allowed in header strings");
                    }
                    self.pos += 1;
                }
                if self.pos == self.s.len() {
                    return self.fail("unterminated string in header");
                }
                let s = String::from_utf8_lossy(&self.s[start..self.pos]).into_owned();
                self.pos += 1;
                Ok(Lit::Str(s))
            }
            Some(b'(') => {
                self.pos += 1;
                let mut dims = Vec::new();
                let mut saw_comma = false;
                loop {
                    match self.peek() {
                        Some(b')') => {
                            self.pos += 1;
                            break;
                        }
                        Some(b'0'..=b'9') => {}
                        _ => return self.fail("expected a dimension or ')' in shape"),
                    }
                    dims.push(self.int()?);
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            saw_comma = true;
                        }
                        Some(b')') => {}
                        _ => return self.fail("expected ',' or ')' in shape"),
                    }
                }
                // `(5)` is the int 5 in Python, not a tuple.
                if dims.len() == 1 && !saw_comma {
                    return self.fail("shape (n) lacks the trailing comma of a 1-tuple");
                }
                Ok(Lit::Tuple(dims))
            }
            Some(b'T' | b'F') => {
                for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
                    if self.s[self.pos..].starts_with(word) {
                        let after = self.s.get(self.pos + word.len());
                        if !after.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                            self.pos += word.len();
                            return Ok(Lit::Bool(v));
                        }
                    }
                }
                self.fail("unexpected name in header")
            }
            _ => self.fail("unexpected token in header"),
        }
    }

    fn int(&mut self) -> PResult<usize> {
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let digits = &self.s[start..self.pos];
        if digits.len() > 1 && digits[0] == b'0' {
            self.pos = start;
            return self.fail("leading zero in a shape dimension");
        }
        if self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_' || *c == b'.')
        {
            return self.fail("shape dimension is not a plain integer");
        }
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<usize>().ok())
            .map_or_else(
                || {
                    self.pos = start;
                    self.fail("shape dimension out of range")
                },
                Ok,
            )
    }
}

/// Reads the header of the file at `path` (without the payload).
pub fn read_header(path: &Path) -> Result<(NpyHeader, u64)> {
    let mut f = crate::fsio::open_regular(path)?;
    let file_len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut head = vec![0u8; 12];
    let n = read_some(&mut f, &mut head).map_err(|e| Error::io(path, e))?;
    head.truncate(n);
    let total = match head.get(6) {
        Some(1) if n >= 10 => 10 + u16::from_le_bytes([head[8], head[9]]) as usize,
        Some(2 | 3) if n >= 12 => 12 + u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize,
        // Too short or odd: let the parser report it.
        _ => return parse_header(&head, path).map(|h| (h, file_len)),
    };
    if total <= MAX_HEADER + 12 && total > head.len() {
        let have = head.len();
        head.resize(total, 0);
        let m = read_some(&mut f, &mut head[have..]).map_err(|e| Error::io(path, e))?;
        head.truncate(have + m);
    }
    parse_header(&head, path).map(|h| (h, file_len))
}

fn read_some(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn check_payload(h: &NpyHeader, file_len: u64, path: &Path) -> Result<u64> {
    let nbytes = h.nbytes().ok_or_else(|| {
        Error::tensor(
            path,
            h.data_offset as u64,
            format!("shape {:?} overflows", h.shape),
        )
    })?;
    let have = file_len.saturating_sub(h.data_offset as u64);
    if have != nbytes {
        return Err(Error::tensor(
            path,
            h.data_offset as u64,
            format!(
                "payload has {have} bytes but shape {:?} × {} bytes per element needs {nbytes}",
                h.shape,
                h.descr.itemsize()
            ),
        ));
    }
    Ok(nbytes)
}

/// Header-level facts about a `.npy` file (numeric or string array), payload size checked.
pub fn inspect(path: &Path) -> Result<FileInfo> {
    let (h, file_len) = read_header(path)?;
    let nbytes = check_payload(&h, file_len, path)?;
    Ok(match h.descr {
        NpyDescr::Numeric(dtype) => FileInfo::Tensor(TensorInfo {
            dtype,
            shape: h.shape,
            nbytes,
        }),
        NpyDescr::Text { descr, .. } => FileInfo::NpyText {
            descr,
            shape: h.shape,
            nbytes,
        },
    })
}

/// Reads a numeric `.npy` file; the tensor borrows the file's bytes (memory-mapped when large).
pub fn read(path: &Path) -> Result<Tensor> {
    let file = FileBytes::open_populated(path)?;
    let h = parse_header(file.bytes(), path)?;
    let nbytes = check_payload(&h, file.bytes().len() as u64, path)?;
    match h.descr {
        NpyDescr::Numeric(dtype) => Ok(Tensor::from_file(
            dtype,
            h.shape,
            file,
            h.data_offset,
            nbytes as usize,
        )),
        NpyDescr::Text { descr, .. } => Err(Error::tensor(
            path,
            0,
            format!("numpy string array (descr {descr:?}), not a numeric tensor"),
        )),
    }
}

/// The dtype a tensor of `dtype` is stored as in `.npy` (bf16 and float8 become float32).
pub fn stored_dtype(dtype: DType) -> DType {
    match dtype {
        DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => DType::F32,
        d => d,
    }
}

/// The header `np.save` writes for an array of this stored dtype and shape.
pub fn header_bytes(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let mut text = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        stored_dtype(dtype).npy_descr(),
        pyrepr::shape_tuple(shape)
    );
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        text.extend(std::iter::repeat_n(
            ' ',
            GROWTH_DIGITS.saturating_sub(digits),
        ));
    }
    let hlen = text.len() + 1;
    let mut out = MAGIC.to_vec();
    // Version 1.0 unless the padded header overflows its u16 length (as numpy decides).
    let pad1 = ALIGN - (10 + hlen) % ALIGN;
    if hlen + pad1 <= u16::MAX as usize {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&((hlen + pad1) as u16).to_le_bytes());
    } else {
        let pad2 = ALIGN - (12 + hlen) % ALIGN;
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&((hlen + pad2) as u32).to_le_bytes());
    }
    let pad = ALIGN - (out.len() + hlen) % ALIGN;
    out.extend_from_slice(text.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

/// Writes `t` as `np.save` would (bf16/float8 converted to float32) to `w`.
pub fn write_to(w: &mut impl Write, t: TensorView<'_>) -> std::io::Result<()> {
    w.write_all(&header_bytes(t.dtype(), t.shape()))?;
    let convert: Option<fn(&[u8]) -> f32> = match t.dtype() {
        DType::BF16 => Some(|b| crate::tensor::bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        DType::F8E4M3FN => Some(|b| numprobe_tensor::float8::e4m3fn_to_f32(b[0])),
        DType::F8E5M2 => Some(|b| numprobe_tensor::float8::e5m2_to_f32(b[0])),
        _ => None,
    };
    match convert {
        None => w.write_all(t.bytes()),
        Some(f) => {
            let mut buf = Vec::with_capacity(64 * 1024);
            for chunk in t.bytes().chunks(16 * 1024 * t.dtype().size()) {
                buf.clear();
                for e in chunk.chunks_exact(t.dtype().size()) {
                    buf.extend_from_slice(&f(e).to_le_bytes());
                }
                w.write_all(&buf)?;
            }
            Ok(())
        }
    }
}

/// Writes `t` to `path` as `np.save` would (bf16/float8 converted to float32).
pub fn write(path: &Path, t: TensorView<'_>) -> Result<()> {
    let f = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    write_to(&mut w, t).map_err(|e| Error::io(path, e))?;
    w.flush().map_err(|e| Error::io(path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(h: &str) -> Result<NpyHeader> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        parse_header(&b, Path::new("t.npy"))
    }

    #[test]
    fn header_literals() {
        let h = parse("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   \n").unwrap();
        assert_eq!(h.descr, NpyDescr::Numeric(DType::F32));
        assert_eq!(h.shape, vec![2, 3]);
        let h = parse("{\"shape\":(5,),\"descr\":\"|b1\",\"fortran_order\":False}\n").unwrap();
        assert_eq!(h.shape, vec![5]);
        assert_eq!(h.descr, NpyDescr::Numeric(DType::Bool));
        assert_eq!(
            parse("{'descr': '<U5', 'fortran_order': False, 'shape': (), }\n")
                .unwrap()
                .descr,
            NpyDescr::Text {
                descr: "<U5".into(),
                itemsize: 20
            }
        );
        for bad in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5), }\n",
            "{'descr': '>f4', 'fortran_order': False, 'shape': (5,), }\n",
            "{'descr': '<f4', 'fortran_order': True, 'shape': (5,), }\n",
            "{'descr': '|O', 'fortran_order': False, 'shape': (5,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), 'x': 1}\n",
            "{'descr': '<f4', 'fortran_order': False}\n",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (5,)}\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (05,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-5,), }\n",
            "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (5,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), } x\n",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (5,), }\n",
            "{'descr': '<V2', 'fortran_order': False, 'shape': (5,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_layout_matches_numpy() {
        // np.save(f, np.zeros((4, 8, 1), np.float32)) header, from a MindSpore fixture.
        let h = header_bytes(DType::F32, &[4, 8, 1]);
        assert_eq!(h.len(), 128);
        assert!(h.starts_with(b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8, 1), }"));
        assert_eq!(*h.last().unwrap(), b'\n');
        assert_eq!(header_bytes(DType::F64, &[]).len() % 64, 0);
        let p = parse_header(&header_bytes(DType::C128, &[7]), Path::new("x")).unwrap();
        assert_eq!(p.shape, vec![7]);
        assert_eq!(p.data_offset % 64, 0);
    }
}
