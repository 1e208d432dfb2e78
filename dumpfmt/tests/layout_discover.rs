//! Finding steps, ranks and files from any starting level.

use std::path::Path;

use dumpfmt::layout::{Layout, RankId, discover, parse_step};

use testsupport::testdata;

#[test]
fn names() {
    assert_eq!(RankId::parse("rank3"), Some(RankId::Rank(3)));
    assert_eq!(RankId::parse("rank"), Some(RankId::NoRank));
    assert_eq!(RankId::parse("proc2016"), Some(RankId::Proc(2016)));
    assert_eq!(RankId::parse("proc"), None);
    assert_eq!(RankId::parse("rankx"), None);
    assert_eq!(RankId::Proc(7).to_string(), "proc7");
    assert_eq!(parse_step("step12"), Some(12));
    assert_eq!(parse_step("step"), None);
    assert_eq!(parse_step("steps"), None);
}

#[test]
fn every_level_of_a_real_dump() {
    let root = testdata().join("fixtures/msprobe-26.2.0-cpu/pt_tiny_f32_tensor_L1/dump");
    let l = discover(&root).unwrap();
    assert_eq!(l.ranks().len(), 2);
    assert_eq!(l.step_count(), 2);
    let r0 = &l.ranks()[0];
    assert_eq!((r0.step, r0.rank), (Some(0), Some(RankId::Proc(24674))));
    assert!(r0.dump_json.is_some() && r0.stack_json.is_some() && r0.construct_json.is_some());
    assert!(r0.debug_json.is_none());
    assert_eq!(
        r0.tensor_dir.as_deref(),
        Some(r0.dir.join("dump_tensor_data").as_path())
    );

    let step = discover(&root.join("step1")).unwrap();
    assert_eq!(step.ranks().len(), 1);
    assert_eq!(step.ranks()[0].step, Some(1));

    let rank = discover(&root.join("step1/proc24674")).unwrap();
    assert_eq!(rank.ranks()[0].step, Some(1));
    assert_eq!(rank.ranks()[0].rank, Some(RankId::Proc(24674)));

    let f = root.join("step1/proc24674/dump.json");
    assert_eq!(discover(&f).unwrap(), Layout::File(f));

    let rank0 =
        discover(&testdata().join("fixtures/msprobe-26.2.0-cpu/pt_tiny_f32_stat_L1_rank0/dump"))
            .unwrap();
    assert!(
        rank0
            .ranks()
            .iter()
            .all(|r| r.rank == Some(RankId::Rank(0)) && r.tensor_dir.is_none())
    );
}

#[test]
fn debug_level_and_split_roots() {
    let l = discover(&testdata().join("fixtures/msprobe-26.2.0-torch-h200/debug_save/dump_path"))
        .unwrap();
    assert!(
        l.ranks()
            .iter()
            .all(|r| r.debug_json.is_some() && r.dump_json.is_none())
    );

    // MindSpore jit split: graph/step0/rank0 and pynative/step{0,1}/rank0.
    let tmp = tempfile::tempdir().unwrap();
    for d in [
        "graph/step0/rank0",
        "pynative/step0/rank0",
        "pynative/step1/rank0",
    ] {
        std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        std::fs::write(
            tmp.path().join(d).join("dump.json"),
            br#"{"task": "statistics", "data": {}}"#,
        )
        .unwrap();
    }
    let l = discover(tmp.path()).unwrap();
    assert_eq!(l.ranks().len(), 3);
    assert_eq!(l.step_count(), 3);
    assert_eq!(l.ranks()[0].split.as_deref(), Some("graph"));
    assert_eq!(l.ranks()[2].split.as_deref(), Some("pynative"));
    assert_eq!(l.ranks()[2].step, Some(1));
    let r = dumpfmt::validate::validate(tmp.path()).unwrap();
    assert!(r.is_ok() && r.steps == 3 && r.json_files == 3, "{r}");
}

#[test]
fn errors() {
    assert!(matches!(
        discover(Path::new("/nonexistent/x")),
        Err(dumpfmt::Error::Io { .. })
    ));
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("other")).unwrap();
    let e = discover(tmp.path()).unwrap_err();
    assert!(matches!(e, dumpfmt::Error::Layout { .. }), "{e}");
}
