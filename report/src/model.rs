//! One tree for both writers: the target's modules (construct.json) or, at L1, the call sites
//! its stack.json names, with every compared API as a leaf and its worst verdict.

use std::collections::HashMap;

use compare::Compared;
use compare::cell::Cell;
use compare::divergence::Summary;
use compare::judge::Level;
use compare::model::Mode;
use dumpfmt::construct::ConstructFile;

/// What a report is made from.
pub struct Input<'a> {
    pub compared: &'a Compared,
    pub summary: &'a Summary,
    /// The target's and golden's construct.json (absent or empty at L1).
    pub target_construct: Option<&'a ConstructFile>,
    pub golden_construct: Option<&'a ConstructFile>,
    /// How the two sides are named on the page (their dump.json paths).
    pub target_name: String,
    pub golden_name: String,
}

/// How an API or module compared: msprobe's three verdicts, or no partner at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Unmatched,
    Pass,
    Warning,
    Error,
}

impl Verdict {
    pub fn code(self) -> i8 {
        match self {
            Verdict::Unmatched => -1,
            Verdict::Pass => 0,
            Verdict::Warning => 1,
            Verdict::Error => 2,
        }
    }
}

/// One dump.json call of the target.
pub struct CallInfo {
    pub key: String,
    pub direction: String,
    /// Its rows in the result table, in table order.
    pub rows: Vec<usize>,
    /// Worst verdict of its rows; `None` when it has no row (nothing compared).
    pub verdict: Option<Verdict>,
    /// The golden call its rows were matched with.
    pub golden: Option<String>,
    /// Index into [`Model::stacks`].
    pub stack: Option<usize>,
    /// The plotted errors: statistics mode relative error of the norm and of the max, tensor
    /// mode 1 − cosine and the max relative error (worst over its outputs, else all rows).
    pub err: [Option<f64>; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// A construct.json module (or other non-API node such as `optimizer`).
    Module,
    /// A dump.json call (API, or a module dumped at mix level).
    Api,
    /// An L1 call site from stack.json.
    Site,
}

/// A tree node, in pre-order.
pub struct Item {
    pub label: String,
    pub kind: ItemKind,
    pub parent: Option<usize>,
    pub depth: usize,
    /// One past the last item of its subtree (pre-order).
    pub end: usize,
    pub call: Option<usize>,
    /// The golden node's path from its top-level ancestor, when the golden has this node.
    pub golden_link: Option<Vec<String>>,
    /// Worst verdict in the subtree and the APIs per verdict (unmatched, pass, warning, error).
    pub worst: Option<Verdict>,
    pub counts: [u32; 4],
}

/// What the tree's inner nodes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeKind {
    /// Modules of construct.json (L0/mix).
    Construct,
    /// Call sites named by stack.json (L1).
    Stack,
    /// Kernel scopes (`Default/network-WithLossCell/...`) of a kernel dump.
    Scope,
}

pub struct Model {
    pub mode: Mode,
    pub calls: Vec<CallInfo>,
    pub items: Vec<Item>,
    pub stacks: Vec<Vec<String>>,
    /// Where the tree comes from.
    pub tree: TreeKind,
    /// Item of each call.
    pub call_item: Vec<usize>,
}

fn level_verdict(l: Level) -> Verdict {
    match l {
        Level::Pass => Verdict::Pass,
        Level::Warning => Verdict::Warning,
        Level::Error => Verdict::Error,
    }
}

/// A table cell as a number: floats and ints, and texts such as `"0.5%"` or `"1e-3"`.
pub fn cell_number(c: &Cell) -> Option<f64> {
    match c {
        Cell::Float(f) => Some(*f),
        Cell::Int(i) => Some(*i as f64),
        Cell::Str(s) => {
            let t = s.trim();
            match t.strip_suffix('%') {
                Some(p) => p.trim().parse::<f64>().ok().map(|v| v / 100.0),
                None => t.parse::<f64>().ok(),
            }
        }
        _ => None,
    }
}

fn is_unmatched_row(row: &[Cell]) -> bool {
    row.get(1).is_none_or(|c| c.is_str("N/A"))
}

fn stack_frames(c: &Cell) -> Vec<String> {
    match c {
        Cell::List(items) => items.iter().map(Cell::py_str).collect(),
        Cell::None => Vec::new(),
        other => vec![other.py_str()],
    }
}

/// Whether a stack frame is the user's code rather than a library's (framework or tool).
fn user_frame(f: &str) -> bool {
    !(f.contains("site-packages") || f.contains("dist-packages") || f.contains("/lib/python"))
}

/// A stack frame (`File P, line N, in F, \n CODE`) as a short label: `CODE  (file:N)`.
pub fn frame_label(f: &str) -> String {
    let (head, code) = match f.split_once('\n') {
        Some((h, c)) => (h, c.trim()),
        None => (f, ""),
    };
    let mut parts = head.trim_start_matches("File ").split(", ");
    let file = parts.next().unwrap_or("");
    let file = file.rsplit('/').next().unwrap_or(file);
    let line = parts
        .next()
        .map(|l| l.trim_start_matches("line "))
        .unwrap_or("");
    if code.is_empty() {
        format!("{file}:{line}")
    } else {
        format!("{code}  ({file}:{line})")
    }
}

impl Model {
    pub fn build(input: &Input) -> Model {
        let cmp = input.compared;
        let table = &cmp.table;
        let mode = cmp.mode;
        let col = |name: &str| table.header.iter().position(|h| h == name);

        // Golden call of each golden leaf name, to link a row's Bench Name to its call.
        let mut bench_leaf: HashMap<&str, &str> = HashMap::new();
        for c in &cmp.bench.calls {
            for l in &c.leaves {
                bench_leaf.entry(l.name.as_str()).or_insert(c.key.as_str());
            }
        }
        let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); cmp.npu.calls.len()];
        for (r, &c) in table.call_index.iter().enumerate() {
            if let Some(v) = rows_of.get_mut(c) {
                v.push(r);
            }
        }
        let (c1, c2) = match mode {
            Mode::Statistics => (col("NormRelativeErr"), col("MaxRelativeErr")),
            Mode::Tensor => (col("Cosine"), col("MaxRelativeErr")),
            Mode::Md5 => (None, None),
        };
        let npu_index: HashMap<&str, usize> = cmp
            .npu
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| (c.key.as_str(), i))
            .collect();
        let mut stacks: Vec<Vec<String>> = Vec::new();
        let mut stack_ids: HashMap<Vec<String>, usize> = HashMap::new();
        let mut calls = Vec::with_capacity(cmp.npu.calls.len());
        for (ci, call) in cmp.npu.calls.iter().enumerate() {
            let rows = std::mem::take(&mut rows_of[ci]);
            let matched: Vec<usize> = rows
                .iter()
                .copied()
                .filter(|&r| !is_unmatched_row(&table.rows[r]))
                .collect();
            let verdict = if rows.is_empty() {
                None
            } else if matched.is_empty() {
                Some(Verdict::Unmatched)
            } else {
                rows.iter()
                    .map(|&r| level_verdict(table.verdicts[r].level))
                    .max()
            };
            let golden = matched.iter().find_map(|&r| {
                let b = table.rows[r][1].py_str();
                bench_leaf.get(b.as_str()).map(|k| k.to_string())
            });
            let outputs: Vec<usize> = matched
                .iter()
                .copied()
                .filter(|&r| table.rows[r][0].py_str().contains(".output."))
                .collect();
            let plotted = if outputs.is_empty() {
                &matched
            } else {
                &outputs
            };
            let worst = |c: Option<usize>, f: &dyn Fn(f64) -> f64| -> Option<f64> {
                let c = c?;
                plotted
                    .iter()
                    .filter_map(|&r| cell_number(&table.rows[r][c]))
                    .filter(|v| v.is_finite())
                    .map(f)
                    .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
            };
            let err = match mode {
                Mode::Tensor => [worst(c1, &|v| 1.0 - v), worst(c2, &|v| v.abs())],
                _ => [worst(c1, &|v| v.abs()), worst(c2, &|v| v.abs())],
            };
            // A backward API has no stack of its own: it shows its forward twin's.
            let own = call
                .stack
                .as_ref()
                .map(stack_frames)
                .filter(|f| !f.is_empty());
            let twin = || {
                let stem = call.key.strip_suffix(".backward")?;
                let fwd = npu_index.get(format!("{stem}.forward").as_str())?;
                cmp.npu.calls[*fwd].stack.as_ref().map(stack_frames)
            };
            let frames = own.or_else(|| {
                if call.direction == "backward" {
                    twin()
                } else {
                    None
                }
            });
            let stack = frames.and_then(|frames| {
                if frames.is_empty() {
                    return None;
                }
                let n = stacks.len();
                let id = *stack_ids.entry(frames.clone()).or_insert(n);
                if id == n {
                    stacks.push(frames);
                }
                Some(id)
            });
            calls.push(CallInfo {
                key: call.key.clone(),
                direction: call.direction.clone(),
                rows,
                verdict,
                golden,
                stack,
                err,
            });
        }

        let construct = input.target_construct.filter(|c| !c.nodes.is_empty());
        let golden_parents: Option<HashMap<&str, Option<&str>>> = input
            .golden_construct
            .filter(|c| !c.nodes.is_empty())
            .map(|g| {
                g.nodes
                    .iter()
                    .map(|n| (n.name.as_str(), n.parent.as_deref()))
                    .collect()
            });
        let golden_link = |name: &str| -> Option<Vec<String>> {
            let gp = golden_parents.as_ref()?;
            let mut parent = *gp.get(name)?;
            let mut path = vec![name.to_string()];
            while let Some(p) = parent {
                if path.len() > 10_000 {
                    break; // a cycle in a hostile construct.json
                }
                path.push(p.to_string());
                parent = gp.get(p).copied().flatten();
            }
            path.reverse();
            Some(path)
        };

        // Unordered nodes: (label, kind, parent, call).
        let mut nodes: Vec<(String, ItemKind, Option<usize>, Option<usize>)> = Vec::new();
        let call_by_key: HashMap<&str, usize> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| (c.key.as_str(), i))
            .collect();
        if let Some(cons) = construct {
            let mut node_of: HashMap<String, usize> = HashMap::new();
            let mut ensure = |name: &str,
                              nodes: &mut Vec<(String, ItemKind, Option<usize>, Option<usize>)>|
             -> usize {
                if let Some(&i) = node_of.get(name) {
                    return i;
                }
                let call = call_by_key.get(name).copied();
                let kind = if name.starts_with("Module.") || name.starts_with("Cell.") {
                    ItemKind::Module
                } else if call.is_some() {
                    ItemKind::Api
                } else {
                    ItemKind::Module
                };
                nodes.push((name.to_string(), kind, None, call));
                node_of.insert(name.to_string(), nodes.len() - 1);
                nodes.len() - 1
            };
            for n in &cons.nodes {
                let i = ensure(&n.name, &mut nodes);
                if let Some(p) = &n.parent {
                    let pi = ensure(p, &mut nodes);
                    if pi != i {
                        nodes[i].2 = Some(pi);
                    }
                }
            }
            // Parameter gradients are not in construct.json: like msprobe's graph, put each
            // under its module's last backward node.
            let in_construct: std::collections::HashSet<&str> = cons
                .nodes
                .iter()
                .flat_map(|n| std::iter::once(n.name.as_str()).chain(n.parent.as_deref()))
                .collect();
            let mut last_backward: HashMap<String, (u64, String)> = HashMap::new();
            for n in &cons.nodes {
                if let Some((head, num)) = n.name.rsplit_once('.')
                    && let Some(prefix) = head.strip_suffix(".backward")
                    && let Ok(num) = num.parse::<u64>()
                {
                    let e = last_backward
                        .entry(prefix.to_string())
                        .or_insert((num, n.name.clone()));
                    if num > e.0 {
                        *e = (num, n.name.clone());
                    }
                }
            }
            for (ci, c) in calls.iter().enumerate() {
                let known = in_construct.contains(c.key.as_str());
                let i = ensure(&c.key, &mut nodes);
                nodes[i].3 = Some(ci);
                if !known
                    && let Some(pos) = c.key.rfind(".parameters_grad")
                    && let Some((_, module)) = last_backward.get(&c.key[..pos])
                {
                    let m = ensure(module, &mut nodes);
                    if m != i {
                        nodes[i].2 = Some(m);
                    }
                }
            }
        } else {
            // L1: each API under the user-code call sites its stack names, outermost first.
            // Backward APIs go under a `backward` node, at the call sites of their forward
            // twin (whose stack they carry).
            let mut site_of: HashMap<(Option<usize>, String), usize> = HashMap::new();
            let mut backward_root = None;
            for (ci, c) in calls.iter().enumerate() {
                let mut parent = None;
                let stack = c.stack;
                if c.direction == "backward" {
                    let root = *backward_root.get_or_insert_with(|| {
                        nodes.push((
                            "backward pass (at the forward call sites)".to_string(),
                            ItemKind::Site,
                            None,
                            None,
                        ));
                        nodes.len() - 1
                    });
                    parent = Some(root);
                }
                if let Some(s) = stack {
                    let frames = &stacks[s];
                    let first_user = frames.iter().position(|f| user_frame(f));
                    if let Some(u0) = first_user {
                        // An API called straight from user code: that line is the API itself.
                        let from = if u0 == 0 { 1 } else { u0 };
                        let sites: Vec<&String> =
                            frames.iter().skip(from).filter(|f| user_frame(f)).collect();
                        for f in sites.into_iter().rev() {
                            let key = (parent, f.clone());
                            let next = match site_of.get(&key) {
                                Some(&i) => i,
                                None => {
                                    nodes.push((frame_label(f), ItemKind::Site, parent, None));
                                    site_of.insert(key, nodes.len() - 1);
                                    nodes.len() - 1
                                }
                            };
                            parent = Some(next);
                        }
                    }
                }
                nodes.push((c.key.clone(), ItemKind::Api, parent, Some(ci)));
            }
        }
        let (items, call_item) = assemble(&nodes, &calls, |n| {
            match (construct.is_some(), nodes[n].3) {
                (true, _) => golden_link(&nodes[n].0),
                (false, Some(c)) => calls[c].golden.clone().map(|g| vec![g]),
                (false, None) => None,
            }
        });
        Model {
            mode,
            calls,
            items,
            stacks,
            tree: if construct.is_some() {
                TreeKind::Construct
            } else {
                TreeKind::Stack
            },
            call_item,
        }
    }
}

/// Unordered tree nodes: label, kind, parent, call.
pub(crate) type Node = (String, ItemKind, Option<usize>, Option<usize>);

/// The nodes as items in pre-order (children in execution order: by the first call of their
/// subtree), with each subtree's worst verdict and counts, and the item of each call.
/// `golden_link` gives a node's matched golden path.
pub(crate) fn assemble(
    nodes: &[Node],
    calls: &[CallInfo],
    golden_link: impl Fn(usize) -> Option<Vec<String>>,
) -> (Vec<Item>, Vec<usize>) {
    let mut call_node: Vec<Option<usize>> = vec![None; calls.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(c) = n.3 {
            call_node[c] = Some(i);
        }
    }

    // Children in execution order: by the first call of their subtree.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut roots = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        match n.2 {
            Some(p) => children[p].push(i),
            None => roots.push(i),
        }
    }
    let mut first = vec![usize::MAX; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(c) = n.3 {
            // Walk up once per call; a parent chain is at most the node count long.
            let mut at = Some(i);
            let mut steps = 0;
            while let Some(a) = at {
                if first[a] <= c || steps > nodes.len() {
                    break;
                }
                first[a] = c;
                at = nodes[a].2;
                steps += 1;
            }
        }
    }
    let order_key = |i: &usize| (first[*i], *i);
    roots.sort_by_key(order_key);
    for ch in &mut children {
        ch.sort_by_key(order_key);
    }

    let mut items: Vec<Item> = Vec::with_capacity(nodes.len());
    let mut seen = vec![false; nodes.len()];
    let mut new_index = vec![usize::MAX; nodes.len()];
    // Iterative pre-order; `end` is filled when a node's subtree is done.
    let mut stack: Vec<(usize, usize, Option<usize>, bool)> =
        roots.iter().rev().map(|&r| (r, 0, None, false)).collect();
    while let Some((n, depth, parent, done)) = stack.pop() {
        if done {
            let at = new_index[n];
            items[at].end = items.len();
            continue;
        }
        if seen[n] {
            continue; // a cycle in construct.json: each node once
        }
        seen[n] = true;
        let at = items.len();
        new_index[n] = at;
        let (label, kind, _, call) = &nodes[n];
        let golden_link = golden_link(n);
        items.push(Item {
            label: label.clone(),
            kind: *kind,
            parent,
            depth,
            end: at + 1,
            call: *call,
            golden_link,
            worst: None,
            counts: [0; 4],
        });
        stack.push((n, depth, parent, true));
        for &ch in children[n].iter().rev() {
            stack.push((ch, depth + 1, Some(at), false));
        }
    }
    // Nodes on a construct.json cycle never reach a root: give them one each.
    for n in 0..nodes.len() {
        if !seen[n] {
            seen[n] = true;
            let at = items.len();
            new_index[n] = at;
            items.push(Item {
                label: nodes[n].0.clone(),
                kind: nodes[n].1,
                parent: None,
                depth: 0,
                end: at + 1,
                call: nodes[n].3,
                golden_link: None,
                worst: None,
                counts: [0; 4],
            });
        }
    }
    // Counts bottom-up (children come after their parent in pre-order).
    for i in (0..items.len()).rev() {
        if let Some(v) = items[i].call.and_then(|c| calls[c].verdict) {
            items[i].counts[(v.code() + 1) as usize] += 1;
            items[i].worst = items[i].worst.max(Some(v));
        }
        if let Some(p) = items[i].parent {
            let (w, counts) = (items[i].worst, items[i].counts);
            let pi = &mut items[p];
            pi.worst = pi.worst.max(w);
            for (sum, n) in pi.counts.iter_mut().zip(counts) {
                *sum += n;
            }
        }
    }
    let call_item = call_node
        .iter()
        .map(|n| n.map(|n| new_index[n]).unwrap_or(0))
        .collect();
    (items, call_item)
}
