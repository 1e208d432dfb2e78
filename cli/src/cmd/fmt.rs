//! `numprobe fmt <file.json> [-o OUT]`: parse a dump.json / stack.json / construct.json /
//! debug.json and write it back exactly as msprobe's `json.dump(indent=1)` would. On files msprobe
//! wrote, the output is byte-identical to the input; unknown keys and key order are kept.

use super::CmdResult;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The JSON file to re-serialize.
    pub file: PathBuf,
    /// Where to write (default: standard output). Written through a temporary file, so a
    /// failure never leaves a partial file behind.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    let value = dumpfmt::json::parse_file(&args.file)?;
    let bytes = dumpfmt::json::to_python_bytes(&value);
    match args.output {
        Some(out) => {
            // Never through a link, never half-written (the error names the file).
            dumpfmt::outfile::write(&out, &bytes)?
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&bytes)?;
            stdout.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
