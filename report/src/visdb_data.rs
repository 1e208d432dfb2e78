//! `input_data` / `output_data` of a vis.db node as msprobe's graph builder writes them: each
//! argument of the node's dump.json entry parsed as msprobe's compare reader does (`read_op`:
//! the record's own keys in dump order, then `data_name`, `requires_grad` and the statistics it
//! lacks, the stand-ins for non-tensor values), split into inputs and outputs, the compare's
//! columns appended on the target side, and every value turned into the text msprobe's
//! `_format_data` gives it (`str()` of the value; texts without `'`, `None` as `null`,
//! non-negative decimals with more than six places rounded to six).

use dumpfmt::json::{Map, Value};

/// A value as msprobe holds it before formatting.
#[derive(Clone, Debug)]
pub enum PyVal {
    None,
    /// A Python `str` (formatted: quotes dropped, `None` → `null`, long decimals rounded).
    Text(String),
    /// Any other value, as `str()` prints it.
    Other(String),
}

/// An insertion-ordered dict with Python's semantics (assigning a key keeps its place).
#[derive(Clone, Debug, Default)]
pub struct Dict(pub Vec<(String, PyVal)>);

impl Dict {
    pub fn set(&mut self, key: &str, v: PyVal) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = v,
            None => self.0.push((key.to_string(), v)),
        }
    }
    fn get(&self, key: &str) -> Option<&PyVal> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }
    fn text(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(PyVal::Text(t)) => Some(t),
            _ => None,
        }
    }
}

/// Python's `repr` of a parsed JSON value.
pub fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::BigInt(d) => d.to_string(),
        Value::Float(f) => pyrepr::repr_f64(*f),
        Value::Str(s) => pyrepr::str_repr(&s.to_string_lossy()),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(py_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", pyrepr::str_repr(&k.to_string_lossy()), py_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A JSON value as msprobe keeps it in a record.
fn pyval(v: &Value) -> PyVal {
    match v {
        Value::Null => PyVal::None,
        Value::Str(s) => PyVal::Text(s.to_string_lossy().into_owned()),
        other => PyVal::Other(py_repr(other)),
    }
}

/// Python truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Int(i) => *i != 0,
        Value::BigInt(_) => true,
        Value::Float(f) => *f != 0.0,
        Value::Str(s) => !s.as_bytes().is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

const STATS: [&str; 4] = ["Max", "Min", "Mean", "Norm"];

/// One parsed argument: its record and its full name.
struct Item {
    dict: Dict,
    full_name: String,
    data_name: String,
}

fn default_item(op_name: &str) -> Item {
    let mut d = Dict::default();
    for k in [
        "type", "Max", "Min", "Mean", "Norm", "dtype", "shape", "md5", "value",
    ] {
        d.set(k, PyVal::None);
    }
    d.set("data_name", PyVal::Text("-1".into()));
    d.set("requires_grad", PyVal::None);
    Item {
        dict: d,
        full_name: op_name.to_string(),
        data_name: "-1".into(),
    }
}

/// msprobe's `gen_op_item`.
fn gen_item(op: &Map, op_name: &str) -> Item {
    let mut d = Dict::default();
    for (k, v) in op.iter() {
        let v = match v {
            Value::Bool(b) => PyVal::Text(if *b { "True" } else { "False" }.into()),
            other => pyval(other),
        };
        d.set(&k.to_string_lossy(), v);
    }
    let data_name = match op.get("data_name") {
        Some(v) if truthy(v) => match v {
            Value::Str(s) => s.to_string_lossy().into_owned(),
            other => py_repr(other),
        },
        _ => "-1".to_string(),
    };
    d.set("data_name", PyVal::Text(data_name.clone()));
    let full_name = if data_name != "-1" {
        data_name
            .rsplit_once('.')
            .map_or(data_name.as_str(), |(s, _)| s)
            .to_string()
    } else {
        op_name.to_string()
    };
    if d.get("requires_grad").is_none() {
        d.set("requires_grad", PyVal::None);
    }
    for s in STATS {
        if d.get(s).is_none() {
            d.set(s, PyVal::None);
        }
    }
    let dtype_set = match d.get("dtype") {
        None | Some(PyVal::None) => false,
        Some(PyVal::Text(t)) => !t.is_empty(),
        Some(PyVal::Other(_)) => true,
    };
    if !dtype_set {
        let ty = op.get("type").and_then(Value::as_str).unwrap_or("");
        let value = op.get("value");
        let value_str = |v: Option<&Value>| {
            PyVal::Text(match v {
                None | Some(Value::Null) => "None".into(),
                Some(Value::Str(s)) => s.to_string_lossy().into_owned(),
                Some(other) => py_repr(other),
            })
        };
        let last = op_name.rsplit('.').next().unwrap_or("");
        let ty_val = op.get("type").map_or(PyVal::None, pyval);
        match ty {
            "torch.Size" => {
                d.set("dtype", ty_val);
                d.set("shape", value_str(value));
            }
            "slice" => {
                d.set("dtype", ty_val);
                let shape = match value {
                    Some(Value::Array(a)) => format!("({},)", a.len()),
                    _ => "()".into(),
                };
                d.set("shape", PyVal::Text(shape));
            }
            "ellipsis" => {
                d.set("dtype", ty_val);
                d.set("shape", PyVal::Text("[]".into()));
                for s in STATS {
                    d.set(s, value.map_or(PyVal::None, pyval));
                }
            }
            _ if ["src", "dst", "group_src", "group_dst"].contains(&last) => {
                d.set("dtype", ty_val);
                d.set("shape", PyVal::Text("[]".into()));
                for s in STATS {
                    d.set(s, value_str(value));
                }
            }
            "torch.ProcessGroup" => {
                d.set("dtype", ty_val);
                d.set("shape", PyVal::Text("[]".into()));
                for s in STATS {
                    d.set(s, value_str(op.get("group_ranks")));
                }
            }
            _ => {
                d.set(
                    "dtype",
                    PyVal::Text(compare::model::py_type_name(value).into()),
                );
                d.set("shape", PyVal::Text("[]".into()));
                for s in STATS {
                    d.set(s, value.map_or(PyVal::None, pyval));
                }
            }
        }
    }
    // md5: what the dump holds, else crc32 of `str(value)` (shown in md5 mode only).
    let has_md5 = matches!(d.get("md5"), Some(PyVal::Text(t)) if !t.is_empty())
        || matches!(d.get("md5"), Some(PyVal::Other(_)));
    if !has_md5 {
        let text = match op.get("value") {
            None => String::new(),
            Some(Value::Str(s)) => s.to_string_lossy().into_owned(),
            Some(v) => py_repr(v),
        };
        d.set(
            "md5",
            PyVal::Text(format!("{:08x}", crc32fast::hash(text.as_bytes()))),
        );
    }
    let data_name = d.text("data_name").unwrap_or("-1").to_string();
    Item {
        dict: d,
        full_name,
        data_name,
    }
}

/// msprobe's `op_item_parse`.
fn parse_items(v: &Value, op_name: &str, depth: usize, out: &mut Vec<Item>) {
    // msprobe stops at depth 50 with an error; a hostile dump.json stops here the same way.
    if depth > 50 {
        return;
    }
    if v.is_null() {
        out.push(default_item(op_name));
        return;
    }
    if !truthy(v) {
        return;
    }
    match v {
        Value::Array(a) => {
            let grads = op_name.split('.').any(|p| p == "parameters_grad");
            for (i, x) in a.iter().enumerate() {
                let name = if grads {
                    op_name.to_string()
                } else {
                    format!("{op_name}.{i}")
                };
                parse_items(x, &name, depth + 1, out);
            }
        }
        Value::Object(m) => {
            if m.get("class_type").and_then(Value::as_str) == Some("torch.distributed.P2POp") {
                let mut item = match m.get("tensor") {
                    Some(Value::Object(t)) => gen_item(t, op_name),
                    _ => default_item(op_name),
                };
                for k in ["class_type", "op", "peer", "tag", "group_id"] {
                    item.dict.set(k, m.get(k).map_or(PyVal::None, pyval));
                }
                out.push(item);
                return;
            }
            if matches!(m.get("type"), Some(Value::Str(_))) {
                out.push(gen_item(m, op_name));
                return;
            }
            for (k, x) in m.iter() {
                parse_items(
                    x,
                    &format!("{op_name}.{}", k.to_string_lossy()),
                    depth + 1,
                    out,
                );
            }
        }
        _ => {}
    }
}

/// A node's parameters: name and record, in msprobe's order.
pub type Records = Vec<(String, Dict)>;

/// A node's (inputs, outputs): msprobe's `read_op` and `get_input_output`.
pub fn node_io(data: &Value, key: &str) -> (Records, Records) {
    let mut items = Vec::new();
    let parts: Vec<&str> = key.split('.').collect();
    let n = parts.len();
    if parts[n - 1] == "debug"
        || parts[n - 1] == "parameters_grad"
        || (n >= 2 && parts[n - 2] == "parameters_grad")
    {
        parse_items(data, key, 0, &mut items);
    } else if let Value::Object(m) = data {
        for (field, suffix) in [
            ("input_args", ".input"),
            ("input_kwargs", ".input"),
            ("input", ".input"),
            ("output", ".output"),
            ("parameters", ".parameters"),
        ] {
            if let Some(v) = m.get(field) {
                parse_items(v, &format!("{key}{suffix}"), 0, &mut items);
            }
        }
    }
    let (mut ins, mut outs): (Records, Records) = (Vec::new(), Vec::new());
    let put = |list: &mut Vec<(String, Dict)>, k: String, d: Dict| match list
        .iter_mut()
        .find(|(n, _)| *n == k)
    {
        Some(e) => e.1 = d,
        None => list.push((k, d)),
    };
    for it in items {
        if it.full_name.is_empty() {
            continue;
        }
        if it.full_name.contains(".output.") && !it.full_name.contains(".input.") {
            put(&mut outs, it.full_name, it.dict);
        } else {
            let k = if it.data_name != "-1" {
                it.data_name
                    .rsplit_once('.')
                    .map_or(it.data_name.as_str(), |(s, _)| s)
                    .to_string()
            } else {
                it.full_name
            };
            put(&mut ins, k, it.dict);
        }
    }
    (ins, outs)
}

/// msprobe's `_format_decimal_string`: a non-negative decimal (optionally a percentage) with
/// more than six places is rounded to six.
fn format_decimal(s: &str) -> String {
    let (num, pct) = match s.strip_suffix('%') {
        Some(n) => (n, "%"),
        None => (s, ""),
    };
    let Some((int, frac)) = num.split_once('.') else {
        return s.to_string();
    };
    let digits = |t: &str| (1..=20).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) || frac.len() <= 6 {
        return s.to_string();
    }
    match num.parse::<f64>() {
        Ok(v) => format!("{v:.6}{pct}"),
        Err(_) => s.to_string(),
    }
}

/// msprobe's `format_node_data` on one record, then `json.dumps` of the node's records.
pub fn format_records(records: &[(String, Dict)], node_id: &str, md5_mode: bool) -> String {
    let mut out = String::from("{");
    for (i, (name, d)) in records.iter().enumerate() {
        let mut d = d.clone();
        d.remove("state");
        d.remove("full_op_name");
        if !md5_mode {
            d.remove("md5");
        }
        if node_id.contains("batch_isend_irecv") {
            for k in ["op", "peer", "tag", "group_id"] {
                d.remove(k);
            }
        }
        if d.text("type") == Some("torch.ProcessGroup") {
            d.0.retain(|(k, _)| {
                ["type", "group_ranks", "group_id", "data_name"].contains(&k.as_str())
            });
        }
        let mut texts: Vec<(String, String)> = Vec::with_capacity(d.0.len());
        let mut all_null = false;
        for (k, v) in &d.0 {
            let t = match v {
                PyVal::Text(t) => format_decimal(&t.replace('\'', "").replace("None", "null")),
                PyVal::None => "null".into(),
                PyVal::Other(t) => t.clone(),
            };
            if k == "Max" && t == "null" {
                all_null = true;
            }
            texts.push((k.clone(), t));
        }
        if all_null {
            texts = vec![("value".into(), "null".into())];
        }
        if i > 0 {
            out.push_str(", ");
        }
        pyrepr::write_json_str(name, &mut out);
        out.push_str(": {");
        for (j, (k, t)) in texts.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            pyrepr::write_json_str(k, &mut out);
            out.push_str(": ");
            pyrepr::write_json_str(t, &mut out);
        }
        out.push('}');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_rounded_as_msprobe_rounds_them() {
        assert_eq!(format_decimal("0.23217601776%"), "0.232176%");
        assert_eq!(format_decimal("0.5%"), "0.5%");
        assert_eq!(format_decimal("-0.0027635097"), "-0.0027635097");
        assert_eq!(format_decimal("0.0020418167114257812"), "0.002042");
        assert_eq!(format_decimal("1e-05"), "1e-05");
    }
}

/// A statistic as a Python number (ints stay ints), `None` for anything else.
#[derive(Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
}

fn num(v: Option<&PyVal>) -> Option<Num> {
    match v? {
        PyVal::Other(t) => t
            .parse::<i64>()
            .map(Num::I)
            .ok()
            .or_else(|| t.parse::<f64>().ok().map(Num::F)),
        _ => None,
    }
}

fn f(n: Num) -> f64 {
    match n {
        Num::I(i) => i as f64,
        Num::F(x) => x,
    }
}

/// The statistics-mode figures msprobe's graph compare computes from the two records
/// (`get_rela_diff_summary_mode`): per statistic the difference and the relative difference in
/// percent, in the order Max, Min, Mean, Norm diffs then the four relative ones.
pub fn summary_figures(npu: &Dict, bench: &Dict) -> [PyVal; 8] {
    let mut out: [PyVal; 8] = std::array::from_fn(|_| PyVal::Text("N/A".into()));
    for (i, s) in STATS.iter().enumerate() {
        let (Some(a), Some(b)) = (num(npu.get(s)), num(bench.get(s))) else {
            continue;
        };
        let diff = match (a, b) {
            (Num::I(x), Num::I(y)) => match x.checked_sub(y) {
                Some(d) => Num::I(d),
                None => Num::F(x as f64 - y as f64),
            },
            _ => Num::F(f(a) - f(b)),
        };
        if f(diff).is_nan() {
            out[i] = PyVal::Text("Nan".into());
            out[i + 4] = PyVal::Text("Nan".into());
            continue;
        }
        let text = |n: Num| match n {
            Num::I(d) => d.to_string(),
            Num::F(d) => pyrepr::repr_f64(d),
        };
        // msprobe marks infinities and NaN with a tab (for spreadsheets).
        let tab = |t: String| {
            if ["inf", "-inf", "nan"].contains(&t.as_str()) {
                format!("{t}\t")
            } else {
                t
            }
        };
        out[i] = PyVal::Other(tab(text(diff)));
        if f(b) != 0.0 {
            let rel = (f(diff) / f(b) * 100.0).abs();
            out[i + 4] = PyVal::Text(format!("{}%", pyrepr::repr_f64(rel)));
        }
    }
    out
}
