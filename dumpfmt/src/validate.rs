//! The checks behind `numprobe validate <path>`.
//!
//! [`validate`] accepts a dump root, a MindSpore split root, a step dir, a rank dir or a single
//! file (JSON or tensor) and checks, for every rank directory:
//!
//! * every JSON file parses, and dump.json / debug.json / stack.json / construct.json follow the
//!   schema;
//! * every `data_name` names an existing file in `dump_tensor_data/` (a plain file name; a link
//!   there must not lead outside it: [`layout::resolve_data_name`]), whose header agrees with the
//!   record's dtype and shape (MindSpore saves BFloat16 and float8 tensors as float32 `.npy`;
//!   PyTorch saves numpy string arrays as `.npy`);
//! * stack.json names are dump.json entries (msprobe records stacks only for entries it dumps;
//!   task `structure` dumps no data, so the rule does not apply there). A problem for the
//!   grouped [8.x+] layout; only a warning for the per-name [1.x] layout, whose samples in the
//!   wild are often trimmed by hand.
//!
//! Problems break the format; warnings are legal but worth knowing: tensor files no record
//! names (a crash between writing tensors and the next JSON flush leaves them, spec §5.1) and
//! `data_name`s that differ from msprobe's naming rule.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::DType;
use crate::construct::ConstructFile;
use crate::dump::DumpFile;
use crate::error::{DataNameProblem, Error, Result};
use crate::json;
use crate::layout::{self, Layout, RankDir};
use crate::names::{EntryName, Framework};
use crate::stack::{StackFile, StackFormat};
use crate::tensor::{self, FileInfo};

/// One finding: a file, where in it (JSON path or byte offset), and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// `$.data["…"].input_args[0].dtype`, `byte 123 (line 4, column 7)`, or empty.
    pub location: String,
    pub message: String,
}

impl Problem {
    pub fn new(
        file: impl Into<PathBuf>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Problem {
        Problem {
            file: file.into(),
            location: location.into(),
            message: message.into(),
        }
    }

    /// Splits an [`Error`] into file, location and message.
    pub fn from_error(e: &Error) -> Problem {
        match e {
            Error::Io { file, source } => Problem::new(file, "", source.to_string()),
            Error::Json {
                file,
                offset,
                line,
                column,
                msg,
            } => Problem::new(
                file,
                format!("byte {offset} (line {line}, column {column})"),
                format!("invalid JSON: {msg}"),
            ),
            Error::Schema { file, path, msg } => Problem::new(file, path, msg),
            Error::Tensor { file, offset, msg } => {
                Problem::new(file, format!("byte {offset}"), msg)
            }
            Error::UnknownDtype { file, path, dtype } => {
                Problem::new(file, path, format!("unknown dtype {dtype:?}"))
            }
            Error::NotRegularFile { file, kind } => Problem::new(
                file,
                "",
                format!("not a regular file (a {kind}); refusing to read it"),
            ),
            Error::ViewTooLarge { file, .. } | Error::DirOutsideDump { dir: file, .. } => {
                // The message is the error's own text without its leading file name.
                let text = e.to_string();
                let prefix = format!("{}: ", file.display());
                let msg = text.strip_prefix(&prefix).unwrap_or(&text).to_string();
                Problem::new(file, "", msg)
            }
            Error::LinkOutside { file, target } => Problem::new(
                file,
                "",
                format!(
                    "a symbolic link to {}, outside its directory; refusing to read it",
                    target.display()
                ),
            ),
            Error::Layout { dir, msg } => Problem::new(dir, "", msg),
            Error::DataName { dir, name, problem } => {
                Problem::new(dir, "", format!("data_name {name:?}: {problem}"))
            }
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                self.location,
                self.message
            )
        }
    }
}

/// What [`validate`] counted and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub path: PathBuf,
    /// Distinct step directories (per split root).
    pub steps: usize,
    pub ranks: usize,
    pub json_files: usize,
    /// Entries of dump.json / debug.json, all kinds.
    pub entries: usize,
    /// API entries (`{Prefix}.{api}.{n}.{forward|backward}`).
    pub api_entries: usize,
    /// Module/cell forward, backward and parameters_grad entries.
    pub module_entries: usize,
    pub tensor_records: usize,
    /// Records with a `data_name`.
    pub file_records: usize,
    /// Files in `dump_tensor_data/` (or 1 for a single tensor file).
    pub tensor_files: usize,
    pub problems: Vec<Problem>,
    pub warnings: Vec<Problem>,
    /// Rows of `statistic.csv` files, when `path` is a MindSpore kernel-level dump
    /// ([`crate::kernel`]); `None` for API dumps.
    pub kernel_statistic_rows: Option<usize>,
}

impl Report {
    /// No problems (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// One line of counts.
    pub fn summary(&self) -> String {
        if let Some(rows) = self.kernel_statistic_rows {
            return format!(
                "{}: MindSpore kernel dump: {} step folder(s), {} rank dir(s), {} tensor files, {} statistic.csv row(s): {} problem(s), {} warning(s)",
                self.path.display(),
                self.steps,
                self.ranks,
                self.tensor_files,
                rows,
                self.problems.len(),
                self.warnings.len()
            );
        }
        format!(
            "{}: {} step(s), {} rank dir(s), {} JSON file(s), {} entries ({} API, {} module), {} tensor records ({} with files), {} tensor files: {} problem(s), {} warning(s)",
            self.path.display(),
            self.steps,
            self.ranks,
            self.json_files,
            self.entries,
            self.api_entries,
            self.module_entries,
            self.tensor_records,
            self.file_records,
            self.tensor_files,
            self.problems.len(),
            self.warnings.len()
        )
    }
}

impl fmt::Display for Report {
    /// The summary line, then one line per problem (`error: …`) and warning (`warning: …`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for p in &self.problems {
            writeln!(f, "error: {p}")?;
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

/// Validates whatever `path` is (see the module docs). `Err` only when `path` cannot be read
/// or is no dump at all; everything found inside is reported in the [`Report`].
pub fn validate(path: &Path) -> Result<Report> {
    if crate::kernel::is_kernel_dump(path) {
        return validate_kernel_dump(path);
    }
    let layout = layout::discover(path)?;
    let mut report = Report {
        path: path.to_path_buf(),
        ..Report::default()
    };
    match &layout {
        Layout::File(f) => validate_single_file(f, &mut report),
        Layout::Tree {
            ranks, links_out, ..
        } => {
            for link in links_out {
                report.problems.push(Problem::from_error(&link.to_error()));
            }
            report.steps = layout.step_count();
            report.ranks = ranks.len();
            for r in ranks {
                validate_rank(r, &mut report);
            }
        }
    }
    Ok(report)
}

/// A MindSpore kernel-level dump: every step folder's entries are regular files, every `.npy`
/// name follows the grammar and its header agrees with the dtype the name states,
/// `statistic.csv` and `mapping.csv` parse; a rank without its execution-order file is a warning.
fn validate_kernel_dump(path: &Path) -> Result<Report> {
    let dump = crate::kernel::open(path)?;
    let mut report = Report {
        path: path.to_path_buf(),
        ranks: dump.ranks.len(),
        kernel_statistic_rows: Some(0),
        ..Report::default()
    };
    for rank in &dump.ranks {
        if rank.steps.is_empty() {
            report.warnings.push(Problem::new(
                &rank.dir,
                "",
                "no {net_name}/{graph_id}/{iteration} folder: the dump's filters matched no kernel, or the run wrote nothing",
            ));
        }
        let mut graphs: Vec<u32> = rank.steps.iter().map(|s| s.graph_id).collect();
        graphs.dedup();
        for g in graphs {
            match rank.execution_order(g) {
                Ok(Some(_)) => {}
                Ok(None) => report.warnings.push(Problem::new(
                    rank.dir.join("execution_order"),
                    "",
                    format!("no ms_execution_order_graph_{g}.csv: kernels cannot be put in execution order"),
                )),
                Err(e) => report.problems.push(Problem::from_error(&e)),
            }
        }
        for step in &rank.steps {
            report.steps += 1;
            let contents = match step.contents() {
                Ok(c) => c,
                Err(e) => {
                    report.problems.push(Problem::from_error(&e));
                    continue;
                }
            };
            for p in &contents.not_regular {
                let kind = std::fs::symlink_metadata(p)
                    .map(|m| crate::fsio::kind_of(&m.file_type()))
                    .unwrap_or("special file");
                report.problems.push(Problem::new(
                    p,
                    "",
                    format!("not a regular file (a {kind}); refusing to read it"),
                ));
            }
            for p in &contents.unparsed {
                report.problems.push(Problem::new(
                    p,
                    "",
                    "not a kernel dump file name ({op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{slot}.{format}[.{dtype}].npy, or without .npy a raw file of a dtype numprobe reads), and not in mapping.csv",
                ));
            }
            if let Some(rows) = &contents.statistics {
                report.kernel_statistic_rows =
                    Some(report.kernel_statistic_rows.unwrap_or(0) + rows.len());
            }
            for t in &contents.tensors {
                report.tensor_files += 1;
                match t.info() {
                    Ok(FileInfo::Tensor(info)) => {
                        if let Some(named) = t.name.dtype_name.as_deref() {
                            match crate::kernel::ms_dtype(named) {
                                Some(d) if d == info.dtype => {}
                                Some(d) => report.problems.push(Problem::new(
                                    &t.path,
                                    "header",
                                    format!(
                                        "the name says {named} ({}), the header holds {}",
                                        d.mindspore_name(),
                                        info.dtype.mindspore_name()
                                    ),
                                )),
                                None => report.warnings.push(Problem::new(
                                    &t.path,
                                    "",
                                    format!(
                                        "dtype {named:?} in the name is not one numprobe knows"
                                    ),
                                )),
                            }
                        }
                    }
                    Ok(FileInfo::NpyText { descr, .. }) => report.problems.push(Problem::new(
                        &t.path,
                        "header",
                        format!("a numpy string array (descr {descr:?}), not a kernel's tensor"),
                    )),
                    Err(e) => report.problems.push(Problem::from_error(&e)),
                }
            }
        }
    }
    Ok(report)
}

fn is_tensor_file(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("pt" | "npy"))
}

fn validate_single_file(f: &Path, report: &mut Report) {
    if is_tensor_file(f) {
        report.tensor_files = 1;
        if let Err(e) = tensor::inspect(f) {
            report.problems.push(Problem::from_error(&e));
        }
        return;
    }
    report.json_files = 1;
    let value = match json::parse_file(f) {
        Ok(v) => v,
        Err(e) => {
            report.problems.push(Problem::from_error(&e));
            return;
        }
    };
    let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let looks_like_dump = value.get("data").is_some() && value.get("task").is_some();
    match name {
        "stack.json" => {
            if let Err(e) = StackFile::from_value(&value, f) {
                report.problems.push(Problem::from_error(&e));
            }
        }
        "construct.json" => {
            if let Err(e) = ConstructFile::from_value(&value, f) {
                report.problems.push(Problem::from_error(&e));
            }
        }
        _ if name == "dump.json" || name == "debug.json" || looks_like_dump => {
            let tensor_dir = f
                .parent()
                .unwrap_or(Path::new("."))
                .join("dump_tensor_data");
            let mut referenced = HashSet::new();
            check_dump(
                f,
                value,
                tensor_dir.is_dir().then_some(&tensor_dir),
                &mut referenced,
                report,
            );
        }
        _ => {}
    }
}

/// The capture journal's file name (capture::journal::FILE_NAME; dumpfmt does not depend on
/// the capture crate).
pub const CAPTURE_JOURNAL: &str = "numprobe_journal.bin";

fn validate_rank(r: &RankDir, report: &mut Report) {
    // RankDir::scan keeps regular files only (links only inside the rank directory): say why
    // a JSON file the rank needs is absent (missing, a FIFO/directory/device where it should
    // be, or a link out of the dump), and do not open it.
    for name in ["dump.json", "debug.json", "stack.json", "construct.json"] {
        let p = r.dir.join(name);
        if let Err(e) = crate::fsio::check_found_file(&p) {
            report.problems.push(Problem::from_error(&e));
        }
        if let Ok(meta) = std::fs::metadata(&p)
            && !meta.is_file()
        {
            report.problems.push(Problem::new(
                &p,
                "",
                format!(
                    "not a regular file (a {}); refusing to read it",
                    crate::fsio::kind_of(&meta.file_type())
                ),
            ));
        }
    }
    // numprobe removes its journal once a clean stop()/step() has made the JSON files durable:
    // one still here means the run ended before that, and its JSON files may lack the end.
    let journal = r.dir.join(CAPTURE_JOURNAL);
    if std::fs::symlink_metadata(&journal).is_ok() {
        report.problems.push(Problem::new(
            &journal,
            "",
            format!(
                "unfinished run: the capture journal is still here (the process ended before a \
                 clean stop()/step()); `numprobe recover {}` rebuilds the JSON files from it \
                 (delete the journal afterwards)",
                r.dir.display()
            ),
        ));
    }
    if r.dump_json.is_none() && r.debug_json.is_none() && !r.dir.join("dump.json").exists() {
        report.problems.push(Problem::new(
            r.dir.join("dump.json"),
            "",
            "missing: a rank directory holds a dump.json (or debug.json)",
        ));
    }
    let mut referenced: HashSet<String> = HashSet::new();
    let mut dump_keys: Option<(HashSet<String>, String)> = None;
    for f in [&r.dump_json, &r.debug_json].into_iter().flatten() {
        report.json_files += 1;
        match json::parse_found(f) {
            Ok(v) => {
                let keys = check_dump(f, v, r.tensor_dir.as_ref(), &mut referenced, report);
                if f.file_name().is_some_and(|n| n == "dump.json") {
                    dump_keys = keys;
                }
            }
            Err(e) => report.problems.push(Problem::from_error(&e)),
        }
    }
    if let Some(f) = &r.stack_json {
        report.json_files += 1;
        match StackFile::open_found(f) {
            Ok(stack) => {
                if let Some((keys, task)) = &dump_keys
                    && task != "structure"
                {
                    // msprobe ≥ 8.x writes both files from the same collector in one flush, so
                    // the subset rule holds; per-name stacks are [1.x] files, often trimmed by
                    // hand, and only get a warning.
                    // A dump.json without any forward entry comes from a `data_mode` that
                    // leaves forward out, and msprobe still writes the forward stacks then.
                    let forward_dumped = keys.iter().any(|k| k.contains(".forward"));
                    let list = if stack.format == StackFormat::Grouped && forward_dumped {
                        &mut report.problems
                    } else {
                        &mut report.warnings
                    };
                    for n in stack.names() {
                        if !keys.contains(n) {
                            list.push(Problem::new(
                                f,
                                "",
                                format!("stack entry {n:?} is not an entry of dump.json"),
                            ));
                        }
                    }
                }
            }
            Err(e) => report.problems.push(Problem::from_error(&e)),
        }
    }
    if let Some(f) = &r.construct_json {
        report.json_files += 1;
        if let Err(e) = ConstructFile::open_found(f) {
            report.problems.push(Problem::from_error(&e));
        }
    }
    if let Some(td) = &r.tensor_dir {
        let mut files = match std::fs::read_dir(td) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_file())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect::<Vec<_>>(),
            Err(e) => {
                report.problems.push(Problem::new(td, "", e.to_string()));
                Vec::new()
            }
        };
        files.sort();
        report.tensor_files += files.len();
        for name in files {
            if !referenced.contains(&name) {
                report.warnings.push(Problem::new(
                    td.join(&name),
                    "",
                    "tensor file that no record names (left by an interrupted run?)",
                ));
            }
        }
    }
}

/// Checks one dump.json/debug.json; returns its entry names and task for the stack check.
fn check_dump(
    f: &Path,
    value: json::Value,
    tensor_dir: Option<&PathBuf>,
    referenced: &mut HashSet<String>,
    report: &mut Report,
) -> Option<(HashSet<String>, String)> {
    let schema = DumpFile::schema_problems(&value, f);
    report
        .problems
        .extend(schema.iter().map(Problem::from_error));
    // Without a `data` object there is nothing more to walk (already reported).
    value.get("data").and_then(|d| d.as_object())?;
    // The view is built even when some records are bad (they were reported above): the rest
    // can still be checked.
    let dump = DumpFile::from_value_unchecked(value, f);
    let framework = dump.framework();
    let mut keys = HashSet::with_capacity(dump.len());
    let mut seen_files: HashMap<String, String> = HashMap::new();
    for entry in dump.entries() {
        keys.insert(entry.name.to_string());
        report.entries += 1;
        match entry.kind() {
            EntryName::Api { .. } => report.api_entries += 1,
            EntryName::Module { .. } | EntryName::ParametersGrad { .. } => {
                report.module_entries += 1
            }
            _ => {}
        }
        for t in entry.tensors() {
            report.tensor_records += 1;
            let Some(dn) = &t.record.data_name else {
                continue;
            };
            report.file_records += 1;
            referenced.insert(dn.clone());
            let ext = Path::new(dn)
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("");
            let expected = entry.expected_data_name(&t, ext);
            if *dn != expected {
                report.warnings.push(Problem::new(
                    f,
                    format!("{}.data_name", t.json_path),
                    format!("{dn:?} differs from msprobe's naming rule ({expected:?})"),
                ));
            }
            if let Some(prev) = seen_files.insert(dn.clone(), t.json_path.clone()) {
                report.problems.push(Problem::new(
                    f,
                    format!("{}.data_name", t.json_path),
                    format!("{dn:?} is also the data_name of {prev}"),
                ));
            }
            let Some(td) = tensor_dir else {
                report.problems.push(Problem::new(
                    f,
                    format!("{}.data_name", t.json_path),
                    format!("{dn:?}: no dump_tensor_data directory beside this file"),
                ));
                continue;
            };
            let file = match layout::resolve_data_name(td, dn) {
                Ok(file) => file,
                Err(Error::DataName { problem, .. }) => {
                    let msg = match problem {
                        DataNameProblem::Missing => format!("no such file in {}", td.display()),
                        other => other.to_string(),
                    };
                    report.problems.push(Problem::new(
                        f,
                        format!("{}.data_name", t.json_path),
                        format!("{dn:?}: {msg}"),
                    ));
                    continue;
                }
                Err(e) => {
                    report.problems.push(Problem::from_error(&e));
                    continue;
                }
            };
            check_tensor_file(f, &t.json_path, &t.record, &file, framework, report);
        }
    }
    Some((keys, dump.task().to_string()))
}

fn check_tensor_file(
    f: &Path,
    json_path: &str,
    rec: &crate::dump::TensorRecord,
    file: &Path,
    framework: Framework,
    report: &mut Report,
) {
    let info = match tensor::inspect(file) {
        Ok(i) => i,
        Err(e) => {
            report.problems.push(Problem::from_error(&e));
            return;
        }
    };
    let (file_dtype, shape) = match &info {
        FileInfo::Tensor(t) => (Some(t.dtype), &t.shape),
        FileInfo::NpyText { shape, .. } => (None, shape),
    };
    let rec_shape: Vec<usize> = rec.shape.iter().map(|&d| d as usize).collect();
    if *shape != rec_shape {
        report.problems.push(Problem::new(
            f,
            format!("{json_path}.shape"),
            format!(
                "record shape {:?} but {} holds shape {:?}",
                rec.shape,
                file.display(),
                shape
            ),
        ));
    }
    match (rec.dtype(), file_dtype) {
        (Some(want), Some(got)) => {
            let ms_float32 = got == DType::F32
                && matches!(want, DType::BF16 | DType::F8E4M3FN | DType::F8E5M2)
                && (framework == Framework::MindSpore
                    || rec.type_name.starts_with("mindspore")
                    || file.extension().is_some_and(|e| e == "npy"));
            if want != got && !ms_float32 {
                report.problems.push(Problem::new(
                    f,
                    format!("{json_path}.dtype"),
                    format!(
                        "record dtype {:?} but {} holds {:?}",
                        rec.dtype,
                        file.display(),
                        got
                    ),
                ));
            }
        }
        (Some(_), None) => report.problems.push(Problem::new(
            f,
            format!("{json_path}.dtype"),
            format!(
                "record dtype {:?} but {} is a numpy string array",
                rec.dtype,
                file.display()
            ),
        )),
        // numpy.ndarray records: the dtype text is numpy's own; the header was checked above.
        (None, _) => {}
    }
}
