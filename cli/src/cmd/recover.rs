//! `numprobe recover DIR`: rebuild dump.json, stack.json and construct.json of a capture that was
//! killed, from the append-only journal in each rank directory at or below DIR.

use super::CmdResult;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A rank directory, a step directory or a whole dump root written by numprobe's capture.
    pub dir: PathBuf,
}

pub fn run(args: Args) -> CmdResult {
    for r in capture::recover(&args.dir)? {
        let torn = if r.ignored_tail > 0 {
            format!(", ignored a torn tail of {} bytes", r.ignored_tail)
        } else {
            String::new()
        };
        let unfilled = if r.unfilled > 0 {
            format!(
                ", {} tensor records without statistics (killed before their device readback)",
                r.unfilled
            )
        } else {
            String::new()
        };
        println!(
            "{}: {} entries from {} journal records{torn}{unfilled}",
            r.dir.display(),
            r.entries,
            r.records
        );
    }
    Ok(ExitCode::SUCCESS)
}
