//! `numprobe compare` over two run roots (step*/rank*/ trees): one table per (step, rank) named
//! as msprobe's distributed compare names it, the run's summary.md, and the exit codes.

mod common;

use common::*;
use std::path::Path;

const FIX: &str = "fixtures/msprobe-26.2.0-cpu";

/// `root/step{s}/rank{r}/` holding a copy of a fixture's rank directory, for each (s, r, fixture).
fn make_run(root: &Path, ranks: &[(u64, u64, &str)]) {
    for (s, r, fixture) in ranks {
        let from = testdata()
            .join(FIX)
            .join(fixture)
            .join(format!("dump/step{s}"));
        let proc_dir = std::fs::read_dir(&from)
            .unwrap()
            .map(|e| e.unwrap().path())
            .next()
            .unwrap();
        copy_tree(&proc_dir, &root.join(format!("step{s}/rank{r}")));
    }
}

#[test]
fn a_whole_run_gives_one_table_per_pair_and_the_exit_code_of_compare() {
    let dir = tempfile::tempdir().unwrap();
    let (tp, gp) = (dir.path().join("t"), dir.path().join("g"));
    let f32 = "pt_tiny_f32_stat_L1";
    make_run(&gp, &[(0, 0, f32), (0, 1, f32), (1, 0, f32), (1, 1, f32)]);
    // Rank 1 ran in bf16: its tables have error rows.
    let bf16 = "pt_tiny_bf16_stat_L1";
    make_run(&tp, &[(0, 0, f32), (0, 1, bf16), (1, 0, f32), (1, 1, bf16)]);
    let out = dir.path().join("out");
    let o = numprobe([
        "compare".as_ref(),
        tp.as_os_str(),
        gp.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--workers".as_ref(),
        "2".as_ref(),
        "--timestamp".as_ref(),
        "20260102030405".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // No progress bar when stderr is not a terminal.
    assert_eq!(stderr(&o), "");
    for s in 0..2 {
        for r in 0..2 {
            let t = out.join(format!("step{s}/compare_result_rank{r}_20260102030405.csv"));
            assert!(t.is_file(), "{}", t.display());
        }
    }
    // The f32 rank's table is the single-pair compare's table of the same pair.
    let single = dir.path().join("single");
    let o1 = numprobe([
        "compare".as_ref(),
        tp.join("step0/rank0").as_os_str(),
        gp.join("step0/rank0").as_os_str(),
        "--out".as_ref(),
        single.as_os_str(),
        "--timestamp".as_ref(),
        "20260102030405".as_ref(),
    ]);
    assert_eq!(o1.status.code(), Some(0), "{}", stderr(&o1));
    assert_eq!(
        std::fs::read(single.join("compare_result_20260102030405.csv")).unwrap(),
        std::fs::read(out.join("step0/compare_result_rank0_20260102030405.csv")).unwrap()
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    let origin: Vec<&str> = summary
        .lines()
        .filter(|l| l.starts_with("Origin:"))
        .collect();
    assert_eq!(origin.len(), 1, "{summary}");
    assert!(origin[0].starts_with("Origin: rank 1, API "), "{summary}");

    // --step/--rank lists select pairs; --exit-zero as for one pair.
    let out2 = dir.path().join("out2");
    let o = numprobe([
        "compare".as_ref(),
        tp.as_os_str(),
        gp.as_os_str(),
        "--out".as_ref(),
        out2.as_os_str(),
        "--step".as_ref(),
        "1".as_ref(),
        "--rank".as_ref(),
        "0,1".as_ref(),
        "--exit-zero".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!out2.join("step0").exists());
    let tables = |dir: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("compare_result_rank"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(tables(&out2.join("step1")).len(), 2);

    // A pair that cannot be read: the others are compared, the run exits 2.
    std::fs::write(tp.join("step1/rank0/dump.json"), "{").unwrap();
    let out3 = dir.path().join("out3");
    let o = numprobe([
        "compare".as_ref(),
        tp.as_os_str(),
        gp.as_os_str(),
        "--out".as_ref(),
        out3.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("step1/rank0: not compared"),
        "{}",
        stderr(&o)
    );
    assert_eq!(tables(&out3.join("step0")).len(), 2);
    assert_eq!(tables(&out3.join("step1")).len(), 1);
}

#[test]
fn lists_need_run_roots() {
    let dir = tempfile::tempdir().unwrap();
    let rank = testdata().join(FIX).join("pt_tiny_f32_stat_L1/dump/step0");
    let o = numprobe([
        "compare".as_ref(),
        rank.as_os_str(),
        rank.as_os_str(),
        "--out".as_ref(),
        dir.path().as_os_str(),
        "--rank".as_ref(),
        "0,1".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("need two run roots"), "{}", stderr(&o));
}
