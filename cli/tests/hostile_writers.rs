//! Hostile and unlucky inputs against what numprobe writes (issue 15, the writer half): planted
//! links at output names, a full disk, formula cells, path-like timestamps, damaged capture
//! journals, stale resume journals, broken precision-compare CSVs and malformed mapping YAML.
//! Each test runs the built binary and checks the exit code, the message and that files that
//! were there before are unchanged.

mod common;

use std::path::{Path, PathBuf};

use capture::Session;
use capture::journal::{self, Meta, Record};
use common::*;
use dumpfmt::json::{Map, Value};

fn code(o: &std::process::Output) -> i32 {
    o.status.code().expect("exited")
}

fn all(o: &std::process::Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

// ---------------------------------------------------------------------------------------------
// Capture journals and recover

fn meta() -> Meta {
    Meta {
        task: "statistics".into(),
        level: "L1".into(),
        framework: "pytorch".into(),
        dump_data_dir: None,
        extra_info: true,
    }
}

fn entry(i: usize) -> Record {
    let t = Map::new()
        .with("type", "torch.Tensor")
        .with("dtype", "torch.float32")
        .with("shape", Value::Array(vec![Value::Int(2)]))
        .with("Max", Value::Float(i as f64 + 0.5))
        .with("Min", Value::Float(-0.5))
        .with("Mean", Value::Float(0.25))
        .with("Norm", Value::Float(1.5))
        .with("requires_grad", false);
    Record::Entry {
        name: format!("Functional.relu.{i}.forward"),
        body: Map::new().with("input_args", Value::Array(vec![Value::Object(t)])),
        reinsert: false,
    }
}

/// A rank directory captured with `n` entries: its journal and the complete JSON files the
/// capture wrote at its last step end.
fn captured_rank(dir: &Path, n: usize) -> PathBuf {
    let rank = dir.join("dump/step0/rank0");
    let mut s = Session::create(&rank, meta()).unwrap();
    for i in 0..n {
        s.record(entry(i)).unwrap();
        s.stack(
            format!("Functional.relu.{i}.forward"),
            vec![format!("File train.py, line {i}, in step, \n y = relu(x)")],
        )
        .unwrap();
        s.record(Record::Construct {
            name: format!("Functional.relu.{i}.forward"),
            parent: None,
        })
        .unwrap();
    }
    s.finish().unwrap();
    rank
}

/// The byte ranges of the journal's frames (after the magic).
fn frames(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut at = journal::MAGIC.len();
    let mut out = Vec::new();
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push(at..at + 8 + len);
        at += 8 + len;
    }
    out
}

fn entries_in(dump_json: &Path) -> usize {
    let v = dumpfmt::json::parse_file(dump_json).unwrap();
    v.get("data").unwrap().as_object().unwrap().len()
}

fn recover(args: &[&Path]) -> std::process::Output {
    let mut a: Vec<&Path> = vec![Path::new("recover")];
    a.extend_from_slice(args);
    numprobe(a)
}

#[cfg(unix)]
#[test]
fn recover_refuses_planted_links_at_every_output() {
    for name in ["dump.json", "stack.json", "construct.json"] {
        let d = tempfile::tempdir().unwrap();
        let rank = captured_rank(d.path(), 5);
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::remove_file(rank.join(name)).unwrap();
        std::os::unix::fs::symlink(&victim, rank.join(name)).unwrap();
        let o = recover(&[&rank]);
        assert_eq!(code(&o), 2, "{name}: {}", all(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&rank.join(name).display().to_string()) && err.contains("symbolic link"),
            "{name}: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{name}"
        );
        assert!(
            std::fs::symlink_metadata(rank.join(name))
                .unwrap()
                .is_symlink()
        );
    }
}

#[test]
fn a_flipped_byte_in_the_middle_loses_one_record_not_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let rank = captured_rank(d.path(), 164);
    let jpath = rank.join(journal::FILE_NAME);
    let mut bytes = std::fs::read(&jpath).unwrap();
    let fr = frames(&bytes);
    // A byte at 10% of the journal, inside an entry frame's payload.
    let target = bytes.len() / 10;
    let hit = fr.iter().find(|r| r.contains(&target)).unwrap().clone();
    let at = (hit.start + 12).max(target).min(hit.end - 1);
    bytes[at] ^= 0x20;
    std::fs::write(&jpath, &bytes).unwrap();
    let before = std::fs::read(rank.join("dump.json")).unwrap();

    // The complete dump.json is not replaced by one with fewer entries.
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 1, "{}", all(&o));
    let text = all(&o);
    assert!(text.contains("1 entries would be lost"), "{text}");
    assert!(text.contains("could not read at least 1 record"), "{text}");
    assert_eq!(std::fs::read(rank.join("dump.json")).unwrap(), before);

    // A killed run has no complete dump.json: everything after the damage is recovered.
    std::fs::remove_file(rank.join("dump.json")).unwrap();
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 1, "{}", all(&o));
    let n = entries_in(&rank.join("dump.json"));
    assert!((162..=163).contains(&n), "{n} entries of 164 recovered");
    assert!(
        all(&o).contains("in the middle of the journal"),
        "{}",
        all(&o)
    );
}

#[test]
fn force_replaces_but_keeps_the_previous_files() {
    let d = tempfile::tempdir().unwrap();
    let rank = captured_rank(d.path(), 20);
    let jpath = rank.join(journal::FILE_NAME);
    let bytes = std::fs::read(&jpath).unwrap();
    let fr = frames(&bytes);
    // Keep the version and meta frames and three entries' worth.
    std::fs::write(&jpath, &bytes[..fr[10].end]).unwrap();
    let before = std::fs::read(rank.join("dump.json")).unwrap();
    let o = recover(&[&rank, Path::new("--force")]);
    assert_eq!(code(&o), 0, "{}", all(&o));
    assert!(entries_in(&rank.join("dump.json")) < 20);
    assert_eq!(std::fs::read(rank.join("dump.json.bak-1")).unwrap(), before);
    assert!(rank.join("stack.json.bak-1").exists());
    assert!(stdout(&o).contains(".bak-1"), "{}", stdout(&o));
}

#[test]
fn an_empty_journal_never_overwrites_a_complete_dump() {
    for content in [&b""[..], &journal::MAGIC[..], &journal::MAGIC[..5]] {
        let d = tempfile::tempdir().unwrap();
        let rank = captured_rank(d.path(), 12);
        std::fs::write(rank.join(journal::FILE_NAME), content).unwrap();
        let before: Vec<_> = ["dump.json", "stack.json", "construct.json"]
            .iter()
            .map(|n| std::fs::read(rank.join(n)).unwrap())
            .collect();
        let o = recover(&[&rank]);
        assert_eq!(code(&o), 1, "{content:?}: {}", all(&o));
        assert!(all(&o).contains("12 entries would be lost"), "{}", all(&o));
        for (n, b) in ["dump.json", "stack.json", "construct.json"]
            .iter()
            .zip(&before)
        {
            assert_eq!(&std::fs::read(rank.join(n)).unwrap(), b, "{n}");
        }
    }
}

#[test]
fn a_torn_tail_is_reported_and_is_no_problem() {
    let d = tempfile::tempdir().unwrap();
    let rank = captured_rank(d.path(), 30);
    let jpath = rank.join(journal::FILE_NAME);
    let bytes = std::fs::read(&jpath).unwrap();
    let fr = frames(&bytes);
    // kill -9 during the last write: half of the last entry's frame reached the file.
    let last_entry = fr[fr.len() - 3].clone();
    let cut = last_entry.start + (last_entry.end - last_entry.start) / 2;
    std::fs::write(&jpath, &bytes[..cut]).unwrap();
    for f in ["dump.json", "stack.json", "construct.json"] {
        std::fs::remove_file(rank.join(f)).unwrap();
    }
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 0, "{}", all(&o));
    assert!(stdout(&o).contains("torn tail"), "{}", stdout(&o));
    assert_eq!(entries_in(&rank.join("dump.json")), 30);
}

#[test]
fn unknown_record_kinds_are_counted_not_dropped_silently() {
    let d = tempfile::tempdir().unwrap();
    let rank = captured_rank(d.path(), 8);
    let jpath = rank.join(journal::FILE_NAME);
    let mut bytes = std::fs::read(&jpath).unwrap();
    for _ in 0..3 {
        let payload = b"\x2a{\"from\": \"a newer numprobe\"}";
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        bytes.extend_from_slice(payload);
    }
    std::fs::write(&jpath, &bytes).unwrap();
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 1, "{}", all(&o));
    let text = stdout(&o);
    assert!(
        text.contains("3 record(s) of kinds this numprobe does not know"),
        "{text}"
    );
    assert!(text.contains("kind 42: 3"), "{text}");
    assert_eq!(entries_in(&rank.join("dump.json")), 8);
}

#[test]
fn a_newer_journal_format_is_refused_and_an_old_one_read() {
    let d = tempfile::tempdir().unwrap();
    let rank = captured_rank(d.path(), 4);
    let jpath = rank.join(journal::FILE_NAME);
    let good = std::fs::read(&jpath).unwrap();
    let before = std::fs::read(rank.join("dump.json")).unwrap();

    let mut newer = good.clone();
    newer[..8].copy_from_slice(b"NPJRNL03");
    std::fs::write(&jpath, &newer).unwrap();
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 2, "{}", all(&o));
    assert!(
        stderr(&o).contains("journal format 3.0 is newer"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(rank.join("dump.json")).unwrap(), before);

    // A version frame naming a newer major under today's magic is refused too.
    let fr = frames(&good);
    let payload = b"\x0a{\"major\": 9, \"minor\": 1}";
    let mut v9 = good[..8].to_vec();
    v9.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v9.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    v9.extend_from_slice(payload);
    v9.extend_from_slice(&good[fr[1].start..]);
    std::fs::write(&jpath, &v9).unwrap();
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 2, "{}", all(&o));
    assert!(
        stderr(&o).contains("journal format 9.1 is newer"),
        "{}",
        stderr(&o)
    );

    // Journals from before the version frame (magic NPJRNL01) are still read.
    let mut old = b"NPJRNL01".to_vec();
    old.extend_from_slice(&good[fr[1].start..]);
    std::fs::write(&jpath, &old).unwrap();
    std::fs::remove_file(rank.join("dump.json")).unwrap();
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 0, "{}", all(&o));
    assert_eq!(std::fs::read(rank.join("dump.json")).unwrap(), before);
}

// ---------------------------------------------------------------------------------------------
// A full disk (a 64 KiB tmpfs; needs root)

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let o = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir)
            .output();
        match o {
            Ok(o) if o.status.success() => Some(Tmpfs(dir.to_path_buf())),
            Ok(o) => {
                println!(
                    "SKIPPED: cannot mount a tmpfs to fill ({}): the full-disk case is not run",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                println!("SKIPPED: no mount command ({e}): the full-disk case is not run");
                None
            }
        }
    }

    /// Fills the file system up to the last byte.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = [0u8; 1024];
        while f.write_all(&block).is_ok() && f.flush().is_ok() {}
        let one = [0u8; 1];
        while f.write_all(&one).is_ok() && f.flush().is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("numprobe-tmp"))
        .collect()
}

#[test]
fn a_full_disk_leaves_the_previous_outputs_intact() {
    let d = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&d.path().join("small")) else {
        return;
    };
    // compare: the previous table and summary stay as they were.
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let out = fs.0.join("out");
    std::fs::create_dir(&out).unwrap();
    let table = out.join("compare_result_20261201000000.csv");
    std::fs::write(&table, "previous table\n").unwrap();
    std::fs::write(out.join("summary.md"), "previous summary\n").unwrap();
    fs.fill();
    let o = numprobe([
        Path::new("compare"),
        &s.join("target"),
        &s.join("golden"),
        Path::new("--out"),
        &out,
        Path::new("--timestamp"),
        Path::new("20261201000000"),
    ]);
    assert_eq!(code(&o), 2, "{}", all(&o));
    assert!(
        stderr(&o).contains("compare_result_20261201000000.csv"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&table).unwrap(), "previous table\n");
    assert_eq!(
        std::fs::read_to_string(out.join("summary.md")).unwrap(),
        "previous summary\n"
    );
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));

    // recover: a dump.json that cannot be rewritten stays the valid one.
    std::fs::remove_file(fs.0.join("filler")).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    let rank = captured_rank(&fs.0, 6);
    let before = std::fs::read(rank.join("dump.json")).unwrap();
    {
        // The journal goes on past the last JSON write (a later kill).
        let jpath = rank.join(journal::FILE_NAME);
        let mut bytes = std::fs::read(&jpath).unwrap();
        for i in 6..40 {
            let payload = entry(i).encode();
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            bytes.extend_from_slice(&payload);
        }
        std::fs::write(&jpath, &bytes).unwrap();
    }
    fs.fill();
    let o = recover(&[&rank]);
    assert_eq!(code(&o), 2, "{}", all(&o));
    assert_eq!(std::fs::read(rank.join("dump.json")).unwrap(), before);
    assert_eq!(entries_in(&rank.join("dump.json")), 6);
    assert!(leftovers(&rank).is_empty(), "{:?}", leftovers(&rank));
}

// ---------------------------------------------------------------------------------------------
// compare's outputs

/// A statistics dump whose API names, from a stranger, start with formula characters.
fn formula_dump(dir: &Path) -> PathBuf {
    let t = |max: f64| {
        Value::Object(
            Map::new()
                .with("type", "torch.Tensor")
                .with("dtype", "torch.float32")
                .with("shape", Value::Array(vec![Value::Int(2)]))
                .with("Max", Value::Float(max))
                .with("Min", Value::Float(-0.5))
                .with("Mean", Value::Float(0.25))
                .with("Norm", Value::Float(1.5))
                .with("requires_grad", false),
        )
    };
    let mut data = Map::new();
    for name in [
        "=HYPERLINK(\"http://x\").0.forward",
        "@SUM(A1).0.forward",
        "Functional.relu.0.forward",
    ] {
        data.insert(
            name,
            Value::Object(
                Map::new()
                    .with("input_args", Value::Array(vec![t(1.0)]))
                    .with("output", Value::Array(vec![t(-0.5)])),
            ),
        );
    }
    let top = Map::new()
        .with("task", "statistics")
        .with("level", "L1")
        .with("framework", "pytorch")
        .with("dump_data_dir", Value::Null)
        .with("data", Value::Object(data));
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("dump.json");
    dumpfmt::json::write_file(&p, &Value::Object(top)).unwrap();
    p
}

fn compare(target: &Path, golden: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut a: Vec<&std::ffi::OsStr> = vec![
        "compare".as_ref(),
        target.as_os_str(),
        golden.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    a.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    numprobe(a)
}

#[cfg(unix)]
#[test]
fn compare_refuses_planted_links_at_its_outputs() {
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    for (name, extra) in [
        ("compare_result_20261201000000.csv", &[][..]),
        ("compare_result_20261201000000.xlsx", &["--xlsx"][..]),
        ("summary.md", &[][..]),
        ("compare_progress.tsv", &[][..]),
        ("compare.lock", &[][..]),
        ("report.html", &[][..]),
        ("compare_20261201000000.vis.db", &["--vis-db"][..]),
    ] {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
        let mut args = vec!["--timestamp", "20261201000000"];
        args.extend_from_slice(extra);
        let o = compare(&s.join("target"), &s.join("golden"), &out, &args);
        assert_eq!(code(&o), 2, "{name}: {}", all(&o));
        assert!(
            stderr(&o).contains(name) && stderr(&o).contains("symbolic link"),
            "{name}: {}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{name}"
        );
    }
}

/// The whole-run compare writes into `OUT/step{S}/` and `OUT/step{S}/rank{R}/`, directories
/// it makes below the one the user names: one already there as a symbolic link (an output
/// directory shared with others) is refused, never written through; the pairs behind it are
/// not compared (exit 2, naming it), the others are.
#[cfg(unix)]
#[test]
fn whole_run_compare_never_writes_through_planted_directories() {
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let d = tempfile::tempdir().unwrap();
    let (t, g) = (d.path().join("t"), d.path().join("g"));
    for (root, side) in [(&t, "target"), (&g, "golden")] {
        // The sample's one rank directory (msprobe names it after the process).
        let step0 = s.join(side).join("step0");
        let from = std::fs::read_dir(&step0)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        for rank in ["rank0", "rank1"] {
            copy_tree(&from, &root.join("step0").join(rank));
        }
    }
    for (planted, compared) in [("step0", 0), ("step0/rank1", 1)] {
        let out = d.path().join(format!("out_{compared}"));
        let victim = d.path().join(format!("victim_{compared}"));
        std::fs::create_dir_all(out.join("step0")).unwrap();
        std::fs::create_dir(&victim).unwrap();
        if planted == "step0" {
            std::fs::remove_dir(out.join("step0")).unwrap();
        }
        std::os::unix::fs::symlink(&victim, out.join(planted)).unwrap();
        let o = compare(&t, &g, &out, &["--timestamp", "20261201000000"]);
        assert_eq!(code(&o), 2, "{planted}: {}", all(&o));
        assert!(
            stderr(&o).contains("symbolic link") && stderr(&o).contains(&*victim.to_string_lossy()),
            "{planted}: {}",
            all(&o)
        );
        assert_eq!(
            std::fs::read_dir(&victim).unwrap().count(),
            0,
            "{planted}: written through the link"
        );
        // With only the rank's directory planted, the other rank is compared.
        let table = out.join("step0/compare_result_rank0_20261201000000.csv");
        assert_eq!(table.is_file(), compared == 1, "{planted}: {}", all(&o));
    }
}

#[test]
fn formula_cells_from_dump_names_are_quoted_in_csv_and_xlsx() {
    let d = tempfile::tempdir().unwrap();
    let t = formula_dump(&d.path().join("t"));
    let g = formula_dump(&d.path().join("g"));
    let out = d.path().join("out");
    let o = compare(&t, &g, &out, &["--timestamp", "20261201000000"]);
    assert_ne!(code(&o), 2, "{}", all(&o));
    let csv = std::fs::read_to_string(out.join("compare_result_20261201000000.csv")).unwrap();
    let rows = ulp::precision_compare::parse_csv(&csv).unwrap();
    let mut quoted = 0;
    for (line, r) in &rows {
        for cell in r {
            assert!(
                !pyrepr::is_formula_cell(cell),
                "line {line}: formula cell {cell:?}"
            );
            quoted += cell.starts_with("'=HYPERLINK") as usize + cell.starts_with("'@SUM") as usize;
        }
    }
    assert!(quoted >= 4, "{quoted} quoted name cells\n{csv}");
    // Numbers keep msprobe's spelling.
    assert!(csv.contains(",-0.5,"), "{csv}");

    let o = compare(&t, &g, &out, &["--timestamp", "20261201000001", "--xlsx"]);
    assert_ne!(code(&o), 2, "{}", all(&o));
    let xlsx = std::fs::read(out.join("compare_result_20261201000001.xlsx")).unwrap();
    let strings = xlsx_strings(&xlsx);
    assert!(
        strings.iter().any(|s| s.starts_with("'=HYPERLINK")),
        "{strings:?}"
    );
    assert!(
        strings.iter().all(|s| !pyrepr::is_formula_cell(s)),
        "{strings:?}"
    );
}

/// The text cells of an xlsx, read with the system's unzip (the shared strings table).
fn xlsx_strings(xlsx: &[u8]) -> Vec<String> {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.xlsx");
    std::fs::write(&p, xlsx).unwrap();
    let o = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, zipfile, re, html\n\
             z = zipfile.ZipFile(sys.argv[1])\n\
             for n in z.namelist():\n\
             \x20   if n.startswith('xl/worksheets/') or n == 'xl/sharedStrings.xml':\n\
             \x20       for t in re.findall(r'<t[^>]*>(.*?)</t>', z.read(n).decode(), re.S):\n\
             \x20           print(html.unescape(t).replace('\\n', ' '))\n",
        )
        .arg(&p)
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn timestamps_that_are_not_fourteen_digits_are_refused() {
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("a/b/out");
    for ts in ["/../../x", "../../../x", "2026", "2026120100000x"] {
        let o = compare(
            &s.join("target"),
            &s.join("golden"),
            &out,
            &["--timestamp", ts],
        );
        assert_eq!(code(&o), 2, "{ts}: {}", all(&o));
        assert!(stderr(&o).contains("14 digits"), "{}", stderr(&o));
    }
    let fx = testdata().join("fixtures/msprobe-26.2.0-cpu/acccheck-cpu_patched_f32_stat");
    let details = details_csv(&fx);
    let o = numprobe([
        Path::new("precision-compare"),
        Path::new("--npu"),
        &details,
        Path::new("--gpu"),
        &details,
        Path::new("--out"),
        &out,
        Path::new("--timestamp"),
        Path::new("/../../x"),
    ]);
    assert_eq!(code(&o), 2, "{}", all(&o));
    assert!(stderr(&o).contains("14 digits"), "{}", stderr(&o));
    // Nothing was written anywhere below the temporary directory but the output folder.
    let mut files = Vec::new();
    walk(d.path(), &mut files);
    assert!(
        files.iter().all(|f| f.starts_with(&out)),
        "written outside --out: {files:?}"
    );
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn resume_recomputes_rows_whose_tensors_changed() {
    let fx = testdata().join("fixtures/msprobe-26.2.0-cpu/pt_tiny_f32_tensor_L1/dump");
    let d = tempfile::tempdir().unwrap();
    let (t, g) = (d.path().join("t"), d.path().join("g"));
    copy_tree(&fx.join("step0/proc24674"), &t);
    copy_tree(&fx.join("step0/proc24674"), &g);
    let out = d.path().join("out");
    let ts = |n: u8| format!("2026120100000{n}");
    let table =
        |n: u8| std::fs::read_to_string(out.join(format!("compare_result_{}.csv", ts(n)))).unwrap();
    let o = compare(&t, &g, &out, &["--timestamp", &ts(1)]);
    assert_ne!(code(&o), 2, "{}", all(&o));

    // The target's tensor changes after the run (here: the next step's values).
    let name = "Functional.linear.0.forward.output.0.pt";
    std::fs::copy(
        fx.join("step1/proc24674/dump_tensor_data").join(name),
        t.join("dump_tensor_data").join(name),
    )
    .unwrap();
    let o = compare(&t, &g, &out, &["--timestamp", &ts(2), "--resume"]);
    assert_ne!(code(&o), 2, "{}", all(&o));
    let fresh_out = d.path().join("fresh");
    let o = compare(&t, &g, &fresh_out, &["--timestamp", &ts(3)]);
    assert_ne!(code(&o), 2, "{}", all(&o));
    let fresh =
        std::fs::read_to_string(fresh_out.join(format!("compare_result_{}.csv", ts(3)))).unwrap();
    assert_ne!(table(1), fresh, "the changed tensor changes the table");
    assert_eq!(table(2), fresh, "--resume gave a stale row");

    // A damaged journal row (wrong field count, unparseable cells) is recomputed too.
    let journal = out.join("compare_progress.tsv");
    let text = std::fs::read_to_string(&journal).unwrap();
    let mangled: String = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("{l}\n")
            } else if i % 2 == 0 {
                format!("{}\tEXTRA\n", l)
            } else {
                format!("{}\n", l.replace("\tf", "\tfx"))
            }
        })
        .collect();
    std::fs::write(&journal, mangled).unwrap();
    let o = compare(&t, &g, &out, &["--timestamp", &ts(4), "--resume"]);
    assert_ne!(code(&o), 2, "{}", all(&o));
    assert_eq!(table(4), fresh);
}

// ---------------------------------------------------------------------------------------------
// acc-check and precision-compare

fn details_csv(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("accuracy_checking_details")
        })
        .unwrap()
}

#[test]
fn acc_check_quotes_a_formula_api_name() {
    let d = tempfile::tempdir().unwrap();
    let (b, a) = (d.path().join("b.npy"), d.path().join("a.npy"));
    let xs = [0.5f64, -1.0, 2.0];
    let b64: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a32: Vec<u8> = xs.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect();
    for (p, dt, bytes) in [
        (&b, dumpfmt::DType::F64, b64),
        (&a, dumpfmt::DType::F32, a32),
    ] {
        let t = dumpfmt::Tensor::from_vec(dt, vec![3], bytes).unwrap();
        dumpfmt::npy::write(p, t.view()).unwrap();
    }
    let o = numprobe([
        "acc-check".as_ref(),
        "--bench".as_ref(),
        b.as_os_str(),
        "--device".as_ref(),
        a.as_os_str(),
        "--api-name".as_ref(),
        std::ffi::OsStr::new("=cmd|' /C calc'!A0"),
    ]);
    assert_ne!(code(&o), 2, "{}", all(&o));
    let line = stdout(&o);
    assert!(line.starts_with("'=cmd|' /C calc'!A0,"), "{line}");
}

/// precision-compare's cells come from API names (msprobe stops at a name with formula
/// characters, leaving header-only files) and its own texts: no formula cell either way.
#[test]
fn precision_compare_writes_no_formula_cell_from_hostile_names() {
    let fx = testdata().join("fixtures/msprobe-26.2.0-cpu");
    let d = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(details_csv(&fx.join("acccheck-cpu_patched_f32_stat"))).unwrap();
    for (i, hostile) in ["=HYPERLINK(1)", "Functional.x;@SUM(A1)", "\u{ff0b}1"]
        .iter()
        .enumerate()
    {
        let npu = d.path().join(format!("npu{i}.csv"));
        std::fs::write(&npu, text.replacen("Functional.linear", hostile, 1)).unwrap();
        let out = d.path().join(format!("out{i}"));
        let o = numprobe([
            Path::new("precision-compare"),
            Path::new("--npu"),
            &npu,
            Path::new("--gpu"),
            &npu,
            Path::new("--out"),
            &out,
            Path::new("--timestamp"),
            Path::new("20261201000000"),
        ]);
        assert_eq!(code(&o), 1, "{hostile}: {}", all(&o));
        assert!(stderr(&o).contains("special characters"), "{}", stderr(&o));
        for kind in ["result", "details"] {
            let p = out.join(format!("api_precision_compare_{kind}_20261201000000.csv"));
            let csv = std::fs::read_to_string(&p).unwrap();
            for (line, r) in ulp::precision_compare::parse_csv(&csv).unwrap() {
                for cell in r {
                    assert!(
                        !pyrepr::is_formula_cell(&cell),
                        "{kind} line {line}: {cell:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn broken_precision_compare_csvs_are_errors_naming_file_and_line() {
    let fx = testdata().join("fixtures/msprobe-26.2.0-cpu/acccheck-cpu_patched_f32_stat");
    let text = std::fs::read_to_string(details_csv(&fx)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // Line 2 opens a quote that never closes; line 2 of the other has a field too many.
    let unterminated = format!(
        "{}\"Functional.relu.0.forward.output.0,torch.float32\nFunctional.relu.1.forward.output.0\n",
        lines[0]
    );
    let width = ulp::precision_compare::parse_csv(lines[0]).unwrap()[0]
        .1
        .len();
    let extra_field = format!("{}{}\n", lines[0], vec!["1"; width + 1].join(","));
    for (what, bad, want) in [
        (
            "unterminated",
            unterminated,
            "line 2: a quoted field opened here is never closed",
        ),
        (
            "extra field",
            extra_field,
            "line 2: 24 fields where the header has 23",
        ),
    ] {
        let p = d.path().join(format!("{}.csv", what.replace(' ', "_")));
        std::fs::write(&p, bad).unwrap();
        let out = d.path().join("out");
        let o = numprobe([
            Path::new("precision-compare"),
            Path::new("--npu"),
            &p,
            Path::new("--gpu"),
            &details_csv(&fx),
            Path::new("--out"),
            &out,
            Path::new("--timestamp"),
            Path::new("20261201000000"),
        ]);
        assert_eq!(code(&o), 2, "{what}: {}", all(&o));
        let err = stderr(&o);
        assert!(
            err.contains(&p.display().to_string()) && err.contains(want),
            "{what}: {err}"
        );
        assert!(!out.exists() || std::fs::read_dir(&out).unwrap().count() == 0);
    }
}

#[test]
fn malformed_mapping_yaml_is_an_error_naming_file_and_line() {
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let d = tempfile::tempdir().unwrap();
    for (what, yaml, want) in [
        ("unclosed quote", "a: b\nc: \"d\ne: f\n", ":2: invalid YAML"),
        ("nested map", "a: b\nc:\n  d: e\n", ":3: a nested map"),
        ("list", "- a\n- b\n", ":1: a list"),
        ("alias", "a: &x b\nc: *x\n", ":2: aliases are not allowed"),
        ("bad indent", "a: b\n  c: d\n", ":2: invalid YAML"),
    ] {
        let y = d.path().join(format!("{}.yaml", what.replace(' ', "_")));
        std::fs::write(&y, yaml).unwrap();
        for flag in ["--data-mapping", "--api-mapping", "--cell-mapping"] {
            let o = compare(
                &s.join("target"),
                &s.join("golden"),
                &d.path().join("out"),
                &[flag, y.to_str().unwrap()],
            );
            assert_eq!(code(&o), 2, "{what} {flag}: {}", all(&o));
            let err = stderr(&o);
            assert!(
                err.contains(&format!("{}{want}", y.display())),
                "{what} {flag}: {err}"
            );
        }
    }
}
