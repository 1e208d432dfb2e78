//! Interrupted and concurrent compares (issue 15): `numprobe compare` killed with SIGKILL at
//! several points leaves only complete outputs under their final names (or none) and
//! `--resume` finishes it into the table an uninterrupted run writes, byte for byte; a second
//! compare writing to the same `--out` is refused while the first runs.

mod common;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dumpfmt::{DType, TensorView};

/// Tensors per side and elements per tensor: enough rows that a run takes a moment, so the
/// kills land while rows are being compared.
const TENSORS: usize = 400;
const ELEMS: usize = 64 * 1024;
const TS: &str = "20000101000000";

/// A MindSpore-style tensor-mode pair under `root` (`target/`, `golden/`), one forward call per
/// tensor; every seventh target tensor differs slightly, so rows carry real metrics and
/// verdicts. Returns the two dump.json paths.
fn pair(root: &Path) -> (PathBuf, PathBuf) {
    let mut out = Vec::new();
    for (side, npu) in [("target", true), ("golden", false)] {
        let dir = root.join(side);
        let td = dir.join("dump_tensor_data");
        std::fs::create_dir_all(&td).unwrap();
        let mut data = Vec::new();
        for t in 0..TENSORS {
            let key = format!("Functional.op{t}.0.forward");
            let name = format!("{key}.output.0.npy");
            let mut state = 0x9e3779b97f4a7c15u64 ^ t as u64;
            let bytes: Vec<u8> = (0..ELEMS)
                .flat_map(|i| {
                    // xorshift: cheap deterministic values in [-1, 1).
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let v = ((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0;
                    let noise = if npu && t % 7 == 3 {
                        1.0 + ((i % 13) as f32 - 6.0) * 1e-3
                    } else {
                        1.0
                    };
                    (v * noise).to_le_bytes()
                })
                .collect();
            let view = TensorView::new(DType::F32, &[ELEMS], &bytes).unwrap();
            dumpfmt::npy::write(&td.join(&name), view).unwrap();
            data.push(format!(
                "\"{key}\": {{\"input_args\": [], \"input_kwargs\": {{}}, \"output\": [{{\"type\": \"mindspore.Tensor\", \"dtype\": \"Float32\", \"shape\": [{ELEMS}], \"Max\": 1.0, \"Min\": -1.0, \"Mean\": 0.0, \"Norm\": 1.0, \"data_name\": \"{name}\"}}]}}"
            ));
        }
        let json = format!(
            "{{\"task\": \"tensor\", \"level\": \"L1\", \"framework\": \"mindspore\", \"dump_data_dir\": null, \"data\": {{{}}}}}",
            data.join(",\n")
        );
        std::fs::write(dir.join("dump.json"), json).unwrap();
        out.push(dir.join("dump.json"));
    }
    (out.remove(0), out.remove(0))
}

/// Starts `numprobe compare` on the pair into `out`; its stdout and stderr go to
/// `{log}.out` and `{log}.err` beside `out` (files: no pipe to fill up).
fn start(pair: &(PathBuf, PathBuf), out: &Path, resume: bool, log: &str) -> Child {
    std::fs::create_dir_all(out).unwrap();
    let log = out.with_file_name(format!("{log}.out"));
    let mut c = Command::new(env!("CARGO_BIN_EXE_numprobe"));
    c.arg("compare")
        .arg(&pair.0)
        .arg(&pair.1)
        .arg("--out")
        .arg(out)
        .args(["--timestamp", TS])
        .env("XDG_RUNTIME_DIR", "/tmp")
        // One worker: a run takes about as long on a many-core machine as here, so the kills
        // and the second compare land while rows are still being compared.
        .env("RAYON_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(log.with_extension("err")).unwrap());
    if resume {
        c.arg("--resume");
    }
    c.spawn().expect("run numprobe")
}

/// Waits for `child` at most 300 s (a hang fails the test instead of stalling it).
fn finish(mut child: Child, out: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        if start.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("compare into {} still running after 300 s", out.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stderr_of(out: &Path, log: &str) -> String {
    std::fs::read_to_string(out.with_file_name(format!("{log}.err"))).unwrap_or_default()
}

/// Rows in the progress journal (lines after the header; a torn last line not counted).
fn journal_rows(out: &Path) -> usize {
    std::fs::read(out.join("compare_progress.tsv"))
        .map(|b| b.iter().filter(|&&c| c == b'\n').count().saturating_sub(1))
        .unwrap_or(0)
}

/// Polls until the journal holds at least `rows` rows, then SIGKILLs the run. Returns whether
/// the kill landed while it was still running (false: it had already exited).
fn kill_at(mut child: Child, out: &Path, rows: usize) -> bool {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if journal_rows(out) >= rows {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no {rows} journal rows after 300 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Child::kill is SIGKILL on unix: no handler, no unwinding, no flush.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    status.code().is_none()
}

/// After a kill: every output under its final name is complete (the reference run's bytes), or
/// absent.
fn only_complete_outputs(out: &Path, reference: &Path, when: &str) {
    for name in [format!("compare_result_{TS}.csv"), "summary.md".to_string()] {
        if let Ok(got) = std::fs::read(out.join(&name)) {
            let want = std::fs::read(reference.join(&name)).unwrap();
            assert!(
                got == want,
                "{when}: {name} half-written ({} bytes)",
                got.len()
            );
        }
    }
}

#[cfg(unix)]
#[test]
fn sigkill_leaves_complete_outputs_and_resume_gives_the_uninterrupted_table() {
    let tmp = tempfile::tempdir().unwrap();
    let pair = pair(tmp.path());
    let reference = tmp.path().join("reference");
    let t0 = Instant::now();
    let code = finish(start(&pair, &reference, false, "ref"), &reference);
    let took = t0.elapsed();
    // Shown with --nocapture: how much room the kills below have on this machine.
    eprintln!("uninterrupted run: {took:?} for {TENSORS} rows");
    assert_ne!(code, 2, "{}", stderr_of(&reference, "ref"));
    assert_eq!(journal_rows(&reference), TENSORS);

    let out = tmp.path().join("killed");
    // Killed soon after the first row: the rows so far are kept.
    assert!(
        kill_at(start(&pair, &out, false, "k1"), &out, 1),
        "finished before the first kill (an uninterrupted run took {took:?}; raise TENSORS)"
    );
    only_complete_outputs(&out, &reference, "first kill");
    let after_first = journal_rows(&out);
    eprintln!("first kill after {after_first} rows");
    assert!(after_first >= 1);
    // Resumed and killed again halfway: the journal keeps growing, none of it lost.
    let landed = kill_at(start(&pair, &out, true, "k2"), &out, TENSORS / 2);
    only_complete_outputs(&out, &reference, "second kill");
    if landed {
        assert!(journal_rows(&out) >= TENSORS / 2);
    }
    // Resumed and killed once every row is journaled: the table or summary may be being
    // written (or already be written, when the run beat the kill).
    kill_at(start(&pair, &out, true, "k3"), &out, TENSORS);
    only_complete_outputs(&out, &reference, "third kill");

    let resumed = finish(start(&pair, &out, true, "k4"), &out);
    assert_eq!(resumed, code, "{}", stderr_of(&out, "k4"));
    for name in [format!("compare_result_{TS}.csv"), "summary.md".to_string()] {
        assert!(
            std::fs::read(out.join(&name)).unwrap()
                == std::fs::read(reference.join(&name)).unwrap(),
            "resumed {name} differs from the uninterrupted run's"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_second_compare_into_the_same_out_is_refused_while_the_first_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let pair = pair(tmp.path());
    let reference = tmp.path().join("reference");
    let code = finish(start(&pair, &reference, false, "ref"), &reference);
    assert_ne!(code, 2, "{}", stderr_of(&reference, "ref"));

    let out = tmp.path().join("shared");
    let mut first = start(&pair, &out, false, "first");
    // The first holds the lock before it writes its journal header.
    let t0 = Instant::now();
    while journal_rows(&out) < 1 {
        assert!(t0.elapsed() < Duration::from_secs(300), "first run stalled");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Not --resume: a fresh run is the one that would truncate the first's journal.
    let second_code = finish(start(&pair, &out, false, "second"), &out);
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first run ended before the second did (raise TENSORS)"
    );
    let first_code = finish(first, &out);
    assert_eq!(first_code, code, "{}", stderr_of(&out, "first"));
    let err = stderr_of(&out, "second");
    assert_eq!(second_code, 2, "the second compare was not refused: {err}");
    assert!(
        err.contains(&format!("another compare is writing to {}", out.display())),
        "{err}"
    );
    // The first run's outputs and journal are whole: what it would have written alone.
    for name in [format!("compare_result_{TS}.csv"), "summary.md".to_string()] {
        assert!(
            std::fs::read(out.join(&name)).unwrap()
                == std::fs::read(reference.join(&name)).unwrap(),
            "{name} differs from a lone run's"
        );
    }
    assert_eq!(journal_rows(&out), TENSORS);
    // Once the first is done (or killed), the directory is free again.
    assert_eq!(finish(start(&pair, &out, true, "third"), &out), code);
}
