//! `stack.json` (spec §4.1): call stacks of forward entries.
//!
//! Two layouts exist. [8.x+]: `{"0": [[names…], [frames…]], "1": …}` groups every name that
//! shares one stack. [1.x] and MindSpore static-graph L0: `{name: [frames…]}`. msprobe's reader
//! rule decides: a key `"0"` present means the new layout.

use std::path::{Path, PathBuf};

use crate::dump::{path_index, path_key};
use crate::error::{Error, Result};
use crate::json::{self, Map, Value};

/// Which layout the file used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackFormat {
    /// `{"0": [[names], [frames]], …}`
    Grouped,
    /// `{name: [frames]}`
    PerName,
}

/// One call stack and the entry names that share it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackGroup {
    pub names: Vec<String>,
    /// Innermost frame first.
    pub frames: Vec<String>,
}

/// A parsed stack.json.
#[derive(Clone, Debug)]
pub struct StackFile {
    pub path: PathBuf,
    pub format: StackFormat,
    /// Groups in file order (one per name for the per-name layout).
    pub groups: Vec<StackGroup>,
}

fn strings(v: &Value, file: &Path, jp: &str) -> Result<Vec<String>> {
    let a = v.as_array().ok_or_else(|| {
        Error::schema(
            file,
            jp,
            format!("expected an array, found {}", v.kind_name()),
        )
    })?;
    a.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_str().map(str::to_string).ok_or_else(|| {
                Error::schema(
                    file,
                    path_index(jp, i),
                    format!("expected a string, found {}", x.kind_name()),
                )
            })
        })
        .collect()
}

impl StackFile {
    pub fn open(path: &Path) -> Result<StackFile> {
        let v = json::parse_file(path)?;
        StackFile::from_value(&v, path)
    }

    /// [`StackFile::open`] of a file found in a dump directory, not named by the user
    /// ([`json::parse_found`]: not read through a link out of its directory).
    pub fn open_found(path: &Path) -> Result<StackFile> {
        let v = json::parse_found(path)?;
        StackFile::from_value(&v, path)
    }

    pub fn from_value(v: &Value, path: &Path) -> Result<StackFile> {
        let m = v.as_object().ok_or_else(|| {
            Error::schema(
                path,
                "$",
                format!("expected an object, found {}", v.kind_name()),
            )
        })?;
        let format = if m.contains_key("0") {
            StackFormat::Grouped
        } else {
            StackFormat::PerName
        };
        let mut groups = Vec::with_capacity(m.len());
        for (k, x) in m.iter() {
            let key = k.to_string_lossy();
            let jp = path_key("$", &key);
            match format {
                StackFormat::Grouped => {
                    let pair = x
                        .as_array()
                        .filter(|a| a.len() == 2)
                        .ok_or_else(|| Error::schema(path, &jp, "expected [[names], [frames]]"))?;
                    groups.push(StackGroup {
                        names: strings(&pair[0], path, &path_index(&jp, 0))?,
                        frames: strings(&pair[1], path, &path_index(&jp, 1))?,
                    });
                }
                StackFormat::PerName => groups.push(StackGroup {
                    names: vec![key.into_owned()],
                    frames: strings(x, path, &jp)?,
                }),
            }
        }
        Ok(StackFile {
            path: path.to_path_buf(),
            format,
            groups,
        })
    }

    /// Every entry name in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.groups
            .iter()
            .flat_map(|g| g.names.iter().map(String::as_str))
    }

    /// The frames recorded for `name`.
    pub fn frames_of(&self, name: &str) -> Option<&[String]> {
        self.groups
            .iter()
            .find(|g| g.names.iter().any(|n| n == name))
            .map(|g| g.frames.as_slice())
    }

    /// The file in the given layout (the grouped one is what 26.2 writes).
    pub fn to_value(&self, format: StackFormat) -> Value {
        let mut m = Map::new();
        match format {
            StackFormat::Grouped => {
                for (i, g) in self.groups.iter().enumerate() {
                    let names = g
                        .names
                        .iter()
                        .map(|n| Value::from(n.as_str()))
                        .collect::<Vec<_>>();
                    let frames = g
                        .frames
                        .iter()
                        .map(|f| Value::from(f.as_str()))
                        .collect::<Vec<_>>();
                    m.push_unique(
                        i.to_string(),
                        Value::Array(vec![names.into(), frames.into()]),
                    );
                }
            }
            StackFormat::PerName => {
                for g in &self.groups {
                    for n in &g.names {
                        let frames = g
                            .frames
                            .iter()
                            .map(|f| Value::from(f.as_str()))
                            .collect::<Vec<_>>();
                        m.insert(n.as_str(), frames.into());
                    }
                }
            }
        }
        Value::Object(m)
    }
}

/// msprobe's frame text: `File {path}, line {n}, in {func}, \n {source}`.
pub fn frame_text(path: &str, line: u64, func: &str, source: &str) -> String {
    format!("File {path}, line {line}, in {func}, \n {}", source.trim())
}
