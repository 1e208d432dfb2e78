//! The visual side of a compare: `report.html`, one self-contained page (tree of the model,
//! error plot, first divergence, detail panel), and `compare_{timestamp}.vis.db`, the SQLite file
//! msprobe's `graph_visualize` writes for its TensorBoard plugin (tb-graph-ascend).
//!
//! Both are built from a finished compare ([`compare::Compared`] and its
//! [`compare::divergence::Summary`]) plus each side's `construct.json`: [`model::Model`] turns
//! them into one tree (modules from construct.json at L0/mix, call sites named by stack.json at
//! L1) with each API's worst verdict; [`html`] and [`visdb`] write it out. [`kernel`] builds the
//! same page from a kernel-dump compare (kernels grouped by scope), [`run`] writes one page per
//! (step, rank) pair of a whole-run compare, and [`index`] the page listing a run's pairs.

pub mod html;
pub mod index;
pub mod kernel;
pub mod model;
pub mod run;
pub mod visdb;
pub mod visdb_data;

use std::path::{Path, PathBuf};

pub use model::{Input, Model};

/// Errors of the report writers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Dump(#[from] dumpfmt::Error),
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{0}")]
    Format(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Reads the `construct.json` beside a `dump.json`; `None` when there is none. A FIFO, a
/// directory, a link out of the directory or a malformed file under that name is an error
/// naming the file.
pub fn construct_beside(dump_json: &Path) -> Result<Option<dumpfmt::construct::ConstructFile>> {
    let path = dump_json.with_file_name("construct.json");
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => {
            // Found beside dump.json, not named by the user: not followed out of its directory.
            Ok(Some(dumpfmt::construct::ConstructFile::open_found(&path)?))
        }
    }
}

/// What [`write_beside`] wrote.
pub struct Written {
    pub html: PathBuf,
    pub vis_db: Option<PathBuf>,
}

/// Writes `report.html` (always) and, with a timestamp, `compare_{timestamp}.vis.db` into the
/// compare's output directory, reading each side's construct.json beside its dump.json.
pub fn write_beside(
    outcome: &compare::CompareOutcome,
    compared: &compare::Compared,
    out_dir: &Path,
    vis_db_timestamp: Option<&str>,
) -> Result<Written> {
    let target_construct = construct_beside(&outcome.target_dump_json)?;
    let golden_construct = construct_beside(&outcome.golden_dump_json)?;
    let input = Input {
        compared,
        summary: &outcome.summary,
        target_construct: target_construct.as_ref(),
        golden_construct: golden_construct.as_ref(),
        target_name: outcome.target_dump_json.display().to_string(),
        golden_name: outcome.golden_dump_json.display().to_string(),
    };
    let model = Model::build(&input);
    let html = out_dir.join("report.html");
    html::write(&model, &input, &html)?;
    let vis_db = match vis_db_timestamp {
        Some(ts) => {
            dumpfmt::outfile::check_timestamp(ts).map_err(Error::Format)?;
            let path = out_dir.join(format!("compare_{ts}.vis.db"));
            let (step, rank) = visdb::step_rank(&outcome.target_dump_json);
            let golden_stacks = visdb::golden_stacks(&outcome.golden_dump_json)?;
            let target_data = visdb::dump_data(&outcome.target_dump_json)?;
            let golden_data = visdb::dump_data(&outcome.golden_dump_json)?;
            visdb::write_with_stacks(
                &input,
                &path,
                step,
                rank,
                (&target_data, &golden_data),
                Some(golden_stacks),
            )?;
            Some(path)
        }
        None => None,
    };
    Ok(Written { html, vis_db })
}
