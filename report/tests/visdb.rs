//! `--vis-db` against msprobe 26.2.0's own `graph_visualize` output for the same pair
//! (testdata/vis, made by testdata/vis/regen.sh): the same schema and config, the same nodes in
//! the same order with the same parents, children, links, colours (precision_index) and stacks.
//! The per-parameter figures (input_data/output_data) must be msprobe's text exactly.

use std::collections::BTreeMap;

use serde_json::Value;

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

/// Rows of a table as JSON objects keyed by column name, by id.
fn table(db: &rusqlite::Connection, name: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut st = db.prepare(&format!("SELECT * FROM {name}")).unwrap();
    let cols: Vec<String> = st.column_names().iter().map(|s| s.to_string()).collect();
    let rows = st
        .query_map([], |r| {
            let mut m = BTreeMap::new();
            for (i, c) in cols.iter().enumerate() {
                let v = match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => Value::Null,
                    rusqlite::types::ValueRef::Integer(n) => Value::from(n),
                    rusqlite::types::ValueRef::Real(f) => Value::from(f),
                    rusqlite::types::ValueRef::Text(t) => {
                        Value::from(String::from_utf8_lossy(t).into_owned())
                    }
                    rusqlite::types::ValueRef::Blob(_) => panic!("no blobs in a vis.db"),
                };
                m.insert(c.clone(), v);
            }
            Ok(m)
        })
        .unwrap();
    rows.map(|r| {
        let r = r.unwrap();
        (r["id"].as_str().unwrap().to_string(), r)
    })
    .collect()
}

fn reference_rows(v: &Value, name: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
    v[name]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let m: BTreeMap<String, Value> = r.as_object().unwrap().clone().into_iter().collect();
            (m["id"].as_str().unwrap().to_string(), m)
        })
        .collect()
}

#[test]
fn stat_mix_pair_matches_msprobe_graph_visualize() {
    let out = tempfile::tempdir().unwrap();
    let opts = compare::CompareOptions {
        target: fixture("pt_tiny_bf16_stat_mix"),
        golden: fixture("pt_tiny_f32_stat_mix"),
        out_dir: out.path().to_path_buf(),
        timestamp: Some("20260101000000".into()),
        ..Default::default()
    };
    let (outcome, compared) = compare::run_keeping(&opts, &()).unwrap();
    let written =
        report::write_beside(&outcome, &compared, out.path(), Some("20260101000000")).unwrap();
    let path = written.vis_db.unwrap();
    assert_eq!(path, out.path().join("compare_20260101000000.vis.db"));

    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(
            testsupport::testdata().join("vis/msprobe-stat_mix_bf16_vs_f32.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let db =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();

    let mut schema: Vec<Value> = db
        .prepare("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
        .unwrap()
        .query_map([], |r| {
            Ok(serde_json::json!([
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?
            ]))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    schema.sort_by_key(|v| v.to_string());
    assert_eq!(Value::from(schema), reference["schema"]);

    assert_eq!(
        table(&db, "tb_config"),
        reference_rows(&reference, "tb_config")
    );
    assert_eq!(
        table(&db, "tb_stack"),
        reference_rows(&reference, "tb_stack")
    );

    let ours = table(&db, "tb_nodes");
    let theirs = reference_rows(&reference, "tb_nodes");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    let mut colours = [0usize; 3];
    let mut data_diffs = Vec::new();
    for (id, t) in &theirs {
        let o = &ours[id];
        for (col, v) in t {
            match col.as_str() {
                // msprobe writes its tensor directory there: a path of the machine that ran it.
                "dump_data_dir" => {}
                "input_data" | "output_data" => {
                    if o[col] != *v {
                        data_diffs.push(format!("{id} {col}:\n ours   {}\n theirs {}", o[col], v));
                    }
                }
                _ => assert_eq!(&o[col], v, "{id}: {col}"),
            }
        }
        match t["precision_index"].as_f64() {
            Some(p) if p >= 1.0 => colours[2] += 1,
            Some(p) if p > 0.0 => colours[1] += 1,
            Some(_) => colours[0] += 1,
            None => {}
        }
    }
    assert!(
        data_diffs.is_empty(),
        "{} nodes' figures differ from msprobe's:\n{}",
        data_diffs.len(),
        data_diffs[..data_diffs.len().min(6)].join("\n")
    );
    // The pair has both colours msprobe gives a compared node here (pass and error).
    assert!(colours[0] > 0 && colours[2] > 0, "{colours:?}");
}

#[test]
fn l1_dump_puts_its_apis_under_the_default_model_in_execution_order() {
    let out = tempfile::tempdir().unwrap();
    let opts = compare::CompareOptions {
        target: fixture("pt_tiny_bf16_stat_L1"),
        golden: fixture("pt_tiny_f32_stat_L1"),
        out_dir: out.path().to_path_buf(),
        timestamp: Some("20260101000000".into()),
        ..Default::default()
    };
    let (outcome, compared) = compare::run_keeping(&opts, &()).unwrap();
    let written =
        report::write_beside(&outcome, &compared, out.path(), Some("20260101000000")).unwrap();
    let db = rusqlite::Connection::open(written.vis_db.unwrap()).unwrap();
    let root: (String, String, String) = db
        .query_row(
            "SELECT node_type, up_node, sub_nodes FROM tb_nodes WHERE id = 'NPU_0_0_DefaultModel'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((root.0.as_str(), root.1.as_str()), ("0", ""));
    let subs: Vec<String> = serde_json::from_str(&root.2).unwrap();
    // Every API straight under the root, in the target's execution order.
    let keys: Vec<String> = compared.npu.calls.iter().map(|c| c.key.clone()).collect();
    assert_eq!(subs, keys);
    let errors: i64 = db
        .query_row(
            "SELECT count(*) FROM tb_nodes WHERE data_source = 'NPU' AND precision_index = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(errors > 0);
}
