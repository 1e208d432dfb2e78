//! Every `.pt` and `.npy` under `testdata/fixtures` (real msprobe dumps) reads, and gives the
//! dtype, shape and bytes that torch / numpy give (one Python run describes all files: dtype,
//! shape, CRC-32 and length of the C-contiguous bytes).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dumpfmt::tensor::{read_info, read_tensor};

mod common;
use common::python;
use testsupport::testdata;

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "pt" || x == "npy") {
            out.push(p);
        }
    }
}

#[test]
fn every_fixture_tensor_reads_as_torch_and_numpy_read_it() {
    let root = testdata().join("fixtures");
    assert!(
        root.is_dir(),
        "{} missing (set NUMPROBE_TESTDATA)",
        root.display()
    );
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    let n_pt = files
        .iter()
        .filter(|p| p.extension().unwrap() == "pt")
        .count();
    assert!(
        n_pt > 100 && files.len() - n_pt > 100,
        "{n_pt} .pt, {} .npy",
        files.len() - n_pt
    );

    let mut child = Command::new(python())
        .arg(testsupport::manifest_dir().join("tests/torch/describe_files.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let list: String = files.iter().map(|p| format!("{}\n", p.display())).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(list.as_bytes()));

    // Our side, while Python works.
    let mut ours = HashMap::new();
    for p in &files {
        let t = read_tensor(p).unwrap_or_else(|e| panic!("{e}"));
        let info = read_info(p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(info, t.info(), "{}", p.display());
        let dtype = if p.extension().unwrap() == "pt" {
            t.dtype().torch_name().to_owned()
        } else {
            t.dtype().npy_descr().to_owned()
        };
        let shape: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
        let line = format!(
            "{}\t{dtype}\t{}\t{:08x}\t{}",
            p.display(),
            shape.join(","),
            crc32fast::hash(t.bytes()),
            t.bytes().len()
        );
        ours.insert(p.display().to_string(), line);
    }
    // Drains stdout/stderr while the writer thread may still be feeding stdin.
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "describe_files.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = String::from_utf8(out.stdout).unwrap();
    let mut checked = 0;
    for line in theirs.lines() {
        let path = line.split('\t').next().unwrap();
        assert_eq!(
            ours.get(path).map(String::as_str),
            Some(line),
            "torch/numpy disagree"
        );
        checked += 1;
    }
    assert_eq!(checked, files.len());
}
