//! Finding dump files on disk (spec §1): dump root → `step{N}` → rank dir (`rank{R}`, `rank`,
//! `proc{PID}`) → `dump.json`, `stack.json`, `construct.json`, `debug.json`, `dump_tensor_data/`.
//! MindSpore's split roots `graph/` + `pynative/` are two dump roots under one directory.
//!
//! [`discover`] accepts any level: a dump root, a split root, a step dir, a rank dir or a single
//! file. The tensor directory is always `{dir(dump.json)}/dump_tensor_data`, never the
//! `dump_data_dir` string written inside dump.json, and a record's `data_name` is resolved in
//! it by [`resolve_data_name`] only: a plain file name, never a path that leaves it.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use crate::error::{DataNameProblem, Error, Result};
use crate::fsio;
use crate::tensor::{Tensor, read_tensor};

/// A directory [`discover`] did not enter (listed in [`Layout::Tree`]'s `links_out`).
pub use crate::fsio::LinkOut;

/// The name of a rank directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RankId {
    /// `rank{R}`
    Rank(u32),
    /// `rank` ([≤8.x] and MindSpore static L0 without a rank id)
    NoRank,
    /// `proc{PID}` ([26.0+] process without rank information)
    Proc(u64),
}

impl RankId {
    pub fn parse(dir_name: &str) -> Option<RankId> {
        if dir_name == "rank" {
            return Some(RankId::NoRank);
        }
        if let Some(r) = dir_name.strip_prefix("rank").filter(|s| is_number(s)) {
            return r.parse().ok().map(RankId::Rank);
        }
        if let Some(p) = dir_name.strip_prefix("proc").filter(|s| is_number(s)) {
            return p.parse().ok().map(RankId::Proc);
        }
        None
    }
}

impl fmt::Display for RankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankId::Rank(r) => write!(f, "rank{r}"),
            RankId::NoRank => f.write_str("rank"),
            RankId::Proc(p) => write!(f, "proc{p}"),
        }
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

/// `step{N}` → N.
pub fn parse_step(dir_name: &str) -> Option<u64> {
    let n = dir_name.strip_prefix("step")?;
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// One rank directory and the files found in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankDir {
    pub dir: PathBuf,
    /// `graph` / `pynative` for MindSpore split roots.
    pub split: Option<String>,
    /// `None` when the walk started at the rank dir itself or the step dir had an odd name.
    pub step: Option<u64>,
    /// `None` when the walk started at a directory whose name is not a rank name.
    pub rank: Option<RankId>,
    pub dump_json: Option<PathBuf>,
    pub stack_json: Option<PathBuf>,
    pub construct_json: Option<PathBuf>,
    pub debug_json: Option<PathBuf>,
    /// `dump_tensor_data/` when it exists.
    pub tensor_dir: Option<PathBuf>,
}

impl RankDir {
    /// Reads what is in `dir` (no recursion). Its JSON files are kept when they are regular
    /// files, or links that stay inside `dir` ([`crate::fsio::check_found_file`]).
    pub fn scan(dir: &Path) -> RankDir {
        let file = |n: &str| {
            let p = dir.join(n);
            (p.is_file() && crate::fsio::check_found_file(&p).is_ok()).then_some(p)
        };
        let td = dir.join("dump_tensor_data");
        RankDir {
            dir: dir.to_path_buf(),
            split: None,
            step: None,
            rank: dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(RankId::parse),
            dump_json: file("dump.json"),
            stack_json: file("stack.json"),
            construct_json: file("construct.json"),
            debug_json: file("debug.json"),
            tensor_dir: td.is_dir().then_some(td),
        }
    }

    /// The file `data_name` names in this rank's `dump_tensor_data/` ([`resolve_data_name`]).
    pub fn tensor_path(&self, data_name: &str) -> Result<PathBuf> {
        resolve_data_name(&self.dir.join("dump_tensor_data"), data_name)
    }

    /// Reads the tensor file `data_name` of this rank (memory-mapped when large); its
    /// [`Tensor::array`] is an `ndarray` view.
    pub fn tensor(&self, data_name: &str) -> Result<Tensor> {
        read_tensor(&self.tensor_path(data_name)?)
    }

    fn has_dump_files(&self) -> bool {
        self.dump_json.is_some()
            || self.debug_json.is_some()
            || self.stack_json.is_some()
            || self.construct_json.is_some()
            || self.tensor_dir.is_some()
    }
}

/// What [`discover`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A directory tree: every rank directory, sorted by split, step and rank, and the
    /// directories below `root` that were not entered because they link out of it.
    Tree {
        root: PathBuf,
        ranks: Vec<RankDir>,
        links_out: Vec<LinkOut>,
    },
    /// A single file (a JSON file or a tensor file).
    File(PathBuf),
}

impl Layout {
    pub fn ranks(&self) -> &[RankDir] {
        match self {
            Layout::Tree { ranks, .. } => ranks,
            Layout::File(_) => &[],
        }
    }

    /// Distinct (split, step) pairs.
    pub fn step_count(&self) -> usize {
        let mut steps: Vec<(Option<&str>, Option<u64>)> = self
            .ranks()
            .iter()
            .map(|r| (r.split.as_deref(), r.step))
            .collect();
        steps.dedup();
        steps.len()
    }
}

/// The directories in `dir` (links followed), sorted by name.
fn subdirs(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let p = e.path();
        if p.is_dir()
            && let Some(n) = e.file_name().to_str()
        {
            out.push((n.to_string(), p));
        }
    }
    out.sort();
    Ok(out)
}

/// The walk of one dump: the directory the user named, and the links found leading out of it.
struct Walk<'a> {
    root: &'a Path,
    links_out: Vec<LinkOut>,
}

impl Walk<'_> {
    /// Whether the walk enters `p`, a directory it found: a link out of the root is noted,
    /// not entered.
    fn enters(&mut self, p: &Path) -> Result<bool> {
        let link = fsio::dir_link_out(p, self.root)?;
        let enters = link.is_none();
        self.links_out.extend(link);
        Ok(enters)
    }

    fn step_ranks(
        &mut self,
        step_dir: &Path,
        step: Option<u64>,
        split: Option<&str>,
    ) -> Result<Vec<RankDir>> {
        let mut out = Vec::new();
        for (name, p) in subdirs(step_dir)? {
            if RankId::parse(&name).is_some() && self.enters(&p)? {
                let mut r = RankDir::scan(&p);
                r.step = step;
                r.split = split.map(str::to_string);
                out.push(r);
            }
        }
        out.sort_by_key(|r| r.rank);
        Ok(out)
    }

    /// The ranks of the `step{N}` directories in `dir` (the root, or a split root in it).
    fn root_ranks(&mut self, dir: &Path, split: Option<&str>) -> Result<Vec<RankDir>> {
        let mut steps: Vec<(u64, PathBuf)> = subdirs(dir)?
            .into_iter()
            .filter_map(|(n, p)| parse_step(&n).map(|s| (s, p)))
            .collect();
        steps.sort();
        let mut out = Vec::new();
        for (s, p) in steps {
            if self.enters(&p)? {
                out.extend(self.step_ranks(&p, Some(s), split)?);
            }
        }
        Ok(out)
    }
}

/// Finds every rank directory under `path` (or `path` itself as a file or rank dir). A step,
/// rank or split directory that is a link leading out of `path` is not entered: it is listed
/// in [`Layout::Tree`]'s `links_out` ([`crate::fsio::check_found_dir`]).
pub fn discover(path: &Path) -> Result<Layout> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return Ok(Layout::File(path.to_path_buf()));
    }
    if !meta.is_dir() {
        return Err(Error::NotRegularFile {
            file: path.to_path_buf(),
            kind: crate::fsio::kind_of(&meta.file_type()),
        });
    }
    let here = RankDir::scan(path);
    if here.has_dump_files() {
        // A rank dir; its step comes from the parent's name when it has one.
        let mut r = here;
        r.step = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .and_then(parse_step);
        return Ok(Layout::Tree {
            root: path.to_path_buf(),
            ranks: vec![r],
            links_out: Vec::new(),
        });
    }
    let mut walk = Walk {
        root: path,
        links_out: Vec::new(),
    };
    let dirs = subdirs(path)?;
    let mut ranks = Vec::new();
    if dirs.iter().any(|(n, _)| parse_step(n).is_some()) {
        ranks = walk.root_ranks(path, None)?;
    } else if dirs.iter().any(|(n, _)| RankId::parse(n).is_some()) {
        let step = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_step);
        ranks = walk.step_ranks(path, step, None)?;
    } else {
        for split in ["graph", "pynative"] {
            let p = path.join(split);
            if p.is_dir() && walk.enters(&p)? {
                ranks.extend(walk.root_ranks(&p, Some(split))?);
            }
        }
    }
    if ranks.is_empty() && walk.links_out.is_empty() {
        return Err(Error::Layout {
            dir: path.to_path_buf(),
            msg:
                "not a dump root, step or rank directory (no step*/rank*/proc* dirs, no dump.json)"
                    .into(),
        });
    }
    Ok(Layout::Tree {
        root: path.to_path_buf(),
        ranks,
        links_out: walk.links_out,
    })
}

/// Whether `name` is a plain file name: not empty, `.` or `..`, no `/` or `\` (on any
/// platform), nothing a platform reads as a root or drive prefix. The rule for every
/// `data_name` (msprobe writes bare names).
pub fn is_file_name(name: &str) -> bool {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
        return false;
    }
    let mut parts = Path::new(name).components();
    matches!(
        (parts.next(), parts.next()),
        (Some(Component::Normal(n)), None) if n == name
    )
}

/// The path of the file `data_name` names in `tensor_dir` (a rank's `dump_tensor_data/`).
///
/// The name must be a plain file name ([`is_file_name`]) of a regular file in the directory;
/// a symbolic link there is followed only when its target stays inside the directory, and the
/// directory, when itself a link, must resolve inside its rank directory. Every
/// reader that turns a record's `data_name` into a path goes through here, so a hostile
/// dump.json cannot make numprobe read outside the dump. Errors are [`Error::DataName`]
/// naming the directory and the name (or [`Error::Io`] when the directory cannot be read).
pub fn resolve_data_name(tensor_dir: &Path, data_name: &str) -> Result<PathBuf> {
    let refuse = |problem| Error::DataName {
        dir: tensor_dir.to_path_buf(),
        name: data_name.to_string(),
        problem,
    };
    if !is_file_name(data_name) {
        return Err(refuse(DataNameProblem::NotAFileName));
    }
    // The directory itself may be a link (a dump moved and linked back), but not one that
    // leads out of the rank directory it sits in: that would read another dump's files, or any.
    if std::fs::symlink_metadata(tensor_dir).is_ok_and(|m| m.file_type().is_symlink())
        && let Some(target) = fsio::real_path_outside(tensor_dir, fsio::parent_dir(tensor_dir))?
    {
        return Err(refuse(DataNameProblem::DirOutsideDump { target }));
    }
    let path = tensor_dir.join(data_name);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(DataNameProblem::Missing));
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    if meta.is_file() {
        return Ok(path);
    }
    if !meta.file_type().is_symlink() {
        return Err(refuse(DataNameProblem::NotRegularFile));
    }
    // A link: its final target must lie under the directory's own real path.
    match fsio::real_path_outside(&path, tensor_dir) {
        Ok(None) => {}
        Ok(Some(target)) => return Err(refuse(DataNameProblem::OutsideDir { target })),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            // A dangling link (a missing tensor directory fails earlier, at symlink_metadata).
            return Err(refuse(DataNameProblem::Missing));
        }
        Err(e) => return Err(e),
    }
    if !path.is_file() {
        return Err(refuse(DataNameProblem::NotRegularFile));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        for ok in ["Torch.add.0.forward.input.0.pt", "a", "..a", "a..", "x.npy"] {
            assert!(is_file_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "/",
            "/etc/passwd",
            "a/b",
            "a\\b",
            "../a",
            "a/",
            "./a",
        ] {
            assert!(!is_file_name(bad), "{bad}");
        }
    }
}
