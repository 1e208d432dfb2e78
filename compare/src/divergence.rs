//! The human summary: counts per verdict and the first divergence in execution order.
//!
//! A row *agrees* when target and golden match within the row's tolerance (exact by default;
//! rows whose dtypes differ, e.g. bf16 against fp32, get at least 1%). Tensor rows measure the
//! relative L2 error (EucDist / golden norm), statistics rows the max/min/mean difference on
//! the tensor's range and the norm's relative difference, md5 rows checksum equality.
//!
//! A *producer* is a call whose outputs disagree while its tensor inputs agree, or whose
//! non-tensor arguments differ. The first divergence is the earliest producer; when a
//! difference already arrives through the tensor inputs of the earliest differing call (model
//! inputs, parameters, an API not dumped), that call is reported with this reason. Later calls
//! with disagreeing outputs and inputs merely propagate it; later producers are listed apart.

use crate::cell::Cell;
use crate::judge::Level;
use crate::model::{Dump, Mode};
use crate::stats_diff::parse_number;
use crate::table::Table;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    Agree,
    Disagree,
    /// No partner or no data: nothing to say.
    Unknown,
}

/// The call where the runs start to differ.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Producer {
    pub key: String,
    /// Position in the target dump (execution order).
    pub call_index: usize,
    pub reason: String,
    /// Rows that disagree, with a short figure each.
    pub rows: Vec<String>,
    pub stack: Option<Vec<String>>,
}

/// How one target call compares with its golden partner: what a whole-run analysis needs to
/// follow a difference from rank to rank (see `run_tree`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallDiff {
    pub key: String,
    /// Some tensor input disagrees.
    pub inputs_differ: bool,
    /// Some output disagrees.
    pub outputs_differ: bool,
    /// Some non-tensor argument (an op, src, group) differs.
    pub args_differ: bool,
    /// The `group` argument's ranks as the table prints them (`[0, 1]`), when the call has one.
    pub group: Option<String>,
}

/// What the summary reports (serialized in a whole-run compare's per-pair result).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub mode: Mode,
    pub rows: usize,
    pub unmatched_rows: usize,
    /// (pass, warning, error) counts of rows and of APIs.
    pub row_levels: [usize; 3],
    pub api_levels: [usize; 3],
    pub producer: Option<Producer>,
    /// Keys of later calls whose outputs disagree because their inputs already did.
    pub propagators: Vec<String>,
    /// Keys of later calls that are producers themselves (independent differences).
    pub other_producers: Vec<String>,
    /// Tensor mode: rows whose tensor files could not be read or are of a dtype the metrics do
    /// not take (row name, message); each is an `error` row, and none counts as agreement.
    pub unreadable: Vec<(String, String)>,
    /// Every target call with a row in the table, in execution order.
    pub calls: Vec<CallDiff>,
}

fn col(t: &Table, name: &str) -> Option<usize> {
    t.header.iter().position(|h| h == name)
}

fn row_tolerance(t: &Table, r: usize, tol: f64) -> f64 {
    let (nd, bd) = (t.rows[r][2].py_str(), t.rows[r][3].py_str());
    if nd == bd { tol } else { tol.max(0.01) }
}

/// Agreement of one row.
pub fn row_agreement(t: &Table, r: usize, tol: f64) -> Agreement {
    let row = &t.rows[r];
    if row[1].is_str("N/A") {
        return Agreement::Unknown;
    }
    let tol = row_tolerance(t, r, tol);
    let verdict = |worst: f64| {
        if worst > tol {
            Agreement::Disagree
        } else {
            Agreement::Agree
        }
    };
    // Statistics differences on the tensor's own scale: max/min/mean against the largest
    // magnitude of the range (a mean near zero says nothing relative to itself), the norm
    // against the norm. Non-numeric statistics (scalar arguments) must be equal.
    let stats_worst = || -> f64 {
        let (Some(n), Some(b)) = (col(t, "NPU max"), col(t, "Bench max")) else {
            return 0.0;
        };
        let texts: Vec<(String, String)> = (0..4)
            .map(|k| (row[n + k].py_str(), row[b + k].py_str()))
            .collect();
        let nums: Vec<Option<(f64, f64)>> = texts
            .iter()
            .map(|(a, b)| match (parse_number(a), parse_number(b)) {
                (Some(x), Some(y)) => Some((x, y)),
                _ => None,
            })
            .collect();
        if texts
            .iter()
            .zip(&nums)
            .any(|((a, b), v)| v.is_none() && a != b)
        {
            return f64::INFINITY;
        }
        let scale = nums[..2]
            .iter()
            .flatten()
            .flat_map(|(x, y)| [x.abs(), y.abs()])
            .fold(0.0, f64::max);
        let mut worst: f64 = 0.0;
        for (k, v) in nums.iter().enumerate() {
            let Some((x, y)) = v else { continue };
            if x == y {
                continue;
            }
            let denom = if k == 3 { y.abs() } else { scale };
            worst = worst.max(if denom > 0.0 {
                (x - y).abs() / denom
            } else {
                f64::INFINITY
            });
        }
        worst
    };
    match t.mode {
        Mode::Md5 => {
            let (n, b) = (col(t, "NPU MD5").unwrap(), col(t, "BENCH MD5").unwrap());
            if row[n].py_eq(&row[b]) {
                Agreement::Agree
            } else {
                Agreement::Disagree
            }
        }
        Mode::Statistics => verdict(stats_worst()),
        Mode::Tensor => {
            let abs = &row[col(t, "MaxAbsErr").unwrap()];
            let euc = &row[col(t, "EucDist").unwrap()];
            let bench_norm = col(t, "Bench l2norm").and_then(|c| parse_number(&row[c].py_str()));
            match (abs, euc) {
                (Cell::Float(a), _) if *a == 0.0 => Agreement::Agree,
                (Cell::Float(_), _) if tol == 0.0 => Agreement::Disagree,
                // Relative L2 error: robust where element-wise relative errors blow up near zero.
                (Cell::Float(_), Cell::Float(e)) => match bench_norm {
                    Some(nb) if nb > 0.0 => verdict(e / nb),
                    _ => Agreement::Disagree,
                },
                // 0-d tensors and rows without tensor data: judge by the statistics.
                (Cell::Float(_), _) => verdict(stats_worst()),
                (Cell::Str(s), _) if s == "unsupported" => verdict(stats_worst()),
                _ => Agreement::Disagree,
            }
        }
    }
}

fn describe(t: &Table, r: usize) -> String {
    let row = &t.rows[r];
    let name = row[0].py_str();
    let pick = |h: &str| col(t, h).map(|c| format!("{h} {}", row[c].py_str()));
    let figs: Vec<String> = match t.mode {
        Mode::Md5 => vec![pick("NPU MD5"), pick("BENCH MD5")]
            .into_iter()
            .flatten()
            .collect(),
        Mode::Statistics => vec![pick("MaxRelativeErr"), pick("NormRelativeErr")]
            .into_iter()
            .flatten()
            .collect(),
        Mode::Tensor => vec![pick("Cosine"), pick("MaxAbsErr"), pick("MaxRelativeErr")]
            .into_iter()
            .flatten()
            .collect(),
    };
    format!("{name}: {}", figs.join(", "))
}

/// Computes the summary of a judged table. `tol` is the relative tolerance for rows of equal dtype.
pub fn summarize(t: &Table, npu: &Dump, tol: f64) -> Summary {
    let mut row_levels = [0usize; 3];
    for v in &t.verdicts {
        row_levels[v.level as usize] += 1;
    }
    let unmatched_rows = t.rows.iter().filter(|r| r[1].is_str("N/A")).count();

    // Rows per NPU call, in table order (which is the target's execution order).
    let mut calls: Vec<(usize, Vec<usize>)> = Vec::new();
    for (r, &c) in t.call_index.iter().enumerate() {
        match calls.last_mut() {
            Some((last, rows)) if *last == c => rows.push(r),
            _ => calls.push((c, vec![r])),
        }
    }
    let mut api_levels = [0usize; 3];
    for (_, rows) in &calls {
        let worst = rows
            .iter()
            .map(|&r| t.verdicts[r].level)
            .max()
            .unwrap_or(Level::Pass);
        api_levels[worst as usize] += 1;
    }

    let mut producer: Option<Producer> = None;
    let mut call_diffs = Vec::with_capacity(calls.len());
    let mut propagators = Vec::new();
    let mut other_producers = Vec::new();
    let stat_col = col(t, "NPU max").or_else(|| col(t, "NPU MD5")).unwrap_or(0);
    for (c, rows) in &calls {
        let call = &npu.calls[*c];
        let is_output = |r: usize| t.rows[r][0].py_str().contains(".output.");
        let is_tensor_row = |r: usize| {
            let name = t.rows[r][0].py_str();
            call.leaves
                .iter()
                .find(|l| l.name == name)
                .map(|l| l.is_tensor)
                .unwrap_or(true)
        };
        let mut non_tensor_diff = Vec::new();
        let mut input_diff = Vec::new();
        let mut inputs_agree = true;
        let mut out_diff = Vec::new();
        for &r in rows {
            let a = row_agreement(t, r, tol);
            if is_output(r) {
                if a == Agreement::Disagree {
                    out_diff.push(r);
                }
            } else if is_tensor_row(r) {
                if a != Agreement::Agree {
                    inputs_agree = false;
                }
                if a == Agreement::Disagree {
                    input_diff.push(r);
                }
            } else if a == Agreement::Disagree {
                non_tensor_diff.push(r);
            }
        }
        let group = rows.iter().find_map(|&r| {
            let name = t.rows[r][0].py_str();
            let is_group = name.contains(".input.") && name.ends_with(".group");
            // The first statistic (or checksum) column holds the group's ranks.
            is_group.then(|| t.rows[r][stat_col].py_str())
        });
        call_diffs.push(CallDiff {
            key: call.key.clone(),
            inputs_differ: !input_diff.is_empty(),
            outputs_differ: !out_diff.is_empty(),
            args_differ: !non_tensor_diff.is_empty(),
            group,
        });
        let produces = if !non_tensor_diff.is_empty() {
            Some(("non-tensor arguments differ", non_tensor_diff))
        } else if !out_diff.is_empty() && inputs_agree {
            Some((
                "outputs disagree while tensor inputs agree",
                out_diff.clone(),
            ))
        } else {
            None
        };
        let first = match (&producer, produces) {
            (None, Some((why, rows))) => Some((why, rows)),
            // The first difference arrives through tensor inputs that no compared API
            // produced (model inputs, parameters, an API that was not dumped).
            (None, None) if !input_diff.is_empty() => {
                let mut rows = input_diff.clone();
                rows.extend(out_diff.iter().copied());
                Some((
                    "its tensor inputs already differ, from outside the compared APIs (data, parameters or an API not dumped)",
                    rows,
                ))
            }
            (Some(_), Some(_)) => {
                other_producers.push(call.key.clone());
                None
            }
            (Some(_), None) => {
                if !out_diff.is_empty() {
                    propagators.push(call.key.clone());
                }
                None
            }
            (None, None) => None,
        };
        if let Some((why, rows)) = first {
            let stack = call.stack.as_ref().map(|s| match s {
                Cell::List(items) => items.iter().map(Cell::py_str).collect(),
                other => vec![other.py_str()],
            });
            producer = Some(Producer {
                key: call.key.clone(),
                call_index: *c,
                reason: why.to_string(),
                rows: rows.iter().map(|&r| describe(t, r)).collect(),
                stack,
            });
        }
    }
    let unreadable = t
        .metric_messages
        .iter()
        .enumerate()
        .filter(|(_, m)| crate::tensor::is_not_compared_message(m))
        .map(|(r, m)| (t.rows[r][0].py_str(), m.clone()))
        .collect();
    Summary {
        mode: t.mode,
        rows: t.rows.len(),
        unmatched_rows,
        unreadable,
        row_levels,
        api_levels,
        producer,
        propagators,
        other_producers,
        calls: call_diffs,
    }
}

impl Summary {
    /// Markdown text for summary.md and the terminal.
    pub fn to_markdown(&self, target: &str, golden: &str, csv_name: &str) -> String {
        let mode = match self.mode {
            Mode::Statistics => "statistics",
            Mode::Md5 => "md5",
            Mode::Tensor => "tensor",
        };
        let mut s = String::new();
        s.push_str("# numprobe compare\n\n");
        s.push_str(&format!(
            "- target: `{target}`\n- golden: `{golden}`\n- mode: {mode}\n- table: `{csv_name}`\n\n"
        ));
        s.push_str("| verdict | rows | APIs |\n|---|---|---|\n");
        for (i, name) in ["pass", "warning", "error"].iter().enumerate() {
            s.push_str(&format!(
                "| {name} | {} | {} |\n",
                self.row_levels[i], self.api_levels[i]
            ));
        }
        s.push_str(&format!(
            "\n{} rows, {} without a golden match.\n\n",
            self.rows, self.unmatched_rows
        ));
        if let Some((name, msg)) = self.unreadable.first() {
            s.push_str(&format!(
                "{} rows could not be compared: their tensor files could not be read or are of a dtype compare does not take (Result error). First: `{name}`: {msg}\n\n",
                self.unreadable.len()
            ));
        }
        s.push_str("## First divergence\n\n");
        match &self.producer {
            None if !self.unreadable.is_empty() => s.push_str(&format!(
                "None among the rows that could be compared; {} rows could not be compared.\n",
                self.unreadable.len()
            )),
            None => s.push_str("None: every matched API agrees with the golden run.\n"),
            Some(p) => {
                s.push_str(&format!(
                    "`{}` (call {} in execution order): {}.\n\n",
                    p.key, p.call_index, p.reason
                ));
                for r in &p.rows {
                    s.push_str(&format!("- {r}\n"));
                }
                if let Some(stack) = &p.stack {
                    s.push_str("\nStack:\n\n```\n");
                    for line in stack {
                        s.push_str(line);
                        s.push('\n');
                    }
                    s.push_str("```\n");
                }
                if !self.other_producers.is_empty() {
                    let shown: Vec<&str> = self
                        .other_producers
                        .iter()
                        .take(10)
                        .map(String::as_str)
                        .collect();
                    s.push_str(&format!(
                        "\n{} later APIs start differences of their own (their inputs agree): {}{}\n",
                        self.other_producers.len(),
                        shown.join(", "),
                        if self.other_producers.len() > 10 { ", ..." } else { "" }
                    ));
                }
                if !self.propagators.is_empty() {
                    let shown: Vec<&str> = self
                        .propagators
                        .iter()
                        .take(10)
                        .map(String::as_str)
                        .collect();
                    s.push_str(&format!(
                        "\nPropagated by {} later APIs whose inputs already differ: {}{}\n",
                        self.propagators.len(),
                        shown.join(", "),
                        if self.propagators.len() > 10 {
                            ", ..."
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        s
    }
}
