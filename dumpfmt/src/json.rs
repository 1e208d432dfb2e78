//! Order-preserving JSON with msprobe's dialect: Python's `json` module on both sides.
//!
//! * Reading ([`parse`], [`parse_file`]) accepts exactly what Python's `json.loads` accepts,
//!   including the bare `NaN`, `Infinity` and `-Infinity` tokens msprobe writes for non-finite
//!   statistics. Integers of any size are kept losslessly ([`Value::BigInt`] holds the digits when
//!   they do not fit an `i64`), object keys keep their order, and a repeated key keeps its first
//!   position with the last value (what a Python `dict` does). Strings may hold lone UTF-16
//!   surrogates (`"\ud800"`), which Python accepts and writes back; [`Str`] keeps them.
//! * Writing ([`write_python`], [`to_python_bytes`], [`write_file`]) reproduces
//!   `json.dump(obj, f, indent=1)` byte for byte: one-space indentation, `ensure_ascii`
//!   escapes, Python `repr(float)`, no trailing newline.
//!
//! Errors are [`Error::Json`] with file, byte offset, line and column. Nesting deeper than
//! [`MAX_DEPTH`] is rejected (msprobe itself stops at 400, Python's `json` near 1000), so no
//! input can exhaust the stack.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Deepest nesting of arrays/objects the parser accepts.
pub const MAX_DEPTH: usize = 1000;

/// A JSON string as Python sees it: a sequence of code points that may include lone surrogates.
///
/// Stored as WTF-8 (UTF-8 that also encodes unpaired surrogates as 3-byte sequences), so every
/// string Python's `json.loads` returns survives a round trip. Almost all strings are plain
/// UTF-8; [`Str::as_str`] returns them directly. Strings up to 22 bytes (keys, dtypes, type
/// names) are stored inline, without an allocation.
#[derive(Clone)]
pub struct Str(Repr);

const INLINE: usize = 22;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Default for Str {
    fn default() -> Self {
        Str(Repr::Inline {
            len: 0,
            buf: [0; INLINE],
        })
    }
}

impl PartialEq for Str {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for Str {}
impl std::hash::Hash for Str {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}
impl PartialOrd for Str {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Str {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Str {
    /// Wraps bytes that are well-formed WTF-8 (the parser's and builders' output).
    fn from_wtf8(b: &[u8]) -> Str {
        if b.len() <= INLINE {
            let mut buf = [0; INLINE];
            buf[..b.len()].copy_from_slice(b);
            Str(Repr::Inline {
                len: b.len() as u8,
                buf,
            })
        } else {
            Str(Repr::Heap(b.into()))
        }
    }

    /// The string, or `None` if it holds a lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.as_bytes()).ok()
    }

    /// The string with lone surrogates replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> Cow<'_, str> {
        match self.as_str() {
            Some(s) => Cow::Borrowed(s),
            None => {
                let mut out = String::with_capacity(self.as_bytes().len());
                for cp in self.code_points() {
                    out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
                }
                Cow::Owned(out)
            }
        }
    }

    /// WTF-8 bytes (UTF-8 when [`Str::as_str`] succeeds).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..*len as usize],
            Repr::Heap(b) => b,
        }
    }

    /// Code points, lone surrogates included.
    pub fn code_points(&self) -> impl Iterator<Item = u32> + '_ {
        let b = self.as_bytes();
        let mut i = 0;
        std::iter::from_fn(move || {
            if i >= b.len() {
                return None;
            }
            let c = b[i];
            let (cp, n) = if c < 0x80 {
                (c as u32, 1)
            } else if c < 0xe0 {
                (((c as u32 & 0x1f) << 6) | (b[i + 1] as u32 & 0x3f), 2)
            } else if c < 0xf0 {
                (
                    ((c as u32 & 0x0f) << 12)
                        | ((b[i + 1] as u32 & 0x3f) << 6)
                        | (b[i + 2] as u32 & 0x3f),
                    3,
                )
            } else {
                (
                    ((c as u32 & 0x07) << 18)
                        | ((b[i + 1] as u32 & 0x3f) << 12)
                        | ((b[i + 2] as u32 & 0x3f) << 6)
                        | (b[i + 3] as u32 & 0x3f),
                    4,
                )
            };
            i += n;
            Some(cp)
        })
    }

    /// Builds a string from code points. Lone surrogates are kept; a high surrogate directly
    /// followed by a low one becomes the supplementary character they encode (that is what
    /// JSON text can express: Python too reads `"\ud800\udc00"` back as U+10000).
    pub fn from_code_points(cps: impl IntoIterator<Item = u32>) -> Option<Str> {
        let mut out = Vec::new();
        let mut pending_high: Option<u32> = None;
        for cp in cps {
            if cp > 0x10ffff {
                return None;
            }
            if let Some(hi) = pending_high.take() {
                if (0xdc00..0xe000).contains(&cp) {
                    push_wtf8(&mut out, 0x10000 + ((hi - 0xd800) << 10) + (cp - 0xdc00));
                    continue;
                }
                push_wtf8(&mut out, hi);
            }
            if (0xd800..0xdc00).contains(&cp) {
                pending_high = Some(cp);
            } else {
                push_wtf8(&mut out, cp);
            }
        }
        if let Some(hi) = pending_high {
            push_wtf8(&mut out, hi);
        }
        Some(Str::from_wtf8(&out))
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Self {
        Str::from_wtf8(s.as_bytes())
    }
}

impl From<String> for Str {
    fn from(s: String) -> Self {
        if s.len() <= INLINE {
            Str::from_wtf8(s.as_bytes())
        } else {
            Str(Repr::Heap(s.into_bytes().into_boxed_slice()))
        }
    }
}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Str {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.to_string_lossy(), f)
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

fn push_wtf8(out: &mut Vec<u8>, cp: u32) {
    if cp < 0x80 {
        out.push(cp as u8);
    } else if cp < 0x800 {
        out.extend_from_slice(&[0xc0 | (cp >> 6) as u8, 0x80 | (cp & 0x3f) as u8]);
    } else if cp < 0x10000 {
        out.extend_from_slice(&[
            0xe0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3f) as u8,
            0x80 | (cp & 0x3f) as u8,
        ]);
    } else {
        out.extend_from_slice(&[
            0xf0 | (cp >> 18) as u8,
            0x80 | ((cp >> 12) & 0x3f) as u8,
            0x80 | ((cp >> 6) & 0x3f) as u8,
            0x80 | (cp & 0x3f) as u8,
        ]);
    }
}

/// An ordered JSON object (Python `dict` semantics: insertion order, unique keys).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Map {
    entries: Vec<(Str, Value)>,
}

impl Map {
    pub fn new() -> Self {
        Map::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        Map {
            entries: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Linear lookup: objects in dumps are small except `data`, whose users iterate instead.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|(k, _)| *k == *key)
            .map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.entries
            .iter_mut()
            .find(|(k, _)| *k == *key)
            .map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` like a Python dict: an existing key keeps its position and gets the new value;
    /// a new key goes last. Returns the previous value.
    pub fn insert(&mut self, key: impl Into<Str>, value: Value) -> Option<Value> {
        let key = key.into();
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            return Some(std::mem::replace(&mut slot.1, value));
        }
        self.entries.push((key, value));
        None
    }

    /// Appends without looking for an existing key (the caller knows it is new).
    pub fn push_unique(&mut self, key: impl Into<Str>, value: Value) {
        self.entries.push((key.into(), value));
    }

    /// Removes `key`, keeping the order of the others (Python `dict.pop`).
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.entries.iter().position(|(k, _)| *k == *key)?;
        Some(self.entries.remove(i).1)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Str, &Value)> + DoubleEndedIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Str, &mut Value)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Str> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &Value> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn into_entries(self) -> Vec<(Str, Value)> {
        self.entries
    }

    /// A builder-style insert for writing literals.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.insert(key, value.into());
        self
    }
}

impl FromIterator<(Str, Value)> for Map {
    fn from_iter<I: IntoIterator<Item = (Str, Value)>>(iter: I) -> Self {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// A JSON value as Python's `json` module models it.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Bool(bool),
    /// A JSON integer that fits an `i64`.
    Int(i64),
    /// A JSON integer outside the `i64` range: its canonical decimal digits (with `-` if negative).
    BigInt(Box<str>),
    /// A number with a fraction or exponent, or `NaN`/`Infinity`/`-Infinity`.
    Float(f64),
    Str(Str),
    Array(Vec<Value>),
    Object(Map),
}

/// Structural equality where floats compare by bits, so `NaN == NaN` and `0.0 != -0.0`:
/// two values are equal exactly when they serialize to the same text.
impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::BigInt(a), Value::BigInt(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::Array(a), Value::Array(b)) => a == b,
            (Value::Object(a), Value::Object(b)) => a == b,
            _ => false,
        }
    }
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => s.as_str(),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Map> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_object_mut(&mut self) -> Option<&mut Map> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A number as `f64` (ints converted, big ints rounded).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::BigInt(s) => s.parse().ok(),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Object member lookup; `None` for non-objects.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?.get(key)
    }

    /// Python's name for the JSON type, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}
impl From<u64> for Value {
    fn from(i: u64) -> Self {
        match i64::try_from(i) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(i.to_string().into()),
        }
    }
}
impl From<usize> for Value {
    fn from(i: usize) -> Self {
        Value::from(i as u64)
    }
}
impl From<i32> for Value {
    fn from(i: i32) -> Self {
        Value::Int(i as i64)
    }
}
impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}
impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.into())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s.into())
    }
}
impl From<Str> for Value {
    fn from(s: Str) -> Self {
        Value::Str(s)
    }
}
impl From<Map> for Value {
    fn from(m: Map) -> Self {
        Value::Object(m)
    }
}
impl From<Vec<Value>> for Value {
    fn from(a: Vec<Value>) -> Self {
        Value::Array(a)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(o: Option<T>) -> Self {
        o.map_or(Value::Null, Into::into)
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Parses JSON text (Python `json.loads` dialect). `file` only labels errors.
pub fn parse(bytes: &[u8], file: &Path) -> Result<Value> {
    let mut p = Parser {
        b: bytes,
        i: 0,
        depth: 0,
        file,
        values: Vec::new(),
        members: Vec::new(),
    };
    if bytes.starts_with(b"\xef\xbb\xbf") {
        return Err(p.err_at(
            0,
            "unexpected UTF-8 byte-order mark (Python's json rejects it too)",
        ));
    }
    // One validation pass over the whole text (Python decodes the file before parsing, too);
    // strings are then copied without checking them again.
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(p.err_at(e.valid_up_to(), "invalid UTF-8"));
    }
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.i != bytes.len() {
        return Err(p.err("extra data after the JSON value"));
    }
    Ok(v)
}

/// Memory-maps `path` and parses it into one tree (no intermediate copy of the file).
pub fn parse_file(path: &Path) -> Result<Value> {
    parse_opened(crate::fsio::open_regular(path)?, path)
}

/// [`parse_file`] of a file found in a dump directory rather than named by the user: one
/// that leads out of its directory is refused ([`crate::fsio::open_found`]).
pub fn parse_found(path: &Path) -> Result<Value> {
    parse_opened(crate::fsio::open_found(path)?, path)
}

fn parse_opened(file: std::fs::File, path: &Path) -> Result<Value> {
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len == 0 {
        return parse(&[], path);
    }
    // SAFETY: the map is read-only and dropped before returning. msprobe rewrites its files
    // whole ("w" mode); a concurrent truncation could raise SIGBUS, the usual mmap caveat that
    // every memory-mapping reader of live dumps accepts.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    parse(&map, path)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    file: &'a Path,
    /// Scratch stacks: the items of all open arrays / objects. Each container is moved out into
    /// an exactly sized vector when it closes (one allocation per container).
    values: Vec<Value>,
    members: Vec<(Str, Value)>,
}

/// Line (1-based) and Python-style column (1-based, counted in characters) of a byte offset.
pub fn line_column(bytes: &[u8], offset: usize) -> (u64, u64) {
    let offset = offset.min(bytes.len());
    let before = &bytes[..offset];
    let line = before.iter().filter(|&&c| c == b'\n').count() as u64 + 1;
    let line_start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1);
    let col = before[line_start..]
        .iter()
        .filter(|&&c| (c & 0xc0) != 0x80)
        .count() as u64
        + 1;
    (line, col)
}

impl<'a> Parser<'a> {
    fn err(&self, msg: impl Into<String>) -> Error {
        self.err_at(self.i, msg)
    }

    fn err_at(&self, at: usize, msg: impl Into<String>) -> Error {
        let (line, column) = line_column(self.b, at);
        Error::Json {
            file: PathBuf::from(self.file),
            offset: at as u64,
            line,
            column,
            msg: msg.into(),
        }
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn expect_msg(&self, what: &str) -> Error {
        if self.i >= self.b.len() {
            self.err(format!("unexpected end of input, expecting {what}"))
        } else {
            self.err(format!(
                "expecting {what}, found {}",
                describe(self.b, self.i)
            ))
        }
    }

    fn value(&mut self) -> Result<Value> {
        let Some(&c) = self.b.get(self.i) else {
            return Err(self.expect_msg("a value"));
        };
        match c {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => Ok(Value::Str(self.string()?)),
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Null),
            b'N' => self.literal(b"NaN", Value::Float(f64::NAN)),
            b'I' => self.literal(b"Infinity", Value::Float(f64::INFINITY)),
            b'-' if self.b[self.i..].starts_with(b"-Infinity") => {
                self.i += 9;
                Ok(Value::Float(f64::NEG_INFINITY))
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(self.expect_msg("a value")),
        }
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Result<Value> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.expect_msg("a value"))
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn array(&mut self) -> Result<Value> {
        self.enter()?;
        self.i += 1;
        let start = self.values.len();
        self.skip_ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            self.depth -= 1;
            return Ok(Value::Array(Vec::new()));
        }
        loop {
            self.skip_ws();
            let v = self.value()?;
            self.values.push(v);
            self.skip_ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.expect_msg("',' or ']'")),
            }
        }
        self.depth -= 1;
        Ok(Value::Array(self.values.drain(start..).collect()))
    }

    fn object(&mut self) -> Result<Value> {
        self.enter()?;
        self.i += 1;
        let start = self.members.len();
        // Large objects (the `data` map) get a hash index for duplicate detection.
        let mut index: Option<HashMap<Str, usize>> = None;
        self.skip_ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(Value::Object(Map::new()));
        }
        loop {
            self.skip_ws();
            if self.b.get(self.i) != Some(&b'"') {
                return Err(self.expect_msg("a property name in double quotes"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.b.get(self.i) != Some(&b':') {
                return Err(self.expect_msg("':'"));
            }
            self.i += 1;
            self.skip_ws();
            let v = self.value()?;
            let open = &mut self.members[start..];
            let existing = match &index {
                Some(ix) => ix.get(&key).copied(),
                None => open.iter().position(|(k, _)| *k == key),
            };
            match existing {
                Some(pos) => open[pos].1 = v,
                None => {
                    let n = open.len();
                    if let Some(ix) = &mut index {
                        ix.insert(key.clone(), n);
                    }
                    self.members.push((key, v));
                    if index.is_none() && n + 1 > 32 {
                        index = Some(
                            self.members[start..]
                                .iter()
                                .enumerate()
                                .map(|(i, (k, _))| (k.clone(), i))
                                .collect(),
                        );
                    }
                }
            }
            self.skip_ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.expect_msg("',' or '}'")),
            }
        }
        self.depth -= 1;
        Ok(Value::Object(Map {
            entries: self.members.drain(start..).collect(),
        }))
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.i;
        let b = self.b;
        let mut j = self.i;
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        match b.get(j) {
            Some(b'0') => j += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(j), Some(b'0'..=b'9')) {
                    j += 1;
                }
            }
            _ => {
                self.i = j;
                return Err(self.expect_msg("a digit"));
            }
        }
        let int_end = j;
        let mut is_float = false;
        // Python's number regex: the fraction and exponent are optional and only taken when
        // complete; "1." is the integer 1 followed by garbage.
        if b.get(j) == Some(&b'.') && matches!(b.get(j + 1), Some(b'0'..=b'9')) {
            j += 2;
            while matches!(b.get(j), Some(b'0'..=b'9')) {
                j += 1;
            }
            is_float = true;
        }
        if matches!(b.get(j), Some(b'e' | b'E')) {
            let mut k = j + 1;
            if matches!(b.get(k), Some(b'+' | b'-')) {
                k += 1;
            }
            if matches!(b.get(k), Some(b'0'..=b'9')) {
                while matches!(b.get(k), Some(b'0'..=b'9')) {
                    k += 1;
                }
                j = k;
                is_float = true;
            }
        }
        self.i = j;
        // The slice is ASCII digits and signs by construction.
        let text = std::str::from_utf8(&b[start..j]).unwrap_or_default();
        if is_float {
            return text
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| self.err_at(start, "invalid number"));
        }
        debug_assert_eq!(int_end, j);
        match text.parse::<i64>() {
            Ok(v) => Ok(Value::Int(v)),
            Err(_) => Ok(Value::BigInt(text.into())),
        }
    }

    fn hex4(&self, at: usize) -> Result<u32> {
        let h = self
            .b
            .get(at..at + 4)
            .ok_or_else(|| self.err_at(at.saturating_sub(2), "incomplete \\u escape"))?;
        let mut v = 0u32;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(self.err_at(at.saturating_sub(2), "invalid \\uXXXX escape")),
            };
            v = v * 16 + d as u32;
        }
        Ok(v)
    }

    fn string(&mut self) -> Result<Str> {
        let open = self.i;
        self.i += 1;
        let b = self.b;
        // Fast path: a run without escapes or control characters is copied as is.
        let run_start = self.i;
        let mut j = self.i;
        while let Some(&c) = b.get(j) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                break;
            }
            j += 1;
        }
        if b.get(j) == Some(&b'"') {
            let s = &b[run_start..j];
            self.i = j + 1;
            return Ok(Str::from_wtf8(s));
        }
        let mut out: Vec<u8> = Vec::with_capacity(j - run_start + 16);
        let mut i = run_start;
        loop {
            let chunk_start = i;
            while let Some(&c) = b.get(i) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                i += 1;
            }
            out.extend_from_slice(&b[chunk_start..i]);
            match b.get(i) {
                None => return Err(self.err_at(open, "unterminated string")),
                Some(b'"') => {
                    self.i = i + 1;
                    return Ok(Str::from_wtf8(&out));
                }
                Some(b'\\') => {
                    let esc = *b
                        .get(i + 1)
                        .ok_or_else(|| self.err_at(open, "unterminated string"))?;
                    let simple = match esc {
                        b'"' => Some(b'"'),
                        b'\\' => Some(b'\\'),
                        b'/' => Some(b'/'),
                        b'b' => Some(8),
                        b'f' => Some(12),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        b'u' => None,
                        _ => return Err(self.err_at(i, "invalid \\escape")),
                    };
                    if let Some(c) = simple {
                        out.push(c);
                        i += 2;
                        continue;
                    }
                    let mut cp = self.hex4(i + 2)?;
                    i += 6;
                    // A high surrogate followed by an escaped low one is a pair; anything else
                    // stays a lone surrogate (Python keeps it).
                    if (0xd800..0xdc00).contains(&cp)
                        && b.get(i) == Some(&b'\\')
                        && b.get(i + 1) == Some(&b'u')
                    {
                        let lo = self.hex4(i + 2)?;
                        if (0xdc00..0xe000).contains(&lo) {
                            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                            i += 6;
                        }
                    }
                    push_wtf8(&mut out, cp);
                }
                Some(_) => return Err(self.err_at(i, "invalid control character in string")),
            }
        }
    }
}

fn describe(b: &[u8], i: usize) -> String {
    match b.get(i) {
        Some(&c) if c.is_ascii_graphic() => format!("'{}'", c as char),
        Some(&c) => format!("byte 0x{c:02x}"),
        None => "end of input".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Serializes like Python's `json.dumps(value, indent=1)` (what msprobe's `json.dump` writes):
/// appends to `out`, no trailing newline.
pub fn write_python(value: &Value, out: &mut Vec<u8>) {
    write_value(value, out, 0);
}

/// [`write_python`] of `value` as it appears nested `level` containers deep in a document
/// (its inner lines indented by `level + 1` spaces), so that a writer may render a part once
/// and splice it into the whole document later.
pub fn write_python_at(value: &Value, level: usize, out: &mut Vec<u8>) {
    write_value(value, out, level);
}

/// A string (an object key or a string value) as [`write_python`] writes it, quoted.
pub fn write_python_str(s: &Str, out: &mut Vec<u8>) {
    write_str(s, out);
}

/// [`write_python_str`] of a Rust string (an entry name, a stack line) without making a
/// [`Str`] of it first.
pub fn write_python_text(s: &str, out: &mut Vec<u8>) {
    write_str_bytes(s.as_bytes(), out);
}

/// The line break and indentation [`write_python`] puts before a member `level` containers
/// deep (for writers that splice pre-rendered parts, see [`write_python_at`]).
pub fn write_python_newline(level: usize, out: &mut Vec<u8>) {
    newline_indent(out, level);
}

/// [`write_python`] into a new buffer.
pub fn to_python_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_python(value, &mut out);
    out
}

/// Writes `value` to `path` in msprobe's format (whole-file rewrite, like msprobe), through
/// [`crate::outfile`]: never through a link, never half-written, fsynced.
pub fn write_file(path: &Path, value: &Value) -> Result<()> {
    crate::outfile::write(path, &to_python_bytes(value))
}

/// [`write_file`] without the fsyncs ([`crate::outfile::write_unsynced`]).
pub fn write_file_unsynced(path: &Path, value: &Value) -> Result<()> {
    crate::outfile::write_unsynced(path, &to_python_bytes(value))
}

fn newline_indent(out: &mut Vec<u8>, level: usize) {
    // One copy from a constant for the usual depths (a record sits 3 to 6 levels deep).
    const NEWLINE_SPACES: &[u8; 33] = b"\n                                ";
    match NEWLINE_SPACES.get(..=level) {
        Some(text) => out.extend_from_slice(text),
        None => {
            out.push(b'\n');
            out.resize(out.len() + level, b' ');
        }
    }
}

fn write_value(value: &Value, out: &mut Vec<u8>, level: usize) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => write_python_bool(*b, out),
        Value::Int(i) => write_python_int(*i, out),
        Value::BigInt(s) => out.extend_from_slice(s.as_bytes()),
        Value::Float(f) => write_python_float(*f, out),
        Value::Str(s) => write_str(s, out),
        Value::Array(a) => {
            let mut c = PyContainer::array(out, level);
            for v in a {
                let inner = c.member_level();
                write_value(v, c.item(), inner);
            }
            c.end();
        }
        Value::Object(m) => {
            let mut c = PyContainer::object(out, level);
            for (k, v) in &m.entries {
                let inner = c.member_level();
                write_value(v, c.key_bytes(k.as_bytes()), inner);
            }
            c.end();
        }
    }
}

/// `true`/`false` as [`write_python`] writes them.
pub fn write_python_bool(b: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// An integer as [`write_python`] writes it.
pub fn write_python_int(i: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa_buf(i).as_bytes());
}

/// A float as [`write_python`] writes it (Python's `repr`, `NaN`/`Infinity` spelled as JSON).
pub fn write_python_float(f: f64, out: &mut Vec<u8>) {
    pyrepr::write_repr_f64(f, pyrepr::NonFinite::Json, out);
}

/// An object or array written member by member exactly as [`write_python_at`] writes the whole
/// value `level` containers deep, for writers that produce a record without building its
/// [`Value`] first (the bracket opens with the first member: an empty one is `{}` or `[]`).
/// Each member's value is written at [`member_level`](PyContainer::member_level).
pub struct PyContainer<'a> {
    out: &'a mut Vec<u8>,
    level: usize,
    open: u8,
    close: u8,
    any: bool,
}

impl<'a> PyContainer<'a> {
    pub fn object(out: &'a mut Vec<u8>, level: usize) -> PyContainer<'a> {
        PyContainer {
            out,
            level,
            open: b'{',
            close: b'}',
            any: false,
        }
    }

    pub fn array(out: &'a mut Vec<u8>, level: usize) -> PyContainer<'a> {
        PyContainer {
            out,
            level,
            open: b'[',
            close: b']',
            any: false,
        }
    }

    /// The nesting level of the members' values.
    pub fn member_level(&self) -> usize {
        self.level + 1
    }

    /// Starts the next array item; write it into the buffer returned.
    pub fn item(&mut self) -> &mut Vec<u8> {
        self.out.push(if self.any { b',' } else { self.open });
        self.any = true;
        newline_indent(self.out, self.level + 1);
        self.out
    }

    /// Starts the member `key` of an object; write its value into the buffer returned.
    pub fn key(&mut self, key: &str) -> &mut Vec<u8> {
        self.key_bytes(key.as_bytes())
    }

    /// [`key`](PyContainer::key) of a key's WTF-8 bytes (a [`Str`]'s).
    fn key_bytes(&mut self, key: &[u8]) -> &mut Vec<u8> {
        self.item();
        write_str_bytes(key, self.out);
        self.out.extend_from_slice(b": ");
        self.out
    }

    /// Closes the container.
    pub fn end(self) {
        if self.any {
            newline_indent(self.out, self.level);
            self.out.push(self.close);
        } else {
            self.out.extend_from_slice(&[self.open, self.close]);
        }
    }
}

struct IntBuf {
    buf: [u8; 20],
    start: usize,
}

impl IntBuf {
    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_buf(v: i64) -> IntBuf {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let neg = v < 0;
    let mut n = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    IntBuf { buf, start: i }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The bytes a JSON string holds as they are: printable ASCII but `"` and `\`.
const PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0x20;
    while c < 0x7f {
        t[c] = c != b'"' as usize && c != b'\\' as usize;
        c += 1;
    }
    t
};

fn push_u_escape(out: &mut Vec<u8>, u: u32) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[(u >> 12) as usize & 15],
        HEX[(u >> 8) as usize & 15],
        HEX[(u >> 4) as usize & 15],
        HEX[u as usize & 15],
    ]);
}

/// Python's `ensure_ascii` string encoder: printable ASCII as is, the short escapes for
/// `" \ \b \f \n \r \t`, `\u00XX` (lowercase) for other controls and DEL, UTF-16 escapes
/// (surrogate pairs above U+FFFF) for everything else.
fn write_str(s: &Str, out: &mut Vec<u8>) {
    write_str_bytes(s.as_bytes(), out);
}

/// A [`Str`]'s bytes (WTF-8, so lone surrogates too) quoted and escaped as Python's json does.
fn write_str_bytes(b: &[u8], out: &mut Vec<u8>) {
    // Keys, type and dtype names, entry names: printable ASCII without quotes or backslashes,
    // copied whole.
    if b.iter().all(|&c| PLAIN[usize::from(c)]) {
        out.reserve(b.len() + 2);
        out.push(b'"');
        out.extend_from_slice(b);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut run = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\' {
            i += 1;
            continue;
        }
        out.extend_from_slice(&b[run..i]);
        if c < 0x80 {
            match c {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                8 => out.extend_from_slice(b"\\b"),
                12 => out.extend_from_slice(b"\\f"),
                _ => push_u_escape(out, c as u32),
            }
            i += 1;
        } else {
            let (cp, n) = decode_wtf8(b, i);
            if cp >= 0x10000 {
                let v = cp - 0x10000;
                push_u_escape(out, 0xd800 + (v >> 10));
                push_u_escape(out, 0xdc00 + (v & 0x3ff));
            } else {
                push_u_escape(out, cp);
            }
            i += n;
        }
        run = i;
    }
    out.extend_from_slice(&b[run..]);
    out.push(b'"');
}

fn decode_wtf8(b: &[u8], i: usize) -> (u32, usize) {
    let c = b[i] as u32;
    let cont = |k: usize| b.get(i + k).map_or(0, |&x| x as u32 & 0x3f);
    if c < 0xe0 {
        (((c & 0x1f) << 6) | cont(1), 2)
    } else if c < 0xf0 {
        (((c & 0x0f) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (
            ((c & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3),
            4,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Value> {
        parse(s.as_bytes(), Path::new("t.json"))
    }

    #[test]
    fn duplicate_keys_keep_first_position_last_value() {
        let v = p(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        assert_eq!(to_python_bytes(&v), b"{\n \"a\": 3,\n \"b\": 2\n}");
    }

    #[test]
    fn deep_nesting_indents_one_space_a_level_past_the_constant() {
        // json.dumps(v, indent=1) of 40 nested single-item lists around 7: line `k` of the
        // opening half is `k` spaces and `[`; the constant covers 32 levels, the rest is built.
        let depth = 40;
        let text = format!("{}7{}", "[".repeat(depth), "]".repeat(depth));
        let mut want = String::new();
        for k in 0..depth {
            want.push_str(&format!("{}[\n", " ".repeat(k)));
        }
        want.push_str(&format!("{}7", " ".repeat(depth)));
        for k in (0..depth).rev() {
            want.push_str(&format!("\n{}]", " ".repeat(k)));
        }
        assert_eq!(
            String::from_utf8(to_python_bytes(&p(&text).unwrap())).unwrap(),
            want
        );
    }

    #[test]
    fn python_tokens() {
        let v = p("[NaN, Infinity, -Infinity, 1.0, 12345678901234567890123, -0]").unwrap();
        assert_eq!(
            to_python_bytes(&v),
            b"[\n NaN,\n Infinity,\n -Infinity,\n 1.0,\n 12345678901234567890123,\n 0\n]"
                .as_slice()
        );
    }

    #[test]
    fn strings_escape_like_python() {
        let v = p(r#""a\u00e9\ud83d\ude00\ud800\"\\\/\b\f\n\r\t\u0001\u007f""#).unwrap();
        assert_eq!(
            String::from_utf8(to_python_bytes(&v)).unwrap(),
            r#""a\u00e9\ud83d\ude00\ud800\"\\/\b\f\n\r\t\u0001\u007f""#
        );
    }

    #[test]
    fn every_ascii_byte_escapes_like_python_anywhere_in_a_string() {
        for c in 0u8..0x80 {
            let want: String = match c {
                b'"' => r#"\""#.into(),
                b'\\' => r"\\".into(),
                b'\n' => r"\n".into(),
                b'\r' => r"\r".into(),
                b'\t' => r"\t".into(),
                8 => r"\b".into(),
                12 => r"\f".into(),
                0..0x20 | 0x7f => format!("\\u{c:04x}"),
                _ => (c as char).to_string(),
            };
            for (pre, post) in [
                ("", ""),
                ("ab", ""),
                ("", "cd"),
                ("Tensor.add.0", ".forward"),
            ] {
                let mut s = pre.as_bytes().to_vec();
                s.push(c);
                s.extend_from_slice(post.as_bytes());
                let mut out = Vec::new();
                write_str_bytes(&s, &mut out);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    format!("\"{pre}{want}{post}\""),
                    "byte {c:#04x}"
                );
            }
        }
    }

    #[test]
    fn errors_have_positions() {
        match p("{\n \"a\": tru\n}") {
            Err(Error::Json {
                line,
                column,
                offset,
                ..
            }) => {
                assert_eq!((line, column, offset), (2, 7, 8));
            }
            other => panic!("{other:?}"),
        }
        assert!(p("[1,]").is_err());
        assert!(p("01").is_err());
        assert!(p("1.").is_err());
        assert!(p("\"\x01\"").is_err());
        assert!(p("-NaN").is_err());
        assert!(p("").is_err());
        assert!(p(&"[".repeat(MAX_DEPTH + 1)).is_err());
        assert!(
            p(&format!(
                "{}{}",
                "[".repeat(MAX_DEPTH),
                "]".repeat(MAX_DEPTH)
            ))
            .is_ok()
        );
    }
}
