//! The whole-run compare of the `compare` crate for `numprobe.cluster`, as its three steps:
//! plan the (step, rank) pairs, compare one pair (anywhere the dump and the output directory
//! are reachable), finish the run from the pairs' result records. They are the steps
//! `compare::run_tree::run_tree` runs on threads for `numprobe compare`, so the files are the
//! same byte for byte.
//!
//! Every call takes the run's options as one dict (`target`, `golden`, `out`, `steps`,
//! `ranks`, `resume`, `fuzzy_match`, `tolerance`, `pandas`, `xlsx`, `data_mapping`,
//! `api_mapping`): a Ray task receives it as plain data.

use std::path::PathBuf;

use compare::CompareOptions;
use compare::run_tree::{PairJob, RunOptions, RunPlan, RunTree};
use compare::stats_diff::PandasCompat;
use compare::tensor::gpu::Backend;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn compare_err(e: compare::Error) -> PyErr {
    match e {
        compare::Error::Usage(m) => PyValueError::new_err(m),
        other => PyOSError::new_err(other.to_string()),
    }
}

const KEYS: [&str; 12] = [
    "target",
    "golden",
    "out",
    "steps",
    "ranks",
    "resume",
    "fuzzy_match",
    "tolerance",
    "pandas",
    "xlsx",
    "data_mapping",
    "api_mapping",
];

/// The run's options from the dict; unknown keys are refused (a misspelt option must not be
/// ignored silently), missing ones take `numprobe compare`'s defaults.
fn run_options(d: &Bound<'_, PyDict>) -> PyResult<RunOptions> {
    for k in d.keys() {
        let k: String = k.extract()?;
        if !KEYS.contains(&k.as_str()) {
            return Err(PyValueError::new_err(format!(
                "unknown compare option {k:?} (known: {})",
                KEYS.join(", ")
            )));
        }
    }
    fn get<'py, T: FromPyObjectOwned<'py>>(
        d: &Bound<'py, PyDict>,
        key: &str,
    ) -> PyResult<Option<T>> {
        match d.get_item(key)? {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => v.extract::<T>().map(Some).map_err(|e| {
                let e: PyErr = e.into();
                PyValueError::new_err(format!("compare option {key}: {e}"))
            }),
        }
    }
    let need = |key: &str| -> PyResult<PathBuf> {
        get::<PathBuf>(d, key)?
            .ok_or_else(|| PyValueError::new_err(format!("compare option {key} is required")))
    };
    let tolerance = get::<f64>(d, "tolerance")?.unwrap_or(0.0);
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "tolerance must be a finite number >= 0, not {tolerance}"
        )));
    }
    let pandas = match get::<String>(d, "pandas")?.as_deref() {
        None | Some("2") => PandasCompat::V2,
        Some("3") => PandasCompat::V3,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "pandas must be \"2\" or \"3\", not {other:?}"
            )));
        }
    };
    let (target, golden, out_dir) = (need("target")?, need("golden")?, need("out")?);
    Ok(RunOptions {
        pair: CompareOptions {
            target: target.clone(),
            golden: golden.clone(),
            out_dir: out_dir.clone(),
            fuzzy_match: get(d, "fuzzy_match")?.unwrap_or(false),
            data_mapping: get(d, "data_mapping")?,
            api_mapping: get(d, "api_mapping")?,
            tolerance,
            pandas,
            xlsx: get(d, "xlsx")?.unwrap_or(false),
            resume: get(d, "resume")?.unwrap_or(false),
            // As `numprobe compare`: tensor metrics on the GPU only for large pairs on a
            // hardware adapter.
            backend: Backend::Auto,
            ..Default::default()
        },
        target,
        golden,
        out_dir,
        steps: get(d, "steps")?.unwrap_or_default(),
        ranks: get(d, "ranks")?.unwrap_or_default(),
        workers: 1,
    })
}

fn trees(opts: &RunOptions) -> PyResult<(RunTree, RunTree)> {
    let one = |p: &PathBuf, side: &str| -> PyResult<RunTree> {
        compare::run_tree::discover(p)
            .map_err(compare_err)?
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{side} {}: not a run root (no step*/rank*/dump.json or rank*/dump.json)",
                    p.display()
                ))
            })
    };
    Ok((one(&opts.target, "target")?, one(&opts.golden, "golden")?))
}

/// The plan with the run's timestamp fixed (`timestamp`, else as `plan_run` decides).
fn planned(opts: &mut RunOptions, timestamp: Option<String>) -> PyResult<(RunTree, RunPlan)> {
    if timestamp.is_some() {
        opts.pair.timestamp = timestamp;
    }
    let (target, golden) = trees(opts)?;
    let plan = compare::run_tree::plan_run(opts, &target, &golden).map_err(compare_err)?;
    opts.pair.timestamp = Some(plan.timestamp.clone());
    Ok((target, plan))
}

/// One planned pair as Python sees it: (step or None, rank, target rank dir, golden rank
/// dir, bytes, done).
type PairRow = (Option<u64>, u64, PathBuf, PathBuf, u64, bool);

/// Plans the run: (timestamp, pairs in the run's order). A pair is *done* when the run is
/// resumed and its record shows it compared in this run.
#[pyfunction]
#[pyo3(signature = (options, timestamp=None))]
fn run_compare_plan(
    py: Python<'_>,
    options: &Bound<'_, PyDict>,
    timestamp: Option<String>,
) -> PyResult<(String, Vec<PairRow>)> {
    let mut opts = run_options(options)?;
    py.detach(|| {
        let (_, plan) = planned(&mut opts, timestamp)?;
        let ts = plan.timestamp.clone();
        // A pair whose report page is gone is compared again (the page needs its dumps).
        let reports = report::run::RunReports::default();
        let rows = plan
            .jobs
            .iter()
            .map(|j| {
                let done = opts.pair.resume
                    && compare::run_tree::done_record(&opts, j, &ts, Some(&reports)).is_some();
                (
                    j.step,
                    j.rank,
                    j.target.clone(),
                    j.golden.clone(),
                    j.bytes,
                    done,
                )
            })
            .collect();
        Ok((ts, rows))
    })
}

/// Compares one planned pair, writing its table, its working files and its result record;
/// returns (compared, the table's path or why not, error rows).
#[pyfunction]
fn run_compare_pair(
    py: Python<'_>,
    options: &Bound<'_, PyDict>,
    timestamp: String,
    pair: PairRow,
) -> PyResult<(bool, String, usize)> {
    let mut opts = run_options(options)?;
    dumpfmt::outfile::check_timestamp(&timestamp).map_err(PyValueError::new_err)?;
    opts.pair.timestamp = Some(timestamp.clone());
    let (step, rank, target, golden, bytes, _) = pair;
    let job = PairJob {
        step,
        rank,
        target,
        golden,
        bytes,
    };
    // The pair's report page as `numprobe compare` writes it (same files from either path).
    let reports = report::run::RunReports::default();
    let mut out = py.detach(|| {
        compare::run_tree::compare_pair_with(&opts, &job, &timestamp, &(), Some(&reports))
    });
    if let (Ok(_), Some(e)) = (&out.result, reports.errors().into_iter().next()) {
        out.result = Err(format!("report not written: {e}"));
    }
    Ok(match out.result {
        Ok((path, s)) => (true, path.display().to_string(), s.row_levels[2]),
        Err(e) => (false, e, 0),
    })
}

/// Finishes the run from the pairs' records (a pair without one is reported as not
/// compared): writes summary.md, run_summary.json and the `-da` JSON; returns (origin line,
/// summary path, exit status as `numprobe compare` gives it without `--exit-zero`, per-pair
/// lines).
#[pyfunction]
fn run_compare_finish(
    py: Python<'_>,
    options: &Bound<'_, PyDict>,
    timestamp: String,
) -> PyResult<(String, String, u8, Vec<String>)> {
    let mut opts = run_options(options)?;
    dumpfmt::outfile::check_timestamp(&timestamp).map_err(PyValueError::new_err)?;
    py.detach(|| {
        let (target, plan) = planned(&mut opts, Some(timestamp.clone()))?;
        let pairs = plan
            .jobs
            .iter()
            .map(|j| {
                compare::run_tree::read_record(&opts, j, &timestamp).unwrap_or_else(|| {
                    compare::run_tree::PairOutcome {
                        step: j.step,
                        rank: j.rank,
                        result: Err("no result record: the pair was not compared".into()),
                    }
                })
            })
            .collect();
        let outcome =
            compare::run_tree::finish(&opts, &target, &plan, pairs).map_err(compare_err)?;
        report::run::write_index(&outcome, &opts.target, &opts.golden, &opts.out_dir)
            .map_err(|e| PyOSError::new_err(format!("report not written: {e}")))?;
        let lines = outcome
            .pairs
            .iter()
            .map(|p| {
                let step = p.step.map_or(String::new(), |s| format!("step{s}/"));
                match &p.result {
                    Ok((path, s)) => format!(
                        "{step}rank{}: {} error rows, table {}",
                        p.rank,
                        s.row_levels[2],
                        path.display()
                    ),
                    Err(e) => format!("{step}rank{}: not compared: {e}", p.rank),
                }
            })
            .chain(
                outcome
                    .unpaired
                    .links_out
                    .iter()
                    .map(|l| format!("not compared: {}", l.to_error())),
            )
            .collect();
        let code = if outcome.has_failures() {
            2
        } else if outcome.has_errors() {
            1
        } else {
            0
        };
        Ok((
            compare::run_tree_json::origin_line(&outcome.steps),
            outcome.summary_path.display().to_string(),
            code,
            lines,
        ))
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_compare_plan, m)?)?;
    m.add_function(wrap_pyfunction!(run_compare_pair, m)?)?;
    m.add_function(wrap_pyfunction!(run_compare_finish, m)?)?;
    Ok(())
}
