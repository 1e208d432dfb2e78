//! Typed errors. Every error names the file it came from and, where it applies, the JSON path
//! (`$.data["Torch.abs.0.forward"].input_args[0].dtype`) or the byte offset of the problem.

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing dump files.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, read or written.
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not (msprobe-flavoured) JSON.
    #[error("{file}: invalid JSON at byte {offset} (line {line}, column {column}): {msg}")]
    Json {
        file: PathBuf,
        offset: u64,
        line: u64,
        column: u64,
        msg: String,
    },
    /// Valid JSON whose content breaks the dump format.
    #[error("{file}: {path}: {msg}")]
    Schema {
        file: PathBuf,
        path: String,
        msg: String,
    },
    /// A binary tensor file (.npy, .pt, the pickle or zip inside) is malformed.
    #[error("{file}: byte {offset}: {msg}")]
    Tensor {
        file: PathBuf,
        offset: u64,
        msg: String,
    },
    /// A strided view whose C-order copy would outgrow its storage by more than the bound the
    /// caller gathers views up to ([`crate::pt::MAX_VIEW_GROWTH`] by default): refused before
    /// anything is allocated. Readers that go through the strides a chunk at a time
    /// ([`crate::pt::open`]) never meet it.
    #[error(
        "{file}: strided view (size {size:?}, stride {stride:?}) would take {nbytes} bytes in C \
         order from a storage of {storage_nbytes} bytes, more than the storage plus {max_growth} \
         bytes numprobe materialises; refused"
    )]
    ViewTooLarge {
        file: PathBuf,
        size: Vec<u64>,
        stride: Vec<u64>,
        nbytes: u64,
        storage_nbytes: u64,
        max_growth: u64,
    },
    /// A dtype string that neither framework writes.
    #[error("{file}: {path}: unknown dtype {dtype:?}")]
    UnknownDtype {
        file: PathBuf,
        path: String,
        dtype: String,
    },
    /// A path that should be a regular file is a FIFO, device, socket or directory: refused
    /// before any read, since reading one can block forever or never end.
    #[error("{file}: not a regular file (a {kind}); refusing to read it")]
    NotRegularFile { file: PathBuf, kind: &'static str },
    /// A dump's own file (dump.json, stack.json, construct.json, found in its directory, not
    /// named by the user) that is a symbolic link to a file outside that directory: refused,
    /// see [`crate::fsio::check_found_file`].
    #[error("{file}: a symbolic link to {target}, outside its directory; refusing to read it")]
    LinkOutside { file: PathBuf, target: PathBuf },
    /// A step, rank or split directory found while walking a dump from `root` (the directory
    /// the user named) that is a symbolic link leading out of `root`: not entered, see
    /// [`crate::fsio::check_found_dir`].
    #[error("{dir}: a symbolic link to {target}, outside the dump {root}; refusing to enter it")]
    DirOutsideDump {
        dir: PathBuf,
        target: PathBuf,
        root: PathBuf,
    },
    /// A directory that is not a dump root, step or rank directory.
    #[error("{dir}: {msg}")]
    Layout { dir: PathBuf, msg: String },
    /// A `data_name` that does not resolve to a file inside its tensor directory
    /// (`dump_tensor_data/`): see [`crate::layout::resolve_data_name`].
    #[error("{dir}: data_name {name:?}: {problem}")]
    DataName {
        /// The tensor directory the name was resolved in.
        dir: PathBuf,
        name: String,
        problem: DataNameProblem,
    },
}

/// Why a `data_name` names no file of the tensor directory.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DataNameProblem {
    /// Not a plain file name: empty, `.`, `..`, absolute, or holding a path separator.
    #[error("not a file name")]
    NotAFileName,
    /// No such file in the directory.
    #[error("no such file in the tensor directory")]
    Missing,
    /// Something that is not a regular file: a directory, FIFO, socket or device (reading one
    /// can block forever or never end).
    #[error("not a regular file")]
    NotRegularFile,
    /// A symbolic link whose target lies outside the directory.
    #[error("a link to {target}, outside the tensor directory")]
    OutsideDir { target: PathBuf },
    /// The tensor directory itself is a link that leads outside the dump's rank directory.
    #[error("the tensor directory is a link to {target}, outside the rank directory")]
    DirOutsideDump { target: PathBuf },
}

impl Error {
    pub fn io(file: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            file: file.into(),
            source,
        }
    }

    pub fn schema(
        file: impl Into<PathBuf>,
        path: impl Into<String>,
        msg: impl Into<String>,
    ) -> Self {
        Error::Schema {
            file: file.into(),
            path: path.into(),
            msg: msg.into(),
        }
    }

    pub fn tensor(file: impl Into<PathBuf>, offset: u64, msg: impl Into<String>) -> Self {
        Error::Tensor {
            file: file.into(),
            offset,
            msg: msg.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
