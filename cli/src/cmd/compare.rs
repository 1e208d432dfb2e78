//! `numprobe compare TARGET GOLDEN --out DIR`: msprobe's compare result table
//! (`compare_result_{timestamp}.csv`) plus `summary.md` and a terminal summary naming the first
//! divergence.

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
    /// Step to compare when a dump root is given.
    #[arg(long)]
    pub step: Option<u64>,
    /// Rank to compare when a step or dump root is given.
    #[arg(long)]
    pub rank: Option<u64>,
    /// Write the result table as compare_result_{timestamp}.xlsx instead of CSV (msprobe's --xlsx).
    #[arg(long)]
    pub xlsx: bool,
    /// Continue an interrupted tensor-mode run in the same output directory.
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
    let opts = CompareOptions {
        target: args.target,
        golden: args.golden,
        out_dir: args.out,
        fuzzy_match: args.fuzzy_match,
        data_mapping: args.data_mapping,
        cell_mapping: args.cell_mapping,
        api_mapping: args.api_mapping,
        step: args.step,
        rank: args.rank,
        timestamp: args.timestamp,
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
    };
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{spinner} comparing tensors {bar:40} {pos}/{len} [{elapsed}<{eta}]",
        )
        .expect("static template"),
    );
    let bar = Bar(bar);
    let outcome = compare::run(&opts, &bar)?;
    bar.0.finish_and_clear();
    println!("{}", outcome.summary_text.trim_end());
    println!();
    println!("result table: {}", outcome.table_path.display());
    println!("summary:      {}", outcome.summary_path.display());
    // The exit-code contract: 1 when the comparison ran and found problems (error rows,
    // unreadable tensors among them).
    Ok(if outcome.summary.row_levels[2] > 0 && !args.exit_zero {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
