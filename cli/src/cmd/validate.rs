//! `numprobe validate <path>`: every JSON file parsed and checked, every data_name resolved and
//! its tensor header compared with the record. Exit 0 only when nothing is wrong.

use super::CmdResult;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A dump root, a step directory, a rank directory, or a single JSON or tensor file.
    pub path: PathBuf,
    /// Also print warnings (e.g. tensor files no record names, as a crash can leave behind).
    #[arg(long)]
    pub warnings: bool,
}

pub fn run(args: Args) -> CmdResult {
    let report = dumpfmt::validate::validate(&args.path)?;
    println!("{}", report.summary());
    for p in &report.problems {
        println!("error: {p}");
    }
    if args.warnings {
        for w in &report.warnings {
            println!("warning: {w}");
        }
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
