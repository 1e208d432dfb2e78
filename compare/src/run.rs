//! Entry points: compare two parsed dumps, or two dump directories/files into an output dir.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dumpfmt::json::Value;

use crate::cell::Cell;
use crate::divergence::{Summary, summarize};
use crate::error::{Error, Result};
use crate::matching::{MatchOptions, match_rows};
use crate::model::{Dump, Mode};
use crate::stats_diff::PandasCompat;
use crate::table::{Progress, RowCache, Table, TableOptions, TensorSource, build, to_csv};
use crate::tensor::TensorResult;
use crate::tensor::gpu::Backend;

/// Options of `numprobe compare`.
#[derive(Clone, Debug, Default)]
pub struct CompareOptions {
    /// Target dump (msprobe `-tp`): a dump.json, a rank dir, a step dir or a dump root.
    pub target: PathBuf,
    /// Golden dump (msprobe `-gp`).
    pub golden: PathBuf,
    pub out_dir: PathBuf,
    /// msprobe `-fm`.
    pub fuzzy_match: bool,
    /// msprobe `-dm`: YAML file mapping target row names to golden row names.
    pub data_mapping: Option<PathBuf>,
    /// msprobe `-cm` (MindSpore target, PyTorch golden): `Some(None)` renames `Cell` to
    /// `Module`; `Some(Some(file))` also maps cell paths with a flat YAML map.
    pub cell_mapping: Option<Option<PathBuf>>,
    /// msprobe `-am` (MindSpore target, PyTorch golden): a flat YAML table of API names
    /// (`Functional.matmul: Torch.matmul`), e.g. msprobe's `ms_to_pt_api.yaml`.
    pub api_mapping: Option<PathBuf>,
    pub step: Option<u64>,
    pub rank: Option<u64>,
    /// `YYYYMMDDHHMMSS` for the file name; now (local time) when `None`.
    pub timestamp: Option<String>,
    /// Relative tolerance for the first-divergence analysis (0 = exact).
    pub tolerance: f64,
    /// The pandas generation whose statistics-diff numerics to reproduce.
    pub pandas: PandasCompat,
    /// Write the table as `compare_result_{timestamp}.xlsx` instead of CSV (msprobe's `--xlsx`).
    pub xlsx: bool,
    /// Reuse the tensor rows an interrupted run of the same comparison left in
    /// `out_dir/compare_progress.tsv` (tensor mode; the journal is always written).
    pub resume: bool,
    /// Where tensor-mode metrics run (CPU, GPU, or the GPU for large pairs on a hardware
    /// adapter); the run opens the GPU on first need and closes it at the end.
    pub backend: Backend,
    /// The stats-gpu engine whose GPU tensor-mode metrics use (the caller's adapter choice);
    /// `None`: one with the default choice, opened on first need.
    pub stats_engine: Option<std::sync::Arc<stats_gpu::Engine<'static>>>,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct CompareOutcome {
    /// The result table: `compare_result_{timestamp}.csv`, or `.xlsx` when asked.
    pub table_path: PathBuf,
    pub summary_path: PathBuf,
    /// The summary.md text (also for the terminal).
    pub summary_text: String,
    pub summary: Summary,
    pub mode: Mode,
    /// The dump.json files compared (target, golden), as located from the options.
    pub target_dump_json: PathBuf,
    pub golden_dump_json: PathBuf,
}

/// A comparison of two parsed dumps, in memory.
pub struct Compared {
    pub mode: Mode,
    pub npu: Dump,
    pub bench: Dump,
    pub table: Table,
}

/// Compares two parsed dump.json values. `stack` is the target's stack.json, if any. Errors
/// name the sides "target dump.json" and "golden dump.json" ([`compare_named`] takes names).
pub fn compare_dumps(
    npu_json: &Value,
    bench_json: &Value,
    stack: Option<&Value>,
    opts: &MatchOptions,
    topts: &TableOptions,
    progress: &dyn Progress,
) -> Result<Compared> {
    compare_named(
        (npu_json, "target dump.json"),
        (bench_json, "golden dump.json"),
        stack,
        opts,
        topts,
        progress,
    )
}

/// [`compare_dumps`] with a name for each side (e.g. `target /path/dump.json`) that errors
/// about that side's dump.json start with.
pub fn compare_named(
    (npu_json, npu_name): (&Value, &str),
    (bench_json, bench_name): (&Value, &str),
    stack: Option<&Value>,
    opts: &MatchOptions,
    topts: &TableOptions,
    progress: &dyn Progress,
) -> Result<Compared> {
    check_dump_json(npu_json, npu_name)?;
    check_dump_json(bench_json, bench_name)?;
    let npu = Dump::from_json_for(npu_json, stack, topts.pandas)?;
    let bench = Dump::from_json_for(bench_json, None, topts.pandas)?;
    let mode = npu.mode(npu_json)?;
    let bench_mode = bench.mode(bench_json)?;
    if mode != bench_mode {
        return Err(Error::Format(format!(
            "the two dumps differ in kind ({mode:?} vs {bench_mode:?}): both must be tensor, statistics or md5 dumps"
        )));
    }
    let pairs = match_rows(&npu, &bench, mode, opts);
    let table = build(mode, &npu, &bench, &pairs, stack.is_some(), topts, progress);
    Ok(Compared {
        mode,
        npu,
        bench,
        table,
    })
}

/// The structure compare relies on, checked before any row is built so that a malformed dump
/// fails (naming the side and the JSON path) rather than comparing to an empty table: a top-level
/// object with a string `task` and an object `data`, and every tensor record (one with a
/// `data_name` or a tensor type) carrying `dtype` and `shape`.
pub fn check_dump_json(v: &Value, name: &str) -> Result<()> {
    let bad = |path: &str, msg: String| Err(Error::Format(format!("{name}: {path}: {msg}")));
    let Some(top) = v.as_object() else {
        return bad(
            "$",
            format!("top level is not an object (found {})", v.kind_name()),
        );
    };
    match top.get("task") {
        Some(Value::Str(_)) => {}
        Some(o) => {
            return bad(
                "$.task",
                format!("expected a string, found {}", o.kind_name()),
            );
        }
        None => {
            return bad(
                "$.task",
                "missing (compare needs task \"tensor\" or \"statistics\")".into(),
            );
        }
    }
    let data = match top.get("data") {
        Some(Value::Object(m)) => m,
        Some(o) => {
            return bad(
                "$.data",
                format!("expected an object, found {}", o.kind_name()),
            );
        }
        None => return bad("$.data", "missing".into()),
    };
    fn walk(v: &Value, path: &str, depth: usize) -> std::result::Result<(), (String, String)> {
        // Deeper records are not read by the row model either.
        if depth > 200 {
            return Ok(());
        }
        match v {
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, &dumpfmt::dump::path_index(path, i), depth + 1)?;
                }
            }
            Value::Object(m) => {
                if dumpfmt::dump::is_tensor_record(m) {
                    for key in ["dtype", "shape"] {
                        if !m.contains_key(key) {
                            return Err((
                                path.to_string(),
                                format!("tensor record without {key:?}"),
                            ));
                        }
                    }
                    return Ok(());
                }
                for (k, x) in m.iter() {
                    walk(
                        x,
                        &dumpfmt::dump::path_key(path, &k.to_string_lossy()),
                        depth + 1,
                    )?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    for (k, x) in data.iter() {
        let entry = dumpfmt::dump::entry_path(&k.to_string_lossy());
        if let Err((path, msg)) = walk(x, &entry, 1) {
            return bad(&path, msg);
        }
    }
    Ok(())
}

/// Whether `p` is a regular file (links followed); a FIFO, device or socket there is an error
/// naming it, so that it is neither opened nor reported as "missing".
fn is_regular(p: &Path) -> Result<bool> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) if !m.is_dir() => Err(Error::Dump(dumpfmt::Error::NotRegularFile {
            file: p.to_path_buf(),
            kind: dumpfmt::fsio::kind_of(&m.file_type()),
        })),
        _ => Ok(false),
    }
}

/// [`is_regular`] of a file found in a dump directory, not named by the user: a link out of
/// that directory is refused ([`dumpfmt::fsio::check_found_file`]).
fn is_found_file(p: &Path) -> Result<bool> {
    dumpfmt::fsio::check_found_file(p)?;
    is_regular(p)
}

/// Finds dump.json under a path: the file itself, a rank dir, a step dir or a dump root (a
/// dump.json named by the user is read wherever its links lead; one found in a directory
/// only inside it; a step or rank directory found below the path only inside the path).
pub fn locate_dump_json(path: &Path, step: Option<u64>, rank: Option<u64>) -> Result<PathBuf> {
    if is_regular(path)? {
        return Ok(path.to_path_buf());
    }
    if !path.is_dir() {
        return Err(Error::Usage(format!(
            "{}: no such file or directory",
            path.display()
        )));
    }
    if is_found_file(&path.join("dump.json"))? {
        return Ok(path.join("dump.json"));
    }
    let subdirs = |p: &Path, prefixes: &[&str]| -> Result<Vec<(Option<u64>, PathBuf)>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(p).map_err(|e| Error::io(p, e))? {
            let e = e.map_err(|e| Error::io(p, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.path().is_dir() {
                continue;
            }
            if let Some(pre) = prefixes.iter().find(|pre| name.starts_with(**pre)) {
                v.push((name[pre.len()..].parse::<u64>().ok(), e.path()));
            }
        }
        v.sort();
        Ok(v)
    };
    let pick = |list: Vec<(Option<u64>, PathBuf)>,
                want: Option<u64>,
                what: &str,
                at: &Path|
     -> Result<PathBuf> {
        match want {
            Some(n) => list
                .into_iter()
                .find(|(k, _)| *k == Some(n))
                .map(|(_, p)| p)
                .ok_or_else(|| Error::Usage(format!("{}: no {what} {n}", at.display()))),
            None => match list.len() {
                0 => Err(Error::Usage(format!(
                    "{}: no dump.json and no {what} directories",
                    at.display()
                ))),
                1 => Ok(list.into_iter().next().unwrap().1),
                _ => Err(Error::Usage(format!(
                    "{}: several {what} directories ({}); choose one with --{what}",
                    at.display(),
                    list.iter()
                        .map(|(_, p)| p
                            .file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            },
        }
    };
    let steps = subdirs(path, &["step"])?;
    let step_dir = if steps.is_empty() {
        path.to_path_buf()
    } else {
        pick(steps, step, "step", path)?
    };
    // The directories chosen below the named one stay inside it (a planted link out of the
    // dump would compare another dump, or any directory holding a dump.json, as this one).
    dumpfmt::fsio::check_found_dir(&step_dir, path)?;
    if is_found_file(&step_dir.join("dump.json"))? {
        return Ok(step_dir.join("dump.json"));
    }
    let ranks = subdirs(&step_dir, &["rank", "proc"])?;
    let rank_dir = pick(ranks, rank, "rank", &step_dir)?;
    dumpfmt::fsio::check_found_dir(&rank_dir, path)?;
    let f = rank_dir.join("dump.json");
    if is_found_file(&f)? {
        Ok(f)
    } else {
        Err(Error::Usage(format!(
            "{}: no dump.json",
            rank_dir.display()
        )))
    }
}

/// Reads the dump.json [`locate_dump_json`] found for the path the user `named`: one named
/// is read wherever its links lead, one found in a directory only inside it (judged on the
/// file opened, see [`dumpfmt::fsio::open_found`]).
fn read_located(named: &Path, located: &Path) -> Result<Value> {
    if located == named {
        read_json(located)
    } else {
        Ok(dumpfmt::json::parse_found(located)?)
    }
}

/// Reads a flat YAML map (`-dm`, `-cm`, `-am` tables): `target_name: golden_name` pairs, in
/// file order, with a YAML parser (yaml-rust2). Errors name the file and line: YAML syntax,
/// a document that is not one flat map of scalars (a list, a nested map), or an alias (`*x`,
/// refused so that a crafted file cannot expand exponentially). `null`/`~`/an empty value is
/// the empty name, as the table's Python reader sees `None`.
pub fn read_data_mapping(path: &Path) -> Result<Vec<(String, String)>> {
    use yaml_rust2::parser::{Event, Parser};
    use yaml_rust2::scanner::TScalarStyle;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut dumpfmt::fsio::open_regular(path)?, &mut text)
        .map_err(|e| Error::io(path, e))?;
    let err = |line: usize, msg: &str| {
        Error::Format(format!(
            "{}:{line}: {msg} (expected a flat YAML map `target_name: golden_name`)",
            path.display()
        ))
    };
    let mut parser = Parser::new_from_str(&text);
    let mut out = Vec::new();
    let mut key: Option<String> = None;
    // 0: before the document's map, 1: inside it, 2: after it.
    let mut state = 0u8;
    loop {
        let (ev, mark) = parser.next_token().map_err(|e| {
            err(
                e.marker().line(),
                &format!(
                    "invalid YAML: {} (column {})",
                    e.info(),
                    e.marker().col() + 1
                ),
            )
        })?;
        let line = mark.line();
        match ev {
            Event::StreamStart | Event::DocumentStart | Event::DocumentEnd | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::MappingStart(..) if state == 0 => state = 1,
            Event::MappingEnd if state == 1 => state = 2,
            Event::Scalar(v, style, _, _) if state == 1 => {
                let plain_null = style == TScalarStyle::Plain
                    && matches!(v.as_str(), "~" | "null" | "Null" | "NULL");
                let v = if plain_null { String::new() } else { v };
                match key.take() {
                    None => key = Some(v),
                    Some(k) => out.push((k, v)),
                }
            }
            // An empty document (nothing but comments) maps nothing.
            Event::Scalar(v, ..) if state == 0 && v.is_empty() => state = 2,
            Event::Alias(_) => return Err(err(line, "aliases are not allowed")),
            Event::SequenceStart(..) => return Err(err(line, "a list is not a name")),
            Event::MappingStart(..) if state == 1 => {
                return Err(err(line, "a nested map is not a name"));
            }
            _ => return Err(err(line, "more than one map")),
        }
    }
    Ok(out)
}

fn read_json(path: &Path) -> Result<Value> {
    Ok(dumpfmt::json::parse_file(path)?)
}

/// Name of the lock file [`run`] holds in its output directory.
pub const LOCK_NAME: &str = "compare.lock";

/// Takes the exclusive lock of `out_dir` for one [`run`] (released when the returned file is
/// dropped, or by the system when the process dies, SIGKILL included, so no stale lock stays).
/// Without it, a second compare writing to the same directory truncates the first one's
/// `compare_progress.tsv` and both write rows over each other at their own offsets; the tables
/// and summary.md are renamed into place whole, so those stay complete either way.
fn lock_out_dir(out_dir: &Path) -> Result<std::fs::File> {
    let path = out_dir.join(LOCK_NAME);
    dumpfmt::outfile::check_target(&path)?;
    let mut o = std::fs::OpenOptions::new();
    o.create(true).write(true).truncate(false);
    #[cfg(unix)]
    {
        // A link or FIFO planted after the check is refused, not followed or waited on.
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = o.open(&path).map_err(|e| Error::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Usage(format!(
            "another compare is writing to {} (it holds {LOCK_NAME}); wait for it or choose another --out",
            out_dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}

/// `YYYYMMDDHHMMSS` of now in local time, as msprobe names its files (UTC where the local
/// zone cannot be read).
pub fn timestamp_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    #[cfg(unix)]
    if let Some(ts) = local_timestamp(secs) {
        return ts;
    }
    utc_timestamp(secs)
}

#[cfg(unix)]
fn local_timestamp(secs: u64) -> Option<String> {
    let t = libc::time_t::try_from(secs).ok()?;
    // SAFETY: an all-zero `tm` is a valid value; localtime_r only writes into it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the thread-safe variant.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    Some(format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    ))
}

/// `YYYYMMDDHHMMSS` of `secs` since the epoch, UTC.
pub fn utc_timestamp(secs: u64) -> String {
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Runs a comparison from paths and writes `compare_result_{timestamp}.csv` and `summary.md`.
/// `progress` hears about the tensor-mode rows (drive a progress bar with it; `&()` ignores).
pub fn run(opts: &CompareOptions, progress: &dyn Progress) -> Result<CompareOutcome> {
    run_keeping(opts, progress).map(|(outcome, _)| outcome)
}

/// [`run`], also handing back the compared dumps and table (for reports built on them).
pub fn run_keeping(
    opts: &CompareOptions,
    progress: &dyn Progress,
) -> Result<(CompareOutcome, Compared)> {
    // Checked before any work: the timestamp becomes part of the output file name.
    if let Some(ts) = &opts.timestamp {
        dumpfmt::outfile::check_timestamp(ts).map_err(Error::Usage)?;
    }
    let npu_path = locate_dump_json(&opts.target, opts.step, opts.rank)?;
    let bench_path = locate_dump_json(&opts.golden, opts.step, opts.rank)?;
    let npu_json = read_located(&opts.target, &npu_path)?;
    let bench_json = read_located(&opts.golden, &bench_path)?;
    let stack_path = npu_path.with_file_name("stack.json");
    // stack.json is optional, but only when absent: a FIFO, directory or device under that
    // name is refused by its reader (naming what it is) rather than silently skipped.
    let stack = match std::fs::symlink_metadata(&stack_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        _ => Some(dumpfmt::json::parse_found(&stack_path)?),
    };
    let mopts = MatchOptions {
        fuzzy: opts.fuzzy_match,
        data_mapping: opts
            .data_mapping
            .as_deref()
            .map(read_data_mapping)
            .transpose()?,
        cell_mapping: match &opts.cell_mapping {
            None => None,
            Some(None) => Some(Vec::new()),
            Some(Some(p)) => Some(read_data_mapping(p)?),
        },
        api_mapping: opts
            .api_mapping
            .as_deref()
            .map(read_data_mapping)
            .transpose()?,
    };
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| Error::io(&opts.out_dir, e))?;
    // Held to the end of the run: the journal below is truncated and appended to in place.
    let _lock = lock_out_dir(&opts.out_dir)?;
    let data_dir = |p: &Path| p.with_file_name("dump_tensor_data");
    let source = DumpDirSource {
        npu_dir: data_dir(&npu_path),
        bench_dir: data_dir(&bench_path),
    };
    let journal = Journal::open_for_dirs(
        &opts.out_dir.join("compare_progress.tsv"),
        &format!("{}\t{}", npu_path.display(), bench_path.display()),
        opts.resume,
        (&source.npu_dir, &source.bench_dir),
    )?;
    let (npu_name, bench_name) = (
        format!("target {}", npu_path.display()),
        format!("golden {}", bench_path.display()),
    );
    let cmp = compare_named(
        (&npu_json, &npu_name),
        (&bench_json, &bench_name),
        stack.as_ref(),
        &mopts,
        &TableOptions {
            source: Some(&source),
            cache: Some(&journal),
            pandas: opts.pandas,
            backend: opts.backend,
            stats_engine: opts.stats_engine.as_deref(),
        },
        progress,
    )?;

    std::fs::create_dir_all(&opts.out_dir).map_err(|e| Error::io(&opts.out_dir, e))?;
    let ts = opts.timestamp.clone().unwrap_or_else(timestamp_now);
    let table_path = if opts.xlsx {
        let path = opts.out_dir.join(format!("compare_result_{ts}.xlsx"));
        crate::xlsx::write_xlsx(&cmp.table, &path)?;
        path
    } else {
        let path = opts.out_dir.join(format!("compare_result_{ts}.csv"));
        dumpfmt::outfile::write(&path, to_csv(&cmp.table).as_bytes())?;
        path
    };
    let summary = summarize(&cmp.table, &cmp.npu, opts.tolerance);
    let table_name = table_path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let summary_text = summary.to_markdown(
        &npu_path.display().to_string(),
        &bench_path.display().to_string(),
        &table_name,
    );
    let summary_path = opts.out_dir.join("summary.md");
    dumpfmt::outfile::write(&summary_path, summary_text.as_bytes())?;
    let mode = cmp.mode;
    Ok((
        CompareOutcome {
            table_path,
            summary_path,
            summary_text,
            summary,
            mode,
            target_dump_json: npu_path,
            golden_dump_json: bench_path,
        },
        cmp,
    ))
}

/// Reads tensor files from the two dumps' `dump_tensor_data/` directories with dumpfmt.
pub struct DumpDirSource {
    pub npu_dir: PathBuf,
    pub bench_dir: PathBuf,
}

impl TensorSource for DumpDirSource {
    /// Reads the file; dtypes the metrics do not take are refused by
    /// [`tensor_row`](crate::table::tensor_row), which knows the row.
    fn load(
        &self,
        npu: bool,
        data_name: &str,
    ) -> std::result::Result<dumpfmt::tensor::Tensor, String> {
        let dir = if npu { &self.npu_dir } else { &self.bench_dir };
        // The one rule every reader of a dump applies: a plain file name, no link out of the
        // directory, no FIFO or device file (which would block or never end).
        let path = dumpfmt::layout::resolve_data_name(dir, data_name).map_err(|e| e.to_string())?;
        dumpfmt::tensor::read_tensor(&path).map_err(|e| e.to_string())
    }

    /// As [`TensorSource::load`], with a strided `.pt` view left to be read through its
    /// strides (memory bounded by a chunk, whatever the view's size).
    fn open(&self, npu: bool, data_name: &str) -> std::result::Result<dumpfmt::pt::Stored, String> {
        let dir = if npu { &self.npu_dir } else { &self.bench_dir };
        let path = dumpfmt::layout::resolve_data_name(dir, data_name).map_err(|e| e.to_string())?;
        dumpfmt::tensor::open_tensor(&path).map_err(|e| e.to_string())
    }
}

/// Append-only journal of finished tensor rows (`compare_progress.tsv` in the output dir):
/// a rerun with `resume` reuses them instead of reading those tensors again.
///
/// A row is reused only while both tensor files are what they were when it was computed
/// (see [`file_identity`]), and only when every field reads back as written; anything else is
/// recomputed, so a journal can make a resumed run faster but never different.
pub struct Journal {
    done: HashMap<(String, String), JournalRow>,
    /// The tensor directories (target, golden) whose files' identities key the rows; `None`
    /// for tensors that are not files (rows keyed on the names alone).
    dirs: Option<(PathBuf, PathBuf)>,
    /// Identities read before a row was computed, for its `put`: a file changed while it was
    /// being compared then fails the next resume's check instead of passing it.
    seen: Mutex<HashMap<(String, String), (String, String)>>,
    file: Mutex<std::io::BufWriter<std::fs::File>>,
}

struct JournalRow {
    ids: (String, String),
    result: TensorResult,
}

/// Bytes hashed at each end of a tensor file for its identity.
const ID_SAMPLE: u64 = 64 * 1024;

/// The identity of a tensor file: size, modification and status-change times in ns, inode,
/// and the CRC-32 of its first and last 64 KiB; `-` when it cannot be read.
///
/// Why not a CRC of the whole file: a resumed run exists not to read every tensor again.
/// The status-change time cannot be set back from user space (unlike the modification time
/// `touch -d` restores), so any write through the file system changes the identity; the
/// sampled CRC also catches a replaced file on a file system with coarse timestamps.
pub fn file_identity(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let id = || -> std::io::Result<String> {
        // The reader's own open: never blocks on a FIFO swapped in, metadata of what was opened.
        let mut f = dumpfmt::fsio::open_regular(path)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let md = f.metadata()?;
        let mut crc = crc32fast::Hasher::new();
        let mut buf = Vec::with_capacity(ID_SAMPLE as usize);
        f.by_ref().take(ID_SAMPLE).read_to_end(&mut buf)?;
        crc.update(&buf);
        if md.len() > ID_SAMPLE {
            buf.clear();
            f.seek(SeekFrom::Start(
                md.len().saturating_sub(ID_SAMPLE).max(ID_SAMPLE),
            ))?;
            f.take(ID_SAMPLE).read_to_end(&mut buf)?;
            crc.update(&buf);
        }
        #[cfg(unix)]
        let (times, ino) = {
            use std::os::unix::fs::MetadataExt;
            (
                format!(
                    "{}.{:09}:{}.{:09}",
                    md.mtime(),
                    md.mtime_nsec(),
                    md.ctime(),
                    md.ctime_nsec()
                ),
                md.ino(),
            )
        };
        #[cfg(not(unix))]
        let (times, ino) = (
            md.modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos().to_string())
                .unwrap_or_default(),
            0u64,
        );
        Ok(format!("{}:{times}:{ino}:{:08x}", md.len(), crc.finalize()))
    };
    id().unwrap_or_else(|_| "-".into())
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

fn unesc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn cell_text(c: &Cell) -> String {
    match c {
        Cell::Float(f) => format!("f{}", pyrepr::repr_f64(*f)),
        other => format!("s{}", esc(&other.py_str())),
    }
}

fn parse_cell(t: &str) -> Option<Cell> {
    let (kind, rest) = t.split_at_checked(1)?;
    match kind {
        "f" => rest.parse::<f64>().ok().map(Cell::Float),
        "s" => Some(Cell::Str(unesc(rest))),
        _ => None,
    }
}

/// Fields of a journal row: the two data names, their file identities, six metric cells, the
/// error flag and the message.
const ROW_FIELDS: usize = 12;

/// A journal row, if every field reads back as written.
fn parse_row(line: &str) -> Option<((String, String), JournalRow)> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != ROW_FIELDS {
        return None;
    }
    let cells: Vec<Cell> = f[4..10]
        .iter()
        .map(|t| parse_cell(t))
        .collect::<Option<_>>()?;
    let values: [Cell; 6] = cells.try_into().ok()?;
    let error_flag = f[10].parse::<bool>().ok()?;
    Some((
        (unesc(f[0]), unesc(f[1])),
        JournalRow {
            ids: (f[2].to_string(), f[3].to_string()),
            result: TensorResult {
                values,
                err_msg: unesc(f[11]),
                error_flag,
            },
        },
    ))
}

impl Journal {
    /// v2: rows carry the tensor files' identities; v3: rows of uncompared dtypes have their
    /// own message; v4: float8 rows are compared (older journals are started afresh, so a
    /// resumed table equals a fresh one).
    const MAGIC: &'static str = "numprobe-compare-progress v4";

    /// Opens the journal for tensors that are not files (rows keyed on the names alone);
    /// with `resume`, loads the rows of a previous run of the same pair (`identity`),
    /// otherwise starts afresh.
    pub fn open(path: &Path, identity: &str, resume: bool) -> Result<Journal> {
        Self::open_inner(path, identity, resume, None)
    }

    /// [`open`](Journal::open) for tensors read from two `dump_tensor_data/` directories:
    /// a row is reused only while both of its files keep their [`file_identity`].
    pub fn open_for_dirs(
        path: &Path,
        identity: &str,
        resume: bool,
        (npu_dir, bench_dir): (&Path, &Path),
    ) -> Result<Journal> {
        Self::open_inner(
            path,
            identity,
            resume,
            Some((npu_dir.to_path_buf(), bench_dir.to_path_buf())),
        )
    }

    fn open_inner(
        path: &Path,
        identity: &str,
        resume: bool,
        dirs: Option<(PathBuf, PathBuf)>,
    ) -> Result<Journal> {
        // Never appended to or truncated through a planted link (or into a FIFO).
        dumpfmt::outfile::check_target(path)?;
        let header = format!("{}\t{}", Self::MAGIC, esc(identity));
        let mut done = HashMap::new();
        let mut keep = false;
        if resume
            && let Ok(bytes) = dumpfmt::fsio::read_regular(path)
            && let Ok(text) = String::from_utf8(bytes)
        {
            let mut lines = text.lines();
            if lines.next() == Some(header.as_str()) {
                keep = true;
                // A torn last line (the run was killed mid-write) or any row that does not
                // read back is skipped: its tensors are compared again.
                done.extend(lines.filter_map(parse_row));
            }
        }
        let file = if keep {
            let torn = dumpfmt::fsio::read_regular(path)
                .map(|b| !b.ends_with(b"\n"))
                .unwrap_or(false);
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .and_then(|mut f| {
                    // End a torn last line so the next record starts on its own line.
                    if torn {
                        use std::io::Write;
                        f.write_all(b"\n")?;
                    }
                    Ok(f)
                })
        } else {
            std::fs::File::create(path)
        }
        .map_err(|e| Error::io(path, e))?;
        let mut w = std::io::BufWriter::new(file);
        if !keep {
            use std::io::Write;
            writeln!(w, "{header}").map_err(|e| Error::io(path, e))?;
        }
        Ok(Journal {
            done,
            dirs,
            seen: Mutex::new(HashMap::new()),
            file: Mutex::new(w),
        })
    }

    /// Rows loaded from a previous run.
    pub fn resumed_rows(&self) -> usize {
        self.done.len()
    }

    /// The identities of the two tensor files of a row (`""` without directories).
    fn identities(&self, n: &str, b: &str) -> (String, String) {
        match &self.dirs {
            None => (String::new(), String::new()),
            Some((nd, bd)) => {
                let id =
                    |dir: &Path, name: &str| match dumpfmt::layout::resolve_data_name(dir, name) {
                        Ok(p) => file_identity(&p),
                        Err(_) => "-".into(),
                    };
                (id(nd, n), id(bd, b))
            }
        }
    }
}

impl RowCache for Journal {
    fn get(&self, n: &str, b: &str) -> Option<TensorResult> {
        let ids = self.identities(n, b);
        let row = self.done.get(&(n.to_string(), b.to_string()));
        let hit = row
            .filter(|r| r.ids == ids && !ids.0.starts_with('-') && !ids.1.starts_with('-'))
            .map(|r| r.result.clone());
        if hit.is_none()
            && let Ok(mut seen) = self.seen.lock()
        {
            seen.insert((n.to_string(), b.to_string()), ids);
        }
        hit
    }

    fn put(&self, n: &str, b: &str, r: &TensorResult) {
        use std::io::Write;
        let key = (n.to_string(), b.to_string());
        let ids = self
            .seen
            .lock()
            .ok()
            .and_then(|mut s| s.remove(&key))
            .unwrap_or_else(|| self.identities(n, b));
        let cells: Vec<String> = r.values.iter().map(cell_text).collect();
        let line = format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            esc(n),
            esc(b),
            ids.0,
            ids.1,
            cells.join("\t"),
            r.error_flag,
            esc(&r.err_msg)
        );
        if let Ok(mut f) = self.file.lock() {
            // Best effort: a failed journal write only costs recomputation on resume.
            let _ = f.write_all(line.as_bytes()).and_then(|_| f.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc_timestamp(0), "19700101000000");
        // 2000-02-29 23:59:59, a leap day.
        assert_eq!(utc_timestamp(951_868_799), "20000229235959");
        assert_eq!(utc_timestamp(4_102_444_800), "21000101000000");
    }

    #[test]
    fn now_is_fourteen_digits() {
        let ts = timestamp_now();
        assert_eq!(ts.len(), 14, "{ts}");
        assert!(ts.bytes().all(|b| b.is_ascii_digit()), "{ts}");
    }
}
