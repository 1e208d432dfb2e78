//! The in-memory dump a journal replays into, and the three JSON files written from it with
//! dumpfmt's byte-exact writer.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use dumpfmt::json::{self, Map, Str, Value};

use crate::error::Result;
use crate::frames::{Frames, hash_lines};
use crate::journal::{Fill, Meta, Record};

/// Transient key of a tensor record whose statistics were computed on a device and are read
/// back later: its value is the pending id a [`Record::Fill`] names. It never reaches a
/// written file.
pub const PENDING_KEY: &str = "numprobe_pending";
/// The statistic keys a fill carries, in msprobe's order.
pub const STAT_KEYS: [&str; 4] = ["Max", "Min", "Mean", "Norm"];

/// Writes `fills`' statistics into the pending tensor records below `v`; returns how many.
fn fill_records(v: &mut Value, fills: &HashMap<u64, &[Value; 4]>) -> usize {
    match v {
        Value::Object(m) => {
            if let Some(id) = m.get(PENDING_KEY) {
                let Some(stats) = id
                    .as_i64()
                    .and_then(|id| u64::try_from(id).ok())
                    .and_then(|id| fills.get(&id))
                else {
                    return 0;
                };
                // The placeholder holds the four keys in msprobe's order already: insert
                // keeps their positions.
                for (k, s) in STAT_KEYS.iter().zip(stats.iter()) {
                    m.insert(*k, s.clone());
                }
                m.remove(PENDING_KEY);
                return 1;
            }
            m.iter_mut().map(|(_, x)| fill_records(x, fills)).sum()
        }
        Value::Array(a) => a.iter_mut().map(|x| fill_records(x, fills)).sum(),
        _ => 0,
    }
}

/// Drops the pending marker of every record below `v` whose statistics never came, leaving
/// their `null` statistics; returns how many.
fn strip_pending(v: &mut Value) -> usize {
    match v {
        Value::Object(m) => {
            if m.remove(PENDING_KEY).is_some() {
                return 1;
            }
            m.iter_mut().map(|(_, x)| strip_pending(x)).sum()
        }
        Value::Array(a) => a.iter_mut().map(strip_pending).sum(),
        _ => 0,
    }
}

/// Nesting depth of an entry body's values in dump.json (the top object, `data`, the entry):
/// the level a [`RenderedBody`]'s values are written at.
pub const VALUE_LEVEL: usize = 3;

/// An array `level` containers deep, as `json::write_python` writes it, each item written by
/// `write`.
fn write_array<T>(
    items: impl Iterator<Item = T>,
    level: usize,
    out: &mut Vec<u8>,
    write: impl Fn(T, &mut Vec<u8>),
) {
    let mut any = false;
    for item in items {
        out.push(if any { b',' } else { b'[' });
        any = true;
        json::write_python_newline(level + 1, out);
        write(item, out);
    }
    if any {
        json::write_python_newline(level, out);
        out.push(b']');
    } else {
        out.extend_from_slice(b"[]");
    }
}

/// An entry body rendered once as the text dump.json holds for it: its keys in order, each
/// with the range of `text` holding its value, indented for its place (see
/// [`json::write_python_at`]). A recorded value is encoded once, for the journal and for every
/// later write of the JSON files, instead of at every write.
#[derive(Clone, Debug, Default)]
pub struct RenderedBody {
    pub text: Vec<u8>,
    pub parts: Vec<(Str, Range<usize>)>,
}

impl RenderedBody {
    /// Each key with its value's text.
    pub fn iter(&self) -> impl Iterator<Item = (&Str, &[u8])> {
        self.parts.iter().map(|(k, r)| (k, &self.text[r.clone()]))
    }

    /// The body as values again, for records that are completed later (placeholders): the
    /// text must be a writer's rendering at [`VALUE_LEVEL`] (as [`render_body`]'s is).
    pub fn to_map(&self) -> Map {
        self.iter()
            .map(|(k, text)| (k.clone(), parse_rendered(text)))
            .collect()
    }
}

/// `body`'s values as dump.json text (see [`RenderedBody`]).
pub fn render_body(body: Map) -> RenderedBody {
    // A tensor record renders to about 300 bytes: one allocation for most bodies.
    let mut text = Vec::with_capacity(512 * body.len().max(1));
    let mut parts = Vec::with_capacity(body.len());
    for (k, v) in body.into_entries() {
        let at = text.len();
        json::write_python_at(&v, VALUE_LEVEL, &mut text);
        parts.push((k, at..text.len()));
    }
    RenderedBody { text, parts }
}

/// A rendered value as a JSON value again (the text is this module's own rendering, so it
/// always parses; `null` would only stand for a bug).
fn parse_rendered(text: &[u8]) -> Value {
    json::parse(text, Path::new("<rendered entry value>")).unwrap_or(Value::Null)
}

/// One entry's body.
#[derive(Clone, Debug)]
enum Body {
    /// Keys in order with the ranges of the state's text arena holding their rendered values
    /// (every entry whose records are complete).
    Text(Vec<(Str, Range<usize>)>),
    /// JSON values: a body that holds, or held, a tensor record waiting for its statistics
    /// (a fill edits it in place).
    Values(Map),
}

impl Body {
    fn to_map(&self, arena: &[u8]) -> Map {
        match self {
            Body::Values(m) => m.clone(),
            Body::Text(parts) => parts
                .iter()
                .map(|(k, r)| (k.clone(), parse_rendered(&arena[r.clone()])))
                .collect(),
        }
    }

    /// Makes this a [`Body::Values`] (parsing rendered values back) and gives its map.
    fn values_mut(&mut self, arena: &[u8]) -> &mut Map {
        if let Body::Text(_) = self {
            *self = Body::Values(self.to_map(arena));
        }
        match self {
            Body::Values(m) => m,
            Body::Text(_) => unreachable!("converted above"),
        }
    }

    /// Writes the body as dump.json holds it at entry depth; `strip`: without pending markers
    /// (records whose statistics never came keep their `null` statistics).
    fn write(&self, arena: &[u8], out: &mut Vec<u8>, strip: bool) {
        match self {
            Body::Text(parts) if parts.is_empty() => out.extend_from_slice(b"{}"),
            Body::Text(parts) => {
                out.push(b'{');
                for (n, (k, r)) in parts.iter().enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    json::write_python_newline(VALUE_LEVEL, out);
                    json::write_python_str(k, out);
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(&arena[r.clone()]);
                }
                json::write_python_newline(VALUE_LEVEL - 1, out);
                out.push(b'}');
            }
            Body::Values(m) => {
                let mut v = Value::Object(m.clone());
                if strip {
                    strip_pending(&mut v);
                }
                json::write_python_at(&v, VALUE_LEVEL - 1, out);
            }
        }
    }
}

/// dump.json + stack.json + construct.json of one rank directory.
///
/// Entries are kept in a slot vector indexed by name (a step records thousands of entries and
/// every API merges into its entry twice, so a linear name lookup per record would make a
/// step quadratic); a moved or removed entry leaves an empty slot until the next compaction.
#[derive(Clone, Debug)]
pub struct DumpState {
    pub meta: Option<Meta>,
    slots: Vec<Option<(String, Body)>>,
    /// The rendered values of [`Body::Text`] bodies, appended as they come (a value replaced
    /// by a later record of the same key leaves its old text unused).
    arena: Vec<u8>,
    index: FastMap<String, usize>,
    /// Stack groups in first-seen order: names sharing one exact frame list (spec §4.1).
    /// A group's frames are shared with the adapter's cache of its call site.
    stack_groups: Vec<(Vec<String>, Arc<Frames>)>,
    /// Groups by their frames' content hash ([`Frames::content_hash`]).
    stack_index: FastMap<u64, Vec<usize>>,
    construct: Vec<(String, Value)>,
    construct_index: FastMap<String, usize>,
    /// Pending tensor records whose fill has not come yet: id -> the entries holding it (one
    /// placeholder may be reused by several entries while its statistics are computed).
    pending: HashMap<u64, Vec<String>>,
}

/// A hash map with foldhash's per-map random seed: several times SipHash's speed on the
/// names and frame lists hashed for every recorded API.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The state [`DumpState::recycle`] handed back, for the next [`DumpState::reused`].
static SPARE: std::sync::Mutex<Option<DumpState>> = std::sync::Mutex::new(None);
/// The largest state kept for reuse: rendered text and entries (a tiny Llama step at L1
/// writes a dump.json of 0.28 MB with 334 entries).
const MAX_RECYCLED_TEXT: usize = 16 << 20;
const MAX_RECYCLED_ENTRIES: usize = 1 << 16;

impl Default for DumpState {
    fn default() -> Self {
        DumpState::new()
    }
}

impl DumpState {
    pub fn new() -> DumpState {
        DumpState {
            meta: None,
            slots: Vec::new(),
            arena: Vec::new(),
            index: FastMap::default(),
            stack_groups: Vec::new(),
            stack_index: FastMap::default(),
            construct: Vec::new(),
            construct_index: FastMap::default(),
            pending: HashMap::new(),
        }
    }

    /// An empty state that grows into the allocations of the last one handed back with
    /// [`DumpState::recycle`]: a step records about what the last one did, so its text, slots
    /// and index need not grow from nothing again (each doubling a copy, the arena's a fresh
    /// map of pages) nor be freed at its end.
    pub fn reused() -> DumpState {
        // Not waited for: a state made afresh is only slower (and a child forked while the
        // lock was held finds it taken).
        SPARE
            .try_lock()
            .ok()
            .and_then(|mut s| s.take())
            .unwrap_or_default()
    }

    /// Empties the state and keeps its allocations for the next [`DumpState::reused`]. An
    /// arena far larger than this state used is cut down first (one unusual step does not
    /// hold its memory for the rest of the run), and a large state is dropped, not kept: it
    /// would be held while nothing records, and its growth is a small part of a step that
    /// records that much.
    pub fn recycle(mut self) {
        let used = self.arena.len();
        if used > MAX_RECYCLED_TEXT || self.slots.len() > MAX_RECYCLED_ENTRIES {
            return;
        }
        // Every member named, so a member added later cannot carry one step into the next.
        let DumpState {
            meta,
            slots,
            arena,
            index,
            stack_groups,
            stack_index,
            construct,
            construct_index,
            pending,
        } = &mut self;
        *meta = None;
        slots.clear();
        arena.clear();
        index.clear();
        stack_groups.clear();
        stack_index.clear();
        construct.clear();
        construct_index.clear();
        pending.clear();
        if arena.capacity() > 2 * used + (1 << 20) {
            arena.shrink_to(2 * used);
        }
        if let Ok(mut s) = SPARE.try_lock() {
            *s = Some(self);
        }
    }

    /// Number of pending tensor records still waiting for their statistics.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Tensor records in the data whose statistics never arrived (written with `null`
    /// statistics): pending ids whose record is gone are not counted.
    pub fn unfilled_records(&self) -> usize {
        fn count(v: &Value) -> usize {
            match v {
                Value::Object(m) if m.contains_key(PENDING_KEY) => 1,
                Value::Object(m) => m.values().map(count).sum(),
                Value::Array(a) => a.iter().map(count).sum(),
                _ => 0,
            }
        }
        self.unresolved_entries()
            .into_iter()
            .filter_map(|n| self.slot(n))
            .map(|b| match b {
                Body::Values(m) => m.values().map(count).sum::<usize>(),
                Body::Text(_) => 0,
            })
            .sum()
    }

    /// Entries holding a pending record (their bodies need the marker stripped when written).
    fn unresolved_entries(&self) -> HashSet<&str> {
        self.pending
            .values()
            .flatten()
            .map(String::as_str)
            .collect()
    }

    /// Number of entries in `data`.
    pub fn data_len(&self) -> usize {
        self.index.len()
    }

    pub fn contains_entry(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The body of entry `name`, as replayed (a copy): a tensor record still waiting for its
    /// statistics carries [`PENDING_KEY`] (the written files never do).
    pub fn entry(&self, name: &str) -> Option<Map> {
        self.slot(name).map(|b| b.to_map(&self.arena))
    }

    fn slot(&self, name: &str) -> Option<&Body> {
        let &i = self.index.get(name)?;
        self.slots[i].as_ref().map(|(_, b)| b)
    }

    /// Entry names in dump.json order.
    pub fn data_names(&self) -> impl Iterator<Item = &str> {
        self.slots.iter().flatten().map(|(n, _)| n.as_str())
    }

    /// dump.json's `data` object (a copy; records still waiting for statistics have them
    /// `null`, as written).
    pub fn data(&self) -> Map {
        let unresolved = self.unresolved_entries();
        let mut m = Map::with_capacity(self.index.len());
        for (n, body) in self.slots.iter().flatten() {
            let mut v = Value::Object(body.to_map(&self.arena));
            if unresolved.contains(n.as_str()) {
                strip_pending(&mut v);
            }
            m.push_unique(n.as_str(), v);
        }
        m
    }

    /// construct.json's object (a copy).
    pub fn construct(&self) -> Map {
        let mut m = Map::with_capacity(self.construct.len());
        for (n, p) in &self.construct {
            m.push_unique(n.as_str(), p.clone());
        }
        m
    }

    /// Number of stack groups so far (the next new frame list gets this index).
    pub fn stack_group_count(&self) -> usize {
        self.stack_groups.len()
    }

    /// The group a frame list belongs to, if it was seen.
    pub fn stack_group_of(&self, frames: &[String]) -> Option<usize> {
        self.group_by_hash(hash_lines(frames), frames)
    }

    /// [`stack_group_of`](DumpState::stack_group_of) of frames whose hash is known.
    pub fn stack_group_of_frames(&self, frames: &Frames) -> Option<usize> {
        self.group_by_hash(frames.content_hash(), frames.lines())
    }

    fn group_by_hash(&self, hash: u64, lines: &[String]) -> Option<usize> {
        self.stack_index
            .get(&hash)?
            .iter()
            .copied()
            .find(|&g| self.stack_groups[g].1.lines() == lines)
    }

    fn push_slot(&mut self, name: &str, body: Body) {
        self.index.insert(name.to_owned(), self.slots.len());
        self.slots.push(Some((name.to_owned(), body)));
    }

    /// Drops empty slots once they outnumber the live entries (keeps order).
    fn maybe_compact(&mut self) {
        if self.slots.len() < 64 || self.slots.len() < 2 * self.index.len() {
            return;
        }
        self.slots.retain(Option::is_some);
        for (i, (n, _)) in self.slots.iter().flatten().enumerate() {
            if let Some(slot) = self.index.get_mut(n.as_str()) {
                *slot = i;
            }
        }
    }

    /// Inserts `body`'s keys into entry `name` (the replay rule of [`Record::Entry`]).
    fn merge_entry(&mut self, name: &str, body: Map, reinsert: bool) {
        self.merge_rendered(name, &render_body(body), reinsert);
    }

    /// The replay rule of [`Record::Entry`] for a body rendered already (the capture path
    /// renders each body once, for its journal record and this state).
    pub fn merge_rendered(&mut self, name: &str, body: &RenderedBody, reinsert: bool) {
        let base = self.arena.len();
        let moved = body
            .parts
            .iter()
            .map(|(k, r)| (k.clone(), r.start + base..r.end + base));
        match self.merge_target(name, reinsert) {
            Some(Body::Text(mine)) => {
                for (k, r) in moved {
                    match mine.iter_mut().find(|(have, _)| *have == k) {
                        Some(slot) => slot.1 = r,
                        None => mine.push((k, r)),
                    }
                }
            }
            Some(Body::Values(m)) => {
                // A body waiting for statistics keeps JSON values: the text is parsed, not kept.
                for (k, r) in body.iter() {
                    m.insert(k.clone(), parse_rendered(r));
                }
                return;
            }
            None => {
                let parts = moved.collect();
                self.push_slot(name, Body::Text(parts));
            }
        }
        self.arena.extend_from_slice(&body.text);
    }

    /// [`merge_entry`](DumpState::merge_entry) of a body holding pending tensor records: the
    /// entry keeps JSON values, which the fills edit.
    fn merge_pending(&mut self, name: &str, body: Map, reinsert: bool) {
        // The arena is lent out while one of its bodies is parsed back into values.
        let arena = std::mem::take(&mut self.arena);
        match self.merge_target(name, reinsert) {
            Some(b) => {
                let m = b.values_mut(&arena);
                for (k, v) in body.into_entries() {
                    m.insert(k, v);
                }
            }
            // A new entry is the body itself: a `Map`'s keys are unique (a Python dict's,
            // or a parsed object's, whose duplicate keys keep the last value).
            None => self.push_slot(name, Body::Values(body)),
        }
        self.arena = arena;
    }

    /// The body a record merges into (moved to the end of `data` with `reinsert`), `None`
    /// for a new entry.
    fn merge_target(&mut self, name: &str, reinsert: bool) -> Option<&mut Body> {
        let at = self.index.get(name).copied()?;
        let i = if reinsert {
            // Python dict semantics of pop + set: the entry moves to the end.
            let moved = self.slots[at].take();
            self.index.insert(name.to_owned(), self.slots.len());
            self.slots.push(moved);
            self.maybe_compact();
            self.index[name]
        } else {
            at
        };
        self.slots[i].as_mut().map(|(_, b)| b)
    }

    /// Writes fills into their pending records. A fill whose record is gone (its entry was
    /// removed or the key overwritten) has nothing left to fill and is dropped.
    fn apply_fills(&mut self, fills: &[Fill]) {
        let by_id: HashMap<u64, &[Value; 4]> = fills.iter().map(|f| (f.id, &f.stats)).collect();
        let mut names: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for f in fills {
            for n in self.pending.remove(&f.id).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    names.push(n);
                }
            }
        }
        for n in names {
            if let Some(&i) = self.index.get(n.as_str())
                && let Some((_, b)) = self.slots[i].as_mut()
            {
                let body = b.values_mut(&self.arena);
                let mut v = Value::Object(std::mem::take(body));
                fill_records(&mut v, &by_id);
                if let Value::Object(m) = v {
                    *body = m;
                }
            }
        }
    }

    /// Applies one record (the replay rule of every kind).
    pub fn apply(&mut self, rec: &Record) {
        match rec {
            Record::Entry { .. } | Record::PendingEntry { .. } => self.apply_owned(rec.clone()),
            other => self.apply_ref(other),
        }
    }

    /// [`apply`](DumpState::apply), moving an entry's body into the state instead of copying
    /// it (the capture path: each recorded API applies two bodies).
    pub fn apply_owned(&mut self, rec: Record) {
        match rec {
            Record::Entry {
                name,
                body,
                reinsert,
            } => self.merge_entry(&name, body, reinsert),
            Record::PendingEntry {
                name,
                body,
                reinsert,
                pending,
            } => {
                self.merge_pending(&name, body, reinsert);
                for id in pending {
                    let names = self.pending.entry(id).or_default();
                    if !names.contains(&name) {
                        names.push(name.clone());
                    }
                }
            }
            Record::Stack { name, frames } => self.add_stack(name, frames),
            other => self.apply_ref(&other),
        }
    }

    /// `name`'s call stack: a member of the group of `frames`, or the first of a new group.
    fn add_stack(&mut self, name: String, frames: Vec<String>) {
        match self.stack_group_of(&frames) {
            Some(g) => self.stack_groups[g].0.push(name),
            None => self.push_stack_group(name, Arc::new(Frames::new(frames))),
        }
    }

    /// [`add_stack`](DumpState::add_stack) of frames rendered already.
    pub(crate) fn add_stack_frames(&mut self, name: String, frames: &Arc<Frames>) {
        match self.stack_group_of_frames(frames) {
            Some(g) => self.stack_groups[g].0.push(name),
            None => self.push_stack_group(name, Arc::clone(frames)),
        }
    }

    fn push_stack_group(&mut self, name: String, frames: Arc<Frames>) {
        self.stack_index
            .entry(frames.content_hash())
            .or_default()
            .push(self.stack_groups.len());
        self.stack_groups.push((vec![name], frames));
    }

    /// The replay rule of the kinds other than entries.
    fn apply_ref(&mut self, rec: &Record) {
        match rec {
            Record::Meta(m) => self.meta = Some(m.clone()),
            Record::Entry { .. } | Record::PendingEntry { .. } => self.apply_owned(rec.clone()),
            Record::Fill(fills) => self.apply_fills(fills),
            Record::Remove { name } => {
                if let Some(i) = self.index.remove(name.as_str()) {
                    self.slots[i] = None;
                    self.maybe_compact();
                }
            }
            Record::Stack { name, frames } => self.add_stack(name.clone(), frames.clone()),
            Record::StackRef { name, group } => {
                // A reference to a group that does not exist cannot come from our writer; a
                // damaged journal loses only that name.
                if let Some(g) = self.stack_groups.get_mut(*group) {
                    g.0.push(name.clone());
                }
            }
            Record::Construct { name, parent } => {
                let p = match parent {
                    Some(p) => Value::from(p.as_str()),
                    None => Value::Null,
                };
                match self.construct_index.get(name.as_str()) {
                    Some(&i) => self.construct[i].1 = p,
                    None => {
                        self.construct_index
                            .insert(name.clone(), self.construct.len());
                        self.construct.push((name.clone(), p));
                    }
                }
            }
            Record::Checkpoint => {}
        }
    }

    /// dump.json's top-level object.
    pub fn dump_value(&self) -> Value {
        let mut top = self.top_without_data();
        top.insert("data", Value::Object(self.data()));
        Value::Object(top)
    }

    /// The top-level keys before `data`.
    fn top_without_data(&self) -> Map {
        let meta = self.meta.clone().unwrap_or(Meta {
            task: "statistics".into(),
            level: "L1".into(),
            framework: "pytorch".into(),
            dump_data_dir: None,
            extra_info: true,
        });
        Map::new()
            .with("task", meta.task.as_str())
            .with("level", meta.level.as_str())
            .with("framework", meta.framework.as_str())
            .with(
                "dump_data_dir",
                match &meta.dump_data_dir {
                    Some(d) => Value::from(d.as_str()),
                    None => Value::Null,
                },
            )
    }

    /// stack.json in 26.2's grouped layout.
    pub fn stack_value(&self) -> Value {
        let mut m = Map::new();
        for (i, (names, frames)) in self.stack_groups.iter().enumerate() {
            let names: Vec<Value> = names.iter().map(|n| Value::from(n.as_str())).collect();
            let frames: Vec<Value> = frames
                .lines()
                .iter()
                .map(|f| Value::from(f.as_str()))
                .collect();
            m.push_unique(
                i.to_string(),
                Value::Array(vec![names.into(), frames.into()]),
            );
        }
        Value::Object(m)
    }

    /// The names of the files [`render_files`](DumpState::render_files) gives, in order:
    /// dump.json, and with `extra_info` stack.json and construct.json.
    pub fn file_names(&self) -> &'static [&'static str] {
        if self.meta.as_ref().is_none_or(|m| m.extra_info) {
            &["dump.json", "stack.json", "construct.json"]
        } else {
            &["dump.json"]
        }
    }

    /// The bytes of dump.json, and with `extra_info` stack.json and construct.json, in
    /// [`file_names`](DumpState::file_names)' order.
    pub fn render_files(&mut self) -> Vec<(&'static str, Vec<u8>)> {
        let names = self.file_names();
        let mut out = vec![(names[0], self.render_dump())];
        if names.len() > 1 {
            out.push((names[1], self.render_stack()));
            out.push((
                names[2],
                json::to_python_bytes(&Value::Object(self.construct())),
            ));
        }
        out
    }

    /// stack.json's bytes: [`stack_value`](DumpState::stack_value) as `json::write_python`
    /// writes it, with each group's frames spliced in as rendered when first seen.
    fn render_stack(&self) -> Vec<u8> {
        if self.stack_groups.is_empty() {
            return b"{}".to_vec();
        }
        let frames_len: usize = self
            .stack_groups
            .iter()
            .map(|(n, f)| 64 * n.len() + f.quoted().map(|q| q.len() + 8).sum::<usize>())
            .sum();
        let mut out = Vec::with_capacity(frames_len + 64);
        out.push(b'{');
        for (i, (names, frames)) in self.stack_groups.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json::write_python_newline(1, &mut out);
            out.push(b'"');
            out.extend_from_slice(i.to_string().as_bytes());
            out.extend_from_slice(b"\": [");
            json::write_python_newline(2, &mut out);
            write_array(names.iter(), 2, &mut out, |n, o| {
                json::write_python_text(n, o)
            });
            out.push(b',');
            json::write_python_newline(2, &mut out);
            write_array(frames.quoted(), 2, &mut out, |q, o| o.extend_from_slice(q));
            json::write_python_newline(1, &mut out);
            out.push(b']');
        }
        json::write_python_newline(0, &mut out);
        out.push(b'}');
        out
    }

    /// dump.json's bytes: the top-level keys, then each entry's rendered body spliced in (an
    /// entry whose device statistics never arrived is written without its pending markers,
    /// its records keeping `null` statistics, so a later fill still finds them).
    fn render_dump(&self) -> Vec<u8> {
        let unresolved = self.unresolved_entries();
        let text_len: usize = self
            .slots
            .iter()
            .flatten()
            .map(|(n, b)| match b {
                Body::Text(parts) => {
                    n.len()
                        + parts
                            .iter()
                            .map(|(k, r)| k.as_bytes().len() + r.len() + 8)
                            .sum::<usize>()
                }
                Body::Values(_) => n.len() + 256,
            })
            .sum();
        let mut out = Vec::with_capacity(text_len + 256);
        out.push(b'{');
        for (k, v) in self.top_without_data().iter() {
            json::write_python_newline(1, &mut out);
            json::write_python_str(k, &mut out);
            out.extend_from_slice(b": ");
            json::write_python_at(v, 1, &mut out);
            out.push(b',');
        }
        json::write_python_newline(1, &mut out);
        out.extend_from_slice(b"\"data\": ");
        if self.index.is_empty() {
            out.extend_from_slice(b"{}");
        } else {
            out.push(b'{');
            for (n, (name, body)) in self.slots.iter().flatten().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                json::write_python_newline(2, &mut out);
                json::write_python_text(name, &mut out);
                out.extend_from_slice(b": ");
                body.write(&self.arena, &mut out, unresolved.contains(name.as_str()));
            }
            json::write_python_newline(1, &mut out);
            out.push(b'}');
        }
        json::write_python_newline(0, &mut out);
        out.push(b'}');
        out
    }

    /// Journal payloads that rebuild this state from nothing (a fresh journal's start after
    /// the last one was removed); `None` while a pending record waits for its statistics (a
    /// placeholder cannot be re-journaled without its id bookkeeping).
    pub fn snapshot_payloads(&self) -> Option<Vec<Vec<u8>>> {
        if !self.pending.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(1 + self.index.len() + self.construct.len());
        if let Some(m) = &self.meta {
            out.push(Record::Meta(m.clone()).encode());
        }
        for (name, body) in self.slots.iter().flatten() {
            out.push(match body {
                Body::Text(parts) => crate::journal::entry_payload(
                    name,
                    parts.iter().map(|(k, r)| (k, &self.arena[r.clone()])),
                    false,
                ),
                Body::Values(m) => Record::Entry {
                    name: name.clone(),
                    body: m.clone(),
                    reinsert: false,
                }
                .encode(),
            });
        }
        for (g, (names, frames)) in self.stack_groups.iter().enumerate() {
            for (i, name) in names.iter().enumerate() {
                out.push(if i == 0 {
                    crate::journal::stack_payload(name, frames)
                } else {
                    crate::journal::stack_ref_payload(name, g)
                });
            }
        }
        for (name, parent) in &self.construct {
            out.push(
                Record::Construct {
                    name: name.clone(),
                    parent: parent.as_str().map(str::to_owned),
                }
                .encode(),
            );
        }
        Some(out)
    }

    /// [`write_files`](DumpState::write_files), each file kept open to be made durable later
    /// ([`dumpfmt::outfile::sync_written`]).
    pub fn write_files_for_later_sync(
        &mut self,
        dir: &Path,
    ) -> Result<Vec<dumpfmt::outfile::Written>> {
        let mut written = Vec::with_capacity(3);
        for (name, bytes) in self.render_files() {
            let path = dir.join(name);
            // Into a file the durability worker created ahead, where one is ready.
            #[cfg(target_os = "linux")]
            if let Some(w) = crate::file_spare::write(&path, &bytes) {
                written.push(w);
                continue;
            }
            written.extend(dumpfmt::outfile::write_all_for_later_sync(&[(
                path, bytes,
            )])?);
        }
        Ok(written)
    }

    /// Writes dump.json, and with `extra_info` stack.json and construct.json, into `dir`
    /// (each replaced whole through a temporary file, never written through a link; not
    /// fsynced: the journal is what survives a power cut).
    pub fn write_files(&mut self, dir: &Path) -> Result<()> {
        for (name, bytes) in self.render_files() {
            dumpfmt::outfile::write_unsynced(&dir.join(name), &bytes)?;
        }
        Ok(())
    }
}
