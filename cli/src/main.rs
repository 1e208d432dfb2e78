//! `numprobe`: the command-line front of the numprobe crates. Argument parsing, file discovery,
//! progress and exit codes live here; every computation lives in the library crates.

mod cmd;
mod settings;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "numprobe",
    version,
    about = "Find where the numbers of a training run go wrong: read, check and compare msprobe dumps",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a dump root, step, rank directory or single file; exit 0 only when all is valid.
    Validate(cmd::validate::Args),
    /// Re-serialize a dump.json / stack.json / construct.json exactly as msprobe writes it.
    Fmt(cmd::fmt::Args),
    /// Print a tensor file's dtype, shape and byte count as JSON.
    Inspect(cmd::inspect::Args),
    /// Statistics of one tensor file as msprobe would record them (Max, Min, Mean, Norm, md5).
    Stats(cmd::stats::Args),
    /// Judge one device output against its benchmark with msprobe's accuracy standards.
    AccCheck(cmd::acc_check::Args),
    /// msprobe's api_precision_compare over two accuracy_checking_details CSVs.
    PrecisionCompare(cmd::precision_compare::Args),
    /// Compare a target dump with a golden one: msprobe's result table and the first divergence.
    Compare(cmd::compare::Args),
    /// Rebuild the JSON files of a killed capture from its journal.
    Recover(cmd::recover::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(a) => cmd::validate::run(a),
        Command::Fmt(a) => cmd::fmt::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Stats(a) => cmd::stats::run(a),
        Command::AccCheck(a) => cmd::acc_check::run(a),
        Command::PrecisionCompare(a) => cmd::precision_compare::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Recover(a) => cmd::recover::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("numprobe: error: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::from(2)
        }
    }
}
