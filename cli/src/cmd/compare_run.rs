//! `numprobe compare TARGET_ROOT GOLDEN_ROOT --out DIR` over a whole distributed run: every
//! (step, rank) pair both roots hold, `--workers` at a time, with a progress bar over the bytes
//! read; the tables, summary.md and JSON are [`compare::run_tree`]'s, the reports (one per pair
//! beside its table, and `report.html` listing them) [`report::run`]'s.

use super::compare::Args;
use compare::CompareOptions;
use compare::run_tree::{RunOptions, RunProgress, discover, plan};
use indicatif::{ProgressBar, ProgressStyle};
use std::process::ExitCode;

/// An indicatif bar over bytes; indicatif draws nothing when stderr is not a terminal.
struct ByteBar(ProgressBar);

impl RunProgress for ByteBar {
    fn total(&self, bytes: u64) {
        self.0.set_length(bytes);
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

/// Runs the whole-run compare when both paths are run roots and the selection holds more than
/// one (step, rank) (or a rank or step present on one side only); `None` leaves the command to
/// the single-pair compare.
pub fn try_run(args: &Args, pair: &CompareOptions) -> Result<Option<ExitCode>, super::CmdError> {
    let (Some(target), Some(golden)) = (discover(&args.target)?, discover(&args.golden)?) else {
        return Ok(None);
    };
    let (jobs, unpaired) = plan(&target, &golden, &args.step, &args.rank)?;
    let lists = args.step.len() > 1 || args.rank.len() > 1;
    let whole = jobs.len() > 1
        || !unpaired.target_only.is_empty()
        || !unpaired.golden_only.is_empty()
        || !unpaired.links_out.is_empty()
        || lists;
    if !whole {
        return Ok(None);
    }
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    let opts = RunOptions {
        pair: pair.clone(),
        target: args.target.clone(),
        golden: args.golden.clone(),
        out_dir: args.out.clone(),
        steps: args.step.clone(),
        ranks: args.rank.clone(),
        workers,
    };
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{spinner} comparing ranks {bar:40} {bytes}/{total_bytes} {bytes_per_sec} [{elapsed}<{eta}]",
        )
        .expect("static template"),
    );
    let bar = ByteBar(bar);
    // Each pair's report.html is written beside its table while the pair is in memory.
    let reports = report::run::RunReports::default();
    let outcome = compare::run_tree::run_tree_with(&opts, &target, &golden, &bar, Some(&reports))?;
    bar.0.finish_and_clear();
    let index = report::run::write_index(&outcome, &args.target, &args.golden, &args.out)?;
    let report_errors = reports.errors();
    for e in &report_errors {
        eprintln!("numprobe: report not written: {e}");
    }
    println!("{}", compare::run_tree_json::origin_line(&outcome.steps));
    for p in &outcome.pairs {
        let step = p.step.map_or(String::new(), |s| format!("step{s}/"));
        match &p.result {
            Ok((path, s)) => println!(
                "{step}rank{}: {} error rows, table {}",
                p.rank,
                s.row_levels[2],
                path.display()
            ),
            Err(e) => eprintln!("numprobe: {step}rank{}: not compared: {e}", p.rank),
        }
    }
    // Ranks behind a link out of their root were left out of the plan: say why.
    for l in &outcome.unpaired.links_out {
        eprintln!("numprobe: not compared: {}", l.to_error());
    }
    println!("summary:      {}", outcome.summary_path.display());
    println!("report:       {}", index.display());
    // 2 when some pair could not be compared or some rank directory was not entered (or its
    // report not written); 1 when a compared pair has error rows.
    Ok(Some(
        if outcome.has_failures() || !report_errors.is_empty() {
            ExitCode::from(2)
        } else if outcome.has_errors() && !args.exit_zero {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    ))
}
