//! The result table: columns per mode, cells typed as msprobe's DataFrame holds them, the
//! judgement, and the CSV text pandas writes.

use rayon::prelude::*;

use crate::cell::{Cell, render_column};
use crate::judge::{Columns, Level, RowVerdict, judge_group};
use crate::matching::Pair;
use crate::model::{Dump, Leaf, Mode};
use crate::stats_diff::{PandasCompat, column_is_int, stat_diff};
use crate::tensor::gpu::{Backend, Engine};
use crate::tensor::{METRIC_COLUMNS, NoMetrics, Side, TensorResult, compare_sides_on};

const BASIC: [&str; 8] = [
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "NPU Requires_grad",
    "Bench Requires_grad",
];
/// The statistics-mode difference columns, in msprobe's order (API and kernel tables alike).
pub const STAT_DIFF_COLUMNS: [&str; 8] = [
    "Max diff",
    "Min diff",
    "Mean diff",
    "L2norm diff",
    "MaxRelativeErr",
    "MinRelativeErr",
    "MeanRelativeErr",
    "NormRelativeErr",
];
const STATS: [&str; 8] = [
    "NPU max",
    "NPU min",
    "NPU mean",
    "NPU l2norm",
    "Bench max",
    "Bench min",
    "Bench mean",
    "Bench l2norm",
];

/// The header msprobe writes for a mode.
pub fn header(mode: Mode, stack: bool) -> Vec<String> {
    let mut h: Vec<&str> = BASIC.to_vec();
    match mode {
        Mode::Statistics => {
            h.extend(STAT_DIFF_COLUMNS);
            h.extend(STATS);
        }
        Mode::Tensor => {
            h.extend(METRIC_COLUMNS);
            h.extend(STATS);
        }
        Mode::Md5 => h.extend(["NPU MD5", "BENCH MD5"]),
    }
    h.extend(["Requires_grad Consistent", "Result", "Err_message"]);
    if stack {
        h.push("NPU_Stack_Info");
    }
    if mode == Mode::Tensor {
        h.push("Data_name");
    }
    h.into_iter().map(String::from).collect()
}

/// Where tensor-mode rows get their tensors from.
pub trait TensorSource: Sync {
    /// Loads the tensor file `data_name` of the target (`npu == true`) or golden dump: read
    /// with dumpfmt (a memory map, whose pages are released once compared) or built in memory
    /// with [`dumpfmt::tensor::Tensor::from_vec`]. The error text lands in the row's message.
    fn load(&self, npu: bool, data_name: &str) -> Result<dumpfmt::tensor::Tensor, String>;

    /// [`TensorSource::load`] without gathering a strided view: what the metrics read
    /// ([`dumpfmt::tensor::open_tensor`]: a sliced, transposed or broadcast `.pt` view is read
    /// through its strides a chunk at a time, never materialised). By default, `load`'s tensor.
    fn open(&self, npu: bool, data_name: &str) -> Result<dumpfmt::pt::Stored, String> {
        self.load(npu, data_name).map(dumpfmt::pt::Stored::Dense)
    }
}

/// Progress of the tensor-mode rows (drive a progress bar with it); `()` ignores it.
pub trait Progress: Sync {
    /// Called once before the tensor rows are compared, with their number.
    fn start(&self, _rows: usize) {}
    /// Called after each finished tensor row (from worker threads).
    fn row(&self) {}
}

impl Progress for () {}

/// Finished tensor rows kept across runs, so an interrupted compare can resume.
pub trait RowCache: Sync {
    fn get(&self, npu_data_name: &str, bench_data_name: &str) -> Option<TensorResult>;
    fn put(&self, npu_data_name: &str, bench_data_name: &str, result: &TensorResult);
}

/// The finished table, before rendering.
pub struct Table {
    pub mode: Mode,
    pub header: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// The dump key of each row's NPU call (msprobe's `api_origin_name`).
    pub group: Vec<String>,
    /// Index of each row's NPU call in the NPU dump.
    pub call_index: Vec<usize>,
    pub verdicts: Vec<RowVerdict>,
    /// Tensor mode: the pre-judgement metric messages (msprobe overwrites them in the file).
    pub metric_messages: Vec<String>,
}

fn na() -> Cell {
    Cell::s("N/A")
}

fn fill_na(c: &Cell) -> Cell {
    match c {
        Cell::None => na(),
        other => other.clone(),
    }
}

/// Computes the metrics of one tensor-mode row on `engine`.
pub fn tensor_row(
    npu: &Leaf,
    bench: Option<&Leaf>,
    source: &dyn TensorSource,
    engine: &Engine,
) -> TensorResult {
    if npu.data_name == "-1" {
        return TensorResult::no_metrics(NoMetrics::NpuNoData, "");
    }
    let Some(bench) = bench else {
        return TensorResult::no_metrics(NoMetrics::Unmatched, "");
    };
    if bench.data_name == "-1" {
        return TensorResult::no_metrics(NoMetrics::BenchNoData, "");
    }
    let n = match source.open(true, &npu.data_name) {
        Ok(t) => t,
        Err(e) => return TensorResult::read_failed(&npu.data_name, &format!("target: {e}")),
    };
    let b = match source.open(false, &bench.data_name) {
        Ok(t) => t,
        Err(e) => return TensorResult::read_failed(&bench.data_name, &format!("golden: {e}")),
    };
    // Checked here, not in the loader, so that the message names the file and is not
    // msprobe's "not found or read failed" (the file was read).
    for (side, leaf, t) in [("target", npu, &n), ("golden", bench, &b)] {
        if !crate::tensor::is_compared(t.dtype()) {
            return TensorResult::uncompared_dtype(side, &leaf.data_name, t.dtype());
        }
    }
    compare_sides_on(&Side::stored(&n), &Side::stored(&b), engine)
}

/// How the table is filled beyond the pairing.
#[derive(Clone, Copy, Default)]
pub struct TableOptions<'a> {
    /// Loads tensor files (tensor mode); without one every tensor row is `unsupported`.
    pub source: Option<&'a dyn TensorSource>,
    /// Finished rows of an interrupted run, and where new ones are recorded.
    pub cache: Option<&'a dyn RowCache>,
    pub pandas: PandasCompat,
    /// Where the tensor metrics run; a GPU is opened on first need and closed when the table
    /// is built.
    pub backend: Backend,
    /// The stats-gpu engine whose GPU the metrics use (its adapter choice); `None`: one with
    /// the default choice, made for this table.
    pub stats_engine: Option<&'a stats_gpu::Engine<'a>>,
}

/// Builds the table for matched pairs, reporting tensor-row progress to `progress`.
pub fn build(
    mode: Mode,
    npu: &Dump,
    bench: &Dump,
    pairs: &[Pair],
    stack: bool,
    topts: &TableOptions,
    progress: &dyn Progress,
) -> Table {
    let header = header(mode, stack);
    let (source, cache, compat) = (topts.source, topts.cache, topts.pandas);
    let leaf_n = |p: &Pair| &npu.calls[p.npu.call].leaves[p.npu.leaf];
    let leaf_b = |p: &Pair| p.bench.map(|b| &bench.calls[b.call].leaves[b.leaf]);

    let tensor_results: Vec<TensorResult> = if mode == Mode::Tensor {
        match source {
            Some(src) => {
                let engine = match topts.stats_engine {
                    Some(stats) => Engine::with_stats_engine(topts.backend, stats),
                    None => Engine::new(topts.backend),
                };
                progress.start(pairs.len());
                pairs
                    .par_iter()
                    .map(|p| {
                        let (n, b) = (leaf_n(p), leaf_b(p));
                        let key = b.map(|b| (n.data_name.as_str(), b.data_name.as_str()));
                        let cached = match (cache, key) {
                            (Some(c), Some((kn, kb))) => c.get(kn, kb),
                            _ => None,
                        };
                        let r = cached.unwrap_or_else(|| {
                            let r = tensor_row(n, b, src, &engine);
                            if let (Some(c), Some((kn, kb))) = (cache, key) {
                                c.put(kn, kb, &r);
                            }
                            r
                        });
                        progress.row();
                        r
                    })
                    .collect()
            }
            None => pairs
                .iter()
                .map(|p| match (leaf_n(p), leaf_b(p)) {
                    (n, _) if n.data_name == "-1" => {
                        TensorResult::no_metrics(NoMetrics::NpuNoData, "")
                    }
                    (_, None) => TensorResult::no_metrics(NoMetrics::Unmatched, ""),
                    (_, Some(b)) if b.data_name == "-1" => {
                        TensorResult::no_metrics(NoMetrics::BenchNoData, "")
                    }
                    (n, Some(_)) => {
                        TensorResult::read_failed(&n.data_name, "(no tensor source given)")
                    }
                })
                .collect(),
        }
    } else {
        vec![]
    };

    // Statistic columns first: their printed form feeds the statistics diff.
    let stat_cells: Vec<[Cell; 8]> = pairs
        .iter()
        .map(|p| {
            let n = leaf_n(p);
            let b = leaf_b(p);
            std::array::from_fn(|i| {
                if i < 4 {
                    n.stats[i].clone()
                } else {
                    b.map(|b| b.stats[i - 4].clone()).unwrap_or_else(na)
                }
            })
        })
        .collect();
    let stat_texts: Vec<Vec<String>> = (0..8)
        .map(|c| render_column(&stat_cells.iter().map(|r| &r[c]).collect::<Vec<_>>()))
        .collect();

    let mut rows = Vec::with_capacity(pairs.len());
    let mut group = Vec::with_capacity(pairs.len());
    let mut call_index = Vec::with_capacity(pairs.len());
    let mut metric_messages = Vec::new();
    let mut prev_call: Option<usize> = None;
    for (i, p) in pairs.iter().enumerate() {
        let n = leaf_n(p);
        let b = leaf_b(p);
        let call = &npu.calls[p.npu.call];
        let bn = |f: &dyn Fn(&Leaf) -> Cell| b.map(f).unwrap_or_else(na);
        let n_rg = fill_na(&n.requires_grad);
        let b_rg = b.map(|b| fill_na(&b.requires_grad)).unwrap_or_else(na);
        let mut row = vec![
            Cell::s(&n.name),
            bn(&|l| Cell::s(&l.name)),
            Cell::s(&n.dtype),
            bn(&|l| Cell::s(&l.dtype)),
            Cell::s(&n.shape),
            bn(&|l| Cell::s(&l.shape)),
            n_rg.clone(),
            b_rg.clone(),
        ];
        match mode {
            Mode::Statistics => {
                let mut diffs = Vec::with_capacity(8);
                let mut rels = Vec::with_capacity(4);
                for s in 0..4 {
                    let int_cols =
                        column_is_int(&stat_texts[s]) && column_is_int(&stat_texts[s + 4]);
                    let (d, r) = stat_diff(
                        &stat_cells[i][s],
                        &stat_cells[i][s + 4],
                        &stat_texts[s][i],
                        &stat_texts[s + 4][i],
                        int_cols,
                        compat,
                    );
                    diffs.push(Cell::Str(d));
                    rels.push(Cell::Str(r));
                }
                row.extend(diffs);
                row.extend(rels);
                row.extend(stat_cells[i].iter().cloned());
            }
            Mode::Tensor => {
                row.extend(tensor_results[i].values.iter().cloned());
                row.extend(stat_cells[i].iter().cloned());
                metric_messages.push(tensor_results[i].err_msg.clone());
            }
            Mode::Md5 => {
                row.push(Cell::s(&n.md5));
                row.push(bn(&|l| Cell::s(&l.md5)));
            }
        }
        row.push(Cell::Bool(n_rg.py_eq(&b_rg)));
        row.push(Cell::s("")); // Result, filled by the judgement
        row.push(Cell::s("")); // Err_message
        if stack {
            let first = prev_call != Some(p.npu.call);
            row.push(match (&call.stack, first) {
                (Some(s), true) => fill_na(s),
                _ => na(),
            });
        }
        if mode == Mode::Tensor {
            row.push(Cell::List(vec![
                Cell::s(&n.data_name),
                b.map(|b| Cell::s(&b.data_name)).unwrap_or_else(na),
            ]));
        }
        prev_call = Some(p.npu.call);
        rows.push(row);
        group.push(call.key.clone());
        call_index.push(p.npu.call);
    }

    let mut table = Table {
        mode,
        header,
        rows,
        group,
        call_index,
        verdicts: vec![],
        metric_messages,
    };
    judge(&mut table);
    table
}

/// Runs the judgement per API group and writes Result / Err_message.
pub fn judge(t: &mut Table) {
    let cols = Columns::new(&t.header);
    let mut order: Vec<&str> = Vec::new();
    let mut members: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    for (i, g) in t.group.iter().enumerate() {
        let e = members.entry(g.as_str()).or_default();
        if e.is_empty() {
            order.push(g.as_str());
        }
        e.push(i);
    }
    let mut verdicts = vec![None; t.rows.len()];
    for g in order {
        let idx = &members[g];
        let rows: Vec<&[Cell]> = idx.iter().map(|&i| t.rows[i].as_slice()).collect();
        for (k, v) in judge_group(t.mode, &cols, &rows).into_iter().enumerate() {
            verdicts[idx[k]] = Some(v);
        }
    }
    let ri = t
        .header
        .iter()
        .position(|h| h == "Result")
        .expect("Result column");
    let ei = t
        .header
        .iter()
        .position(|h| h == "Err_message")
        .expect("Err_message column");
    t.verdicts = verdicts
        .into_iter()
        .map(|v| v.expect("every row judged"))
        .collect();
    // A tensor that could not be read, or not compared for its dtype, is never agreement:
    // msprobe's rules above see only `unsupported` cells and would pass the row.
    if t.mode == Mode::Tensor {
        for (v, msg) in t.verdicts.iter_mut().zip(&t.metric_messages) {
            if crate::tensor::is_not_compared_message(msg) {
                v.raise(Level::Error, msg);
            }
        }
    }
    for (row, v) in t.rows.iter_mut().zip(&t.verdicts) {
        row[ri] = Cell::s(v.level.as_str());
        row[ei] = Cell::Str(v.err_message());
    }
}

/// The CSV text pandas writes for the table (no byte-order mark, `\n` line ends).
pub fn to_csv(t: &Table) -> String {
    let ncol = t.header.len();
    let cols: Vec<Vec<String>> = (0..ncol)
        .map(|c| {
            let cells: Vec<&Cell> = t.rows.iter().map(|r| &r[c]).collect();
            let mut texts = render_column(&cells);
            // msprobe writes float infinities as " inf"/" -inf" so spreadsheets keep them.
            for (text, cell) in texts.iter_mut().zip(&cells) {
                if let Cell::Float(f) = cell {
                    if *f == f64::INFINITY {
                        *text = " inf".into();
                    } else if *f == f64::NEG_INFINITY {
                        *text = " -inf".into();
                    }
                }
            }
            texts
        })
        .collect();
    // pandas quotes through Python's csv module with its own `\n` line end, so a field holding
    // `\n` is quoted and one holding only `\r` is not.
    let mut out = String::new();
    pyrepr::write_csv_record(&t.header, "\n", &mut out);
    for r in 0..t.rows.len() {
        pyrepr::write_csv_record(cols.iter().map(|col| &col[r]), "\n", &mut out);
    }
    out
}
