//! `numprobe acc-check --bench B.npy --device D.npy --api-name NAME`: judge one device output
//! against its benchmark with msprobe's accuracy standards; prints the row msprobe writes to
//! `accuracy_checking_details_*.csv`, or a JSON object with `--json`.

use super::CmdResult;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use std::path::PathBuf;
use std::process::ExitCode;
use ulp::{CheckOptions, DType, Output};

#[derive(clap::Args)]
pub struct Args {
    /// Benchmark output (float32 for float16/bfloat16 devices, float64 for float32/float64).
    #[arg(long)]
    pub bench: PathBuf,
    /// Device output.
    #[arg(long)]
    pub device: PathBuf,
    /// API Name column, e.g. `Functional.relu.0.forward.output.0`; its bare name selects rules.
    #[arg(long)]
    pub api_name: String,
    /// The device dtype when it differs from the file's (bfloat16 data comes as float32 .npy).
    #[arg(long, value_parser = PossibleValuesParser::new(["float16", "bfloat16", "float32", "float64"])
        .map(|name| DType::from_numpy_name(&name).expect("a listed numpy name")))]
    pub device_dtype: Option<DType>,
    /// Print a JSON object with every detail field and the CSV line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    // ulp's standards read whole arrays (numpy's float32 means are re-blocked across the whole
    // pair, the integer and ULP checks index both), so a strided `.pt` view is gathered into C
    // order: a sliced or transposed one is never larger than its storage, and a broadcast
    // (stride-0) one is gathered only up to its storage plus `dumpfmt::pt::MAX_VIEW_GROWTH`;
    // past that `dumpfmt::Error::ViewTooLarge` (file, sizes, bound) before any allocation.
    let bench_t = dumpfmt::tensor::read_tensor(&args.bench)?;
    let device_t = dumpfmt::tensor::read_tensor(&args.device)?;
    let bench = Output::new(bench_t.view());
    let device = Output::with_dtype(
        device_t.view(),
        args.device_dtype.unwrap_or(device_t.dtype()),
    );
    let bare = ulp::bare_api_name(&args.api_name).unwrap_or_else(|| args.api_name.clone());
    let verdict =
        ulp::check_output(&bare, bench, device, CheckOptions::default()).map_err(|e| {
            let ulp::CheckError::UnsupportedDtype { side, .. } = &e;
            let path = if *side == "bench" {
                &args.bench
            } else {
                &args.device
            };
            format!("{}: {e}", path.display())
        })?;
    let failed = verdict.status == ulp::Status::Error;
    let row = verdict.row;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&row.to_json(&args.api_name))?
        );
    } else {
        println!("{}", row.csv_line(&args.api_name));
    }
    // 1: the check ran and the output failed msprobe's standards.
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
