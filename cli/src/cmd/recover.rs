//! `numprobe recover DIR`: rebuild dump.json, stack.json and construct.json of a capture that was
//! killed, from the append-only journal in each rank directory at or below DIR.
//!
//! Exit codes: 0 every rank recovered from an intact journal (a torn tail is what a kill leaves
//! and is only reported); 1 something could not be read (damage in the middle of a journal,
//! malformed or unknown records) or a rank was refused because its journal gives fewer
//! entries than the dump.json already there (`--force` replaces it anyway); 2 could not run.

use super::CmdResult;
use capture::{RecoverOptions, RecoverOutcome};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A rank directory, a step directory or a whole dump root written by numprobe's capture.
    pub dir: PathBuf,
    /// Replace a dump.json even when the journal gives fewer entries than it holds (the
    /// previous files are still kept as NAME.bak-N).
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: Args) -> CmdResult {
    let mut problems = false;
    for r in capture::recover_with(&args.dir, RecoverOptions { force: args.force })? {
        let mut notes = Vec::new();
        if r.ignored_tail > 0 {
            notes.push(format!(
                "ignored a torn tail of {} bytes (the end of a killed run)",
                r.ignored_tail
            ));
        }
        if r.damaged_frames > 0 {
            problems = true;
            notes.push(format!(
                "could not read at least {} record(s) in the middle of the journal ({} damaged bytes skipped; reading resumed after them)",
                r.damaged_frames, r.damaged_bytes
            ));
        }
        if r.malformed_records > 0 {
            problems = true;
            notes.push(format!(
                "{} intact record(s) could not be decoded",
                r.malformed_records
            ));
        }
        if !r.unknown_kinds.is_empty() {
            problems = true;
            let kinds: Vec<String> = r
                .unknown_kinds
                .iter()
                .map(|(k, n)| format!("kind {k}: {n}"))
                .collect();
            notes.push(format!(
                "{} record(s) of kinds this numprobe does not know, not applied ({}; written by a newer numprobe?)",
                r.unknown_kinds.values().sum::<usize>(),
                kinds.join(", ")
            ));
        }
        if r.unfilled > 0 {
            notes.push(format!(
                "{} tensor records without statistics (killed before their device readback)",
                r.unfilled
            ));
        }
        let what = match &r.outcome {
            RecoverOutcome::Written { backup: Some(n) } => {
                format!("written; the previous files are kept as *.bak-{n}")
            }
            RecoverOutcome::Written { backup: None } => "written".into(),
            RecoverOutcome::Unchanged => "unchanged (the files already hold this)".into(),
            RecoverOutcome::Refused {
                previous,
                recovered,
            } => {
                problems = true;
                eprintln!(
                    "numprobe: {}: not replaced: dump.json holds {previous} entries and the journal gives {recovered}; {} entries would be lost (--force replaces it, keeping the old files as *.bak-N)",
                    r.dir.display(),
                    previous - recovered
                );
                "refused".into()
            }
        };
        let notes: String = notes.iter().map(|n| format!("; {n}")).collect();
        println!(
            "{}: {} entries from {} journal records: {what}{notes}",
            r.dir.display(),
            r.entries,
            r.records
        );
    }
    Ok(if problems {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
