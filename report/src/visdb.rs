//! `compare_{timestamp}.vis.db`: the SQLite file msprobe's `graph_visualize` writes for its
//! TensorBoard plugin (tb-graph-ascend): tables `tb_nodes` (both sides' graphs), `tb_config` and
//! `tb_stack`, with msprobe's schema and indexes.
//!
//! The graph follows msprobe's builder: every construct.json entry in file order under the root
//! `DefaultModel` (a backward node without a parent takes its forward twin's, backward stacks
//! come from the forward node), runs of two or more top-level APIs gathered into
//! `Apis_Between_Modules.N`, parameter gradients under their module's last backward node, and
//! nodes numbered in post-order. A target node is matched with the golden node of the same name
//! whose ancestors have the same names; its `precision_index` is the worst verdict of its rows
//! (pass 0, warning 0.5, error 1). An L1 dump (empty construct.json), which msprobe refuses, gets
//! its APIs directly under `DefaultModel` in execution order (not gathered into a collection).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use compare::Compared;
use compare::cell::Cell;
use compare::judge::Level;
use compare::model::{Dump, Mode};
use dumpfmt::construct::ConstructFile;
use rusqlite::types::Value as Sql;

use crate::model::Input;
use crate::visdb_data::{self, PyVal};
use crate::{Error, Result};
use dumpfmt::json::Value as JsonValue;

const ROOT: &str = "DefaultModel";
const COLLECTION: &str = "Apis_Between_Modules";
const NO_FORWARD: &str =
    "This backward node cannot find the forward node and cannot retrieve stack information.";
const IGNORE_PRECISION: [&str; 6] = [
    "empty",
    "empty_like",
    "empty_with_format",
    "new_empty_strided",
    "new_empty",
    "empty_strided",
];

const OP_MODULE: u8 = 0;
const OP_API: u8 = 1;
const OP_COLLECTION: u8 = 9;

/// msprobe's node kind from a name (`op_patterns`); anything else is a module.
fn node_op(name: &str) -> u8 {
    const API: [&str; 12] = [
        "Tensor.",
        "Torch.",
        "Functional.",
        "NPU.",
        "VF.",
        "Distributed.",
        "Aten.",
        "Mint.",
        "Primitive.",
        "Jit.",
        "MintFunctional.",
        "MindSpeed.",
    ];
    // The patterns are regexes whose `.` matches any character; names use a literal dot.
    let module = ["Module", "Cell", "optimizer", "clip_grad", ROOT];
    let dotted = |p: &str, n: &str| {
        let stem = p.trim_end_matches('.');
        n.len() > stem.len() && n.starts_with(stem)
    };
    if module.iter().any(|p| {
        if *p == "Module" || *p == "Cell" {
            dotted(p, name)
        } else {
            name.starts_with(p)
        }
    }) {
        OP_MODULE
    } else if API.iter().any(|p| dotted(p, name)) {
        OP_API
    } else {
        OP_MODULE
    }
}

/// `(prefix, n)` of a name ending in `.backward.N` / `.forward.N`.
fn split_pass<'a>(name: &'a str, pass: &str) -> Option<(&'a str, &'a str)> {
    let (head, num) = name.rsplit_once('.')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix = head.strip_suffix(pass)?.strip_suffix('.')?;
    Some((prefix, num))
}

fn backward_to_forward(name: &str) -> Option<String> {
    split_pass(name, "backward").map(|(p, n)| format!("{p}.forward.{n}"))
}

fn forward_to_backward(name: &str) -> Option<String> {
    split_pass(name, "forward").map(|(p, n)| format!("{p}.backward.{n}"))
}

struct GNode {
    id: String,
    op: u8,
    up: Option<usize>,
    subs: Vec<usize>,
    stack: Vec<String>,
    link: Vec<String>,
    precision: Option<f64>,
}

struct Graph {
    nodes: Vec<GNode>,
    map: HashMap<String, usize>,
    collections: usize,
}

impl Graph {
    fn new() -> Graph {
        let mut g = Graph {
            nodes: Vec::new(),
            map: HashMap::new(),
            collections: 0,
        };
        g.add(ROOT, OP_MODULE, None);
        g
    }

    fn add(&mut self, id: &str, op: u8, up: Option<usize>) -> usize {
        if let Some(&i) = self.map.get(id) {
            return i;
        }
        let i = self.nodes.len();
        self.nodes.push(GNode {
            id: id.to_string(),
            op,
            up: None,
            subs: Vec::new(),
            stack: Vec::new(),
            link: Vec::new(),
            precision: None,
        });
        self.map.insert(id.to_string(), i);
        self.set_up(i, up);
        i
    }

    /// msprobe's `add_upnode`: the first parent wins.
    fn set_up(&mut self, i: usize, up: Option<usize>) {
        if let Some(u) = up
            && u != i
            && self.nodes[i].up.is_none()
        {
            self.nodes[i].up = Some(u);
            self.nodes[u].subs.push(i);
        }
    }

    fn ancestors(&self, i: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = self.nodes[i].up;
        while let Some(a) = at {
            if out.len() > self.nodes.len() {
                return Vec::new(); // a cycle: msprobe gives up the same way
            }
            out.push(self.nodes[a].id.clone());
            at = self.nodes[a].up;
        }
        out.reverse();
        out
    }

    /// Post-order depth-first (children before their parent), msprobe's `get_sorted_nodes`.
    fn sorted(&self) -> Vec<usize> {
        let mut seen = vec![false; self.nodes.len()];
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![(0usize, false)];
        while let Some((n, done)) = stack.pop() {
            if seen[n] {
                continue;
            }
            if done {
                seen[n] = true;
                order.push(n);
            } else {
                stack.push((n, true));
                for &s in self.nodes[n].subs.iter().rev() {
                    if !seen[s] {
                        stack.push((s, false));
                    }
                }
            }
        }
        order
    }
}

/// One side: its construct.json, its dump.json call keys and its stack frames per call.
struct Side<'a> {
    construct: Option<&'a ConstructFile>,
    dump: &'a Dump,
    stacks: HashMap<String, Vec<String>>,
}

fn build_graph(side: &Side) -> Graph {
    let mut g = Graph::new();
    let create = |g: &mut Graph, name: &str, up: Option<usize>| -> usize {
        if let Some(&i) = g.map.get(name) {
            g.set_up(i, up);
            return i;
        }
        let i = g.add(name, node_op(name), up);
        let mut stack = side.stacks.get(name).cloned().unwrap_or_default();
        // A backward node without frames borrows its forward node's: `X.backward.N` takes
        // `X.forward.0`'s, an API's `X.backward` takes `X.forward`'s.
        let forward = match split_pass(name, "backward") {
            Some((p, _)) => Some(format!("{p}.forward.0")),
            None if name.ends_with(".backward") => Some(name.replace("backward", "forward")),
            None => None,
        };
        if stack.is_empty()
            && let Some(forward) = forward
        {
            let fwd = g.map.get(&forward).copied();
            stack = match fwd {
                Some(f) => g.nodes[f].stack.clone(),
                None => vec![NO_FORWARD.to_string()],
            };
        }
        g.nodes[i].stack = stack;
        i
    };
    let construct_nodes = side.construct.map(|c| c.nodes.as_slice()).unwrap_or(&[]);
    if construct_nodes.is_empty() {
        // L1: msprobe refuses it; the APIs go under the root in execution order.
        for c in &side.dump.calls {
            create(&mut g, &c.key, Some(0));
        }
    } else {
        let parents: HashMap<&str, Option<&str>> = construct_nodes
            .iter()
            .map(|n| (n.name.as_str(), n.parent.as_deref()))
            .collect();
        for n in construct_nodes {
            let up = match n.parent.as_deref() {
                Some(p) => Some(backward_inplace(&parents, &n.name, p)),
                None => backward_missing(&parents, &n.name),
            };
            let up_i = match up {
                Some(p) => create(&mut g, &p, None),
                None => 0,
            };
            create(&mut g, &n.name, Some(up_i));
        }
    }
    if !construct_nodes.is_empty() {
        collect_apis_between_modules(&mut g);
    }
    add_parameters_grad(&mut g, side.dump);
    g
}

/// msprobe's `_handle_backward_inplace`: a backward node whose parent's module path differs
/// from its own takes its forward twin's parent, turned backward.
fn backward_inplace(parents: &HashMap<&str, Option<&str>>, sub: &str, up: &str) -> String {
    if split_pass(sub, "backward").is_some() {
        let sub_split: Vec<&str> = sub.split('.').collect();
        let up_split: Vec<&str> = up.split('.').collect();
        if sub_split.len() < 5 || up_split.len() < 4 {
            return up.to_string();
        }
        let sub_prefix = sub_split[..sub_split.len() - 4].join(".");
        let up_prefix = up_split[..up_split.len() - 3].join(".");
        if sub_prefix != up_prefix
            && let Some(fwd) = backward_to_forward(sub)
            && let Some(fwd_up) = parents.get(fwd.as_str())
        {
            let Some(fwd_up) = fwd_up else {
                return String::new();
            };
            if let Some(new_up) = forward_to_backward(fwd_up)
                && parents.contains_key(new_up.as_str())
            {
                return new_up;
            }
        }
    }
    up.to_string()
}

/// msprobe's `_handle_backward_upnode_missing`: a backward node without a parent takes its
/// forward twin's parent, turned backward, when construct.json has it.
fn backward_missing(parents: &HashMap<&str, Option<&str>>, sub: &str) -> Option<String> {
    if let Some(fwd) = backward_to_forward(sub)
        && let Some(Some(fwd_up)) = parents.get(fwd.as_str())
        && let Some(new_up) = forward_to_backward(fwd_up)
        && parents.contains_key(new_up.as_str())
    {
        return Some(new_up);
    }
    if sub.ends_with(".backward")
        && let Some(Some(fwd_up)) = parents.get(sub.replace("backward", "forward").as_str())
    {
        let new_up = fwd_up.replace("forward", "backward");
        if parents.contains_key(new_up.as_str()) {
            return Some(new_up);
        }
    }
    None
}

fn collect_apis_between_modules(g: &mut Graph) {
    let top = std::mem::take(&mut g.nodes[0].subs);
    let mut out = Vec::with_capacity(top.len());
    let mut i = 0;
    while i < top.len() {
        if g.nodes[top[i]].op != OP_API {
            out.push(top[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < top.len() && g.nodes[top[i]].op == OP_API {
            i += 1;
        }
        let run = &top[start..i];
        if run.len() >= 2 {
            let id = format!("{COLLECTION}.{}", g.collections);
            g.collections += 1;
            let c = g.add(&id, OP_COLLECTION, None);
            g.nodes[c].subs = run.to_vec();
            for &n in run {
                g.nodes[n].up = Some(c);
            }
            g.nodes[c].up = Some(0);
            out.push(c);
        } else {
            out.extend_from_slice(run);
        }
    }
    g.nodes[0].subs = out;
}

/// Parameter-gradient entries of dump.json missing from the graph go under their module's last
/// backward node.
fn add_parameters_grad(g: &mut Graph, dump: &Dump) {
    let mut by_prefix: Vec<(String, Vec<String>)> = Vec::new();
    for c in &dump.calls {
        if g.map.contains_key(&c.key) {
            continue;
        }
        let Some(pos) = c.key.rfind(".parameters_grad") else {
            continue;
        };
        let suffix = &c.key[pos..];
        let rest = &suffix[".parameters_grad".len()..];
        let valid = rest.is_empty()
            || (rest.starts_with('.')
                && rest.len() > 1
                && rest[1..].bytes().all(|b| b.is_ascii_digit()));
        if !valid {
            continue;
        }
        let prefix = c.key[..pos].to_string();
        match by_prefix.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, v)) => v.push(suffix.to_string()),
            None => by_prefix.push((prefix, vec![suffix.to_string()])),
        }
    }
    for (prefix, suffixes) in by_prefix {
        let mut max = 0u64;
        for key in g.map.keys() {
            if let Some((p, n)) = split_pass(key, "backward")
                && p == prefix
                && let Ok(n) = n.parse::<u64>()
            {
                max = max.max(n);
            }
        }
        if let Some(&node) = g.map.get(&format!("{prefix}.backward.{max}")) {
            for s in suffixes {
                g.add(&format!("{prefix}{s}"), OP_MODULE, Some(node));
            }
        }
    }
}

fn py_json_list(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        pyrepr::write_json_str(s, &mut out);
    }
    out.push(']');
    out
}

fn py_json_obj(pairs: &[(String, String)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        pyrepr::write_json_str(k, &mut out);
        out.push_str(": ");
        out.push_str(v);
    }
    out.push('}');
    out
}

fn compare_columns(mode: Mode) -> Vec<&'static str> {
    let mut cols: Vec<&'static str> = match mode {
        Mode::Statistics => compare::table::STAT_DIFF_COLUMNS.to_vec(),
        Mode::Tensor => compare::tensor::METRIC_COLUMNS.to_vec(),
        Mode::Md5 => vec!["Result"],
    };
    if mode != Mode::Md5 {
        cols.extend(["Requires_grad Consistent", "Result", "Err_message"]);
    } else {
        cols.extend(["Requires_grad Consistent", "Err_message"]);
    }
    cols
}

/// A table cell as msprobe holds the compare figure before formatting.
fn cell_val(c: &Cell) -> PyVal {
    match c {
        Cell::None => PyVal::None,
        Cell::Str(s) => PyVal::Text(s.clone()),
        other => PyVal::Other(other.py_str()),
    }
}

/// input_data / output_data of a node: its dump.json entry as msprobe's graph builder formats
/// it, with the compare's figures of each parameter on a compared target node.
fn node_data(
    cmp: &Compared,
    data: Option<&JsonValue>,
    golden: Option<&JsonValue>,
    key: &str,
    compared: bool,
    row_of: &HashMap<&str, usize>,
    cols: &[(&'static str, usize)],
) -> (String, String) {
    let Some(entry) = data.and_then(|d| d.get(key)) else {
        return ("{}".into(), "{}".into());
    };
    let (mut ins, mut outs) = visdb_data::node_io(entry, key);
    if compared {
        // Statistics mode: msprobe's graph computes the differences from the two records
        // itself (Python numbers, not the table's text).
        let bench: Vec<(String, visdb_data::Dict)> =
            match (cmp.mode, golden.and_then(|g| g.get(key))) {
                (Mode::Statistics, Some(g)) => {
                    let (i, o) = visdb_data::node_io(g, key);
                    i.into_iter().chain(o).collect()
                }
                _ => Vec::new(),
            };
        for (name, d) in ins.iter_mut().chain(outs.iter_mut()) {
            let Some(&r) = row_of.get(name.as_str()) else {
                continue;
            };
            let row = &cmp.table.rows[r];
            let bench_name = row[1].py_str();
            let figures = bench
                .iter()
                .find(|(n, _)| *n == bench_name)
                .map(|(_, b)| visdb_data::summary_figures(d, b));
            for &(col, ci) in cols {
                let at = compare_columns(Mode::Statistics)[..8]
                    .iter()
                    .position(|c| *c == col);
                let v = match (&figures, at) {
                    (Some(f), Some(k)) => f[k].clone(),
                    _ => cell_val(&row[ci]),
                };
                d.set(col, v);
            }
        }
    }
    let md5 = cmp.mode == Mode::Md5;
    (
        visdb_data::format_records(&ins, key, md5),
        visdb_data::format_records(&outs, key, md5),
    )
}

/// The `data` object of a dump.json (each call's record), as msprobe's graph builder reads it.
pub fn dump_data(dump_json: &Path) -> Result<JsonValue> {
    let doc = dumpfmt::json::parse_file(dump_json)?;
    Ok(doc.get("data").cloned().unwrap_or(JsonValue::Null))
}

/// Step and rank of a dump.json from its directories (`stepN/rankM/dump.json`), else 0.
pub fn step_rank(dump_json: &Path) -> (i64, i64) {
    let num = |p: Option<&Path>, prefix: &str| -> Option<i64> {
        p?.file_name()?.to_str()?.strip_prefix(prefix)?.parse().ok()
    };
    let dir = dump_json.parent();
    let rank = num(dir, "rank").unwrap_or(0);
    let step = num(dir.and_then(Path::parent), "step")
        .or_else(|| num(dir, "step"))
        .unwrap_or(0);
    (step, rank)
}

fn stacks_of(dump: &Dump) -> HashMap<String, Vec<String>> {
    dump.calls
        .iter()
        .filter_map(|c| {
            let frames = match c.stack.as_ref()? {
                Cell::List(items) => items.iter().map(Cell::py_str).collect(),
                Cell::None => return None,
                other => vec![other.py_str()],
            };
            Some((c.key.clone(), frames))
        })
        .collect()
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |source| Error::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a golden stack.json beside its dump.json into per-call frames (the compare keeps only
/// the target's).
pub fn golden_stacks(dump_json: &Path) -> Result<HashMap<String, Vec<String>>> {
    let path = dump_json.with_file_name("stack.json");
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
        _ => {
            let f = dumpfmt::stack::StackFile::open_found(&path)?;
            let mut out = HashMap::new();
            for g in &f.groups {
                for n in &g.names {
                    // A later group naming the same entry wins, as in msprobe's reader.
                    out.insert(n.clone(), g.frames.clone());
                }
            }
            Ok(out)
        }
    }
}

/// Writes the vis.db (atomically: built beside the target, then renamed into place). `data`:
/// the target's and golden's dump.json `data` objects ([`dump_data`]), whose records become
/// the nodes' input_data/output_data.
pub fn write(
    input: &Input,
    path: &Path,
    step: i64,
    rank: i64,
    data: (&JsonValue, &JsonValue),
) -> Result<()> {
    write_with_stacks(input, path, step, rank, data, None)
}

/// [`write()`] with the golden's stack.json frames (the tb_stack rows of the golden graph).
pub fn write_with_stacks(
    input: &Input,
    path: &Path,
    step: i64,
    rank: i64,
    data: (&JsonValue, &JsonValue),
    golden_stacks: Option<HashMap<String, Vec<String>>>,
) -> Result<()> {
    let cmp = input.compared;
    let npu_side = Side {
        construct: input.target_construct,
        dump: &cmp.npu,
        stacks: stacks_of(&cmp.npu),
    };
    let bench_side = Side {
        construct: input.golden_construct,
        dump: &cmp.bench,
        stacks: golden_stacks.unwrap_or_default(),
    };
    let mut gn = build_graph(&npu_side);
    let mut gb = build_graph(&bench_side);

    // Rows per call key, for precision and figures.
    let table = &cmp.table;
    let mut rows_of_call: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut row_of_leaf: HashMap<&str, usize> = HashMap::new();
    for (r, &c) in table.call_index.iter().enumerate() {
        rows_of_call
            .entry(cmp.npu.calls[c].key.as_str())
            .or_default()
            .push(r);
    }
    let names: Vec<String> = table.rows.iter().map(|r| r[0].py_str()).collect();
    for (r, n) in names.iter().enumerate() {
        row_of_leaf.entry(n.as_str()).or_insert(r);
    }
    let unmatched = |r: usize| table.rows[r].get(1).is_none_or(|c| c.is_str("N/A"));

    // Pre-order matching from the root: same name, same ancestor names.
    let mut queue = std::collections::VecDeque::from([0usize]);
    let mut visited = vec![false; gn.nodes.len()];
    while let Some(n) = queue.pop_front() {
        if std::mem::replace(&mut visited[n], true) {
            continue;
        }
        let id = gn.nodes[n].id.clone();
        if let Some(&b) = gb.map.get(&id) {
            let anc = gn.ancestors(n);
            if anc == gb.ancestors(b) {
                let mut link = anc;
                link.push(id.clone());
                gb.nodes[b].link = link.clone();
                gn.nodes[n].link = link;
                let rows: Vec<usize> = rows_of_call
                    .get(id.as_str())
                    .map(|v| v.iter().copied().filter(|&r| !unmatched(r)).collect())
                    .unwrap_or_default();
                if !rows.is_empty() {
                    let worst = rows
                        .iter()
                        .map(|&r| table.verdicts[r].level)
                        .max()
                        .unwrap_or(Level::Pass);
                    let api = id.split('.').nth(1).unwrap_or("");
                    gn.nodes[n].precision = Some(if IGNORE_PRECISION.contains(&api) {
                        if cmp.mode == Mode::Md5 { 1.0 } else { 0.0 }
                    } else {
                        match worst {
                            Level::Pass => 0.0,
                            Level::Warning => 0.5,
                            Level::Error => 1.0,
                        }
                    });
                }
            }
        }
        queue.extend(gn.nodes[n].subs.iter().copied());
    }
    // An API collection takes the worst index of its members.
    for i in 0..gn.nodes.len() {
        if gn.nodes[i].op == OP_COLLECTION {
            let worst = gn.nodes[i]
                .subs
                .iter()
                .map(|&s| gn.nodes[s].precision.unwrap_or(0.0))
                .fold(0.0, f64::max);
            gn.nodes[i].precision = Some(worst);
        }
    }

    let cols: Vec<(&'static str, usize)> = compare_columns(cmp.mode)
        .into_iter()
        .filter_map(|c| table.header.iter().position(|h| h == c).map(|i| (c, i)))
        .collect();

    // Refused early (a planted link, a directory, a FIFO), and checked again before the rename.
    dumpfmt::outfile::check_target(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".numprobe-tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // As dumpfmt's writer: 0666 less the umask, like any file the CLI creates.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder
        .tempfile_in(path.parent().unwrap_or(Path::new(".")))
        .map_err(|e| Error::Format(format!("{}: {e}", path.display())))?;
    let tmp_path: PathBuf = tmp.path().to_path_buf();
    {
        let err = sql_err(path);
        let mut db = rusqlite::Connection::open(&tmp_path).map_err(&err)?;
        db.execute_batch(SCHEMA).map_err(&err)?;
        let tx = db.transaction().map_err(&err)?;
        {
            let mut ins_node = tx
                .prepare(
                    "INSERT INTO tb_nodes (id, graph_id, node_order, node_name, node_type, up_node, sub_nodes, precision_index, overflow_level, micro_step_id, matched_node_link, stack_id, parallel_merge_info, matched_distributed, modified, input_data, output_data, data_source, dump_data_dir, step, rank, is_distributed) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
                )
                .map_err(&err)?;
            let mut ins_stack = tx
                .prepare("INSERT INTO tb_stack (id, stack_info) VALUES (?1, ?2)")
                .map_err(&err)?;
            for (g, source, dump) in [(&gn, "NPU", data.0), (&gb, "Bench", data.1)] {
                let graph_id = format!("{source}_{step}_{rank}");
                // msprobe's tensor directory (a run-dependent path): not kept by the compare.
                let data_dir = Sql::Null;
                let mut stack_ids: HashMap<String, String> = HashMap::new();
                let mut stack_rows: Vec<(String, String)> = Vec::new();
                for (order, &n) in g.sorted().iter().enumerate() {
                    let node = &g.nodes[n];
                    let text = py_json_list(&node.stack);
                    let next = format!("{graph_id}_{}", stack_ids.len());
                    let stack_id = stack_ids
                        .entry(text.clone())
                        .or_insert_with(|| {
                            stack_rows.push((next.clone(), text));
                            next
                        })
                        .clone();
                    // Only a compared target node carries the compare's figures.
                    let compared =
                        source == "NPU" && node.precision.is_some() && node.op != OP_COLLECTION;
                    let (input_data, output_data) = node_data(
                        cmp,
                        Some(dump),
                        Some(data.1),
                        &node.id,
                        compared,
                        &row_of_leaf,
                        &cols,
                    );
                    let precision = match node.precision {
                        None => Sql::Null,
                        Some(p) if p.fract() == 0.0 => Sql::Integer(p as i64),
                        Some(p) => Sql::Real(p),
                    };
                    let subs = if node.subs.is_empty() {
                        String::new()
                    } else {
                        py_json_list(
                            &node
                                .subs
                                .iter()
                                .map(|&s| g.nodes[s].id.clone())
                                .collect::<Vec<_>>(),
                        )
                    };
                    ins_node
                        .execute(rusqlite::params![
                            format!("{graph_id}_{}", node.id),
                            graph_id,
                            order as i64,
                            node.id,
                            node.op.to_string(),
                            node.up.map(|u| g.nodes[u].id.clone()).unwrap_or_default(),
                            subs,
                            precision,
                            Sql::Null,
                            0i64,
                            py_json_list(&node.link),
                            stack_id,
                            "",
                            "{}",
                            0i64,
                            input_data,
                            output_data,
                            source,
                            data_dir.clone(),
                            step,
                            rank,
                            i64::from(node.id.starts_with("Distributed.")),
                        ])
                        .map_err(&err)?;
                }
                for (id, text) in stack_rows {
                    ins_stack
                        .execute(rusqlite::params![id, text])
                        .map_err(&err)?;
                }
            }
            let (task, tips) = match cmp.mode {
                Mode::Statistics => (
                    "summary",
                    vec![
                        ("Max diff", "NPU与标杆API统计信息比对，最大值的差值"),
                        ("Min diff", "NPU与标杆API统计信息比对，最小值的差值"),
                        ("Mean diff", "NPU与标杆API统计信息比对，平均值的差值"),
                        (
                            "L2norm diff",
                            "NPU与标杆API统计信息比对，2范数（平方根）的差值",
                        ),
                    ],
                ),
                Mode::Md5 => (
                    "md5",
                    vec![("md5", "数据MD5信息，用于比较两个数据信息是否完全一致")],
                ),
                Mode::Tensor => (
                    "all",
                    compare::tensor::METRIC_COLUMNS
                        .iter()
                        .map(|c| (*c, ""))
                        .collect(),
                ),
            };
            let tool_tip = py_json_obj(
                &tips
                    .iter()
                    .map(|(k, v)| {
                        let mut s = String::new();
                        pyrepr::write_json_str(v, &mut s);
                        (k.to_string(), s)
                    })
                    .collect::<Vec<_>>(),
            );
            tx.execute(
                "INSERT OR IGNORE INTO tb_config (id, graph_type, task, tool_tip, micro_steps, overflow_check, node_colors, rank_list, step_list) VALUES ('1', 'compare', ?1, ?2, 1, 0, ?3, ?4, ?5)",
                rusqlite::params![
                    task,
                    tool_tip,
                    node_colors(cmp.mode),
                    format!("[{rank}]"),
                    format!("[{step}]")
                ],
            )
            .map_err(&err)?;
        }
        tx.commit().map_err(&err)?;
        db.execute_batch(INDEXES).map_err(&err)?;
        db.close().map_err(|(_, e)| err(e))?;
    }
    dumpfmt::outfile::check_target(path)?;
    tmp.persist(path)
        .map_err(|e| Error::Format(format!("{}: {}", path.display(), e.error)))?;
    Ok(())
}

fn node_colors(mode: Mode) -> String {
    let desc = match mode {
        Mode::Statistics => [
            "此节点所有输入输出的统计量误差, 颜色越深代表调试侧与标杆侧的偏差越大",
            "此节点所有输入输出的统计量误差, 颜色越深代表调试侧与标杆侧的偏差越大",
        ],
        Mode::Tensor => [
            "此节点所有输入输出的 tensor 误差, 颜色越深代表调试侧与标杆侧的偏差越大",
            "此节点所有输入输出的 tensor 误差, 颜色越深代表调试侧与标杆侧的偏差越大",
        ],
        Mode::Md5 => [
            "与标杆相比, 此节点所有输入输出的md5值相同",
            "与标杆相比, 此节点任意输入输出的md5值不同",
        ],
    };
    let entry = |color: &str, value: &str, d: &str, level: &str| {
        let mut s = String::new();
        pyrepr::write_json_str(color, &mut s);
        s.push_str(": {\"value\": ");
        s.push_str(value);
        s.push_str(", \"description\": ");
        pyrepr::write_json_str(d, &mut s);
        s.push_str(", \"accuracy_level\": ");
        pyrepr::write_json_str(level, &mut s);
        s.push('}');
        s
    };
    format!(
        "{{{}, {}, {}, {}}}",
        entry("#FFFCF3", "[0, 0.3]", desc[0], "pass"),
        entry("#FFDC7F", "[0.3, 0.6]", desc[1], "warning"),
        entry("#FF704D", "[0.6, 1]", desc[1], "error"),
        entry("#C7C7C7", "[]", "比对过程中节点未匹配上", "unmatched node"),
    )
}

/// msprobe's tables, as `create_table_sql_from_dict` writes them.
const SCHEMA: &str = "PRAGMA journal_mode=DELETE;
CREATE TABLE IF NOT EXISTS tb_nodes (
    id TEXT PRIMARY KEY,
    graph_id TEXT NOT NULL,
    node_order INTEGER NOT NULL,
    node_name TEXT NOT NULL,
    node_type TEXT NOT NULL,
    up_node TEXT,
    sub_nodes TEXT,
    precision_index INTEGER,
    overflow_level TEXT,
    micro_step_id INTEGER NOT NULL,
    matched_node_link TEXT,
    stack_id TEXT,
    parallel_merge_info TEXT,
    matched_distributed TEXT,
    modified INTEGER NOT NULL,
    input_data TEXT,
    output_data TEXT,
    data_source TEXT,
    dump_data_dir TEXT,
    step INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    is_distributed INTEGER
);
CREATE TABLE IF NOT EXISTS tb_stack (
    id TEXT PRIMARY KEY,
    stack_info TEXT
);
CREATE TABLE IF NOT EXISTS tb_config (
    id TEXT PRIMARY KEY,
    graph_type TEXT NOT NULL,
    task TEXT,
    tool_tip TEXT,
    micro_steps INTEGER,
    overflow_check INTEGER,
    node_colors TEXT NOT NULL,
    rank_list TEXT NOT NULL,
    step_list TEXT NOT NULL
);";

const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS index1 ON tb_nodes (step, rank, data_source, up_node, node_order);
CREATE INDEX IF NOT EXISTS index2 ON tb_nodes (step, rank, data_source, node_name);
CREATE INDEX IF NOT EXISTS index3 ON tb_nodes (step, rank, data_source, node_order);
CREATE INDEX IF NOT EXISTS index4 ON tb_nodes (step, rank, node_order);
CREATE INDEX IF NOT EXISTS index5 ON tb_nodes (step, rank, micro_step_id, node_order);
CREATE INDEX IF NOT EXISTS index6 ON tb_nodes (step, rank, modified, matched_node_link);
CREATE INDEX IF NOT EXISTS index7 ON tb_nodes (is_distributed);
";
