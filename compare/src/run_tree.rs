//! A whole distributed run: every (step, rank) pair that both dump roots hold, compared in
//! parallel, and a cross-rank view that follows the collectives to the rank and API where a
//! difference was produced.
//!
//! A *run root* holds `step{S}/rank{R}/dump.json` trees (or, a step directory, `rank{R}/`
//! directly). Each pair is one [`crate::run()`] into its own working directory
//! `OUT/step{S}/rank{R}/` (journal, lock, the pair's summary.md); its table is then renamed to
//! `OUT/step{S}/compare_result_rank{R}_{timestamp}.csv`, the name msprobe's distributed compare
//! gives it (`compare_result` + `_rank{R}` suffix + timestamp), and the pair's result record
//! (`pair_result.json`) is written last. At most `workers` pairs are in memory at once,
//! whatever the number of ranks.
//!
//! The run is three steps that other drivers share ([`plan_run`], [`compare_pair`] per pair,
//! [`finish`]): [`run_tree`] runs the pairs on threads; the Python package's Ray driver
//! (`numprobe.cluster`) runs each pair as a task on whichever machine, and the closing step
//! reads their records, so both write the same files.
//!
//! The origin of a step ([`find_origin`]): on each rank, the first call whose difference does
//! not arrive through its tensor inputs is either *local* (a computation whose outputs differ
//! while its inputs agree, differing non-tensor arguments, or inputs that differ from outside
//! the dumped APIs) or a collective whose outputs differ while its inputs agree: the difference
//! was *received* from another rank of the collective's group, so that rank only propagates it.
//! The origin is the local first divergence that comes earliest in collective order (the number
//! of collectives the rank passed before it, then its position after the last of them, then the
//! rank), as msprobe's `-da` orders its nodes by layer and sub-layer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::divergence::{CallDiff, Summary};
use crate::error::{Error, Result};
use crate::run::CompareOptions;
use crate::table::Progress;

/// One rank directory of a run root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankDir {
    pub rank: u64,
    pub dir: PathBuf,
}

/// The steps of a run root: `None` for a step directory given directly (no `step{S}` level).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunTree {
    pub steps: BTreeMap<Option<u64>, Vec<RankDir>>,
    /// Step and rank directories that are links leading out of the root: not entered
    /// ([`dumpfmt::fsio::check_found_dir`]).
    pub links_out: Vec<RunLinkOut>,
}

/// A step or rank directory of a run root that was not entered, and where it sits in the run
/// (`rank` is `None` for a whole step directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLinkOut {
    pub step: Option<u64>,
    pub rank: Option<u64>,
    pub link: dumpfmt::fsio::LinkOut,
}

/// Numbered subdirectories `{prefix}{n}` of `dir`, sorted. A link is entered only when it
/// stays inside `root` (a dump received from elsewhere stays inside itself); one leading out
/// is returned apart, with its number.
#[allow(clippy::type_complexity)]
fn numbered_dirs(
    dir: &Path,
    prefix: &str,
    root: &Path,
) -> Result<(Vec<(u64, PathBuf)>, Vec<(u64, dumpfmt::fsio::LinkOut)>)> {
    let (mut v, mut out) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(n) = name
            .strip_prefix(prefix)
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let Ok(ft) = e.file_type() else { continue };
        let path = e.path();
        if ft.is_symlink() && path.is_dir() {
            if let Some(link) = dumpfmt::fsio::dir_link_out(&path, root)? {
                out.push((n, link));
                continue;
            }
        } else if !ft.is_dir() {
            continue;
        }
        v.push((n, path));
    }
    v.sort();
    out.sort_by_key(|(n, _)| *n);
    Ok((v, out))
}

/// The rank directories (with a dump.json) of `step_dir`, step `step` of the run under `root`;
/// links out of `root` go to `links_out`.
fn rank_dirs(
    step_dir: &Path,
    step: Option<u64>,
    root: &Path,
    links_out: &mut Vec<RunLinkOut>,
) -> Result<Vec<RankDir>> {
    let (ranks, out) = numbered_dirs(step_dir, "rank", root)?;
    links_out.extend(out.into_iter().map(|(rank, link)| RunLinkOut {
        step,
        rank: Some(rank),
        link,
    }));
    Ok(ranks
        .into_iter()
        .filter(|(_, d)| d.join("dump.json").is_file())
        .map(|(rank, dir)| RankDir { rank, dir })
        .collect())
}

/// The run tree under `root`, or `None` when `root` is not a run root (a file, a directory
/// with its own dump.json, or one without `step*/rank*/dump.json` or `rank*/dump.json`).
pub fn discover(root: &Path) -> Result<Option<RunTree>> {
    if !root.is_dir() || root.join("dump.json").exists() {
        return Ok(None);
    }
    let mut tree = RunTree::default();
    let (steps, out) = numbered_dirs(root, "step", root)?;
    tree.links_out
        .extend(out.into_iter().map(|(step, link)| RunLinkOut {
            step: Some(step),
            rank: None,
            link,
        }));
    if steps.is_empty() {
        let ranks = rank_dirs(root, None, root, &mut tree.links_out)?;
        if !ranks.is_empty() {
            tree.steps.insert(None, ranks);
        }
    } else {
        for (s, dir) in steps {
            let ranks = rank_dirs(&dir, Some(s), root, &mut tree.links_out)?;
            if !ranks.is_empty() {
                tree.steps.insert(Some(s), ranks);
            }
        }
    }
    Ok((!tree.steps.is_empty()).then_some(tree))
}

/// One pair to compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairJob {
    pub step: Option<u64>,
    pub rank: u64,
    pub target: PathBuf,
    pub golden: PathBuf,
    /// Bytes the pair reads (both dump.json files and tensor files), for the progress bar.
    pub bytes: u64,
}

/// What a plan leaves out: (step, rank) present on one side only, and the directories of
/// either side not entered (links out of their root, [`RunTree::links_out`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unpaired {
    pub target_only: Vec<(Option<u64>, u64)>,
    pub golden_only: Vec<(Option<u64>, u64)>,
    pub links_out: Vec<dumpfmt::fsio::LinkOut>,
}

/// Sum of the regular files' sizes of a rank directory's dump.json and dump_tensor_data/
/// (metadata only; links are not followed).
fn pair_bytes(dir: &Path) -> u64 {
    let size = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map_or(0, |m| m.len())
    };
    let mut n = size(&dir.join("dump.json"));
    if let Ok(rd) = std::fs::read_dir(dir.join("dump_tensor_data")) {
        for e in rd.flatten() {
            // DirEntry's file type and metadata do not follow links.
            if e.file_type().is_ok_and(|t| t.is_file())
                && let Ok(m) = e.metadata()
            {
                n += m.len();
            }
        }
    }
    n
}

/// The pairs both trees hold, restricted to `steps` and `ranks` when they are not empty.
/// A step directory given directly (no step level) pairs with the other side's only step.
pub fn plan(
    target: &RunTree,
    golden: &RunTree,
    steps: &[u64],
    ranks: &[u64],
) -> Result<(Vec<PairJob>, Unpaired)> {
    let mut jobs = Vec::new();
    let mut unpaired = Unpaired::default();
    let single = |t: &RunTree| t.steps.len() == 1 && t.steps.contains_key(&None);
    let pairs_of_steps: Vec<(Option<u64>, &Vec<RankDir>, &Vec<RankDir>)> = if single(target)
        || single(golden)
    {
        if target.steps.len() != 1 || golden.steps.len() != 1 {
            return Err(Error::Usage(
                    "one side is a step directory (rank*/ directly) and the other holds several steps: give the matching step directory".into(),
                ));
        }
        let (ts, t) = target.steps.iter().next().unwrap();
        let (gs, g) = golden.steps.iter().next().unwrap();
        vec![(ts.or(*gs), t, g)]
    } else {
        let mut v = Vec::new();
        for (s, t) in &target.steps {
            match golden.steps.get(s) {
                Some(g) => v.push((*s, t, g)),
                None => unpaired.target_only.extend(t.iter().map(|r| (*s, r.rank))),
            }
        }
        for (s, g) in &golden.steps {
            if !target.steps.contains_key(s) {
                unpaired.golden_only.extend(g.iter().map(|r| (*s, r.rank)));
            }
        }
        v
    };
    let step_wanted = |s: Option<u64>| steps.is_empty() || s.is_some_and(|s| steps.contains(&s));
    let rank_wanted = |r: u64| ranks.is_empty() || ranks.contains(&r);
    for (s, t, g) in pairs_of_steps {
        if !step_wanted(s) {
            continue;
        }
        for rt in t.iter().filter(|r| rank_wanted(r.rank)) {
            match g.iter().find(|rg| rg.rank == rt.rank) {
                Some(rg) => jobs.push(PairJob {
                    step: s,
                    rank: rt.rank,
                    bytes: pair_bytes(&rt.dir) + pair_bytes(&rg.dir),
                    target: rt.dir.clone(),
                    golden: rg.dir.clone(),
                }),
                None => unpaired.target_only.push((s, rt.rank)),
            }
        }
        for rg in g.iter().filter(|r| rank_wanted(r.rank)) {
            if !t.iter().any(|rt| rt.rank == rg.rank) {
                unpaired.golden_only.push((s, rg.rank));
            }
        }
    }
    unpaired
        .target_only
        .retain(|(s, r)| step_wanted(*s) && rank_wanted(*r));
    unpaired
        .golden_only
        .retain(|(s, r)| step_wanted(*s) && rank_wanted(*r));
    // A refused directory is reported when the selection would have compared it (a rank
    // directly under a step directory given alone is judged by its rank).
    unpaired.links_out = target
        .links_out
        .iter()
        .chain(&golden.links_out)
        .filter(|l| (l.step.is_none() || step_wanted(l.step)) && l.rank.is_none_or(rank_wanted))
        .map(|l| l.link.clone())
        .collect();
    Ok((jobs, unpaired))
}

/// Progress of a whole run, in bytes read.
pub trait RunProgress: Sync {
    fn total(&self, bytes: u64);
    fn advance(&self, bytes: u64);
}

impl RunProgress for () {
    fn total(&self, _: u64) {}
    fn advance(&self, _: u64) {}
}

/// Turns one pair's row events into bytes: its dump.json files at the start, its tensor bytes
/// spread over its rows, the rest when the pair ends.
struct PairProgress<'a> {
    run: &'a dyn RunProgress,
    bytes: u64,
    json_bytes: u64,
    per_row: AtomicU64,
    done: AtomicU64,
}

impl PairProgress<'_> {
    fn add(&self, n: u64) {
        let left = self.bytes.saturating_sub(self.done.load(Ordering::Relaxed));
        let n = n.min(left);
        self.done.fetch_add(n, Ordering::Relaxed);
        self.run.advance(n);
    }
    fn finish(&self) {
        self.add(u64::MAX);
    }
}

impl Progress for PairProgress<'_> {
    fn start(&self, rows: usize) {
        self.add(self.json_bytes);
        let rest = self.bytes.saturating_sub(self.json_bytes);
        self.per_row
            .store(rest / (rows.max(1) as u64), Ordering::Relaxed);
    }
    fn row(&self) {
        self.add(self.per_row.load(Ordering::Relaxed));
    }
}

/// Options of a whole-run compare: the single-pair options (their target, golden, out_dir,
/// step and rank are replaced per pair) and the selection.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub pair: CompareOptions,
    pub target: PathBuf,
    pub golden: PathBuf,
    pub out_dir: PathBuf,
    /// Steps and ranks to compare (empty: all that both sides have).
    pub steps: Vec<u64>,
    pub ranks: Vec<u64>,
    /// Pairs compared at once (at least 1).
    pub workers: usize,
}

/// Sees each compared pair while its dumps and table are still in memory (a report writer):
/// called in the worker that compared it, after its table was renamed to `table`.
pub trait PairSink: Sync {
    fn pair(
        &self,
        job: &PairJob,
        outcome: &crate::CompareOutcome,
        compared: &crate::Compared,
        table: &Path,
    );

    /// Whether a pair an earlier run finished (its table at `table`) still has what this sink
    /// writes; a resumed run compares it again when not.
    fn has_output(&self, _job: &PairJob, _table: &Path) -> bool {
        true
    }
}

/// The result of one pair.
#[derive(Clone, Debug)]
pub struct PairOutcome {
    pub step: Option<u64>,
    pub rank: u64,
    /// The table, renamed to msprobe's distributed name, or why the pair could not be compared.
    pub result: std::result::Result<(PathBuf, Summary), String>,
}

/// A rank's first divergence as the cross-rank view sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirstDiff {
    /// Produced on this rank (or entering from outside the dumped APIs).
    Local {
        key: String,
        /// Collectives this rank passed before the call.
        layer: usize,
        /// Calls after the last of them.
        sub_layer: usize,
        reason: &'static str,
    },
    /// Arrived through a collective whose inputs agree on this rank.
    Received { key: String, layer: usize },
}

impl FirstDiff {
    pub fn key(&self) -> &str {
        match self {
            FirstDiff::Local { key, .. } | FirstDiff::Received { key, .. } => key,
        }
    }
}

/// The origin of a step's difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub rank: u64,
    pub key: String,
    pub reason: &'static str,
}

/// The communication APIs msprobe's `-da` follows (its keyword list: every torch.distributed
/// collective and point-to-point call), under PyTorch's `Distributed.` and MindSpore's
/// `Mint.distributed.`/`Communication.` prefixes.
pub fn is_collective(key: &str) -> bool {
    const PREFIXES: [&str; 3] = ["Distributed.", "MintDistributed.", "Communication."];
    const WORDS: [&str; 10] = [
        "send",
        "recv",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "all_to_all",
        "barrier",
        "all_reduce",
        "all_gather",
    ];
    PREFIXES.iter().any(|p| key.starts_with(p)) && WORDS.iter().any(|w| key.contains(w))
}

/// A rank's first divergence from its calls in execution order (`None`: the rank agrees).
pub fn first_diff(calls: &[CallDiff]) -> Option<FirstDiff> {
    let (mut layer, mut sub_layer) = (0usize, 0usize);
    for c in calls {
        let collective = is_collective(&c.key);
        let local = |reason| {
            Some(FirstDiff::Local {
                key: c.key.clone(),
                layer,
                sub_layer,
                reason,
            })
        };
        if c.args_differ {
            return local("non-tensor arguments differ");
        }
        if c.inputs_differ {
            return local(
                "its tensor inputs already differ, from outside the compared APIs (data, parameters or an API not dumped)",
            );
        }
        if c.outputs_differ {
            if collective {
                return Some(FirstDiff::Received {
                    key: c.key.clone(),
                    layer,
                });
            }
            return local("outputs disagree while tensor inputs agree");
        }
        if collective {
            layer += 1;
            sub_layer = 0;
        } else {
            sub_layer += 1;
        }
    }
    None
}

/// Parses a group's ranks as the table prints them (`[0, 1]`).
fn group_ranks(text: &str) -> Option<Vec<u64>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    inner
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().ok())
        .collect()
}

/// The origin among ranks' first divergences: the earliest local one in collective order.
/// A rank that received its difference through a collective is never the origin; when every
/// diverging rank received it (the producing rank was not compared), there is none.
pub fn find_origin(firsts: &BTreeMap<u64, FirstDiff>) -> Option<Origin> {
    firsts
        .iter()
        .filter_map(|(rank, f)| match f {
            FirstDiff::Local {
                key,
                layer,
                sub_layer,
                reason,
            } => Some(((*layer, *sub_layer, *rank), key, *reason)),
            FirstDiff::Received { .. } => None,
        })
        .min_by_key(|(order, _, _)| *order)
        .map(|((_, _, rank), key, reason)| Origin {
            rank,
            key: key.clone(),
            reason,
        })
}

/// Per step: each rank's first divergence and the origin.
#[derive(Clone, Debug)]
pub struct StepView {
    pub step: Option<u64>,
    pub firsts: BTreeMap<u64, FirstDiff>,
    pub origin: Option<Origin>,
    /// Ranks that received the difference through a collective whose group (when the dump
    /// records it) does not contain the origin: a second, independent origin elsewhere.
    pub unexplained: Vec<u64>,
}

/// What a whole-run compare produced.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub pairs: Vec<PairOutcome>,
    pub unpaired: Unpaired,
    pub steps: Vec<StepView>,
    pub summary_path: PathBuf,
    pub summary_text: String,
    /// `OUT/step{S}/diff_analyze_{ts}.json` per step with an origin.
    pub analyze_paths: Vec<PathBuf>,
}

impl RunOutcome {
    /// Whether some pair found error rows (exit 1 of compare).
    pub fn has_errors(&self) -> bool {
        self.pairs
            .iter()
            .any(|p| matches!(&p.result, Ok((_, s)) if s.row_levels[2] > 0))
    }
    /// Whether some pair could not be compared, or some rank directory was not entered (a
    /// link out of its dump): exit 2.
    pub fn has_failures(&self) -> bool {
        self.pairs.iter().any(|p| p.result.is_err()) || !self.unpaired.links_out.is_empty()
    }
}

fn step_dir_name(step: Option<u64>) -> Option<String> {
    step.map(|s| format!("step{s}"))
}

/// `OUT/step{S}` (or `OUT` for a step directory given directly).
fn step_out(out_dir: &Path, step: Option<u64>) -> PathBuf {
    match step_dir_name(step) {
        Some(d) => out_dir.join(d),
        None => out_dir.to_path_buf(),
    }
}

/// A pair's working directory `OUT/step{S}/rank{R}/`.
pub fn pair_dir(out_dir: &Path, step: Option<u64>, rank: u64) -> PathBuf {
    step_out(out_dir, step).join(format!("rank{rank}"))
}

/// [`pair_dir`] made (or found) as real directories below the output directory, never
/// through a link planted there ([`dumpfmt::outfile::create_dir_below`]).
fn pair_out_dir(out_dir: &Path, step: Option<u64>, rank: u64) -> Result<PathBuf> {
    let rel = pair_dir(Path::new(""), step, rank);
    Ok(dumpfmt::outfile::create_dir_below(out_dir, &rel)?)
}

/// The name of a pair's result record in its working directory.
pub const PAIR_RESULT: &str = "pair_result.json";
/// Version of the record's layout; a record of another version is not reused.
const PAIR_RESULT_VERSION: u32 = 1;
/// Largest record read back (its error text included); a bigger file is treated as no record.
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// A finished pair as written to `OUT/step{S}/rank{R}/pair_result.json`, last of the pair's
/// files and atomically: its presence is what makes the pair *done* for a resumed run, and
/// the run's closing step ([`finish`]) reads the pairs compared elsewhere (other processes,
/// other machines sharing the output directory) from it.
#[derive(serde::Serialize, serde::Deserialize)]
struct PairRecord {
    version: u32,
    step: Option<u64>,
    rank: u64,
    timestamp: String,
    target: PathBuf,
    golden: PathBuf,
    /// The table's file name (beside the working directory), or why the pair failed.
    table: Option<String>,
    error: Option<String>,
    summary: Option<Summary>,
}

fn write_record(opts: &RunOptions, job: &PairJob, ts: &str, out: &PairOutcome) -> Result<()> {
    let (table, error, summary) = match &out.result {
        Ok((path, s)) => (
            Some(
                path.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            ),
            None,
            Some(s.clone()),
        ),
        Err(e) => (None, Some(e.clone()), None),
    };
    let rec = PairRecord {
        version: PAIR_RESULT_VERSION,
        step: job.step,
        rank: job.rank,
        timestamp: ts.to_string(),
        target: job.target.clone(),
        golden: job.golden.clone(),
        table,
        error,
        summary,
    };
    let dir = pair_out_dir(&opts.out_dir, job.step, job.rank)?;
    let text = serde_json::to_string_pretty(&rec).expect("records serialize");
    dumpfmt::outfile::write(&dir.join(PAIR_RESULT), text.as_bytes())?;
    Ok(())
}

/// A pair's record as read, when it reads (anything unreadable is no record: the pair is
/// compared again).
fn load_record(out_dir: &Path, job: &PairJob) -> Option<PairRecord> {
    let path = pair_dir(out_dir, job.step, job.rank).join(PAIR_RESULT);
    // The reader's own open: a FIFO planted under the name is refused, never waited on.
    let f = dumpfmt::fsio::open_regular(&path).ok()?;
    // A record is a few hundred bytes; anything past the bound is not one of ours (and is not
    // read into memory whole).
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_RECORD_BYTES + 1), &mut text)
        .ok()?;
    if text.len() as u64 > MAX_RECORD_BYTES {
        return None;
    }
    serde_json::from_str(&text).ok()
}

/// The outcome a pair's record holds, when it is one of this run: same step, rank, dump
/// directories and timestamp, and (for a compared pair) its table still in place. `None` for
/// a pair without a record or with one from another run.
/// The record of a pair an earlier run of this compare finished, when a resumed run may skip
/// it: compared without error, its table in place, and what `sink` writes still there.
pub fn done_record(
    opts: &RunOptions,
    job: &PairJob,
    ts: &str,
    sink: Option<&dyn PairSink>,
) -> Option<PairOutcome> {
    read_record(opts, job, ts).filter(|o| match &o.result {
        Ok((table, _)) => sink.is_none_or(|s| s.has_output(job, table)),
        Err(_) => false,
    })
}

pub fn read_record(opts: &RunOptions, job: &PairJob, ts: &str) -> Option<PairOutcome> {
    let rec = load_record(&opts.out_dir, job)?;
    if rec.version != PAIR_RESULT_VERSION
        || rec.step != job.step
        || rec.rank != job.rank
        || rec.timestamp != ts
        || rec.target != job.target
        || rec.golden != job.golden
    {
        return None;
    }
    let result = match (rec.table, rec.error, rec.summary) {
        (Some(name), None, Some(summary)) => {
            // A plain file name, as written: nothing else is joined to the output directory.
            if Path::new(&name).file_name() != Some(std::ffi::OsStr::new(&name)) {
                return None;
            }
            let table = step_out(&opts.out_dir, job.step).join(name);
            if !table.is_file() {
                return None;
            }
            Ok((table, summary))
        }
        (None, Some(e), None) => Err(e),
        _ => return None,
    };
    Some(PairOutcome {
        step: job.step,
        rank: job.rank,
        result,
    })
}

/// The timestamp of a run whose pairs already have records in `opts.out_dir` (the first
/// pair's that has one): a resumed run without a timestamp of its own continues that run.
pub fn recorded_timestamp(opts: &RunOptions, jobs: &[PairJob]) -> Option<String> {
    jobs.iter().find_map(|job| {
        let rec = load_record(&opts.out_dir, job)?;
        dumpfmt::outfile::check_timestamp(&rec.timestamp)
            .ok()
            .map(|()| rec.timestamp)
    })
}

/// Compares one pair into `out/step{S}/rank{R}/`, renames its table beside it, and writes the
/// pair's result record (also for a pair that could not be compared).
pub fn compare_pair(
    opts: &RunOptions,
    job: &PairJob,
    ts: &str,
    progress: &dyn RunProgress,
) -> PairOutcome {
    compare_pair_with(opts, job, ts, progress, None)
}

/// [`compare_pair`], handing the compared pair to `sink` before its memory is freed.
pub fn compare_pair_with(
    opts: &RunOptions,
    job: &PairJob,
    ts: &str,
    progress: &dyn RunProgress,
    sink: Option<&dyn PairSink>,
) -> PairOutcome {
    let step_out = step_out(&opts.out_dir, job.step);
    let work = pair_dir(&opts.out_dir, job.step, job.rank);
    let json_bytes = ["dump.json"]
        .iter()
        .flat_map(|f| [job.target.join(f), job.golden.join(f)])
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let pp = PairProgress {
        run: progress,
        bytes: job.bytes,
        json_bytes,
        per_row: AtomicU64::new(0),
        done: AtomicU64::new(0),
    };
    let mut pair = opts.pair.clone();
    pair.target = job.target.clone();
    pair.golden = job.golden.clone();
    pair.out_dir = work.clone();
    pair.step = None;
    pair.rank = None;
    pair.timestamp = Some(ts.to_string());
    let result = (|| -> Result<(PathBuf, Summary)> {
        pair_out_dir(&opts.out_dir, job.step, job.rank)?;
        let (outcome, compared) = crate::run_keeping(&pair, &pp)?;
        let ext = outcome
            .table_path
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_else(|| "csv".into());
        let name = format!("compare_result_rank{}_{ts}.{ext}", job.rank);
        let dest = step_out.join(&name);
        dumpfmt::outfile::check_target(&dest)?;
        std::fs::rename(&outcome.table_path, &dest).map_err(|e| Error::io(&dest, e))?;
        // The pair's own summary names the table where it now is.
        let text = outcome.summary.to_markdown(
            &job.target.join("dump.json").display().to_string(),
            &job.golden.join("dump.json").display().to_string(),
            &format!("../{name}"),
        );
        dumpfmt::outfile::write(&outcome.summary_path, text.as_bytes())?;
        if let Some(sink) = sink {
            sink.pair(job, &outcome, &compared, &dest);
        }
        drop(compared);
        Ok((dest, outcome.summary))
    })();
    pp.finish();
    let mut out = PairOutcome {
        step: job.step,
        rank: job.rank,
        result: result.map_err(|e| e.to_string()),
    };
    if let Err(e) = write_record(opts, job, ts, &out) {
        // Without its record the pair is not done: a resumed run compares it again.
        if out.result.is_ok() {
            out.result = Err(format!("its result record could not be written: {e}"));
        }
    }
    out
}

/// A whole-run compare before any pair ran: the pairs, those left out, and the timestamp
/// every file of the run carries.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub jobs: Vec<PairJob>,
    pub unpaired: Unpaired,
    pub timestamp: String,
}

/// Plans a whole-run compare: checks the timestamp, pairs the two trees (an error when no
/// pair is left), fixes the timestamp (`opts.pair.timestamp`; for a resumed run without one,
/// that of the pairs already done; else now) and creates the output directory.
pub fn plan_run(opts: &RunOptions, target: &RunTree, golden: &RunTree) -> Result<RunPlan> {
    if let Some(ts) = &opts.pair.timestamp {
        dumpfmt::outfile::check_timestamp(ts).map_err(Error::Usage)?;
    }
    let (jobs, unpaired) = plan(target, golden, &opts.steps, &opts.ranks)?;
    if jobs.is_empty() {
        return Err(Error::Usage(format!(
            "{} and {}: no (step, rank) pair both runs hold{}",
            opts.target.display(),
            opts.golden.display(),
            if opts.steps.is_empty() && opts.ranks.is_empty() {
                String::new()
            } else {
                " among the selected steps and ranks".into()
            }
        )));
    }
    let timestamp = match &opts.pair.timestamp {
        Some(ts) => ts.clone(),
        None if opts.pair.resume => {
            recorded_timestamp(opts, &jobs).unwrap_or_else(crate::run::timestamp_now)
        }
        None => crate::run::timestamp_now(),
    };
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| Error::io(&opts.out_dir, e))?;
    Ok(RunPlan {
        jobs,
        unpaired,
        timestamp,
    })
}

/// Compares every selected pair of two run roots, `opts.workers` at a time, and writes the
/// run's summary.md and, per step with an origin, msprobe's `-da` JSON. With
/// `opts.pair.resume`, pairs whose record shows them done in this run are not compared again.
pub fn run_tree(
    opts: &RunOptions,
    target: &RunTree,
    golden: &RunTree,
    progress: &dyn RunProgress,
) -> Result<RunOutcome> {
    run_tree_with(opts, target, golden, progress, None)
}

/// [`run_tree`], handing each compared pair to `sink` before its memory is freed.
pub fn run_tree_with(
    opts: &RunOptions,
    target: &RunTree,
    golden: &RunTree,
    progress: &dyn RunProgress,
    sink: Option<&dyn PairSink>,
) -> Result<RunOutcome> {
    let plan = plan_run(opts, target, golden)?;
    let ts = plan.timestamp.as_str();
    let jobs = &plan.jobs;
    progress.total(jobs.iter().map(|j| j.bytes).sum());
    let mut results: Vec<(usize, PairOutcome)> = Vec::with_capacity(jobs.len());
    let mut todo: Vec<usize> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        match opts
            .pair
            .resume
            .then(|| done_record(opts, job, ts, sink))
            .flatten()
        {
            Some(done) => {
                progress.advance(job.bytes);
                results.push((i, done));
            }
            None => todo.push(i),
        }
    }
    // Largest pairs first: the last worker to finish then holds a small one.
    todo.sort_by_key(|&i| std::cmp::Reverse(jobs[i].bytes));
    let workers = opts.workers.clamp(1, todo.len().max(1));
    let next = Mutex::new(todo.into_iter());
    let results = Mutex::new(results);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let Some(i) = next.lock().unwrap().next() else {
                        break;
                    };
                    let out = compare_pair_with(opts, &jobs[i], ts, progress, sink);
                    results.lock().unwrap().push((i, out));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    let pairs: Vec<PairOutcome> = results.into_iter().map(|(_, p)| p).collect();
    finish(opts, target, &plan, pairs)
}

/// Closes a whole-run compare whose pairs are done (here or elsewhere: `pairs` in the plan's
/// order): the cross-rank view, msprobe's `-da` JSON per step with an origin, the run's
/// summary.md and run_summary.json.
pub fn finish(
    opts: &RunOptions,
    target: &RunTree,
    plan: &RunPlan,
    pairs: Vec<PairOutcome>,
) -> Result<RunOutcome> {
    let ts = plan.timestamp.as_str();
    let unpaired = plan.unpaired.clone();
    let mut steps: BTreeMap<Option<u64>, BTreeMap<u64, &Summary>> = BTreeMap::new();
    for p in &pairs {
        if let Ok((_, s)) = &p.result {
            steps.entry(p.step).or_default().insert(p.rank, s);
        }
    }
    let views: Vec<StepView> = steps
        .iter()
        .map(|(step, ranks)| {
            let firsts: BTreeMap<u64, FirstDiff> = ranks
                .iter()
                .filter_map(|(r, s)| first_diff(&s.calls).map(|f| (*r, f)))
                .collect();
            let origin = find_origin(&firsts);
            let unexplained = firsts
                .iter()
                .filter_map(|(r, f)| {
                    let FirstDiff::Received { key, .. } = f else {
                        return None;
                    };
                    let group = ranks[r]
                        .calls
                        .iter()
                        .find(|c| &c.key == key)
                        .and_then(|c| c.group.as_deref())
                        .and_then(group_ranks);
                    match (&origin, group) {
                        (None, _) => Some(*r),
                        (Some(o), Some(g)) if !g.contains(&o.rank) => Some(*r),
                        _ => None,
                    }
                })
                .collect();
            StepView {
                step: *step,
                firsts,
                origin,
                unexplained,
            }
        })
        .collect();

    let mut analyze_paths = Vec::new();
    for v in &views {
        let Some(o) = &v.origin else { continue };
        let rank_dir = target
            .steps
            .get(&v.step)
            .or_else(|| target.steps.values().next())
            .and_then(|rs| rs.iter().find(|r| r.rank == o.rank))
            .map(|r| r.dir.clone());
        let Some(rank_dir) = rank_dir else { continue };
        let json = crate::run_tree_json::diff_analyze(&rank_dir, o)?;
        let dir =
            dumpfmt::outfile::create_dir_below(&opts.out_dir, &step_out(Path::new(""), v.step))?;
        let path = dir.join(format!("diff_analyze_{ts}.json"));
        dumpfmt::outfile::write(&path, json.as_bytes())?;
        analyze_paths.push(path);
    }

    let summary_text = crate::run_tree_json::summary_markdown(opts, &pairs, &unpaired, &views);
    let summary_path = opts.out_dir.join("summary.md");
    dumpfmt::outfile::write(&summary_path, summary_text.as_bytes())?;
    let json = crate::run_tree_json::run_json(&pairs, &unpaired, &views);
    dumpfmt::outfile::write(&opts.out_dir.join("run_summary.json"), json.as_bytes())?;
    Ok(RunOutcome {
        pairs,
        unpaired,
        steps: views,
        summary_path,
        summary_text,
        analyze_paths,
    })
}
