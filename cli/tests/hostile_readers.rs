//! Dumps from strangers (issue 15, the readers' half): every command run on hostile or broken
//! input, asserting what a user relies on: the exit code (0 nothing found, 1 problems found,
//! 2 could not do the job), the row or message naming the file and the place, and that nothing
//! hangs (FIFOs), allocates what the file does not hold (stride-0 views) or executes (pickles).

mod common;
use common::*;
use dumpfmt::{DType, TensorView};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run left: exit code (`None` when killed by a signal), stdout, stderr.
struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

impl Run {
    fn text(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.out, self.err
        )
    }
}

/// Runs numprobe in `cwd` and kills it after 60 s, so that a regression that blocks on a FIFO
/// fails the test instead of hanging it. Output goes to files (no pipe to fill up).
fn run_in(cwd: &Path, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Run {
    let log = tempfile::tempdir().unwrap();
    let (o, e) = (log.path().join("out"), log.path().join("err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_numprobe"))
        .args(args.iter().map(|a| a.as_ref()))
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .expect("run numprobe");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "numprobe {:?} still running after 60 s (blocked?)",
                args.iter().map(|a| a.as_ref()).collect::<Vec<_>>()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        out: std::fs::read_to_string(&o).unwrap(),
        err: std::fs::read_to_string(&e).unwrap(),
    }
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Run {
    run_in(Path::new("."), args)
}

fn assert_run(r: &Run, code: i32, needles: &[&str]) {
    assert_eq!(r.code, Some(code), "{}", r.text());
    let all = format!("{}{}", r.out, r.err);
    for n in needles {
        assert!(all.contains(n), "missing {n:?} in\n{}", r.text());
    }
}

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo")
        .arg(p)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {}", p.display());
}

fn write_pt(p: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let shape = [values.len()];
    let view = TensorView::new(DType::F32, &shape, &bytes).unwrap();
    dumpfmt::pt::write(p, view, "cpu").unwrap();
}

fn record(data_name: &str) -> String {
    format!(
        r#"{{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 2.0, "Min": 1.0, "Mean": 1.5, "Norm": 2.23606797749979, "requires_grad": false, "data_name": "{data_name}"}}"#
    )
}

/// A tensor-mode dump at `root/step0/rank0` whose one API `Torch.add.0.forward` has input and
/// output records naming `input_name` and `Torch.add.0.forward.output.0.pt`; the files named by
/// plain names are written ([1, 2]). Returns the rank directory.
fn tensor_dump(root: &Path, input_name: &str) -> PathBuf {
    let rank = root.join("step0/rank0");
    let td = rank.join("dump_tensor_data");
    std::fs::create_dir_all(&td).unwrap();
    let output = "Torch.add.0.forward.output.0.pt";
    for name in [input_name, output] {
        if dumpfmt::layout::is_file_name(name) {
            write_pt(&td.join(name), &[1.0, 2.0]);
        }
    }
    let json = format!(
        r#"{{"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "data": {{"Torch.add.0.forward": {{"input_args": [{}], "input_kwargs": {{}}, "output": [{}]}}}}}}"#,
        record(input_name),
        record(output)
    );
    std::fs::write(rank.join("dump.json"), json).unwrap();
    rank
}

const INPUT: &str = "Torch.add.0.forward.input.0.pt";

/// compare TARGET GOLDEN into `out`; returns the run and the CSV text (empty when none).
fn compare(target: &Path, golden: &Path, out: &Path) -> (Run, String) {
    let r = run(&[
        &"compare",
        &target,
        &golden,
        &"--out",
        &out,
        &"--timestamp",
        &"20000101000000",
    ]);
    let csv =
        std::fs::read_to_string(out.join("compare_result_20000101000000.csv")).unwrap_or_default();
    (r, csv)
}

/// The CSV row of `name` (its first cell).
fn row<'a>(csv: &'a str, name: &str) -> &'a str {
    csv.lines()
        .find(|l| l.starts_with(&format!("{name},")))
        .unwrap_or_else(|| panic!("no row {name} in\n{csv}"))
}

fn hostile(name: &str) -> PathBuf {
    testdata().join("hostile").join(name)
}

#[test]
fn a_clean_pair_passes_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tensor_dump(&tmp.path().join("t"), INPUT);
    let g = tensor_dump(&tmp.path().join("g"), INPUT);
    let (r, csv) = compare(&t, &g, &tmp.path().join("out"));
    assert_run(&r, 0, &["| error | 0 | 0 |"]);
    assert!(
        row(&csv, "Torch.add.0.forward.input.0").contains(",pass,"),
        "{csv}"
    );
    assert_run(&run(&[&"validate", &t]), 0, &["0 problem(s)"]);
}

/// Each refused or unreadable target tensor: an `error` row naming the file and the reason,
/// counted in summary.md, exit 1. The golden side is a clean dump, or for hostile names the
/// same names (tensor-mode rows are named after their data_name, so both sides must carry it
/// for the rows to match and a read to be attempted).
#[cfg(unix)]
#[test]
fn unreadable_tensors_are_error_rows_never_agreement() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    let outside = tmp.path().join("outside.pt");
    write_pt(&outside, &[1.0, 2.0]);

    type Plant = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, &str, Plant, &str)> = vec![
        (
            "absolute",
            "/etc/passwd",
            Box::new(|_| {}),
            "not a file name",
        ),
        (
            "dotdot",
            "../../../outside.pt",
            Box::new(|_| {}),
            "not a file name",
        ),
        (
            "dev_zero_name",
            "/dev/zero",
            Box::new(|_| {}),
            "not a file name",
        ),
        (
            "missing",
            INPUT,
            Box::new(|td| std::fs::remove_file(td.join(INPUT)).unwrap()),
            "no such file",
        ),
        (
            "link_out",
            INPUT,
            Box::new({
                let outside = outside.clone();
                move |td| {
                    std::fs::remove_file(td.join(INPUT)).unwrap();
                    symlink(&outside, td.join(INPUT)).unwrap();
                }
            }),
            "outside the tensor directory",
        ),
        (
            "link_to_dev_zero",
            INPUT,
            Box::new(|td| {
                std::fs::remove_file(td.join(INPUT)).unwrap();
                symlink("/dev/zero", td.join(INPUT)).unwrap();
            }),
            "outside the tensor directory",
        ),
        (
            "fifo",
            INPUT,
            Box::new(|td| {
                std::fs::remove_file(td.join(INPUT)).unwrap();
                mkfifo(&td.join(INPUT));
            }),
            "not a regular file",
        ),
        (
            "directory",
            INPUT,
            Box::new(|td| {
                std::fs::remove_file(td.join(INPUT)).unwrap();
                std::fs::create_dir(td.join(INPUT)).unwrap();
            }),
            "not a regular file",
        ),
        (
            "truncated_pt",
            INPUT,
            Box::new(|td| {
                let p = td.join(INPUT);
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..b.len() / 2]).unwrap();
            }),
            // dumpfmt's tensor errors name the byte offset of the damage.
            ": byte ",
        ),
        (
            "pickle_payload",
            INPUT,
            Box::new(|td| {
                std::fs::copy(hostile("payload_canary.pt"), td.join(INPUT)).unwrap();
            }),
            "disallowed",
        ),
    ];
    for (label, name, plant, why) in cases {
        let root = tmp.path().join(label);
        let t = tensor_dump(&root, name);
        plant(&t.join("dump_tensor_data"));
        let g = if name == INPUT {
            g.clone()
        } else {
            tensor_dump(&root.join("golden"), name)
        };
        let out = root.join("out");
        let (r, csv) = compare(&t, &g, &out);
        assert_run(
            &r,
            1,
            &["| error | 1 | 1 |", "1 rows could not be compared"],
        );
        let row_name = name.rsplit_once(".pt").map_or(name, |(a, _)| a);
        let line = row(&csv, row_name);
        assert!(line.contains(",error,"), "{label}: {line}");
        assert!(line.contains("not found or read failed"), "{label}: {line}");
        assert!(line.contains(why), "{label}: {why:?} not in {line}");
        // The readable output row still passes: one bad file does not spoil the others.
        assert!(
            row(&csv, "Torch.add.0.forward.output.0").contains(",pass,"),
            "{csv}"
        );
        let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
        assert!(
            !summary.contains("every matched API agrees"),
            "{label}: {summary}"
        );
        // validate finds the same file bad.
        let v = run(&[&"validate", &t]);
        assert_eq!(v.code, Some(1), "{label}: {}", v.text());
        assert!(!root.join("numprobe_canary_pwned").exists());
    }
    assert!(
        !Path::new("numprobe_canary_pwned").exists(),
        "a pickle payload ran"
    );
}

#[cfg(unix)]
#[test]
fn tensor_directory_linked_out_of_the_dump_is_refused_but_inside_is_followed() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    // dump_tensor_data → another dump's directory (outside this rank directory).
    let t = tensor_dump(&tmp.path().join("target"), INPUT);
    let td = t.join("dump_tensor_data");
    std::fs::rename(&td, tmp.path().join("elsewhere")).unwrap();
    symlink(tmp.path().join("elsewhere"), &td).unwrap();
    let (r, csv) = compare(&t, &g, &tmp.path().join("out"));
    assert_run(&r, 1, &["| error | 2 | 1 |"]);
    let line = row(&csv, "Torch.add.0.forward.input.0");
    assert!(line.contains("outside the rank directory"), "{line}");
    assert_run(&run(&[&"validate", &t]), 1, &["outside the rank directory"]);

    // A link that stays inside the rank directory is followed.
    let t2 = tensor_dump(&tmp.path().join("inside"), INPUT);
    let td2 = t2.join("dump_tensor_data");
    std::fs::rename(&td2, t2.join("real_data")).unwrap();
    symlink("real_data", &td2).unwrap();
    let (r, _) = compare(&t2, &g, &tmp.path().join("out2"));
    assert_run(&r, 0, &["| error | 0 | 0 |"]);
    assert_run(&run(&[&"validate", &t2]), 0, &["0 problem(s)"]);
}

#[cfg(unix)]
#[test]
fn fifos_never_block_any_command() {
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    let t = tensor_dump(&tmp.path().join("target"), INPUT);
    for name in ["dump.json", "stack.json", "construct.json"] {
        let _ = std::fs::remove_file(t.join(name));
        mkfifo(&t.join(name));
    }
    // dump.json a FIFO: compare cannot do its job (2) and says what the file is.
    let (r, _) = compare(&t, &g, &tmp.path().join("out"));
    assert_run(&r, 2, &["dump.json", "FIFO"]);
    let (r, _) = compare(&t.join("dump.json"), &g, &tmp.path().join("out"));
    assert_run(&r, 2, &["dump.json", "FIFO"]);
    assert_run(
        &run(&[&"validate", &t]),
        1,
        &["dump.json", "FIFO", "stack.json"],
    );
    assert_run(&run(&[&"validate", &t.join("dump.json")]), 2, &["FIFO"]);
    for f in ["dump.json", "stack.json", "construct.json"] {
        assert_run(&run(&[&"fmt", &t.join(f)]), 2, &[f, "FIFO"]);
    }
    let fifo_pt = tmp.path().join("x.pt");
    mkfifo(&fifo_pt);
    let fifo_npy = tmp.path().join("x.npy");
    mkfifo(&fifo_npy);
    for f in [&fifo_pt, &fifo_npy] {
        assert_run(&run(&[&"inspect", f]), 2, &["x.", "FIFO"]);
        assert_run(&run(&[&"stats", f]), 2, &["x.", "FIFO"]);
    }
    // Devices and directories named by the user are refused too, not read forever.
    assert_run(
        &run(&[&"stats", &"/dev/zero"]),
        2,
        &["/dev/zero", "character device"],
    );
    assert_run(&run(&[&"inspect", &tmp.path()]), 2, &["directory"]);
    assert_run(
        &run(&[&"fmt", &"/dev/zero"]),
        2,
        &["/dev/zero", "character device"],
    );
}

/// The other files numprobe reads, as FIFOs: a capture journal in a dump from elsewhere
/// (`recover`) and a mapping YAML (`compare --data-mapping`) are refused, never waited on.
#[cfg(unix)]
#[test]
fn fifo_journals_and_mappings_never_block() {
    let tmp = tempfile::tempdir().unwrap();
    let rank = tmp.path().join("step0/rank0");
    std::fs::create_dir_all(&rank).unwrap();
    let journal = rank.join(capture::journal::FILE_NAME);
    mkfifo(&journal);
    // Found while walking the dump, or named directly: said to be a FIFO, not "no journal".
    for arg in [tmp.path(), journal.as_path()] {
        let r = run(&[&"recover", &arg]);
        assert_run(&r, 2, &[capture::journal::FILE_NAME, "FIFO"]);
        assert!(!r.err.contains("no journal"), "{}", r.text());
    }

    // precision-compare's CSV inputs: a FIFO is refused by name, never waited on.
    let csv = tmp.path().join("details.csv");
    std::fs::write(&csv, "API Name\n").unwrap();
    let fifo_csv = tmp.path().join("fifo.csv");
    mkfifo(&fifo_csv);
    for (npu, gpu) in [(&fifo_csv, &csv), (&csv, &fifo_csv)] {
        let r = run(&[
            &"precision-compare",
            &"--npu",
            npu,
            &"--gpu",
            gpu,
            &"--out",
            &tmp.path().join("pc"),
        ]);
        assert_run(&r, 2, &["fifo.csv", "FIFO"]);
    }
    let r = run(&[
        &"precision-compare",
        &"--npu",
        &"/dev/zero",
        &"--gpu",
        &csv,
        &"--out",
        &tmp.path().join("pc"),
    ]);
    assert_run(&r, 2, &["/dev/zero", "character device"]);

    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    let t = tensor_dump(&tmp.path().join("target"), INPUT);
    let map = tmp.path().join("map.yaml");
    mkfifo(&map);
    let r = run(&[
        &"compare",
        &t,
        &g,
        &"--out",
        &tmp.path().join("out"),
        &"--data-mapping",
        &map,
    ]);
    assert_run(&r, 2, &["map.yaml", "FIFO"]);
}

/// stack.json is optional when absent, but a FIFO, directory or device under that name beside
/// dump.json is a broken dump: compare cannot do its job (2) and says which file and what it
/// is, instead of skipping it and writing a table without stacks.
#[cfg(unix)]
#[test]
fn a_stack_json_that_is_not_a_file_is_refused_by_compare() {
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    type Plant = fn(&Path);
    let cases: [(&str, Plant, &str); 3] = [
        ("fifo", |p| mkfifo(p), "FIFO"),
        ("dir", |p| std::fs::create_dir(p).unwrap(), "directory"),
        (
            "device",
            |p| std::os::unix::fs::symlink("/dev/null", p).unwrap(),
            "character device",
        ),
    ];
    for (label, plant, what) in cases {
        let t = tensor_dump(&tmp.path().join(label), INPUT);
        plant(&t.join("stack.json"));
        let out = tmp.path().join(format!("out_{label}"));
        let (r, csv) = compare(&t, &g, &out);
        assert_run(&r, 2, &["stack.json", what]);
        assert!(csv.is_empty(), "{label}: a table was written:\n{csv}");
    }
    // Absent, it stays optional (a_clean_pair_passes_and_exits_0 has none either).
    let t = tensor_dump(&tmp.path().join("absent"), INPUT);
    assert!(!t.join("stack.json").exists());
    let (r, _) = compare(&t, &g, &tmp.path().join("out_absent"));
    assert_run(&r, 0, &[]);
}

/// A dump's own JSON files are found in its rank directory, not named by the user, and
/// msprobe and numprobe write them as files: a link there that leads out of the directory was
/// planted, and every reader that finds one refuses it (validate: a problem; compare, and the
/// report it writes: could not do the job) instead of reading another file of the machine into
/// its tables and report. A link that stays inside the directory is followed, and a dump.json
/// the user names on the command line is read wherever its link leads.
#[cfg(unix)]
#[test]
fn dump_files_linked_out_of_their_directory_are_refused() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    // What the links lead to: well-formed files outside the dump, which a reader that follows
    // them would take as the dump's own (so the old behaviour passes, and this test fails it).
    let elsewhere = tensor_dump(&tmp.path().join("elsewhere"), INPUT);
    std::fs::write(elsewhere.join("stack.json"), "{}").unwrap();
    std::fs::write(elsewhere.join("construct.json"), "{}").unwrap();
    for name in ["dump.json", "stack.json", "construct.json"] {
        let t = tensor_dump(&tmp.path().join(format!("planted_{name}")), INPUT);
        let link = t.join(name);
        let _ = std::fs::remove_file(&link);
        symlink(elsewhere.join(name), &link).unwrap();
        let r = run(&[&"validate", &t]);
        assert_run(&r, 1, &[name, "outside its directory"]);
        let out = tmp.path().join(format!("out_{name}"));
        let (r, csv) = compare(&t, &g, &out);
        assert_run(&r, 2, &[name, "outside its directory"]);
        // construct.json is read by the report, after the table.
        if name != "construct.json" {
            assert!(csv.is_empty(), "{name}: a table was written:\n{csv}");
        }
        // As the golden side too, where compare reads dump.json and the report construct.json
        // (the golden's stacks are not read).
        let (r, _) = compare(&g, &t, &tmp.path().join(format!("out_g_{name}")));
        match name {
            "stack.json" => assert_run(&r, 0, &[]),
            _ => assert_run(&r, 2, &[name, "outside its directory"]),
        }
    }
    // Inside the rank directory: followed.
    let t = tensor_dump(&tmp.path().join("inside"), INPUT);
    std::fs::rename(t.join("dump.json"), t.join("real_dump.json")).unwrap();
    symlink("real_dump.json", t.join("dump.json")).unwrap();
    std::fs::write(t.join("real_stack.json"), "{}").unwrap();
    symlink("real_stack.json", t.join("stack.json")).unwrap();
    assert_run(&run(&[&"validate", &t]), 0, &["0 problem(s)"]);
    let (r, _) = compare(&t, &g, &tmp.path().join("out_inside"));
    assert_run(&r, 0, &["| error | 0 | 0 |"]);
    // A whole-run compare (roots of two ranks): the rank with the planted link is not compared.
    let (tr, gr) = (tmp.path().join("run_t"), tmp.path().join("run_g"));
    for root in [&tr, &gr] {
        let r0 = tensor_dump(root, INPUT);
        copy_tree(&r0, &root.join("step0/rank1"));
    }
    let planted = tr.join("step0/rank1/dump.json");
    std::fs::remove_file(&planted).unwrap();
    symlink(elsewhere.join("dump.json"), &planted).unwrap();
    let r = run(&[&"compare", &tr, &gr, &"--out", &tmp.path().join("out_run")]);
    assert_run(&r, 2, &["rank1", "outside its directory"]);
    // Named by the user: the user's choice of file, followed.
    let named = tmp.path().join("named");
    std::fs::create_dir(&named).unwrap();
    copy_tree(
        &elsewhere.join("dump_tensor_data"),
        &named.join("dump_tensor_data"),
    );
    symlink(elsewhere.join("dump.json"), named.join("dump.json")).unwrap();
    let (r, _) = compare(&named.join("dump.json"), &g, &tmp.path().join("out_named"));
    assert_run(&r, 0, &["| error | 0 | 0 |"]);
}

/// Step and rank directories are found by walking the directory the user named, and the
/// writers make them as directories: one that is a link leading out of the dump was planted,
/// and entering it would read another dump (or any directory holding a dump.json) as this
/// one's. validate reports it, the single-pair compare refuses it (exit 2), the whole-run
/// compare compares the other ranks, names it in its output and summary and exits 2; a link
/// that stays inside the dump is entered.
#[cfg(unix)]
#[test]
fn step_and_rank_directories_linked_out_of_the_dump_are_refused() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    // A well-formed rank outside the dump, which a walk that follows the links would compare
    // (and pass) as the target's.
    let elsewhere = tensor_dump(&tmp.path().join("elsewhere"), INPUT);
    let t = tmp.path().join("planted");
    std::fs::create_dir_all(t.join("step0")).unwrap();
    symlink(&elsewhere, t.join("step0/rank0")).unwrap();
    assert_run(
        &run(&[&"validate", &t]),
        1,
        &["step0/rank0", "outside the dump"],
    );
    let (r, csv) = compare(&t, &g, &tmp.path().join("out_rank"));
    assert_run(&r, 2, &["step0/rank0", "outside the dump"]);
    assert!(csv.is_empty(), "a table was written:\n{csv}");
    // As the golden side too, and a step directory linked out.
    let (r, _) = compare(&g, &t, &tmp.path().join("out_golden"));
    assert_run(&r, 2, &["step0/rank0", "outside the dump"]);
    let t2 = tmp.path().join("planted_step");
    std::fs::create_dir(&t2).unwrap();
    symlink(elsewhere.parent().unwrap(), t2.join("step0")).unwrap();
    let (r, _) = compare(&t2, &g, &tmp.path().join("out_step"));
    assert_run(&r, 2, &["step0", "outside the dump"]);
    // The whole-run compare: rank0 is compared, rank1 (planted) is not, and the run says why.
    let (tr, gr) = (tmp.path().join("run_t"), tmp.path().join("run_g"));
    for root in [&tr, &gr] {
        let r0 = tensor_dump(root, INPUT);
        copy_tree(&r0, &root.join("step0/rank2"));
        if root == &gr {
            copy_tree(&r0, &root.join("step0/rank1"));
        }
    }
    symlink(&elsewhere, tr.join("step0/rank1")).unwrap();
    let out = tmp.path().join("out_run");
    let r = run(&[&"compare", &tr, &gr, &"--out", &out]);
    assert_run(
        &r,
        2,
        &["rank1", "outside the dump", "step0/rank0: 0 error rows"],
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("Not compared:") && summary.contains("outside the dump"),
        "{summary}"
    );
    // Left out of the selection, the planted rank is not the run's concern.
    let r = run(&[
        &"compare",
        &tr,
        &gr,
        &"--rank",
        &"0,2",
        &"--out",
        &tmp.path().join("out_ranks_0_2"),
    ]);
    assert_run(&r, 0, &["step0/rank2: 0 error rows"]);
    assert!(!r.text().contains("outside the dump"), "{}", r.text());
    // Inside the dump: entered, by validate and by both compares.
    std::fs::remove_file(tr.join("step0/rank1")).unwrap();
    copy_tree(&tr.join("step0/rank0"), &tr.join("kept_rank1"));
    symlink("../kept_rank1", tr.join("step0/rank1")).unwrap();
    assert_run(
        &run(&[&"validate", &tr]),
        0,
        &["3 rank dir(s)", "0 problem(s)"],
    );
    let r = run(&[
        &"compare",
        &tr,
        &gr,
        &"--out",
        &tmp.path().join("out_run_inside"),
    ]);
    assert_run(&r, 0, &["step0/rank1: 0 error rows"]);
    // The dump is the directory the user names: from the step directory, the same link
    // leads out of it.
    let r = run(&[
        &"compare",
        &tr.join("step0"),
        &gr.join("step0"),
        &"--out",
        &tmp.path().join("out_steps"),
    ]);
    assert_run(
        &r,
        2,
        &["step0/rank1", "outside the dump", "rank0: 0 error rows"],
    );
    let r = run(&[
        &"compare",
        &tr,
        &gr,
        &"--rank",
        &"1",
        &"--out",
        &tmp.path().join("out_one_inside"),
    ]);
    assert_run(&r, 0, &["| error | 0 | 0 |"]);
}

/// A readable tensor of a dtype compare does not take (here complex64, on both sides) is an
/// `error` row that says so and names the file, not msprobe's "not found or read failed"
/// (the file was found and read).
#[test]
fn a_tensor_of_an_uncompared_dtype_is_an_error_row_that_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dumps = Vec::new();
    for side in ["target", "golden"] {
        let d = tensor_dump(&tmp.path().join(side), INPUT);
        // [1+0j, 2+0j] as complex64: interleaved (re, im) float32 pairs.
        let bytes: Vec<u8> = [1.0f32, 0.0, 2.0, 0.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let view = TensorView::new(DType::C64, &[2], &bytes).unwrap();
        dumpfmt::pt::write(&d.join("dump_tensor_data").join(INPUT), view, "cpu").unwrap();
        let json = std::fs::read_to_string(d.join("dump.json")).unwrap();
        let json = json.replacen("torch.float32", "torch.complex64", 1);
        std::fs::write(d.join("dump.json"), json).unwrap();
        dumps.push(d);
    }
    let out = tmp.path().join("out");
    let (r, csv) = compare(&dumps[0], &dumps[1], &out);
    assert_run(
        &r,
        1,
        &["| error | 1 | 1 |", "1 rows could not be compared"],
    );
    let line = row(&csv, "Torch.add.0.forward.input.0");
    assert!(line.contains(",error,"), "{line}");
    assert!(
        line.contains(&format!("Dtype not compared: target {INPUT} is complex64")),
        "{line}"
    );
    assert!(!line.contains("not found or read failed"), "{line}");
    assert!(
        row(&csv, "Torch.add.0.forward.output.0").contains(",pass,"),
        "{csv}"
    );
}

/// Runs numprobe with its address space capped at 1 GiB (`ulimit -v`): a reader that
/// allocates a view's C-order size (8 GiB, 4 TiB) fails instead of passing.
#[cfg(unix)]
fn run_capped(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Run {
    let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![
        &"-c",
        &"ulimit -v 1048576 && exec \"$0\" \"$@\"",
        &env!("CARGO_BIN_EXE_numprobe"),
    ];
    all.extend_from_slice(args);
    let log = tempfile::tempdir().unwrap();
    let (o, e) = (log.path().join("out"), log.path().join("err"));
    let status = Command::new("sh")
        .args(all.iter().map(|a| a.as_ref()))
        .env("XDG_RUNTIME_DIR", "/tmp")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .status()
        .unwrap();
    Run {
        code: status.code(),
        out: std::fs::read_to_string(&o).unwrap(),
        err: std::fs::read_to_string(&e).unwrap(),
    }
}

/// A stride-0 view of 8 GiB or 4 TiB from a 1.6 KB file: `stats` reads it through its strides
/// (each distinct element once, times its repeat count) and gives torch's statistics of the
/// expanded tensor in 1 GiB of address space (`compare` reads views through their strides too:
/// see `compare_reads_huge_stride0_views_in_bounded_memory`).
#[cfg(unix)]
#[test]
fn stride0_views_give_statistics_without_allocating_them() {
    for (f, numel) in [
        ("expand_2e31.pt", "2147483648"),
        ("expand_2e40.pt", "1099511627776"),
    ] {
        let p = hostile(f);
        assert_run(&run(&[&"inspect", &p]), 0, &[numel]);
        // torch.zeros(1).expand(n): torch.max/min/mean/norm are all 0.
        let r = run_capped(&[&"stats", &p]);
        assert_run(&r, 0, &[]);
        assert_eq!(
            r.out.trim(),
            r#"{"Max": 0.0, "Min": 0.0, "Mean": 0.0, "Norm": 0.0}"#,
            "{}",
            r.text()
        );
    }
}

/// Strided views torch made (broadcast outer, inner and middle dimensions, transposed, sliced,
/// sliced at an offset; float32, float16, bfloat16, float64, int64): `stats` gives torch's
/// Max/Min exactly, its Mean/Norm (exactly where every sum is exact, else within float32
/// summation-order error) and, in md5 mode, the CRC-32 of the C-order bytes
/// (testdata/hostile/strided/expected.json, made by make_strided.py with torch).
#[test]
fn strided_views_give_torchs_statistics() {
    let dir = hostile("strided");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let expected = expected.as_object().unwrap();
    assert!(expected.len() >= 10);
    for (name, want) in expected {
        let f = dir.join(format!("{name}.pt"));
        let r = run(&[&"stats", &f]);
        assert_run(&r, 0, &[]);
        let got: serde_json::Value = serde_json::from_str(r.out.trim()).unwrap();
        for key in ["Max", "Min"] {
            assert_eq!(got[key].as_f64(), want[key].as_f64(), "{name} {key}");
        }
        for key in ["Mean", "Norm"] {
            let Some(w) = want.get(key).and_then(|v| v.as_f64()) else {
                // Integers and float64 (precision low) carry no Mean/Norm.
                assert!(got[key].is_null(), "{name} {key}: {}", r.out);
                continue;
            };
            let g = got[key].as_f64().unwrap_or_else(|| panic!("{name} {key}"));
            let tol = if name.contains("exact") {
                0.0
            } else if name.contains("f16") {
                1e-3
            } else {
                1e-4
            };
            assert!(
                (g - w).abs() <= tol * w.abs(),
                "{name} {key}: got {g}, torch {w}"
            );
        }
        let r = run(&[&"stats", &f, &"--summary", &"md5"]);
        assert_run(&r, 0, &[want["md5"].as_str().unwrap()]);
    }
}

#[test]
fn damaged_and_non_tensor_files_name_the_file_and_what_they_hold() {
    let tmp = tempfile::tempdir().unwrap();
    assert_run(
        &run(&[&"stats", &hostile("dict.pt")]),
        2,
        &["dict.pt", "holds a dict, not a tensor"],
    );
    assert_run(
        &run(&[&"inspect", &hostile("list.pt")]),
        2,
        &["list.pt", "holds a list, not a tensor"],
    );
    // Truncated .pt and .npy.
    let pt = tmp.path().join("t.pt");
    write_pt(&pt, &[1.0; 64]);
    let b = std::fs::read(&pt).unwrap();
    std::fs::write(&pt, &b[..b.len() - 100]).unwrap();
    assert_run(&run(&[&"stats", &pt]), 2, &["t.pt", "byte"]);
    let npy = tmp.path().join("t.npy");
    let bytes = [0u8; 256];
    dumpfmt::npy::write(&npy, TensorView::new(DType::F32, &[64], &bytes).unwrap()).unwrap();
    let b = std::fs::read(&npy).unwrap();
    std::fs::write(&npy, &b[..b.len() - 8]).unwrap();
    assert_run(&run(&[&"stats", &npy]), 2, &["t.npy"]);
    assert_run(&run(&[&"inspect", &npy]), 2, &["t.npy"]);
    // A missing file: the OS error carries the path.
    let gone = tmp.path().join("gone.pt");
    assert_run(&run(&[&"stats", &gone]), 2, &["gone.pt", "No such file"]);
}

#[test]
fn a_live_pickle_payload_is_never_executed() {
    let tmp = tempfile::tempdir().unwrap();
    let canary = tmp.path().join("numprobe_canary_pwned");
    for cmd in ["stats", "inspect", "validate"] {
        let r = run_in(tmp.path(), &[&cmd, &hostile("payload_canary.pt")]);
        assert_ne!(r.code, Some(0), "{cmd}: {}", r.text());
        assert!(r.out.contains("payload_canary.pt") || r.err.contains("payload_canary.pt"));
        assert!(!canary.exists(), "{cmd} executed the pickle");
    }
}

/// dump.json whose structure is broken: compare and validate fail, naming the side, the file
/// and the JSON path, instead of comparing zero rows.
#[test]
fn malformed_dumps_fail_naming_file_and_json_path() {
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    let cases = [
        (
            "no_data",
            r#"{"task": "tensor", "level": "L1"}"#,
            "$.data: missing",
            "missing \"data\"",
        ),
        (
            "list_data",
            r#"{"task": "tensor", "level": "L1", "data": []}"#,
            "$.data: expected an object, found array",
            "$.data: expected an object, found array",
        ),
        (
            "no_task",
            r#"{"level": "L1", "data": {}}"#,
            "$.task: missing",
            "missing \"task\"",
        ),
        (
            "no_dtype",
            r#"{"task": "tensor", "level": "L1", "data": {"Torch.add.0.forward": {"input_args": [{"type": "torch.Tensor", "shape": [2], "data_name": "x.pt"}], "output": []}}}"#,
            "$.data[\"Torch.add.0.forward\"].input_args[0]: tensor record without \"dtype\"",
            "input_args[0]: tensor record without \"dtype\"",
        ),
        (
            "no_shape",
            r#"{"task": "statistics", "level": "L1", "data": {"Torch.add.0.forward": {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "Max": 1.0}], "output": []}}}"#,
            "input_args[0]: tensor record without \"shape\"",
            "input_args[0]: tensor record without \"shape\"",
        ),
        (
            "top_level_list",
            "[]",
            "top level is not an object",
            "expected an object at top level",
        ),
    ];
    for (label, json, compare_msg, validate_msg) in cases {
        let rank = tmp.path().join(label).join("step0/rank0");
        std::fs::create_dir_all(&rank).unwrap();
        let f = rank.join("dump.json");
        std::fs::write(&f, json).unwrap();
        let f_text = f.display().to_string();
        let (r, _) = compare(&rank, &g, &tmp.path().join(label).join("out"));
        assert_run(&r, 2, &[&format!("target {f_text}"), compare_msg]);
        // The golden side is named as such.
        let (r, _) = compare(&g, &rank, &tmp.path().join(label).join("out2"));
        assert_run(&r, 2, &[&format!("golden {f_text}"), compare_msg]);
        assert_run(&run(&[&"validate", &rank]), 1, &[&f_text, validate_msg]);
    }
}

#[cfg(unix)]
#[test]
fn validate_fails_without_a_readable_dump_json() {
    let tmp = tempfile::tempdir().unwrap();
    // Missing: only the tensor directory is left.
    let t = tensor_dump(&tmp.path().join("missing"), INPUT);
    std::fs::remove_file(t.join("dump.json")).unwrap();
    assert_run(&run(&[&"validate", &t]), 1, &["dump.json", "missing"]);
    // A directory where dump.json should be.
    let t = tensor_dump(&tmp.path().join("dir"), INPUT);
    std::fs::remove_file(t.join("dump.json")).unwrap();
    std::fs::create_dir(t.join("dump.json")).unwrap();
    assert_run(&run(&[&"validate", &t]), 1, &["dump.json", "directory"]);
    // A FIFO (also covered with the other commands above).
    let t = tensor_dump(&tmp.path().join("fifo"), INPUT);
    std::fs::remove_file(t.join("dump.json")).unwrap();
    mkfifo(&t.join("dump.json"));
    assert_run(&run(&[&"validate", &t]), 1, &["dump.json", "FIFO"]);
}

#[test]
fn exit_codes_of_compare_and_acc_check() {
    // The shipped sample pair has error rows: compare found problems.
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let tmp = tempfile::tempdir().unwrap();
    let (r, _) = compare(
        &s.join("target"),
        &s.join("golden"),
        &tmp.path().join("out"),
    );
    assert_run(&r, 1, &["| error | 312 | 108 |"]);

    // acc-check: an output far from its benchmark is an `error` verdict (1); equal ones pass (0).
    let npy = |name: &str, dtype: DType, vals: &[f64]| -> PathBuf {
        let p = tmp.path().join(name);
        let bytes: Vec<u8> = match dtype {
            DType::F64 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => vals
                .iter()
                .flat_map(|v| (*v as f32).to_le_bytes())
                .collect(),
        };
        dumpfmt::npy::write(&p, TensorView::new(dtype, &[vals.len()], &bytes).unwrap()).unwrap();
        p
    };
    let vals: Vec<f64> = (1..=64).map(|i| i as f64 * 0.25).collect();
    let bench = npy("bench.npy", DType::F64, &vals);
    let same = npy("same.npy", DType::F32, &vals);
    let far: Vec<f64> = vals.iter().map(|v| -v * 3.0).collect();
    let bad = npy("bad.npy", DType::F32, &far);
    let api = "Functional.relu.0.forward.output.0";
    let r = run(&[
        &"acc-check",
        &"--bench",
        &bench,
        &"--device",
        &same,
        &"--api-name",
        &api,
    ]);
    assert_run(&r, 0, &["pass"]);
    let r = run(&[
        &"acc-check",
        &"--bench",
        &bench,
        &"--device",
        &bad,
        &"--api-name",
        &api,
    ]);
    assert_run(&r, 1, &["error"]);
}

/// Operating-system errors name the path they are about (item 14 of the hostile-input issue):
/// an output directory that is a file, a missing tensor, dump or journal directory.
#[test]
fn os_errors_name_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let g = tensor_dump(&tmp.path().join("golden"), INPUT);
    let file = tmp.path().join("a_file");
    std::fs::write(&file, b"x").unwrap();
    let r = run(&[&"compare", &g, &g, &"--out", &file]);
    assert_run(&r, 2, &["a_file"]);
    let r = run(&[&"compare", &g, &g, &"--out", &file.join("sub")]);
    assert_run(&r, 2, &["a_file/sub"]);
    let missing = tmp.path().join("missing");
    for cmd in ["stats", "inspect", "validate", "fmt", "recover"] {
        let r = run(&[&cmd, &missing]);
        assert_run(&r, 2, &["missing", "No such file"]);
    }
    let r = run(&[
        &"precision-compare",
        &"--npu",
        &missing,
        &"--gpu",
        &missing,
        &"--out",
        &tmp.path().join("pc"),
    ]);
    assert_run(&r, 2, &["missing", "No such file"]);
}

/// Writes `torch.save(view)` of a float32 storage.
fn write_view(p: &Path, storage: &[f32], offset: u64, size: &[u64], stride: &[u64]) {
    let bytes: Vec<u8> = storage.iter().flat_map(|v| v.to_le_bytes()).collect();
    let shape = [storage.len()];
    let sv = TensorView::new(DType::F32, &shape, &bytes).unwrap();
    let view = dumpfmt::pt::ViewOf {
        offset,
        size: size.to_vec(),
        stride: stride.to_vec(),
    };
    dumpfmt::pt::write_view(p, sv, &view, "cpu").unwrap();
}

/// The cells of `row` under `columns` of the CSV header.
fn cells_of(csv: &str, row_name: &str, columns: &[&str]) -> Vec<String> {
    let mut r = csv::Reader::from_reader(csv.trim_start_matches('\u{feff}').as_bytes());
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let rec = r
        .records()
        .map(|x| x.unwrap())
        .find(|x| &x[0] == row_name)
        .unwrap_or_else(|| panic!("no row {row_name} in\n{csv}"));
    columns
        .iter()
        .map(|c| {
            let i = header
                .iter()
                .position(|h| h == c)
                .unwrap_or_else(|| panic!("{c}"));
            rec[i].to_string()
        })
        .collect()
}

/// A stride-0 view of 2^27 float32 elements (512 MiB in C order) from 4 bytes of storage on
/// each side: `compare` reads both through their strides chunk by chunk, in 1 GiB of address
/// space (gathering the two would take all of it), and gives the cells of the expanded tensors.
/// A huge view against a small tensor is a shape mismatch, decided without reading either.
#[cfg(unix)]
#[test]
fn compare_reads_huge_stride0_views_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 1u64 << 27;
    let t = tensor_dump(&tmp.path().join("t"), INPUT);
    let g = tensor_dump(&tmp.path().join("g"), INPUT);
    // torch.full((1,), 1.5).expand(n) against torch.tensor([9., 2.5])[1:].expand(n).
    write_view(
        &t.join("dump_tensor_data").join(INPUT),
        &[1.5],
        0,
        &[n],
        &[0],
    );
    write_view(
        &g.join("dump_tensor_data").join(INPUT),
        &[9.0, 2.5],
        1,
        &[n],
        &[0],
    );
    let out = tmp.path().join("out");
    let r = run_capped(&[
        &"compare",
        &t,
        &g,
        &"--out",
        &out,
        &"--timestamp",
        &"20000101000000",
    ]);
    let csv =
        std::fs::read_to_string(out.join("compare_result_20000101000000.csv")).unwrap_or_default();
    assert!(r.code.is_some_and(|c| c <= 1), "{}", r.text());
    let got = cells_of(
        &csv,
        "Torch.add.0.forward.input.0",
        &[
            "Cosine",
            "EucDist",
            "MaxAbsErr",
            "MaxRelativeErr",
            "One Thousandth Err Ratio",
            "Five Thousandths Err Ratio",
        ],
    );
    // Every difference is 1.0: EucDist = sqrt(2^27) = 2^13.5; |1.5 - 2.5| / 2.5 in float32.
    assert_eq!(
        got,
        [
            "1.0",
            "11585.237502960395",
            "1.0",
            "0.40000000596",
            "0.0",
            "0.0"
        ],
        "{csv}"
    );

    // The huge view against the [1, 2] golden: shapes differ, nothing is read.
    let g2 = tensor_dump(&tmp.path().join("g2"), INPUT);
    let out2 = tmp.path().join("out2");
    let r = run_capped(&[
        &"compare",
        &t,
        &g2,
        &"--out",
        &out2,
        &"--timestamp",
        &"20000101000000",
    ]);
    // (The verdict of a shape mismatch is msprobe's judgement, not this test's subject.)
    assert!(r.code.is_some_and(|c| c <= 1), "{}", r.text());
    let csv = std::fs::read_to_string(out2.join("compare_result_20000101000000.csv")).unwrap();
    let line = row(&csv, "Torch.add.0.forward.input.0");
    assert!(line.contains("shape unmatched"), "{line}");
}

/// Each strided view torch made (testdata/hostile/strided: broadcast, transposed, sliced,
/// offset; float32, float16, bfloat16, float64, int64) compared against a golden C-order
/// tensor gives exactly the row its C-order copy gives, on either side of the pair.
#[test]
fn compare_reads_strided_views_as_their_contiguous_copies() {
    let dir = hostile("strided");
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let f = e.unwrap().path();
        if f.extension().is_none_or(|x| x != "pt") {
            continue;
        }
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let whole = dumpfmt::tensor::read_tensor(&f).unwrap();
        // The golden: the C-order copy with the lowest byte of every third element changed.
        let item = whole.dtype().size();
        let mut other = whole.bytes().to_vec();
        for k in (0..other.len() / item).step_by(3) {
            other[k * item] ^= 1;
        }
        let write_c = |p: &Path, bytes: &[u8]| {
            let v = TensorView::new(whole.dtype(), whole.shape(), bytes).unwrap();
            dumpfmt::pt::write(p, v, "cpu").unwrap();
        };
        let root = tmp.path().join(&name);
        let [strided, copy, golden] = ["strided", "copy", "golden"].map(|side| {
            let rank = tensor_dump(&root.join(side), INPUT);
            let p = rank.join("dump_tensor_data").join(INPUT);
            match side {
                "strided" => {
                    std::fs::copy(&f, &p).unwrap();
                }
                "copy" => write_c(&p, whole.bytes()),
                _ => write_c(&p, &other),
            }
            rank
        });
        let line = |t: &Path, g: &Path, out: &str| {
            let (r, csv) = compare(t, g, &root.join(out));
            assert!(r.code.is_some_and(|c| c <= 1), "{name}: {}", r.text());
            row(&csv, "Torch.add.0.forward.input.0").to_string()
        };
        let want = line(&copy, &golden, "o1");
        assert_eq!(line(&strided, &golden, "o2"), want, "{name}");
        let want = line(&golden, &copy, "o3");
        assert_eq!(line(&golden, &strided, "o4"), want, "{name}");
        assert_eq!(
            line(&strided, &strided, "o5"),
            line(&copy, &copy, "o6"),
            "{name}"
        );
        seen += 1;
    }
    assert!(seen >= 10);
}

/// `acc-check` on a strided device output gives the line of its C-order copy; a broadcast
/// view past the bound numprobe gathers (8 GiB from a 1.6 KB file: ulp's standards need whole
/// arrays) is refused with the typed size-limit error naming the file and the bound, exit 2,
/// in 1 GiB of address space.
#[cfg(unix)]
#[test]
fn acc_check_reads_strided_outputs_and_refuses_views_past_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let f = hostile("strided/transposed_f32.pt");
    let whole = dumpfmt::tensor::read_tensor(&f).unwrap();
    let copy = tmp.path().join("copy.pt");
    dumpfmt::pt::write(&copy, whole.view(), "cpu").unwrap();
    // The benchmark: the float64 widening with every fifth element nudged.
    let vals: Vec<f64> = whole
        .array::<f32>()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, &v)| v as f64 * if i % 5 == 0 { 1.001 } else { 1.0 })
        .collect();
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bench = tmp.path().join("bench.npy");
    dumpfmt::npy::write(
        &bench,
        TensorView::new(DType::F64, whole.shape(), &bytes).unwrap(),
    )
    .unwrap();
    let api = "Functional.relu.0.forward.output.0";
    let check = |device: &Path| {
        run(&[
            &"acc-check",
            &"--bench",
            &bench,
            &"--device",
            &device,
            &"--api-name",
            &api,
        ])
    };
    let (a, b) = (check(&f), check(&copy));
    assert!(a.code.is_some_and(|c| c <= 1), "{}", a.text());
    assert_eq!((a.code, &a.out), (b.code, &b.out));

    let r = run_capped(&[
        &"acc-check",
        &"--bench",
        &bench,
        &"--device",
        &hostile("expand_2e31.pt"),
        &"--api-name",
        &api,
    ]);
    assert_run(
        &r,
        2,
        &["expand_2e31.pt", "strided view", "8589934592", "1073741824"],
    );
}
