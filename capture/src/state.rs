//! The in-memory dump a journal replays into, and the three JSON files written from it with
//! dumpfmt's byte-exact writer.

use std::collections::HashMap;
use std::path::Path;

use dumpfmt::json::{self, Map, Value};

use crate::error::Result;
use crate::journal::{Meta, Record};

/// dump.json + stack.json + construct.json of one rank directory.
///
/// Entries are kept in a slot vector indexed by name (a step records thousands of entries and
/// every API merges into its entry twice, so a linear name lookup per record would make a
/// step quadratic); a moved or removed entry leaves an empty slot until the next compaction.
#[derive(Clone, Debug)]
pub struct DumpState {
    pub meta: Option<Meta>,
    slots: Vec<Option<(String, Map)>>,
    index: HashMap<String, usize>,
    /// Stack groups in first-seen order: names sharing one exact frame list (spec §4.1).
    stack_groups: Vec<(Vec<String>, Vec<String>)>,
    stack_index: HashMap<Vec<String>, usize>,
    construct: Vec<(String, Value)>,
    construct_index: HashMap<String, usize>,
}

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
            index: HashMap::new(),
            stack_groups: Vec::new(),
            stack_index: HashMap::new(),
            construct: Vec::new(),
            construct_index: HashMap::new(),
        }
    }

    /// Number of entries in `data`.
    pub fn data_len(&self) -> usize {
        self.index.len()
    }

    pub fn contains_entry(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The body of entry `name`.
    pub fn entry(&self, name: &str) -> Option<&Map> {
        let &i = self.index.get(name)?;
        self.slots[i].as_ref().map(|(_, m)| m)
    }

    /// Entry names in dump.json order.
    pub fn data_names(&self) -> impl Iterator<Item = &str> {
        self.slots.iter().flatten().map(|(n, _)| n.as_str())
    }

    /// dump.json's `data` object (a copy).
    pub fn data(&self) -> Map {
        let mut m = Map::with_capacity(self.index.len());
        for (n, body) in self.slots.iter().flatten() {
            m.push_unique(n.as_str(), Value::Object(body.clone()));
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
        self.stack_index.get(frames).copied()
    }

    fn push_slot(&mut self, name: &str, body: Map) {
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

    /// Applies one record (the replay rule of every kind).
    pub fn apply(&mut self, rec: &Record) {
        match rec {
            Record::Meta(m) => self.meta = Some(m.clone()),
            Record::Entry {
                name,
                body,
                reinsert,
            } => {
                let at = self.index.get(name.as_str()).copied();
                let i = match (at, *reinsert) {
                    (Some(i), true) => {
                        // Python dict semantics of pop + set: the entry moves to the end.
                        let moved = self.slots[i].take();
                        self.index.insert(name.clone(), self.slots.len());
                        self.slots.push(moved);
                        self.maybe_compact();
                        self.index[name.as_str()]
                    }
                    (Some(i), false) => i,
                    (None, _) => {
                        self.push_slot(name, Map::with_capacity(body.len()));
                        self.slots.len() - 1
                    }
                };
                if let Some((_, m)) = self.slots[i].as_mut() {
                    for (k, v) in body.iter() {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            Record::Remove { name } => {
                if let Some(i) = self.index.remove(name.as_str()) {
                    self.slots[i] = None;
                    self.maybe_compact();
                }
            }
            Record::Stack { name, frames } => match self.stack_index.get(frames) {
                Some(&i) => self.stack_groups[i].0.push(name.clone()),
                None => {
                    self.stack_index
                        .insert(frames.clone(), self.stack_groups.len());
                    self.stack_groups.push((vec![name.clone()], frames.clone()));
                }
            },
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
            let frames: Vec<Value> = frames.iter().map(|f| Value::from(f.as_str())).collect();
            m.push_unique(
                i.to_string(),
                Value::Array(vec![names.into(), frames.into()]),
            );
        }
        Value::Object(m)
    }

    /// Writes dump.json, and with `extra_info` stack.json and construct.json, into `dir`.
    pub fn write_files(&mut self, dir: &Path) -> Result<()> {
        let extra_info = self.meta.as_ref().is_none_or(|m| m.extra_info);
        // Lend the entry bodies to the top-level object instead of cloning them: this runs at
        // every stop/step and the data holds every record of the step.
        let mut data = Map::with_capacity(self.index.len());
        for (n, body) in self.slots.iter_mut().flatten() {
            data.push_unique(n.as_str(), Value::Object(std::mem::take(body)));
        }
        let mut top = self.top_without_data();
        top.insert("data", Value::Object(data));
        let top = Value::Object(top);
        let written = json::write_file(&dir.join("dump.json"), &top);
        if let Value::Object(mut m) = top
            && let Some(Value::Object(d)) = m.remove("data")
        {
            let live = self.slots.iter_mut().flatten();
            for ((_, v), (_, body)) in d.into_entries().into_iter().zip(live) {
                if let Value::Object(b) = v {
                    *body = b;
                }
            }
        }
        written?;
        if extra_info {
            json::write_file(&dir.join("stack.json"), &self.stack_value())?;
            json::write_file(
                &dir.join("construct.json"),
                &Value::Object(self.construct()),
            )?;
        }
        Ok(())
    }
}
