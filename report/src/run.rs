//! The pages of a whole-run compare ([`compare::run_tree`]): each pair's report beside its
//! table (`step{S}/report_rank{R}.html`), written by [`RunReports`] while the pair is in
//! memory, and `report.html` in the output directory listing every pair with its first
//! divergence under the run's origin line.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use compare::run_tree::{PairJob, PairSink, RunOutcome};

use crate::Result;
use crate::index::{Entry, Index, State};

/// The report's file name of a pair's rank.
pub fn pair_report_name(rank: u64) -> String {
    format!("report_rank{rank}.html")
}

/// Writes each pair's page beside its table; errors are kept for the caller (a report that
/// could not be written does not undo the pair's comparison).
#[derive(Default)]
pub struct RunReports {
    written: Mutex<Vec<(Option<u64>, u64, PathBuf)>>,
    errors: Mutex<Vec<String>>,
}

impl RunReports {
    /// Pages written: (step, rank, path).
    pub fn written(&self) -> Vec<(Option<u64>, u64, PathBuf)> {
        let mut v = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        v.sort();
        v
    }

    /// Why pages could not be written.
    pub fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl PairSink for RunReports {
    fn pair(
        &self,
        job: &PairJob,
        outcome: &compare::CompareOutcome,
        compared: &compare::Compared,
        table: &Path,
    ) {
        let dir = table.parent().unwrap_or(Path::new("."));
        let path = dir.join(pair_report_name(job.rank));
        let up = if job.step.is_some() {
            "../report.html"
        } else {
            "report.html"
        };
        match write_pair(outcome, compared, &path, up) {
            Ok(()) => self
                .written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((job.step, job.rank, path)),
            Err(e) => self
                .errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{}: {e}", path.display())),
        }
    }

    fn has_output(&self, job: &PairJob, table: &Path) -> bool {
        let dir = table.parent().unwrap_or(Path::new("."));
        // A link planted at the page's name is not the page (the writer would refuse it).
        std::fs::symlink_metadata(dir.join(pair_report_name(job.rank))).is_ok_and(|m| m.is_file())
    }
}

fn write_pair(
    outcome: &compare::CompareOutcome,
    compared: &compare::Compared,
    path: &Path,
    up: &str,
) -> Result<()> {
    let target_construct = crate::construct_beside(&outcome.target_dump_json)?;
    let golden_construct = crate::construct_beside(&outcome.golden_dump_json)?;
    let input = crate::Input {
        compared,
        summary: &outcome.summary,
        target_construct: target_construct.as_ref(),
        golden_construct: golden_construct.as_ref(),
        target_name: outcome.target_dump_json.display().to_string(),
        golden_name: outcome.golden_dump_json.display().to_string(),
    };
    let model = crate::Model::build(&input);
    let mut page = crate::html::Page::of_compare(&input);
    page.up = Some(("← all ranks and steps".into(), up.into()));
    crate::html::write_page(&model, &page, path)
}

/// Writes the run's `report.html` into `out_dir`: the origin line, then every pair (compared,
/// failed, or present on one side only) with its first divergence and links.
pub fn write_index(
    outcome: &RunOutcome,
    target: &Path,
    golden: &Path,
    out_dir: &Path,
) -> Result<PathBuf> {
    let rel = |p: &Path| -> Option<String> {
        p.strip_prefix(out_dir)
            .ok()
            .map(|r| r.to_string_lossy().replace('\\', "/"))
    };
    let mut entries = Vec::new();
    for p in &outcome.pairs {
        let view = outcome.steps.iter().find(|v| v.step == p.step);
        let origin = view
            .and_then(|v| v.origin.as_ref())
            .filter(|o| o.rank == p.rank);
        let (state, first, table) = match &p.result {
            Ok((table, s)) => {
                let first = match (origin, view.and_then(|v| v.firsts.get(&p.rank))) {
                    (Some(o), _) => Some(format!("{}: {}", o.key, o.reason)),
                    (None, Some(compare::run_tree::FirstDiff::Received { key, .. })) => Some(
                        format!("{key}: received through this collective from another rank"),
                    ),
                    (None, Some(compare::run_tree::FirstDiff::Local { key, reason, .. })) => {
                        Some(format!("{key}: {reason}"))
                    }
                    (None, None) => s
                        .producer
                        .as_ref()
                        .map(|pr| format!("{}: {}", pr.key, pr.reason)),
                };
                (
                    State::Compared {
                        rows: s.rows,
                        levels: s.row_levels,
                    },
                    first,
                    rel(table),
                )
            }
            Err(e) => (State::Failed(e.clone()), None, None),
        };
        // Linked only when its page was written (beside the table).
        let report = match &p.result {
            Ok((table, _)) => table
                .parent()
                .map(|d| d.join(pair_report_name(p.rank)))
                .filter(|r| r.is_file())
                .and_then(|r| rel(&r)),
            Err(_) => None,
        };
        entries.push(Entry {
            step: p.step,
            rank: p.rank,
            state,
            first,
            origin: origin.is_some(),
            report,
            table,
        });
    }
    for (list, side) in [
        (&outcome.unpaired.target_only, "target"),
        (&outcome.unpaired.golden_only, "golden"),
    ] {
        for &(step, rank) in list {
            entries.push(Entry {
                step,
                rank,
                state: State::Unpaired(side),
                first: None,
                origin: false,
                report: None,
                table: None,
            });
        }
    }
    entries.sort_by_key(|e| (e.step, e.rank));
    let index = Index {
        title: "numprobe compare: whole run".into(),
        target: target.display().to_string(),
        golden: golden.display().to_string(),
        lines: std::iter::once(compare::run_tree_json::origin_line(&outcome.steps))
            .chain(
                outcome
                    .unpaired
                    .links_out
                    .iter()
                    .map(|l| format!("Not compared: {}", l.to_error())),
            )
            .collect(),
        entries,
    };
    let path = out_dir.join("report.html");
    crate::index::write(&index, &path)?;
    Ok(path)
}
