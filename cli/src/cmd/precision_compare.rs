//! `numprobe precision-compare --npu NPU.csv --gpu GPU.csv --out DIR`: msprobe's
//! api_precision_compare over two `accuracy_checking_details_*.csv` files.

use super::CmdResult;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// accuracy_checking_details CSV of the device under test.
    #[arg(long)]
    pub npu: PathBuf,
    /// accuracy_checking_details CSV of the benchmark device.
    #[arg(long)]
    pub gpu: PathBuf,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Timestamp in the output file names: 14 digits, YYYYMMDDHHMMSS (default: now, local time).
    #[arg(long)]
    pub timestamp: Option<String>,
}

pub fn run(args: Args) -> CmdResult {
    // ulp checks the timestamp and the inputs, then creates the output directory.
    let ts = args.timestamp.unwrap_or_else(compare::run::timestamp_now);
    let out = ulp::precision_compare::run(&args.npu, &args.gpu, &args.out, &ts)?;
    println!("result:  {}", out.result_csv.display());
    println!("details: {}", out.details_csv.display());
    Ok(match out.aborted {
        // msprobe leaves header-only files when it aborts; so do we, and say why.
        Some(why) => {
            eprintln!("numprobe: precision-compare aborted: {why}");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    })
}
