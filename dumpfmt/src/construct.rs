//! `construct.json` (spec §4.2): node → parent node.
//!
//! Values are a parent name, `null`, `""` ([1.x] top level; read as no parent), or for Megatron
//! runs `[parent_or_null, micro_step]` with an extra `"megatron_micro_step_number": <int>` key.

use std::path::{Path, PathBuf};

use crate::dump::path_key;
use crate::error::{Error, Result};
use crate::json::{self, Value};

/// One node of construct.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// `None` for top-level nodes (`null` or `""`).
    pub parent: Option<String>,
    /// Megatron micro-step, when the `[parent, micro_step]` form was used.
    pub micro_step: Option<i64>,
}

/// A parsed construct.json.
#[derive(Clone, Debug)]
pub struct ConstructFile {
    pub path: PathBuf,
    pub nodes: Vec<Node>,
    /// `megatron_micro_step_number`, when present.
    pub megatron_micro_step_number: Option<i64>,
}

fn parent_of(v: &Value, path: &Path, jp: &str) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::Str(s) if s.as_bytes().is_empty() => Ok(None),
        Value::Str(s) => Ok(Some(s.to_string_lossy().into_owned())),
        other => Err(Error::schema(
            path,
            jp,
            format!(
                "expected a parent name or null, found {}",
                other.kind_name()
            ),
        )),
    }
}

impl ConstructFile {
    pub fn open(path: &Path) -> Result<ConstructFile> {
        let v = json::parse_file(path)?;
        ConstructFile::from_value(&v, path)
    }

    /// [`ConstructFile::open`] of a file found in a dump directory, not named by the user
    /// ([`json::parse_found`]: not read through a link out of its directory).
    pub fn open_found(path: &Path) -> Result<ConstructFile> {
        let v = json::parse_found(path)?;
        ConstructFile::from_value(&v, path)
    }

    pub fn from_value(v: &Value, path: &Path) -> Result<ConstructFile> {
        let m = v.as_object().ok_or_else(|| {
            Error::schema(
                path,
                "$",
                format!("expected an object, found {}", v.kind_name()),
            )
        })?;
        let mut nodes = Vec::with_capacity(m.len());
        let mut mega = None;
        for (k, x) in m.iter() {
            let name = k.to_string_lossy().into_owned();
            let jp = path_key("$", &name);
            if name == "megatron_micro_step_number" {
                mega = Some(
                    x.as_i64()
                        .ok_or_else(|| Error::schema(path, &jp, "expected an integer"))?,
                );
                continue;
            }
            let node = match x {
                Value::Array(a) => {
                    if a.len() != 2 {
                        return Err(Error::schema(path, &jp, "expected [parent, micro_step]"));
                    }
                    Node {
                        name,
                        parent: parent_of(&a[0], path, &format!("{jp}[0]"))?,
                        micro_step: Some(a[1].as_i64().ok_or_else(|| {
                            Error::schema(path, format!("{jp}[1]"), "expected an integer")
                        })?),
                    }
                }
                other => Node {
                    name,
                    parent: parent_of(other, path, &jp)?,
                    micro_step: None,
                },
            };
            nodes.push(node);
        }
        Ok(ConstructFile {
            path: path.to_path_buf(),
            nodes,
            megatron_micro_step_number: mega,
        })
    }

    pub fn parent_of(&self, name: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|n| n.name == name)?
            .parent
            .as_deref()
    }
}
