//! The `data.pkl` of a single-tensor `torch.save` archive: a strict reader and a byte-exact
//! writer.
//!
//! Why a hand-written pickle VM: `torch.save` pickles one call
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict())`
//! (or `_rebuild_tensor_v3(…, dtype)` for uint16/32/64 and float8) whose storage arrives through a
//! persistent id (`BINPERSID` on `('storage', torch.FloatStorage, '0', 'cpu', numel)`). The Rust
//! pickle crate (`serde-pickle`) deserialises plain data into serde types: it has no hook for
//! persistent ids, and it either rejects `GLOBAL`/`REDUCE` or (with `replace_unresolved_globals`)
//! replaces every global by `None`, which is the opposite of what is needed here: resolve exactly
//! the handful of globals torch uses and refuse every other one. A VM over ~20 opcodes is smaller
//! than an adapter and keeps the allow-list exact, like `torch.load(weights_only=True)`.
//!
//! Accepted: protocol 2 (`PROTO 2` first, `STOP` last, nothing after it); opcodes `GLOBAL`,
//! `BINPUT`/`LONG_BINPUT`, `BINGET`/`LONG_BINGET`, `MARK`, `TUPLE`, `TUPLE1..3`, `EMPTY_TUPLE`,
//! `BINUNICODE`, `BININT1`, `BININT2`, `BININT`, `LONG1`, `NEWTRUE`, `NEWFALSE`, `BINPERSID`,
//! `REDUCE`; globals `torch._utils._rebuild_tensor_v2`, `_rebuild_tensor_v3`, `_rebuild_tensor`
//! (pre-1.x layout without requires_grad/hooks), the twelve legacy `torch.*Storage` classes,
//! `torch.storage.UntypedStorage`, `torch.<dtype>` (v3's dtype argument) and
//! `collections.OrderedDict` (only as the empty backward-hooks dict). The result must be exactly
//! one tensor. Anything else is a [`PickleError`] with the byte offset in `data.pkl`.
//! Rejected on purpose: the tensor-metadata argument (conj/neg bits would change the values).

use std::collections::HashMap;
use std::rc::Rc;

use crate::DType;

/// What the pickle says about the saved tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    pub dtype: DType,
    /// Name of the storage entry: the archive holds it as `{prefix}/data/{key}`.
    pub storage_key: String,
    /// Device the tensor lived on when saved (`cpu`, `cuda:0`, `npu:0`).
    pub location: String,
    /// Size of the storage in bytes.
    pub storage_nbytes: u64,
    /// Offset into the storage, in elements.
    pub storage_offset: u64,
    pub size: Vec<u64>,
    /// Strides in elements.
    pub stride: Vec<u64>,
    pub requires_grad: bool,
}

/// A refused or malformed pickle; `offset` is the byte offset in `data.pkl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickleError {
    pub offset: usize,
    pub msg: String,
}

impl std::fmt::Display for PickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "data.pkl byte {}: {}", self.offset, self.msg)
    }
}

/// The legacy typed storage classes `_rebuild_tensor_v2` uses (never for uint16/32/64 or
/// float8, which torch saves through v3 and an untyped storage).
const LEGACY_STORAGES: &[(&str, DType)] = &[
    ("FloatStorage", DType::F32),
    ("DoubleStorage", DType::F64),
    ("HalfStorage", DType::F16),
    ("BFloat16Storage", DType::BF16),
    ("ByteStorage", DType::U8),
    ("CharStorage", DType::I8),
    ("ShortStorage", DType::I16),
    ("IntStorage", DType::I32),
    ("LongStorage", DType::I64),
    ("BoolStorage", DType::Bool),
    ("ComplexFloatStorage", DType::C64),
    ("ComplexDoubleStorage", DType::C128),
];

fn legacy_storage_of(dtype: DType) -> Option<&'static str> {
    LEGACY_STORAGES.iter().find(|r| r.1 == dtype).map(|r| r.0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Global {
    RebuildV1,
    RebuildV2,
    RebuildV3,
    /// A legacy typed storage class.
    TypedStorage(DType),
    UntypedStorage,
    /// `torch.float32` etc. as an object.
    Dtype(DType),
    OrderedDict,
}

#[derive(Clone, Debug)]
struct Storage {
    key: Rc<str>,
    location: Rc<str>,
    /// `None` for an untyped (byte) storage.
    dtype: Option<DType>,
    nbytes: u64,
}

/// Values are cheap to clone (memo reads clone them), so that a hostile pickle cannot multiply
/// its size in memory through `BINGET`.
#[derive(Clone, Debug)]
enum Value {
    Int(i64),
    Bool(bool),
    Str(Rc<str>),
    /// `depth`: nesting level (1 for a tuple of scalars), bounded by [`MAX_DEPTH`].
    Tuple {
        items: Rc<[Value]>,
        depth: u8,
    },
    Global(Global),
    Storage(Rc<Storage>),
    /// An empty `collections.OrderedDict()`.
    EmptyOrderedDict,
    Tensor(Rc<TensorMeta>),
}

/// torch's pickle nests tuples three deep; deeper nesting is refused (it also keeps the
/// recursive drop of nested values shallow).
const MAX_DEPTH: u8 = 8;
/// torch's tensors have at most a few dozen dimensions.
const MAX_DIMS: usize = 64;
/// A single-tensor data.pkl is a few hundred bytes.
pub const MAX_PICKLE_LEN: usize = 1 << 20;

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) => "int",
            Value::Bool(_) => "bool",
            Value::Str(_) => "str",
            Value::Tuple { .. } => "tuple",
            Value::Global(_) => "global",
            Value::Storage(_) => "storage",
            Value::EmptyOrderedDict => "OrderedDict",
            Value::Tensor(_) => "tensor",
        }
    }
}

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being executed, for errors.
    op_at: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

type PResult<T> = std::result::Result<T, PickleError>;

/// Parses a single-tensor `data.pkl`.
pub fn parse_tensor_pickle(data: &[u8]) -> PResult<TensorMeta> {
    Vm {
        data,
        pos: 0,
        op_at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    }
    .run()
}

impl Vm<'_> {
    fn err<T>(&self, msg: impl Into<String>) -> PResult<T> {
        Err(PickleError {
            offset: self.op_at,
            msg: msg.into(),
        })
    }

    fn take(&mut self, n: usize) -> PResult<&[u8]> {
        if self.data.len() - self.pos < n {
            return Err(PickleError {
                offset: self.data.len(),
                msg: format!(
                    "truncated: opcode at byte {} needs {n} more bytes",
                    self.op_at
                ),
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> PResult<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> PResult<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn line(&mut self) -> PResult<String> {
        let rest = &self.data[self.pos..];
        let Some(n) = rest.iter().position(|&b| b == b'\n') else {
            return Err(PickleError {
                offset: self.data.len(),
                msg: "truncated GLOBAL name".into(),
            });
        };
        let s = &rest[..n];
        if !s
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
            || s.is_empty()
        {
            return self.err("GLOBAL name is not a dotted identifier");
        }
        self.pos += n + 1;
        Ok(String::from_utf8(s.to_vec()).expect("ASCII"))
    }

    fn push(&mut self, v: Value) {
        self.stack.push(v);
    }

    fn pop(&mut self) -> PResult<Value> {
        if self.marks.last() == Some(&self.stack.len()) {
            return self.err("stack underflow (at a MARK)");
        }
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.err("stack underflow"),
        }
    }

    fn top(&self) -> PResult<&Value> {
        if self.marks.last() == Some(&self.stack.len()) {
            return self.err("memo of an empty stack (at a MARK)");
        }
        match self.stack.last() {
            Some(v) => Ok(v),
            None => self.err("memo of an empty stack"),
        }
    }

    fn pop_n(&mut self, n: usize) -> PResult<Vec<Value>> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n {
            return self.err("stack underflow");
        }
        Ok(self.stack.split_off(self.stack.len() - n))
    }

    fn run(mut self) -> PResult<TensorMeta> {
        if self.data.len() > MAX_PICKLE_LEN {
            return self.err(format!(
                "{} bytes is implausibly large for one tensor",
                self.data.len()
            ));
        }
        if self.data.first() != Some(&0x80) {
            return self.err("not a protocol-2 pickle (no PROTO opcode)");
        }
        loop {
            self.op_at = self.pos;
            let op = match self.data.get(self.pos) {
                Some(&op) => op,
                None => return self.err("pickle ends without STOP"),
            };
            self.pos += 1;
            match op {
                0x80 => {
                    if self.op_at != 0 {
                        return self.err("PROTO not at the start");
                    }
                    let p = self.u8()?;
                    if p != 2 {
                        return self.err(format!("pickle protocol {p}; torch.save writes 2"));
                    }
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = self.resolve(&module, &name)?;
                    self.push(Value::Global(g));
                }
                b'q' => {
                    let i = self.u8()? as u32;
                    let v = self.top()?.clone();
                    self.memo.insert(i, v);
                }
                b'r' => {
                    let i = self.u32()?;
                    let v = self.top()?.clone();
                    self.memo.insert(i, v);
                }
                b'h' | b'j' => {
                    let i = if op == b'h' {
                        self.u8()? as u32
                    } else {
                        self.u32()?
                    };
                    match self.memo.get(&i) {
                        Some(v) => {
                            let v = v.clone();
                            self.push(v)
                        }
                        None => return self.err(format!("memo key {i} not set")),
                    }
                }
                b'(' => self.marks.push(self.stack.len()),
                b't' => {
                    let Some(m) = self.marks.pop() else {
                        return self.err("TUPLE without MARK");
                    };
                    let items = self.stack.split_off(m);
                    let t = self.tuple(items)?;
                    self.push(t);
                }
                b')' => self.push(Value::Tuple {
                    items: Rc::new([]),
                    depth: 1,
                }),
                0x85..=0x87 => {
                    let items = self.pop_n((op - 0x84) as usize)?;
                    let t = self.tuple(items)?;
                    self.push(t);
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let s = self.take(n)?;
                    match std::str::from_utf8(s) {
                        Ok(s) => {
                            let s: Rc<str> = s.into();
                            self.push(Value::Str(s))
                        }
                        Err(_) => return self.err("BINUNICODE is not UTF-8"),
                    }
                }
                b'K' => {
                    let v = self.u8()? as i64;
                    self.push(Value::Int(v));
                }
                b'M' => {
                    let b = self.take(2)?;
                    let v = u16::from_le_bytes([b[0], b[1]]) as i64;
                    self.push(Value::Int(v));
                }
                b'J' => {
                    let v = self.u32()? as i32 as i64;
                    self.push(Value::Int(v));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    if n > 8 {
                        return self.err(format!("LONG1 of {n} bytes does not fit 64 bits"));
                    }
                    let b = self.take(n)?;
                    let mut buf = if b.last().is_some_and(|&x| x & 0x80 != 0) {
                        [0xff; 8]
                    } else {
                        [0; 8]
                    };
                    buf[..n].copy_from_slice(b);
                    self.push(Value::Int(i64::from_le_bytes(buf)));
                }
                0x88 => self.push(Value::Bool(true)),
                0x89 => self.push(Value::Bool(false)),
                b'Q' => {
                    let pid = self.pop()?;
                    let s = self.persistent_load(pid)?;
                    self.push(Value::Storage(Rc::new(s)));
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let v = self.reduce(callable, args)?;
                    self.push(v);
                }
                b'.' => {
                    if self.pos != self.data.len() {
                        return self.err("bytes after STOP");
                    }
                    if !self.marks.is_empty() {
                        return self.err("STOP with an open MARK");
                    }
                    return match self.stack.as_slice() {
                        [Value::Tensor(_)] => match self.stack.pop() {
                            Some(Value::Tensor(t)) => Ok(Rc::unwrap_or_clone(t)),
                            _ => unreachable!(),
                        },
                        [v] => self.err(format!("pickle holds a {}, not a tensor", v.kind())),
                        _ => self.err(format!(
                            "STOP with {} values on the stack",
                            self.stack.len()
                        )),
                    };
                }
                _ => {
                    let name = opcode_name(op);
                    // A dict or list is what torch.save of a state_dict or of several tensors
                    // writes: say so, rather than only naming the opcode.
                    let held = match op {
                        b'}' | b'd' => Some("dict"),
                        b']' | b'l' => Some("list"),
                        _ => None,
                    };
                    if let Some(kind) = held {
                        return self.err(format!(
                            "the file holds a {kind}, not a tensor (torch.save of a {kind}?); \
                             numprobe reads files of one tensor (pickle opcode 0x{op:02x} {name})"
                        ));
                    }
                    return self.err(format!("disallowed pickle opcode 0x{op:02x} ({name})"));
                }
            }
        }
    }

    fn tuple(&self, items: Vec<Value>) -> PResult<Value> {
        let inner = items
            .iter()
            .map(|v| match v {
                Value::Tuple { depth, .. } => *depth,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        if inner >= MAX_DEPTH {
            return self.err("tuples nested too deeply");
        }
        Ok(Value::Tuple {
            items: items.into(),
            depth: inner + 1,
        })
    }

    fn resolve(&self, module: &str, name: &str) -> PResult<Global> {
        let g = match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildV2),
            ("torch._utils", "_rebuild_tensor_v3") => Some(Global::RebuildV3),
            ("torch._utils", "_rebuild_tensor") => Some(Global::RebuildV1),
            ("torch.storage", "UntypedStorage") => Some(Global::UntypedStorage),
            ("collections", "OrderedDict") => Some(Global::OrderedDict),
            ("torch", n) => LEGACY_STORAGES
                .iter()
                .find(|r| r.0 == n)
                .map(|r| Global::TypedStorage(r.1))
                .or_else(|| DType::from_torch_name(&format!("torch.{n}")).map(Global::Dtype)),
            _ => None,
        };
        match g {
            Some(g) => Ok(g),
            None => self.err(format!("disallowed global {module}.{name}")),
        }
    }

    fn persistent_load(&self, pid: Value) -> PResult<Storage> {
        let Value::Tuple { items, .. } = pid else {
            return self.err(format!("persistent id is a {}, not a tuple", pid.kind()));
        };
        match &items[..] {
            [
                Value::Str(tag),
                Value::Global(class),
                Value::Str(key),
                Value::Str(location),
                Value::Int(numel),
            ] if &**tag == "storage" => {
                let dtype = match class {
                    Global::TypedStorage(d) => Some(*d),
                    Global::UntypedStorage => None,
                    _ => return self.err("persistent id names no storage class"),
                };
                let elem = dtype.map_or(1, |d| d.size() as u64);
                let nbytes = u64::try_from(*numel)
                    .ok()
                    .and_then(|n| n.checked_mul(elem))
                    .map_or_else(|| self.err(format!("bad storage size {numel}")), Ok)?;
                if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return self.err(format!("bad storage key {key:?}"));
                }
                Ok(Storage {
                    key: Rc::clone(key),
                    location: Rc::clone(location),
                    dtype,
                    nbytes,
                })
            }
            _ => self.err("persistent id is not ('storage', StorageClass, key, location, numel)"),
        }
    }

    fn reduce(&self, callable: Value, args: Value) -> PResult<Value> {
        let Value::Global(g) = callable else {
            return self.err(format!("REDUCE on a {}", callable.kind()));
        };
        let Value::Tuple { items: args, .. } = args else {
            return self.err(format!("REDUCE arguments are a {}", args.kind()));
        };
        match g {
            Global::OrderedDict if args.is_empty() => Ok(Value::EmptyOrderedDict),
            Global::OrderedDict => self.err("OrderedDict with arguments (non-empty backward hooks)"),
            Global::RebuildV1 => match &args[..] {
                [storage, offset, size, stride] => self.rebuild(storage, offset, size, stride, false, None),
                _ => self.err(format!("_rebuild_tensor takes 4 arguments, got {}", args.len())),
            },
            Global::RebuildV2 => match &args[..] {
                [storage, offset, size, stride, Value::Bool(rg), Value::EmptyOrderedDict] => {
                    self.rebuild(storage, offset, size, stride, *rg, None)
                }
                [_, _, _, _, _, _, _] => self.err("tensor metadata argument (e.g. conj/neg bit) is not supported"),
                _ => self.err("_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, bool, OrderedDict())"),
            },
            Global::RebuildV3 => match &args[..] {
                [storage, offset, size, stride, Value::Bool(rg), Value::EmptyOrderedDict, Value::Global(Global::Dtype(d))] => {
                    self.rebuild(storage, offset, size, stride, *rg, Some(*d))
                }
                [_, _, _, _, _, _, _, _] => self.err("tensor metadata argument (e.g. conj/neg bit) is not supported"),
                _ => self.err("_rebuild_tensor_v3 arguments are not (storage, offset, size, stride, bool, OrderedDict(), dtype)"),
            },
            _ => self.err("REDUCE on a global that is not callable here"),
        }
    }

    fn rebuild(
        &self,
        storage: &Value,
        offset: &Value,
        size: &Value,
        stride: &Value,
        requires_grad: bool,
        v3_dtype: Option<DType>,
    ) -> PResult<Value> {
        let Value::Storage(s) = storage else {
            return self.err(format!("tensor storage is a {}", storage.kind()));
        };
        let dtype = match (s.dtype, v3_dtype) {
            (Some(d), None) => d,
            (None, Some(d)) => d,
            (Some(_), Some(_)) => return self.err("_rebuild_tensor_v3 with a typed storage"),
            (None, None) => return self.err("_rebuild_tensor_v2 with an untyped storage"),
        };
        if s.nbytes % dtype.size() as u64 != 0 {
            return self.err("storage size is not a multiple of the element size");
        }
        let Value::Int(off) = offset else {
            return self.err(format!("storage offset is a {}", offset.kind()));
        };
        let storage_offset =
            u64::try_from(*off).map_or_else(|_| self.err("negative storage offset"), Ok)?;
        let size = self.int_tuple(size, "size")?;
        let stride = self.int_tuple(stride, "stride")?;
        if size.len() != stride.len() {
            return self.err(format!(
                "size has {} dims, stride {}",
                size.len(),
                stride.len()
            ));
        }
        if size.len() > MAX_DIMS {
            return self.err(format!(
                "{} dimensions (at most {MAX_DIMS} supported)",
                size.len()
            ));
        }
        Ok(Value::Tensor(Rc::new(TensorMeta {
            dtype,
            storage_key: s.key.to_string(),
            location: s.location.to_string(),
            storage_nbytes: s.nbytes,
            storage_offset,
            size,
            stride,
            requires_grad,
        })))
    }

    fn int_tuple(&self, v: &Value, what: &str) -> PResult<Vec<u64>> {
        let Value::Tuple { items, .. } = v else {
            return self.err(format!("{what} is a {}, not a tuple", v.kind()));
        };
        items
            .iter()
            .map(|x| match x {
                Value::Int(i) if *i >= 0 => Ok(*i as u64),
                Value::Int(i) => self.err(format!("negative {what} {i}")),
                other => self.err(format!("{what} holds a {}", other.kind())),
            })
            .collect()
    }
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        b'}' => "EMPTY_DICT",
        b']' => "EMPTY_LIST",
        b'N' => "NONE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x95 => "FRAME",
        0x94 => "MEMOIZE",
        0x8c => "SHORT_BINUNICODE",
        b'P' => "PERSID",
        b's' | b'u' => "SETITEM(S)",
        b'a' | b'e' => "APPEND(S)",
        b'G' => "BINFLOAT",
        b'T' | b'U' => "BINSTRING",
        b'V' => "UNICODE",
        b'I' => "INT",
        b'L' => "LONG",
        0x8b => "LONG4",
        b'0' | b'2' | b'1' => "POP/DUP",
        _ => "unknown",
    }
}

/// Writes pickles the way CPython's pickler (protocol 2) does for the objects torch.save emits:
/// every string, global and non-empty tuple is memoised with `BINPUT`.
struct Writer {
    out: Vec<u8>,
    memo: u32,
}

impl Writer {
    fn memoize(&mut self) {
        if self.memo < 256 {
            self.out.extend_from_slice(&[b'q', self.memo as u8]);
        } else {
            self.out.push(b'r');
            self.out.extend_from_slice(&self.memo.to_le_bytes());
        }
        self.memo += 1;
    }

    fn global(&mut self, module: &str, name: &str) {
        self.out.push(b'c');
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
        self.memoize();
    }

    fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self.memoize();
    }

    /// CPython's `save_long` for protocol 2.
    fn int(&mut self, v: i64) {
        if (0..=0xff).contains(&v) {
            self.out.extend_from_slice(&[b'K', v as u8]);
        } else if (0..=0xffff).contains(&v) {
            self.out.push(b'M');
            self.out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if (i32::MIN as i64..=i32::MAX as i64).contains(&v) {
            self.out.push(b'J');
            self.out.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            // Minimal two's complement: (bit_length >> 3) + 1 bytes, trimmed for negatives.
            let bits = if v >= 0 {
                64 - v.leading_zeros()
            } else {
                64 - (!v).leading_zeros()
            };
            let mut n = (bits as usize >> 3) + 1;
            let bytes = v.to_le_bytes();
            if v < 0 && n > 1 && bytes[n - 1] == 0xff && bytes[n - 2] & 0x80 != 0 {
                n -= 1;
            }
            self.out.extend_from_slice(&[0x8a, n as u8]);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }

    /// A tuple of ints (size or stride).
    fn int_tuple(&mut self, items: &[u64]) {
        let small = items.len() <= 3;
        if items.is_empty() {
            self.out.push(b')');
            return;
        }
        if !small {
            self.out.push(b'(');
        }
        for &i in items {
            self.int(i as i64);
        }
        self.out.push(if small {
            0x84 + items.len() as u8
        } else {
            b't'
        });
        self.memoize();
    }
}

/// The `data.pkl` `torch.save` writes for a tensor described by `meta` (v2 with a legacy storage
/// class where one exists, v3 with an untyped storage for uint16/32/64 and float8).
pub fn write_tensor_pickle(meta: &TensorMeta) -> Vec<u8> {
    let mut w = Writer {
        out: vec![0x80, 2],
        memo: 0,
    };
    let legacy = legacy_storage_of(meta.dtype);
    w.global(
        "torch._utils",
        if legacy.is_some() {
            "_rebuild_tensor_v2"
        } else {
            "_rebuild_tensor_v3"
        },
    );
    w.out.extend_from_slice(b"((");
    w.str("storage");
    let numel = match legacy {
        Some(class) => {
            w.global("torch", class);
            meta.storage_nbytes / meta.dtype.size() as u64
        }
        None => {
            w.global("torch.storage", "UntypedStorage");
            meta.storage_nbytes
        }
    };
    w.str(&meta.storage_key);
    w.str(&meta.location);
    w.int(numel as i64);
    w.out.push(b't');
    w.memoize();
    w.out.push(b'Q');
    w.int(meta.storage_offset as i64);
    w.int_tuple(&meta.size);
    w.int_tuple(&meta.stride);
    w.out.push(if meta.requires_grad { 0x88 } else { 0x89 });
    w.global("collections", "OrderedDict");
    w.out.extend_from_slice(b")R");
    w.memoize();
    if legacy.is_none() {
        let name = meta.dtype.torch_name().trim_start_matches("torch.");
        w.global("torch", name);
    }
    w.out.push(b't');
    w.memoize();
    w.out.push(b'R');
    w.memoize();
    w.out.push(b'.');
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// data.pkl of `torch.save(torch.tensor([[1.5, -2.25, 3.0], [0.1, 0.2, -0.3]]))` (fixture).
    const F32_2X3: &[u8] = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storageq\x01ctorch\nFloatStorage\nq\x02X\x01\x00\x00\x000q\x03X\x03\x00\x00\x00cpuq\x04K\x06tq\x05QK\x00K\x02K\x03\x86q\x06K\x03K\x01\x86q\x07\x89ccollections\nOrderedDict\nq\x08)Rq\ttq\nRq\x0b.";
    /// torch 2.15, `torch.zeros(3, dtype=torch.uint16)`.
    const U16_3: &[u8] = b"\x80\x02ctorch._utils\n_rebuild_tensor_v3\nq\x00((X\x07\x00\x00\x00storageq\x01ctorch.storage\nUntypedStorage\nq\x02X\x01\x00\x00\x000q\x03X\x03\x00\x00\x00cpuq\x04K\x06tq\x05QK\x00K\x03\x85q\x06K\x01\x85q\x07\x89ccollections\nOrderedDict\nq\x08)Rq\tctorch\nuint16\nq\ntq\x0bRq\x0c.";
    /// torch 2.15, `torch.tensor(2.5)`.
    const F32_0DIM: &[u8] = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storageq\x01ctorch\nFloatStorage\nq\x02X\x01\x00\x00\x000q\x03X\x03\x00\x00\x00cpuq\x04K\x01tq\x05QK\x00))\x89ccollections\nOrderedDict\nq\x06)Rq\x07tq\x08Rq\t.";

    #[test]
    fn parses_and_rewrites_torch_pickles() {
        for (bytes, dtype, size, nbytes) in [
            (F32_2X3, DType::F32, vec![2, 3], 24),
            (U16_3, DType::U16, vec![3], 6),
            (F32_0DIM, DType::F32, vec![], 4),
        ] {
            let m = parse_tensor_pickle(bytes).unwrap();
            assert_eq!(m.dtype, dtype);
            assert_eq!(m.size, size);
            assert_eq!(m.storage_nbytes, nbytes);
            assert_eq!(m.location, "cpu");
            assert_eq!(write_tensor_pickle(&m), bytes);
        }
    }

    #[test]
    fn ints_encode_like_cpython() {
        let enc = |v| {
            let mut w = Writer {
                out: vec![],
                memo: 0,
            };
            w.int(v);
            w.out
        };
        assert_eq!(enc(300), b"M,\x01");
        assert_eq!(enc(70000), b"Jp\x11\x01\x00");
        assert_eq!(enc(1 << 31), b"\x8a\x05\x00\x00\x00\x80\x00");
        assert_eq!(enc(1 << 32), b"\x8a\x05\x00\x00\x00\x00\x01");
        assert_eq!(enc(-1), b"J\xff\xff\xff\xff");
        assert_eq!(enc(-(1 << 31) - 1), b"\x8a\x05\xff\xff\xff\x7f\xff");
        assert_eq!(enc(i64::MAX), b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f");
        // Non-negative ints round-trip through the VM as storage offsets and dims.
        for v in [
            0u64,
            255,
            256,
            65535,
            65536,
            1 << 31,
            1 << 40,
            i64::MAX as u64,
        ] {
            let m = TensorMeta {
                dtype: DType::U8,
                storage_key: "0".into(),
                location: "cpu".into(),
                storage_nbytes: v,
                storage_offset: v,
                size: vec![v, 1, v, v],
                stride: vec![1, v, 0, 1],
                requires_grad: true,
            };
            assert_eq!(parse_tensor_pickle(&write_tensor_pickle(&m)).unwrap(), m);
        }
    }

    #[test]
    fn refuses_what_torch_does_not_write() {
        let swap = |from: &[u8], to: &[u8]| {
            let s = F32_2X3;
            let i = s.windows(from.len()).position(|w| w == from).unwrap();
            [&s[..i], to, &s[i + from.len()..]].concat()
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (swap(b"FloatStorage", b"FloatStorag_"), "disallowed global"),
            (
                swap(b"torch._utils\n_rebuild_tensor_v2", b"os\nsystem"),
                "disallowed global",
            ),
            (swap(b")R", b"}R"), "EMPTY_DICT"),
            (
                swap(b"X\x07\x00\x00\x00storage", b"X\x07\x00\x00\x00storagx"),
                "persistent id",
            ),
            (swap(b"\x80\x02", b"\x80\x04"), "protocol 4"),
            ([F32_2X3, b"x"].concat(), "after STOP"),
            (F32_2X3[..F32_2X3.len() - 1].to_vec(), "without STOP"),
            (swap(b"K\x03K\x01\x86", b"K\x03\x85"), "dims"),
        ];
        for (bytes, want) in cases {
            let e = parse_tensor_pickle(&bytes).unwrap_err();
            assert!(e.msg.contains(want), "{e} (wanted {want})");
        }
        for n in 0..F32_2X3.len() {
            assert!(parse_tensor_pickle(&F32_2X3[..n]).is_err());
        }
        // Deep nesting and memo amplification stay cheap and fail cleanly.
        let deep = [&b"\x80\x02K\x00"[..], &[0x85; 40], b"."].concat();
        let e = parse_tensor_pickle(&deep).unwrap_err();
        assert!(e.msg.contains("nested too deeply"), "{e}");
        let mut amp = b"\x80\x02(".to_vec();
        amp.extend(std::iter::repeat_n(&b"K\x01"[..], 5000).flatten());
        amp.extend_from_slice(b"tq\x00");
        amp.extend(std::iter::repeat_n(&b"h\x00"[..], 100_000).flatten());
        amp.push(b'.');
        let e = parse_tensor_pickle(&amp).unwrap_err();
        assert!(e.msg.contains("values on the stack"), "{e}");
    }
}
