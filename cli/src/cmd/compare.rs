//! `numprobe compare TARGET GOLDEN --out DIR`: msprobe's compare result table
//! (`compare_result_{timestamp}.csv`) plus `summary.md` and a terminal summary naming the first
//! divergence. Two run roots holding several (step, rank) pairs are compared whole
//! ([`super::compare_run`]).

use super::CmdResult;
use compare::CompareOptions;
use compare::stats_diff::PandasCompat;
use compare::table::Progress;
use compare::tensor::gpu::Backend;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The run under suspicion (msprobe's -tp): dump root, step or rank directory, or dump.json.
    pub target: PathBuf,
    /// The trusted run (msprobe's -gp).
    pub golden: PathBuf,
    /// Output directory for the CSV and summary.md (created if missing).
    #[arg(short, long)]
    pub out: PathBuf,
    /// Fuzzy matching of API names (msprobe's -fm).
    #[arg(long)]
    pub fuzzy_match: bool,
    /// Name-mapping YAML between the two dumps (msprobe's -dm).
    #[arg(long, value_name = "MAP.yaml")]
    pub data_mapping: Option<PathBuf>,
    /// Cell→Module mapping for MindSpore vs PyTorch (msprobe's -cm); without a file only the
    /// prefix is mapped.
    #[arg(long, value_name = "MAP.yaml", num_args = 0..=1)]
    pub cell_mapping: Option<Option<PathBuf>>,
    /// API-name mapping table between frameworks (msprobe's -am), a flat YAML table.
    #[arg(long, value_name = "MAP.yaml")]
    pub api_mapping: Option<PathBuf>,
    /// Step(s) to compare when a dump root is given (a list compares each: `--step 0,2`).
    #[arg(long, value_delimiter = ',')]
    pub step: Vec<u64>,
    /// Rank(s) to compare when a step or dump root is given (a list compares each).
    #[arg(long, value_delimiter = ',')]
    pub rank: Vec<u64>,
    /// Pairs compared at once when two whole runs are compared (each holds one pair in memory;
    /// default: the number of CPUs).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Write the result table as compare_result_{timestamp}.xlsx instead of CSV (msprobe's --xlsx).
    #[arg(long)]
    pub xlsx: bool,
    /// Continue an interrupted tensor-mode run in the same output directory (for two whole
    /// runs, pairs whose result record shows them done with the same timestamp are skipped).
    #[arg(long)]
    pub resume: bool,
    /// Relative tolerance under which two tensors count as agreeing for the first divergence
    /// (0 = bit-exact; rows whose dtypes differ always get at least 1%).
    #[arg(long, default_value_t = 0.0)]
    pub tolerance: f64,
    /// Which pandas msprobe ran with; its text-to-number parsing changes statistics diffs.
    #[arg(long, value_parser = ["2", "3"], default_value = "2")]
    pub pandas: String,
    /// Timestamp in the output file name: 14 digits, YYYYMMDDHHMMSS (default: now, local time).
    #[arg(long)]
    pub timestamp: Option<String>,
    /// Also write compare_{timestamp}.vis.db, the SQLite file msprobe's graph_visualize writes
    /// for its TensorBoard plugin (tb-graph-ascend).
    #[arg(long)]
    pub vis_db: bool,
    /// Exit 0 when the comparison ran, even if it found error rows (for a pair known to
    /// diverge; without it such a run exits 1, which gates CI jobs).
    #[arg(long)]
    pub exit_zero: bool,
}

/// An indicatif bar over the tensor rows; hidden when stderr is not a terminal.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn start(&self, rows: usize) {
        self.0.set_length(rows as u64);
        // Statistics/md5 dumps have no tensor rows to wait for.
        if rows == 0 {
            self.0.finish_and_clear();
        }
    }
    fn row(&self) {
        self.0.inc(1);
    }
}

pub fn run(args: Args) -> CmdResult {
    if dumpfmt::kernel::is_kernel_dump(&args.target)
        && dumpfmt::kernel::is_kernel_dump(&args.golden)
    {
        return run_kernel(args);
    }
    // One timestamp for every file of the run (table, vis.db).
    let mut args = args;
    args.timestamp = Some(
        args.timestamp
            .take()
            .unwrap_or_else(compare::run::timestamp_now),
    );
    let opts = options(&args);
    if let Some(code) = super::compare_run::try_run(&args, &opts)? {
        return Ok(code);
    }
    if args.step.len() > 1 || args.rank.len() > 1 {
        return Err("--step/--rank lists need two run roots (step*/rank*/ trees)".into());
    }
    run_pair(args, opts)
}

/// The single-pair options of the command line.
pub fn options(args: &Args) -> CompareOptions {
    CompareOptions {
        target: args.target.clone(),
        golden: args.golden.clone(),
        out_dir: args.out.clone(),
        fuzzy_match: args.fuzzy_match,
        data_mapping: args.data_mapping.clone(),
        cell_mapping: args.cell_mapping.clone(),
        api_mapping: args.api_mapping.clone(),
        step: args.step.first().copied(),
        rank: args.rank.first().copied(),
        timestamp: args.timestamp.clone(),
        tolerance: args.tolerance,
        pandas: if args.pandas == "3" {
            PandasCompat::V3
        } else {
            PandasCompat::V2
        },
        resume: args.resume,
        xlsx: args.xlsx,
        // Tensor metrics on the GPU only for large pairs on a hardware adapter.
        backend: Backend::Auto,
        stats_engine: Some(std::sync::Arc::new(super::stats_engine())),
    }
}

fn run_pair(args: Args, opts: CompareOptions) -> CmdResult {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{spinner} comparing tensors {bar:40} {pos}/{len} [{elapsed}<{eta}]",
        )
        .expect("static template"),
    );
    let bar = Bar(bar);
    let (outcome, compared) = compare::run_keeping(&opts, &bar)?;
    bar.0.finish_and_clear();
    let visual = report::write_beside(
        &outcome,
        &compared,
        &opts.out_dir,
        args.vis_db
            .then_some(opts.timestamp.as_deref().unwrap_or_default()),
    )?;
    println!("{}", outcome.summary_text.trim_end());
    println!();
    println!("result table: {}", outcome.table_path.display());
    println!("summary:      {}", outcome.summary_path.display());
    println!("report:       {}", visual.html.display());
    if let Some(db) = &visual.vis_db {
        println!("vis.db:       {}", db.display());
    }
    // The exit-code contract: 1 when the comparison ran and found problems (error rows,
    // unreadable tensors among them).
    Ok(if outcome.summary.row_levels[2] > 0 && !args.exit_zero {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Two MindSpore kernel-level dumps: msprobe's graph-mode tables, one per rank and iteration.
fn run_kernel(args: Args) -> CmdResult {
    let ranks = args
        .rank
        .iter()
        .map(|&r| u32::try_from(r).map_err(|_| format!("--rank {r}: out of range")))
        .collect::<Result<Vec<u32>, String>>()?;
    let opts = compare::kernel::KernelCompareOptions {
        ranks: (!ranks.is_empty()).then_some(ranks),
        steps: (!args.step.is_empty()).then(|| args.step.clone()),
    };
    let outcome = compare::kernel::run_kernel_compare(
        &args.target,
        &args.golden,
        &args.out,
        &opts,
        args.timestamp.as_deref(),
        args.tolerance,
    )?;
    let visual = report::kernel::write_beside(
        &outcome,
        &args.target,
        &args.golden,
        &args.out,
        args.tolerance,
    )?;
    println!("{}", outcome.summary_text.trim_end());
    println!();
    for (_, path) in &outcome.tables {
        println!("result table: {}", path.display());
    }
    println!("summary:      {}", outcome.summary_path.display());
    println!("report:       {}", visual.html.display());
    Ok(if outcome.error_rows > 0 && !args.exit_zero {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
