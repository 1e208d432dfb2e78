//! The dump as the comparison sees it: one row per leaf (tensor or scalar argument), grouped
//! per API/module call, built from `dump.json` with msprobe's naming and ordering rules.

use dumpfmt::json::Value;

use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::stats_diff::PandasCompat;

/// msprobe's three comparison modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    /// `task: statistics` (msprobe's SUMMARY).
    Statistics,
    /// `task: statistics` with `md5` checksums.
    Md5,
    /// `task: tensor` (msprobe's ALL): metrics on the tensor files.
    Tensor,
}

/// Which part of the call a row belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Input,
    Output,
    Parameters,
    ParametersGrad,
    Debug,
}

/// One leaf of one call.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// Full row name, e.g. `Torch.add.0.forward.input.0`.
    pub name: String,
    pub state: State,
    /// Dtype text as msprobe prints it (`torch.float32`, `<class 'int'>`).
    pub dtype: String,
    /// Shape text (`[4, 4]`, `[]`).
    pub shape: String,
    /// `True`/`False` text or `None` when the dump has none.
    pub requires_grad: Cell,
    /// Max, Min, Mean, Norm: NaN already turned into the text `Nan`, a missing one into `None`.
    pub stats: [Cell; 4],
    /// Checksum text (dumped, or `crc32(str(value))` for a scalar without one).
    pub md5: String,
    /// Tensor file name, `-1` when the leaf has none.
    pub data_name: String,
    /// Whether this is a tensor (as opposed to a scalar or other non-tensor argument).
    pub is_tensor: bool,
}

/// One API or module call (one key of `data`).
#[derive(Clone, Debug)]
pub struct Call {
    pub key: String,
    /// Key without call index and direction (`Torch.add`).
    pub op_no_number: String,
    /// `{index}.{direction}` for APIs, `{direction}.{index}` for modules, `parameters_grad`.
    pub call_part: String,
    pub direction: String,
    pub leaves: Vec<Leaf>,
    /// Stack text list from `stack.json`, when present.
    pub stack: Option<Cell>,
}

/// A parsed dump.
#[derive(Clone, Debug)]
pub struct Dump {
    pub task: String,
    pub framework: String,
    pub calls: Vec<Call>,
}

impl Dump {
    /// Builds the row model from a parsed `dump.json` and optional `stack.json`, with the cells
    /// msprobe writes under pandas 2 (the pinned peer).
    pub fn from_json(dump: &Value, stack: Option<&Value>) -> Result<Dump> {
        Self::from_json_for(dump, stack, PandasCompat::V2)
    }

    /// [`Dump::from_json`] for msprobe running with the given pandas: a `None` argument's
    /// Dtype and Tensor Shape cells depend on it (see [`null_leaf_text`]).
    pub fn from_json_for(
        dump: &Value,
        stack: Option<&Value>,
        pandas: PandasCompat,
    ) -> Result<Dump> {
        let obj = dump
            .as_object()
            .ok_or_else(|| Error::Format("dump.json: top level is not an object".into()))?;
        let task = obj
            .get("task")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let framework = obj
            .get("framework")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let stack_map = stack.map(stack_entries).unwrap_or_default();
        let null_text = null_leaf_text(&framework, pandas);
        let mut calls = Vec::new();
        if let Some(data) = obj.get("data").and_then(Value::as_object) {
            for (key, op_data) in data.iter() {
                let key = key.to_string_lossy().into_owned();
                let Some((op_no_number, call_part, direction)) = split_key(&key) else {
                    continue;
                };
                let leaves = read_call(op_data, &key, null_text);
                if leaves.is_empty() {
                    continue;
                }
                let stack = stack_map
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v.clone());
                calls.push(Call {
                    key,
                    op_no_number,
                    call_part,
                    direction,
                    leaves,
                    stack,
                });
            }
        }
        Ok(Dump {
            task,
            framework,
            calls,
        })
    }

    /// The comparison mode of this dump (statistics becomes md5 when any leaf has a checksum).
    pub fn mode(&self, raw: &Value) -> Result<Mode> {
        match self.task.as_str() {
            "tensor" => Ok(Mode::Tensor),
            "statistics" => Ok(if has_md5(raw.get("data").unwrap_or(&Value::Null)) {
                Mode::Md5
            } else {
                Mode::Statistics
            }),
            other => Err(Error::Format(format!(
                "compare needs a dump with task \"tensor\" or \"statistics\", found {other:?}"
            ))),
        }
    }
}

/// Detects a `md5` key anywhere in the leaves.
fn has_md5(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("md5") || m.values().any(has_md5),
        Value::Array(a) => a.iter().any(has_md5),
        _ => false,
    }
}

/// stack.json in either layout: `{api: [lines]}` (old) or `{"0": [[apis], [lines]], ...}` (new).
fn stack_entries(v: &Value) -> Vec<(String, Cell)> {
    let mut out = Vec::new();
    let Some(m) = v.as_object() else { return out };
    let new_layout = m.get("0").is_some_and(|x| !x.is_null());
    for (k, val) in m.iter() {
        if new_layout {
            let Some(pair) = val.as_array() else { continue };
            if pair.len() != 2 {
                continue;
            }
            let Some(apis) = pair[0].as_array() else {
                continue;
            };
            for api in apis {
                if let Some(name) = api.as_str() {
                    out.push((name.to_string(), value_cell(&pair[1])));
                }
            }
        } else {
            out.push((k.to_string_lossy().into_owned(), value_cell(val)));
        }
    }
    out
}

/// Splits a dump key into (op_no_number, call part, direction); `None` for keys msprobe skips.
pub fn split_key(key: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = key.split('.').collect();
    let last = *parts.last()?;
    let second_last = if parts.len() >= 2 {
        parts[parts.len() - 2]
    } else {
        ""
    };
    let (op, call, dir) = if last == "parameters_grad" || second_last == "parameters_grad" {
        (
            if parts.len() > 1 {
                parts[..parts.len() - 1].join(".")
            } else {
                String::new()
            },
            "parameters_grad".to_string(),
            "parameters_grad".to_string(),
        )
    } else if let Some(dir) = ["forward", "backward"]
        .into_iter()
        .find(|d| *d == last || *d == second_last)
    {
        (
            if parts.len() > 2 {
                parts[..parts.len() - 2].join(".")
            } else {
                String::new()
            },
            format!("{second_last}.{last}"),
            dir.to_string(),
        )
    } else {
        return None;
    };
    if op.is_empty() {
        None
    } else {
        Some((op, call, dir))
    }
}

/// Rows of one call in msprobe's order: inputs/kwargs, parameters, outputs, parameter grads.
fn read_call(op_data: &Value, key: &str, null_text: &str) -> Vec<Leaf> {
    let split: Vec<&str> = key.split('.').collect();
    let mut items = Vec::new();
    if split.last() == Some(&"debug") {
        parse_item(op_data, key, State::Debug, 0, &mut items, null_text);
    } else if split.last() == Some(&"parameters_grad")
        || (split.len() >= 2 && split[split.len() - 2] == "parameters_grad")
    {
        parse_item(
            op_data,
            key,
            State::ParametersGrad,
            0,
            &mut items,
            null_text,
        );
    } else if let Some(m) = op_data.as_object() {
        for (field, suffix, state) in [
            ("input_args", ".input", State::Input),
            ("input_kwargs", ".input", State::Input),
            ("input", ".input", State::Input),
            ("output", ".output", State::Output),
            ("parameters", ".parameters", State::Parameters),
        ] {
            if let Some(v) = m.get(field) {
                parse_item(
                    v,
                    &format!("{key}{suffix}"),
                    state,
                    0,
                    &mut items,
                    null_text,
                );
            }
        }
    }
    let rank = |s: State| match s {
        State::Parameters => 1,
        State::Output => 2,
        State::ParametersGrad => 3,
        _ => 0,
    };
    // Stable: keeps the dump order inside each group.
    items.sort_by_key(|l: &Leaf| rank(l.state));
    items
}

const MAX_DEPTH: usize = 200;

fn parse_item(
    v: &Value,
    name: &str,
    state: State,
    depth: usize,
    out: &mut Vec<Leaf>,
    null_text: &str,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::Null => out.push(default_leaf(name, state, null_text)),
        Value::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                if name.split('.').any(|s| s == "parameters_grad") {
                    parse_item(item, name, state, depth + 1, out, null_text);
                } else {
                    parse_item(
                        item,
                        &format!("{name}.{i}"),
                        state,
                        depth + 1,
                        out,
                        null_text,
                    );
                }
            }
        }
        Value::Object(m) => {
            if m.get("class_type").and_then(Value::as_str) == Some("torch.distributed.P2POp") {
                match m.get("tensor") {
                    Some(t @ Value::Object(_)) => out.push(leaf(t, name, state)),
                    _ => out.push(default_leaf(name, state, null_text)),
                }
                return;
            }
            if m.get("type").and_then(Value::as_str).is_some() {
                out.push(leaf(v, name, state));
                return;
            }
            for (k, sub) in m.iter() {
                parse_item(
                    sub,
                    &format!("{name}.{}", k.to_string_lossy()),
                    state,
                    depth + 1,
                    out,
                    null_text,
                );
            }
        }
        _ => {}
    }
}

/// The Dtype and Tensor Shape text of a `null` leaf (a `None` argument or output). msprobe
/// 26.2.0 turns both columns into text with `astype(str)` and later fills missing cells with
/// `N/A`: pandas 2 turns `None` into the text `None` there, pandas 3 keeps it missing, so it
/// becomes `N/A`. Its MindSpore path writes the text `None` before either step.
pub fn null_leaf_text(framework: &str, pandas: PandasCompat) -> &'static str {
    if framework == "mindspore" || pandas == PandasCompat::V2 {
        "None"
    } else {
        "N/A"
    }
}

fn default_leaf(name: &str, state: State, null_text: &str) -> Leaf {
    Leaf {
        name: name.to_string(),
        state,
        dtype: null_text.into(),
        shape: null_text.into(),
        requires_grad: Cell::None,
        stats: std::array::from_fn(|_| Cell::s("None")),
        md5: "N/A".into(),
        data_name: "-1".into(),
        is_tensor: false,
    }
}

/// Python `str()` of a JSON value as Python's json module would have loaded it.
pub fn py_str(v: &Value) -> String {
    value_cell(v).py_str()
}

/// A JSON value as a table cell (containers become their Python text).
pub fn value_cell(v: &Value) -> Cell {
    match v {
        Value::Null => Cell::None,
        Value::Bool(b) => Cell::Bool(*b),
        Value::Int(i) => Cell::Int(*i),
        Value::BigInt(s) => Cell::Str(s.to_string()),
        Value::Float(f) => Cell::Float(*f),
        Value::Str(s) => Cell::Str(s.to_string_lossy().into_owned()),
        Value::Array(a) => Cell::List(a.iter().map(value_cell).collect()),
        Value::Object(m) => {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}: {}",
                        pyrepr::str_repr(&k.to_string_lossy()),
                        value_cell(v).py_repr()
                    )
                })
                .collect();
            Cell::Str(format!("{{{}}}", parts.join(", ")))
        }
    }
}

/// `str(type(v))` of the Python value a dump.json value stands for (`None` for absent).
pub fn py_type_name(v: Option<&Value>) -> &'static str {
    match v {
        None | Some(Value::Null) => "<class 'NoneType'>",
        Some(Value::Bool(_)) => "<class 'bool'>",
        Some(Value::Int(_)) | Some(Value::BigInt(_)) => "<class 'int'>",
        Some(Value::Float(_)) => "<class 'float'>",
        Some(Value::Str(_)) => "<class 'str'>",
        Some(Value::Array(_)) => "<class 'list'>",
        Some(Value::Object(_)) => "<class 'dict'>",
    }
}

/// `str(np.shape(np.array(value)))` for the values a slice carries.
fn np_shape_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Array(a)) => {
            let inner: Option<Vec<usize>> =
                a.first().and_then(|f| f.as_array()).map(|f| vec![f.len()]);
            match inner {
                Some(d)
                    if a.iter()
                        .all(|x| x.as_array().map(|y| y.len()) == Some(d[0])) =>
                {
                    pyrepr::shape_tuple(&[a.len(), d[0]])
                }
                _ => pyrepr::shape_tuple(&[a.len()]),
            }
        }
        _ => "()".into(),
    }
}

/// The leaf's own fields, with bools turned into the texts `True`/`False` as msprobe does.
fn field_cell(v: &Value) -> Cell {
    match v {
        Value::Bool(b) => Cell::s(if *b { "True" } else { "False" }),
        other => value_cell(other),
    }
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Int(i)) => *i != 0,
        Some(Value::BigInt(_)) => true,
        Some(Value::Float(f)) => *f != 0.0,
        Some(Value::Str(s)) => !s.as_bytes().is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
    }
}

fn leaf(v: &Value, name: &str, state: State) -> Leaf {
    let m = v.as_object().expect("leaf is an object");
    let data_name = match m.get("data_name") {
        Some(d) if truthy(Some(d)) => field_cell(d).py_str(),
        _ => "-1".to_string(),
    };
    let full_name = if data_name != "-1" {
        data_name
            .rsplit_once('.')
            .map(|(a, _)| a.to_string())
            .unwrap_or_else(|| data_name.clone())
    } else {
        name.to_string()
    };
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    let value = m.get("value");
    let stat_keys = ["Max", "Min", "Mean", "Norm"];
    let mut stats: [Cell; 4] =
        std::array::from_fn(|i| m.get(stat_keys[i]).map(field_cell).unwrap_or(Cell::None));
    let mut md5 = m
        .get("md5")
        .filter(|x| truthy(Some(x)))
        .map(|x| field_cell(x).py_str());
    let (dtype, shape);
    if truthy(m.get("dtype")) {
        dtype = field_cell(m.get("dtype").unwrap()).py_str();
        shape = m
            .get("shape")
            .map(|s| field_cell(s).py_str())
            .unwrap_or_else(|| "None".into());
    } else {
        let last = name.rsplit('.').next().unwrap_or("");
        match ty {
            "torch.Size" => {
                dtype = ty.to_string();
                shape = value.map(py_str).unwrap_or_else(|| "None".into());
            }
            "slice" => {
                dtype = ty.to_string();
                shape = np_shape_text(value);
            }
            "ellipsis" => {
                dtype = ty.to_string();
                shape = "[]".into();
                stats = std::array::from_fn(|_| value.map(value_cell).unwrap_or(Cell::None));
            }
            _ if ["src", "dst", "group_src", "group_dst"].contains(&last) => {
                dtype = ty.to_string();
                shape = "[]".into();
                let text = value.map(py_str).unwrap_or_else(|| "None".into());
                stats = std::array::from_fn(|_| Cell::Str(text.clone()));
                md5 = Some(text);
            }
            "torch.ProcessGroup" => {
                dtype = ty.to_string();
                shape = "[]".into();
                let text = m
                    .get("group_ranks")
                    .map(py_str)
                    .unwrap_or_else(|| "None".into());
                stats = std::array::from_fn(|_| Cell::Str(text.clone()));
                md5 = Some(text);
            }
            _ => {
                dtype = py_type_name(value).to_string();
                shape = "[]".into();
                stats = std::array::from_fn(|_| value.map(value_cell).unwrap_or(Cell::None));
            }
        }
    }
    let md5 = md5.unwrap_or_else(|| {
        let text = value.map(py_str).unwrap_or_default();
        format!("{:08x}", crc32fast::hash(text.as_bytes()))
    });
    // msprobe: a missing statistic is the text `None`, a NaN (or the text `nan`) is `Nan`.
    let stats = stats.map(|c| match c {
        Cell::None => Cell::s("None"),
        Cell::Float(f) if f.is_nan() => Cell::s("Nan"),
        Cell::Str(s) if s.eq_ignore_ascii_case("nan") => Cell::s("Nan"),
        other => other,
    });
    Leaf {
        name: full_name,
        state,
        dtype,
        shape,
        requires_grad: m.get("requires_grad").map(field_cell).unwrap_or(Cell::None),
        stats,
        md5,
        data_name,
        is_tensor: ty.contains("Tensor") || ty.contains("tensor") || ty == "numpy.ndarray",
    }
}
