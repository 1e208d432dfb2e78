//! The report of a kernel-dump compare ([`compare::kernel`]): one page per (rank, step) table.
//!
//! A kernel dump has no construct.json: the tree is the kernels' scopes
//! (`Default/network-WithLossCell/_backbone-Net/fc-Dense/MatMul-op0`), taken from the rank's
//! execution-order files (file names carry the scope with `/` turned into `_`, which cannot be
//! undone: `_loss_fn-MSELoss` holds a `_` of its own). A kernel is one occurrence of an op name;
//! kernels are in execution order as [`compare::kernel::KernelTable::first_divergence`] orders
//! them (the target's timestamps, kernels only the golden ran after the matched kernel before
//! them in the golden's order), and the first divergence is that function's.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use compare::cell::Cell;
use compare::kernel::{FirstDivergence, KernelCompareOutcome, KernelRow, KernelTable, Origin};
use compare::model::Mode;
use dumpfmt::kernel::Io;

use crate::Result;
use crate::html::{self, Divergence, Page, short_num};
use crate::model::{CallInfo, ItemKind, Model, Node, TreeKind, Verdict, assemble};

/// The group of kernels whose scope is not in any execution-order file.
const UNPLACED: &str = "(scope not in the execution order)";
/// The group of graph inputs and weights (`Parameter.*` files).
const PARAMETERS: &str = "Parameters";

/// What a kernel page is made from.
pub struct KernelInput<'a> {
    pub table: &'a KernelTable,
    /// The relative difference under which values count as equal (the compare's `--tolerance`).
    pub tolerance: f64,
    /// Full scopes of the rank's kernels (both dumps' execution-order files).
    pub scopes: &'a [String],
    pub target_name: String,
    pub golden_name: String,
    /// The run's index page, relative to this one: text and href.
    pub up: Option<(String, String)>,
}

/// A kernel: an op name's occurrence, with its rows in table order.
struct Kernel {
    op_type: String,
    op_name: String,
    occurrence: usize,
    rows: Vec<usize>,
}

fn side(r: &KernelRow) -> &compare::kernel::SideCells {
    r.npu
        .as_ref()
        .or(r.bench.as_ref())
        .expect("a kernel row has a file on one side at least")
}

/// Kernels of a table in execution order (the order `first_divergence` walks).
fn kernels_in_order(table: &KernelTable) -> Vec<Kernel> {
    let mut by_key: BTreeMap<(String, usize), Vec<usize>> = BTreeMap::new();
    for (i, r) in table.rows.iter().enumerate() {
        if r.npu.is_none() && r.bench.is_none() {
            continue;
        }
        by_key
            .entry((side(r).name.op_name.clone(), r.occurrence))
            .or_default()
            .push(i);
    }
    let first_ts = |rows: &[usize], npu: bool| {
        rows.iter()
            .filter_map(|&i| {
                let r = &table.rows[i];
                if npu {
                    r.npu.as_ref()
                } else {
                    r.bench.as_ref()
                }
            })
            .map(|s| s.name.timestamp)
            .min()
    };
    let order = |npu: bool| {
        let mut v: Vec<(u64, &(String, usize))> = by_key
            .iter()
            .filter_map(|(k, rows)| first_ts(rows, npu).map(|t| (t, k)))
            .collect();
        v.sort();
        v
    };
    let target_rank: HashMap<&(String, usize), usize> = order(true)
        .into_iter()
        .enumerate()
        .map(|(i, (_, k))| (k, 2 * i + 1))
        .collect();
    let mut rank = target_rank.clone();
    let mut last = 0usize;
    for (_, k) in order(false) {
        match target_rank.get(k) {
            Some(r) => last = *r,
            None => {
                rank.insert(k, last + 1);
            }
        }
    }
    let mut keys: Vec<&(String, usize)> = by_key.keys().collect();
    keys.sort_by_key(|k| (rank.get(k).copied().unwrap_or(usize::MAX), *k));
    keys.into_iter()
        .map(|k| {
            let rows = by_key[k].clone();
            Kernel {
                op_type: side(&table.rows[rows[0]]).name.op_type.clone(),
                op_name: k.0.clone(),
                occurrence: k.1,
                rows,
            }
        })
        .collect()
}

/// Whether a row's two sides hold different values (numprobe's test, as the first divergence
/// applies it).
fn differs(r: &KernelRow, tolerance: f64) -> bool {
    r.read_error.is_some()
        || match r.value_diff {
            Some(d) => d > tolerance,
            None => r.npu.is_some() && r.bench.is_some(),
        }
}

fn io_of(r: &KernelRow) -> Io {
    side(r).name.io
}

/// A row's verdict: msprobe's `No` (or an unreadable file) is an error, `Yes` a pass; a pair
/// msprobe does not judge (scalars, different dtypes or shapes) is a warning when its values
/// differ, a pass when they agree. A row with one side only is judged by its kernel (unmatched).
fn row_level(r: &KernelRow, tolerance: f64) -> u8 {
    if r.is_error() {
        2
    } else if r.npu.is_none() || r.bench.is_none() || r.accuracy.as_deref() == Some("Yes") {
        0
    } else if differs(r, tolerance) {
        1
    } else {
        0
    }
}

fn row_result(r: &KernelRow, level: u8) -> String {
    match (&r.npu, &r.bench) {
        (None, _) => "golden only".into(),
        (_, None) => "target only".into(),
        _ if r.read_error.is_some() => "unreadable".into(),
        _ => match r.accuracy.as_deref() {
            Some("Yes") => "pass".into(),
            Some("No") => "error".into(),
            _ if level == 1 => "values differ (not judged)".into(),
            _ => "not judged".into(),
        },
    }
}

/// The page's text of a kernel table cell: numbers as numbers, empty as None.
fn text_cell(t: &str) -> Cell {
    if t.is_empty() {
        return Cell::None;
    }
    match t.trim().parse::<f64>() {
        Ok(v) if !t.contains(['[', ',']) => Cell::Float(v),
        _ => Cell::Str(t.to_string()),
    }
}

/// Full scopes indexed for [`scope_path`]: each scope and each enclosing scope by its
/// `/` → `_` form.
struct Scopes<'a> {
    exact: HashMap<String, &'a str>,
    parents: HashMap<String, &'a str>,
}

impl<'a> Scopes<'a> {
    fn new(scopes: &'a [String]) -> Scopes<'a> {
        let mut exact = HashMap::new();
        let mut parents = HashMap::new();
        for s in scopes {
            exact.insert(s.replace('/', "_"), s.as_str());
            let mut at = s.as_str();
            while let Some((p, _)) = at.rsplit_once('/') {
                parents.insert(p.replace('/', "_"), p);
                at = p;
            }
        }
        Scopes { exact, parents }
    }
}

/// Scope path of a kernel: the execution-order entry whose `/` → `_` form is its op name, else
/// (MindSpore may number an op differently in the execution order than in the file name) the
/// longest enclosing scope its op name starts with, then the rest of the name.
fn scope_path(k: &Kernel, scopes: &Scopes) -> Vec<String> {
    if let Some(s) = scopes.exact.get(&k.op_name) {
        return s.split('/').map(str::to_string).collect();
    }
    let mut cut = k.op_name.len();
    while let Some(i) = k.op_name[..cut].rfind('_') {
        if let Some(p) = scopes.parents.get(&k.op_name[..i]) {
            let mut path: Vec<String> = p.split('/').map(str::to_string).collect();
            path.push(k.op_name[i + 1..].to_string());
            return path;
        }
        cut = i;
    }
    if k.op_type == "Parameter" {
        return vec![PARAMETERS.to_string(), k.op_name.clone()];
    }
    vec![UNPLACED.to_string(), k.op_name.clone()]
}

fn call_key(path: &[String], occurrence: usize) -> String {
    let name = path.join("/");
    if occurrence > 0 {
        format!("{name} #{occurrence}")
    } else {
        name
    }
}

fn origin_text(why: Origin) -> &'static str {
    match why {
        Origin::Produced => "its outputs differ while its inputs agree",
        Origin::OnlyInTarget => "a kernel only the target runs, before the first differing one",
        Origin::OnlyInGolden => "a kernel only the golden runs, before the first differing one",
        Origin::GraphInput => "a graph input that differs, feeding the first differing kernel",
        Origin::InputsDiffer => "the first kernel whose outputs differ (its inputs differ too)",
    }
}

/// The model and page rows of one kernel table.
pub struct KernelReport {
    pub model: Model,
    pub header: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    pub levels: Vec<u8>,
    pub divergence: Divergence,
    pub counts: (usize, usize, [usize; 3], [usize; 3]),
    /// The first divergence as [`KernelTable::first_divergence`] gives it.
    pub first: Option<FirstDivergence>,
}

impl KernelReport {
    pub fn build(input: &KernelInput) -> KernelReport {
        let table = input.table;
        let tol = input.tolerance;
        let scopes = Scopes::new(input.scopes);
        let kernels = kernels_in_order(table);
        let cells = table.cells(&|p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let mut header: Vec<String> = compare::kernel::COLUMNS
            .iter()
            .map(|c| c.to_string())
            .collect();
        header.push("max|target-golden|/max|golden|".into());
        header.push("Result".into());

        let mut rows = Vec::with_capacity(table.rows.len());
        let mut levels = Vec::with_capacity(table.rows.len());
        let mut calls = Vec::with_capacity(kernels.len());
        let mut paths = Vec::with_capacity(kernels.len());
        for k in &kernels {
            let path = scope_path(k, &scopes);
            let key = call_key(&path, k.occurrence);
            let mut call_rows = Vec::with_capacity(k.rows.len());
            let (mut diff, mut one_minus_cos) = (None::<f64>, None::<f64>);
            let outputs = k.rows.iter().any(|&i| io_of(&table.rows[i]) == Io::Output);
            let mut worst = None;
            for &i in &k.rows {
                let r = &table.rows[i];
                let level = row_level(r, tol);
                let name = format!("{key}.{}.{}", io_of(r).as_str(), side(r).name.slot);
                let mut row: Vec<Cell> = Vec::with_capacity(header.len());
                row.push(Cell::Str(if r.npu.is_some() {
                    name.clone()
                } else {
                    "N/A".into()
                }));
                row.push(Cell::Str(if r.bench.is_some() {
                    name
                } else {
                    "N/A".into()
                }));
                row.extend(cells[i][2..].iter().map(|t| text_cell(t)));
                row.push(r.value_diff.map_or(Cell::None, Cell::Float));
                row.push(Cell::Str(row_result(r, level)));
                call_rows.push(rows.len());
                rows.push(row);
                levels.push(level);
                if r.npu.is_some() && r.bench.is_some() {
                    worst = worst.max(Some(level));
                }
                // Plotted: the worst output (all rows when the kernel has no output file).
                if outputs && io_of(r) != Io::Output {
                    continue;
                }
                let max = |a: Option<f64>, v: f64| Some(a.map_or(v, |a| a.max(v)));
                if let Some(d) = r.value_diff.filter(|d| d.is_finite()) {
                    diff = max(diff, d);
                }
                if let Some(Cell::Float(c)) = r.metrics.as_ref().map(|m| &m[0])
                    && c.is_finite()
                {
                    one_minus_cos = max(one_minus_cos, 1.0 - c);
                }
            }
            let both = k.rows.iter().any(|&i| table.rows[i].bench.is_some())
                && k.rows.iter().any(|&i| table.rows[i].npu.is_some());
            let verdict = if both {
                Some(match worst {
                    Some(2) => Verdict::Error,
                    Some(1) => Verdict::Warning,
                    Some(_) => Verdict::Pass,
                    None => Verdict::Unmatched,
                })
            } else {
                Some(Verdict::Unmatched)
            };
            // Backward kernels (MindSpore names the gradient graph `Gradients/...`) are shaded.
            let direction = if path.first().is_some_and(|p| p == "Gradients") {
                "backward"
            } else {
                "forward"
            };
            calls.push(CallInfo {
                key: key.clone(),
                direction: direction.into(),
                rows: call_rows,
                verdict,
                golden: both.then(|| key.clone()),
                stack: None,
                err: [diff, one_minus_cos],
            });
            paths.push((path, both));
        }

        // The tree: one node per scope prefix, the kernel as the leaf.
        let mut nodes: Vec<Node> = Vec::new();
        let mut scope_node: HashMap<(Option<usize>, String), usize> = HashMap::new();
        let mut golden_of_node: Vec<Option<Vec<String>>> = Vec::new();
        for (ci, (path, both)) in paths.iter().enumerate() {
            let mut parent = None;
            for (d, seg) in path[..path.len() - 1].iter().enumerate() {
                let next = *scope_node.entry((parent, seg.clone())).or_insert_with(|| {
                    nodes.push((seg.clone(), ItemKind::Module, parent, None));
                    golden_of_node.push(None);
                    nodes.len() - 1
                });
                if *both {
                    golden_of_node[next] = Some(path[..=d].to_vec());
                }
                parent = Some(next);
            }
            let k = &kernels[ci];
            let leaf = path.last().cloned().unwrap_or_default();
            let label = if k.occurrence > 0 {
                format!("{leaf} #{}", k.occurrence)
            } else {
                leaf
            };
            nodes.push((label, ItemKind::Api, parent, Some(ci)));
            golden_of_node.push(both.then(|| path.clone()));
        }
        let (items, call_item) = assemble(&nodes, &calls, |n| golden_of_node[n].clone());

        // The first divergence, and the other kernels that start or only carry differences.
        let first = table.first_divergence(tol);
        let producer = first.as_ref().and_then(|f| {
            let c = kernels
                .iter()
                .position(|k| k.op_name == f.op_name && k.occurrence == f.occurrence)?;
            let figures = kernels[c]
                .rows
                .iter()
                .map(|&i| {
                    let r = &table.rows[i];
                    let what = format!("{}.{}", io_of(r).as_str(), side(r).name.slot);
                    match (&r.npu, &r.bench, r.value_diff) {
                        (None, _, _) => format!("{what}: golden only"),
                        (_, None, _) => format!("{what}: target only"),
                        (_, _, Some(d)) => format!(
                            "{what}: max|target−golden|/max|golden| {}",
                            if d.is_finite() {
                                short_num(d)
                            } else {
                                "inf (NaN or inf at different places)".into()
                            }
                        ),
                        (_, _, None) => format!("{what}: element counts differ"),
                    }
                })
                .collect();
            let mut why = origin_text(f.why).to_string();
            if f.differing_after > 0 {
                why.push_str(&format!(
                    "; {} later kernel(s) differ too",
                    f.differing_after
                ));
            }
            Some((c, why, figures))
        });
        let (mut propagators, mut others) = (Vec::new(), Vec::new());
        if let Some((p, _, _)) = &producer {
            // Every other kernel whose outputs differ (a graph input, dumped at the end of the
            // step, comes after the kernels it feeds).
            for (c, k) in kernels.iter().enumerate().filter(|(c, _)| c != p) {
                let rows: Vec<&KernelRow> = k.rows.iter().map(|&i| &table.rows[i]).collect();
                let out_differs = rows.iter().any(|r| {
                    r.npu.is_some()
                        && r.bench.is_some()
                        && io_of(r) == Io::Output
                        && differs(r, tol)
                });
                if !out_differs {
                    continue;
                }
                let in_differs = rows.iter().any(|r| {
                    io_of(r) == Io::Input
                        && (differs(r, tol) || r.npu.is_none() || r.bench.is_none())
                });
                // A weight dumped at the end of the step (a `Parameter` file that is not a
                // graph input) holds the optimizer's update: it carries the difference.
                let weight = k.op_type == "Parameter" && !k.op_name.starts_with("inputs");
                if in_differs || weight {
                    propagators.push(calls[c].key.clone());
                } else {
                    others.push(calls[c].key.clone());
                }
            }
        }
        let mut row_levels = [0usize; 3];
        for &l in &levels {
            row_levels[l as usize] += 1;
        }
        let mut api_levels = [0usize; 3];
        for c in &calls {
            match c.verdict {
                Some(Verdict::Pass) => api_levels[0] += 1,
                Some(Verdict::Warning) => api_levels[1] += 1,
                Some(Verdict::Error) => api_levels[2] += 1,
                _ => {}
            }
        }
        let unmatched = table
            .rows
            .iter()
            .filter(|r| r.npu.is_none() || r.bench.is_none())
            .count();
        let divergence = Divergence {
            producer,
            propagators,
            others,
        };
        KernelReport {
            model: Model {
                mode: Mode::Tensor,
                calls,
                items,
                stacks: Vec::new(),
                tree: TreeKind::Scope,
                call_item,
            },
            header,
            rows,
            levels,
            divergence,
            counts: (table.rows.len(), unmatched, row_levels, api_levels),
            first,
        }
    }

    /// The page (borrowing the report's rows).
    pub fn page<'a>(&'a self, input: &'a KernelInput) -> Page<'a> {
        let mut lines = vec![
            r#"[0.01,1,"1 − cosine 0.01 (cosine 0.99: msprobe's No when MaxAbsErr > 0.001)"]"#
                .to_string(),
            r#"[0.1,2,"1 − cosine 0.1 (cosine 0.9: msprobe's No)"]"#.to_string(),
        ];
        if input.tolerance > 0.0 {
            lines.push(format!(
                "[{},1,\"--tolerance {}\"]",
                input.tolerance,
                short_num(input.tolerance)
            ));
        }
        Page {
            target_name: &input.target_name,
            golden_name: &input.golden_name,
            header: &self.header,
            rows: &self.rows,
            levels: self.levels.clone(),
            divergence: Divergence {
                producer: self.divergence.producer.clone(),
                propagators: self.divergence.propagators.clone(),
                others: self.divergence.others.clone(),
            },
            counts: self.counts,
            thresholds: Some(format!(
                "{{\"y1\":\"max |target − golden| / max |golden| (numprobe)\",\"y2\":\"1 − cosine (msprobe)\",\"lines\":[{}]}}",
                lines.join(",")
            )),
            up: input.up.clone(),
        }
    }
}

/// Writes one kernel table's page to `path`; returns the table's first divergence.
pub fn write(input: &KernelInput, path: &Path) -> Result<Option<FirstDivergence>> {
    let report = KernelReport::build(input);
    html::write_page(&report.model, &report.page(input), path)?;
    Ok(report.first)
}

/// Every kernel scope in `rank`'s execution-order files of a kernel dump (all graphs).
pub fn rank_scopes(dump: &dumpfmt::kernel::KernelDump, rank: u32) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for r in dump.ranks.iter().filter(|r| r.rank == rank) {
        let mut graphs: Vec<u32> = r.steps.iter().map(|s| s.graph_id).collect();
        graphs.sort_unstable();
        graphs.dedup();
        for g in graphs {
            if let Some(order) = r.execution_order(g)? {
                out.extend(order);
            }
        }
    }
    Ok(out)
}

/// What [`write_beside`] wrote.
pub struct KernelWritten {
    /// `report.html`: the page of the only table, or the index of several.
    pub html: PathBuf,
    /// Each table's page (rank, step, path); the same as `html` for a single table.
    pub tables: Vec<(u32, u64, PathBuf)>,
}

/// Writes the pages of a kernel compare into `out_dir`: `report.html` for a single table; for
/// several, `report_rank{R}_step{S}.html` each beside its CSV and `report.html` listing them.
pub fn write_beside(
    outcome: &KernelCompareOutcome,
    target: &Path,
    golden: &Path,
    out_dir: &Path,
    tolerance: f64,
) -> Result<KernelWritten> {
    let t = dumpfmt::kernel::open(target)?;
    let g = dumpfmt::kernel::open(golden)?;
    let single = outcome.tables.len() == 1;
    let index_path = out_dir.join("report.html");
    let mut written = Vec::new();
    let mut entries = Vec::new();
    for (table, csv) in &outcome.tables {
        let mut scopes = rank_scopes(&t, table.rank)?;
        scopes.extend(rank_scopes(&g, table.rank)?);
        let name = if single {
            "report.html".to_string()
        } else {
            format!("report_rank{}_step{}.html", table.rank, table.step)
        };
        let input = KernelInput {
            table,
            tolerance,
            scopes: &scopes,
            target_name: format!(
                "{} (rank {}, step {})",
                target.display(),
                table.rank,
                table.step
            ),
            golden_name: format!(
                "{} (rank {}, step {})",
                golden.display(),
                table.rank,
                table.step
            ),
            up: (!single).then(|| ("← all tables".to_string(), "report.html".to_string())),
        };
        let report = KernelReport::build(&input);
        let path = out_dir.join(&name);
        html::write_page(&report.model, &report.page(&input), &path)?;
        entries.push(crate::index::Entry {
            step: Some(table.step),
            rank: table.rank as u64,
            state: crate::index::State::Compared {
                rows: table.rows.len(),
                levels: report.counts.2,
            },
            first: report.first.as_ref().map(|f| f.to_string()),
            origin: false,
            report: Some(name),
            table: csv.file_name().map(|n| n.to_string_lossy().into_owned()),
        });
        written.push((table.rank, table.step, path));
    }
    if !single {
        let index = crate::index::Index {
            title: "numprobe compare: MindSpore kernel dumps".into(),
            target: target.display().to_string(),
            golden: golden.display().to_string(),
            lines: Vec::new(),
            entries,
        };
        crate::index::write(&index, &index_path)?;
    }
    Ok(KernelWritten {
        html: index_path,
        tables: written,
    })
}
