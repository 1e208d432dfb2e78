//! The in-memory dump a journal replays into, and the three JSON files written from it with
//! dumpfmt's byte-exact writer.

use std::collections::HashMap;
use std::path::Path;

use dumpfmt::json::{self, Map, Value};

use crate::error::Result;
use crate::journal::{Meta, Record};

/// dump.json + stack.json + construct.json of one rank directory.
#[derive(Clone, Debug)]
pub struct DumpState {
    pub meta: Option<Meta>,
    pub data: Map,
    /// Stack groups in first-seen order: names sharing one exact frame list (spec §4.1).
    stack_groups: Vec<(Vec<String>, Vec<String>)>,
    stack_index: HashMap<Vec<String>, usize>,
    pub construct: Map,
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
            data: Map::new(),
            stack_groups: Vec::new(),
            stack_index: HashMap::new(),
            construct: Map::new(),
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
                let existing = if *reinsert {
                    self.data.remove(name)
                } else {
                    None
                };
                let target = match existing {
                    Some(v) => {
                        self.data.insert(name.as_str(), v);
                        self.data.get_mut(name)
                    }
                    None => {
                        if !self.data.contains_key(name) {
                            self.data.insert(name.as_str(), Value::Object(Map::new()));
                        }
                        self.data.get_mut(name)
                    }
                };
                if let Some(Value::Object(m)) = target {
                    for (k, v) in body.iter() {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            Record::Remove { name } => {
                self.data.remove(name);
            }
            Record::Stack { name, frames } => match self.stack_index.get(frames) {
                Some(&i) => self.stack_groups[i].0.push(name.clone()),
                None => {
                    self.stack_index
                        .insert(frames.clone(), self.stack_groups.len());
                    self.stack_groups.push((vec![name.clone()], frames.clone()));
                }
            },
            Record::Construct { name, parent } => {
                let p = match parent {
                    Some(p) => Value::from(p.as_str()),
                    None => Value::Null,
                };
                self.construct.insert(name.as_str(), p);
            }
            Record::Checkpoint => {}
        }
    }

    /// dump.json's top-level object.
    pub fn dump_value(&self) -> Value {
        let mut top = match self.dump_value_without_data() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        top.insert("data", Value::Object(self.data.clone()));
        Value::Object(top)
    }

    /// The top-level keys before `data`.
    fn dump_value_without_data(&self) -> Value {
        let meta = self.meta.clone().unwrap_or(Meta {
            task: "statistics".into(),
            level: "L1".into(),
            framework: "pytorch".into(),
            dump_data_dir: None,
            extra_info: true,
        });
        Value::Object(
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
                ),
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
        // Lend `data` to the top-level object instead of cloning it: this runs at every
        // stop/step and the data holds every record of the step.
        let mut top = match self.dump_value_without_data() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        top.insert("data", Value::Object(std::mem::take(&mut self.data)));
        let top = Value::Object(top);
        let written = json::write_file(&dir.join("dump.json"), &top);
        if let Value::Object(mut m) = top
            && let Some(Value::Object(d)) = m.remove("data")
        {
            self.data = d;
        }
        written?;
        if extra_info {
            json::write_file(&dir.join("stack.json"), &self.stack_value())?;
            json::write_file(
                &dir.join("construct.json"),
                &Value::Object(self.construct.clone()),
            )?;
        }
        Ok(())
    }
}
