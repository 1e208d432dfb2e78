//! Errors of the capture crate, each naming the file involved.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: byte {offset}: {msg}")]
    Journal {
        path: PathBuf,
        offset: u64,
        msg: String,
    },
    #[error(transparent)]
    Dump(#[from] dumpfmt::Error),
    #[error("statistics: {0}")]
    Stats(#[from] stats_gpu::summary::StatsError),
    #[error("tensor: {0}")]
    Tensor(String),
    /// Another capture holds this rank directory's journal.
    #[error(
        "{dir}: another capture is writing to this directory (its journal is locked); \
         give each run its own dump_path or rank"
    )]
    Busy { dir: PathBuf },
    /// Several steps' files could not be made durable (their journals stayed).
    #[error(
        "{first} (and {more} more steps whose files could not be made durable; their journals stayed)"
    )]
    Durable { first: Box<Error>, more: usize },
    #[error("{path}: no journal ({journal}) found below it")]
    NoJournal {
        path: PathBuf,
        journal: &'static str,
    },
}

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
