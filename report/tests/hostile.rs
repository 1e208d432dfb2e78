//! A hostile construct.json (parent cycles, a node its own parent, unknown parents) still gives
//! a report and a vis.db: every API once in the tree, no hang.

use dumpfmt::construct::{ConstructFile, Node};

fn fixture(name: &str) -> std::path::PathBuf {
    let step =
        testsupport::testdata().join(format!("fixtures/msprobe-26.2.0-cpu/{name}/dump/step0"));
    let proc = std::fs::read_dir(&step)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    proc.join("dump.json")
}

#[test]
fn construct_cycles_neither_hang_nor_lose_apis() {
    let out = tempfile::tempdir().unwrap();
    let opts = compare::CompareOptions {
        target: fixture("pt_tiny_bf16_stat_L1"),
        golden: fixture("pt_tiny_f32_stat_L1"),
        out_dir: out.path().to_path_buf(),
        timestamp: Some("20260101000000".into()),
        ..Default::default()
    };
    let (outcome, compared) = compare::run_keeping(&opts, &()).unwrap();
    let keys: Vec<String> = compared.npu.calls.iter().map(|c| c.key.clone()).collect();
    let node = |name: &str, parent: Option<&str>| Node {
        name: name.to_string(),
        parent: parent.map(str::to_string),
        micro_step: None,
    };
    // The first API is its own parent, the next two form a cycle, the rest hang off a module
    // that is the child of one of them.
    let mut nodes = vec![
        node(&keys[0], Some(&keys[0])),
        node(&keys[1], Some(&keys[2])),
        node(&keys[2], Some(&keys[1])),
        node("Module.m.M.forward.0", Some(&keys[1])),
    ];
    for k in &keys[3..] {
        nodes.push(node(k, Some("Module.m.M.forward.0")));
    }
    let construct = ConstructFile {
        path: "hostile/construct.json".into(),
        nodes,
        megatron_micro_step_number: None,
    };
    let input = report::Input {
        compared: &compared,
        summary: &outcome.summary,
        target_construct: Some(&construct),
        golden_construct: Some(&construct),
        target_name: "t".into(),
        golden_name: "g".into(),
    };
    let model = report::Model::build(&input);
    let mut in_tree: Vec<&str> = model
        .items
        .iter()
        .filter(|i| i.call.is_some())
        .map(|i| i.label.as_str())
        .collect();
    in_tree.sort();
    let mut want: Vec<&str> = keys.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(in_tree, want);
    for (i, it) in model.items.iter().enumerate() {
        assert!(it.end > i && it.end <= model.items.len());
    }
    let html = out.path().join("report.html");
    report::html::write(&model, &input, &html).unwrap();
    let db = out.path().join("compare_20260101000000.vis.db");
    let t = report::visdb::dump_data(&outcome.target_dump_json).unwrap();
    let g = report::visdb::dump_data(&outcome.golden_dump_json).unwrap();
    report::visdb::write(&input, &db, 0, 0, (&t, &g)).unwrap();
    assert!(db.exists());
}
