//! A whole distributed run compared at once (compare::run_tree): per-(step, rank) tables named
//! as msprobe's distributed compare names them, and the origin found by following the
//! collectives. The runs are synthesised statistics dumps of a tensor-parallel step: a matmul,
//! an all_reduce over the group of every rank, a relu.

use std::collections::BTreeMap;
use std::path::Path;

use compare::CompareOptions;
use compare::run_tree::{FirstDiff, RunOptions, discover, first_diff, plan, run_tree};
use serde_json::{Value, json};
use testsupport::runs::{rank_dump, write_run};

fn opts(tp: &Path, gp: &Path, out: &Path, workers: usize) -> RunOptions {
    RunOptions {
        pair: CompareOptions {
            timestamp: Some("20260101000000".into()),
            ..Default::default()
        },
        target: tp.to_path_buf(),
        golden: gp.to_path_buf(),
        out_dir: out.to_path_buf(),
        workers,
        ..Default::default()
    }
}

/// A difference made on rank 1 in step 1 reaches ranks 0, 2, 3 through the all_reduce: the
/// origin is rank 1's matmul, not rank 0 (the first rank to show a difference).
#[test]
fn origin_is_the_producing_rank_not_the_first_rank_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let (tp, gp, out) = (
        dir.path().join("t"),
        dir.path().join("g"),
        dir.path().join("out"),
    );
    let world = 4;
    write_run(&gp, &[0, 1], world, |_, r| {
        rank_dump(world, r, false, false)
    });
    write_run(&tp, &[0, 1], world, |s, r| {
        rank_dump(world, r, s == 1 && r == 1, s == 1)
    });
    let (t, g) = (
        discover(&tp).unwrap().unwrap(),
        discover(&gp).unwrap().unwrap(),
    );
    let outcome = run_tree(&opts(&tp, &gp, &out, 2), &t, &g, &()).unwrap();

    assert_eq!(outcome.pairs.len(), 8);
    for s in 0..2 {
        for r in 0..world {
            let table = out.join(format!("step{s}/compare_result_rank{r}_20260101000000.csv"));
            assert!(table.is_file(), "{} missing", table.display());
        }
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    let origin_lines: Vec<&str> = summary
        .lines()
        .filter(|l| l.starts_with("Origin:"))
        .collect();
    assert_eq!(
        origin_lines,
        ["Origin: rank 1, API Torch.matmul.0.forward"],
        "{summary}"
    );

    let step1 = outcome.steps.iter().find(|v| v.step == Some(1)).unwrap();
    assert!(
        matches!(&step1.firsts[&1], FirstDiff::Local { key, .. } if key == "Torch.matmul.0.forward")
    );
    for r in [0, 2, 3] {
        assert!(
            matches!(&step1.firsts[&r], FirstDiff::Received { key, .. } if key == "Distributed.all_reduce.0.forward"),
            "rank {r}: {:?}",
            step1.firsts[&r]
        );
    }
    assert!(step1.unexplained.is_empty());
    let step0 = outcome.steps.iter().find(|v| v.step == Some(0)).unwrap();
    assert!(step0.firsts.is_empty() && step0.origin.is_none());

    // msprobe's -da shape: {"rank_1": [{"op_name", "data_info": {"input", "output"}, "stack_info"}]}.
    assert_eq!(outcome.analyze_paths.len(), 1);
    let da: Value =
        serde_json::from_str(&std::fs::read_to_string(&outcome.analyze_paths[0]).unwrap()).unwrap();
    let node = &da["rank_1"][0];
    assert_eq!(node["op_name"], "Torch.matmul.0.forward");
    assert_eq!(
        node["data_info"]["output"]["Torch.matmul.0.forward.output.0"]["NPU max"],
        json!(4.5)
    );
    assert!(node["data_info"]["input"]["Torch.matmul.0.forward.input.0"].is_object());
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run_summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        run["origin"],
        json!({"step": 1, "rank": 1, "op_name": "Torch.matmul.0.forward"})
    );
    assert!(!outcome.has_failures());
}

/// The same tables, byte for byte, with 1 worker and with 3, and as the single-pair compare
/// writes them.
#[test]
fn tables_do_not_depend_on_the_worker_count_and_match_the_single_pair_compare() {
    let dir = tempfile::tempdir().unwrap();
    let (tp, gp) = (dir.path().join("t"), dir.path().join("g"));
    let world = 3;
    write_run(&gp, &[0], world, |_, r| rank_dump(world, r, false, false));
    write_run(&tp, &[0], world, |_, r| rank_dump(world, r, r == 2, true));
    let (t, g) = (
        discover(&tp).unwrap().unwrap(),
        discover(&gp).unwrap().unwrap(),
    );
    let mut tables: Vec<BTreeMap<String, Vec<u8>>> = Vec::new();
    for workers in [1, 3] {
        let out = dir.path().join(format!("out{workers}"));
        run_tree(&opts(&tp, &gp, &out, workers), &t, &g, &()).unwrap();
        let mut m = BTreeMap::new();
        for e in std::fs::read_dir(out.join("step0")).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                m.insert(
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
        tables.push(m);
    }
    assert_eq!(tables[0], tables[1]);
    for r in 0..world {
        let single = dir.path().join(format!("single{r}"));
        let o = compare::run(
            &CompareOptions {
                target: tp.join(format!("step0/rank{r}")),
                golden: gp.join(format!("step0/rank{r}")),
                out_dir: single,
                timestamp: Some("20260101000000".into()),
                ..Default::default()
            },
            &(),
        )
        .unwrap();
        assert_eq!(
            std::fs::read(&o.table_path).unwrap(),
            tables[0][&format!("compare_result_rank{r}_20260101000000.csv")]
        );
    }
}

/// `--step`/`--rank` lists select pairs; a rank on one side only is listed, not compared.
#[test]
fn selection_and_unpaired_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let (tp, gp) = (dir.path().join("t"), dir.path().join("g"));
    write_run(&gp, &[0, 1, 2], 2, |_, r| rank_dump(2, r, false, false));
    write_run(&tp, &[0, 1, 2], 3, |_, r| rank_dump(2, r, false, false));
    let (t, g) = (
        discover(&tp).unwrap().unwrap(),
        discover(&gp).unwrap().unwrap(),
    );
    let (jobs, unpaired) = plan(&t, &g, &[0, 2], &[]).unwrap();
    let got: Vec<(Option<u64>, u64)> = jobs.iter().map(|j| (j.step, j.rank)).collect();
    assert_eq!(
        got,
        [(Some(0), 0), (Some(0), 1), (Some(2), 0), (Some(2), 1)]
    );
    assert_eq!(unpaired.target_only, [(Some(0), 2), (Some(2), 2)]);
    let (jobs, unpaired) = plan(&t, &g, &[1], &[1]).unwrap();
    assert_eq!(jobs.len(), 1);
    assert!(unpaired.target_only.is_empty());
    // A step directory (rank*/ directly) is a run root of one step.
    let step = discover(&tp.join("step1")).unwrap().unwrap();
    assert_eq!(step.steps.keys().collect::<Vec<_>>(), [&None]);
    // A rank directory is not.
    assert!(discover(&tp.join("step1/rank0")).unwrap().is_none());
    let out = dir.path().join("out");
    let o = run_tree(&opts(&tp, &gp, &out, 2), &t, &g, &()).unwrap();
    assert!(!o.has_errors());
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("Origin: none"), "{summary}");
    assert!(
        summary.contains(
            "Only in the target run (not compared): step0/rank2, step1/rank2, step2/rank2"
        ),
        "{summary}"
    );
}

/// A broken pair is reported and the others are still compared.
#[test]
fn a_pair_that_cannot_be_read_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (tp, gp) = (dir.path().join("t"), dir.path().join("g"));
    write_run(&gp, &[0], 2, |_, r| rank_dump(2, r, false, false));
    write_run(&tp, &[0], 2, |_, r| rank_dump(2, r, false, false));
    std::fs::write(
        tp.join("step0/rank1/dump.json"),
        "{\"task\": \"statistics\", \"data\": [",
    )
    .unwrap();
    let (t, g) = (
        discover(&tp).unwrap().unwrap(),
        discover(&gp).unwrap().unwrap(),
    );
    let out = dir.path().join("out");
    let o = run_tree(&opts(&tp, &gp, &out, 2), &t, &g, &()).unwrap();
    assert!(o.has_failures());
    let bad = o.pairs.iter().find(|p| p.rank == 1).unwrap();
    let msg = bad.result.as_ref().unwrap_err();
    assert!(msg.contains("rank1") && msg.contains("dump.json"), "{msg}");
    assert!(o.pairs.iter().find(|p| p.rank == 0).unwrap().result.is_ok());
}

/// First divergences from call lists: a collective whose inputs agree but outputs differ
/// received the difference; a computation did it itself.
#[test]
fn first_diff_classifies_calls() {
    use compare::divergence::CallDiff;
    let call = |key: &str, i: bool, o: bool| CallDiff {
        key: key.into(),
        inputs_differ: i,
        outputs_differ: o,
        args_differ: false,
        group: None,
    };
    let got = first_diff(&[
        call("Torch.matmul.0.forward", false, false),
        call("Distributed.all_gather.0.forward", false, false),
        call("Distributed.all_reduce.0.forward", false, true),
        call("Torch.relu.0.forward", true, true),
    ]);
    assert_eq!(
        got,
        Some(FirstDiff::Received {
            key: "Distributed.all_reduce.0.forward".into(),
            layer: 1
        })
    );
    let got = first_diff(&[
        call("Distributed.broadcast.0.forward", false, false),
        call("Torch.add.0.forward", false, false),
        call("Torch.mul.0.forward", false, true),
    ]);
    assert!(matches!(
        got,
        Some(FirstDiff::Local {
            layer: 1,
            sub_layer: 1,
            ..
        })
    ));
    assert_eq!(
        first_diff(&[call("Torch.add.0.forward", false, false)]),
        None
    );
}

/// Each pair leaves its result record; a resumed run compares only the pairs without one (or
/// with one of another run), and writes the very files of a run that compared every pair. The
/// three steps driven one by one (as numprobe.cluster drives them) write the same files too.
#[test]
fn resume_compares_only_pairs_without_a_record_and_steps_write_the_same_files() {
    use compare::run_tree::{PAIR_RESULT, compare_pair, finish, pair_dir, plan_run, read_record};
    let dir = tempfile::tempdir().unwrap();
    let (tp, gp) = (dir.path().join("t"), dir.path().join("g"));
    let world = 4;
    write_run(&gp, &[0], world, |_, r| rank_dump(world, r, false, false));
    write_run(&tp, &[0], world, |_, r| rank_dump(world, r, r == 2, true));
    let (t, g) = (
        discover(&tp).unwrap().unwrap(),
        discover(&gp).unwrap().unwrap(),
    );
    let files = |root: &Path| -> BTreeMap<String, Vec<u8>> {
        let mut m = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(root).unwrap().display().to_string();
                    m.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        m
    };
    let whole = dir.path().join("whole");
    let o = opts(&tp, &gp, &whole, 2);
    run_tree(&o, &t, &g, &()).unwrap();
    let reference = files(&whole);
    for r in 0..world {
        assert!(reference.contains_key(&format!("step0/rank{r}/{PAIR_RESULT}")));
    }

    // Step by step, as another driver runs them.
    let stepped = dir.path().join("stepped");
    let o = opts(&tp, &gp, &stepped, 1);
    let plan = plan_run(&o, &t, &g).unwrap();
    let pairs: Vec<_> = plan
        .jobs
        .iter()
        .map(|j| compare_pair(&o, j, &plan.timestamp, &()))
        .collect();
    for j in &plan.jobs {
        let back = read_record(&o, j, &plan.timestamp).unwrap();
        assert!(back.result.is_ok());
        // A record of another run's timestamp is not this run's.
        assert!(read_record(&o, j, "20250101000000").is_none());
    }
    // A record padded past its bound (planted, or not ours) is no record: never read whole.
    let rec = pair_dir(&stepped, Some(0), 0).join(PAIR_RESULT);
    let good = std::fs::read(&rec).unwrap();
    let mut padded = good.clone();
    padded.resize(good.len() + (2 << 20), b' ');
    std::fs::write(&rec, &padded).unwrap();
    assert!(
        read_record(
            &o,
            plan.jobs.iter().find(|j| j.rank == 0).unwrap(),
            &plan.timestamp
        )
        .is_none()
    );
    std::fs::write(&rec, &good).unwrap();
    finish(&o, &t, &plan, pairs).unwrap();
    assert_eq!(files(&stepped), reference);

    // Resumed: rank 1's record is gone and rank 3's table was touched; only rank 1 is compared
    // again (rank 3's table stays as it is: its record says it is done).
    let mut o = opts(&tp, &gp, &whole, 2);
    o.pair.resume = true;
    std::fs::remove_file(pair_dir(&whole, Some(0), 1).join(PAIR_RESULT)).unwrap();
    let t3 = whole.join("step0/compare_result_rank3_20260101000000.csv");
    let kept = std::fs::read(&t3).unwrap();
    std::fs::write(&t3, b"marker").unwrap();
    let t1 = whole.join("step0/compare_result_rank1_20260101000000.csv");
    std::fs::write(&t1, b"stale").unwrap();
    run_tree(&o, &t, &g, &()).unwrap();
    assert_eq!(std::fs::read(&t3).unwrap(), b"marker");
    std::fs::write(&t3, kept).unwrap();
    assert_eq!(files(&whole), reference);
}
