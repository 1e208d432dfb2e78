//! Resuming an interrupted tensor-mode compare from its progress journal.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use compare::matching::MatchOptions;
use compare::run::{Journal, compare_dumps};
use compare::table::TableOptions;
use compare::table::{TensorSource, to_csv};
use dumpfmt::tensor::Tensor;

struct Counting<'a> {
    inner: &'a MapSource,
    loads: AtomicUsize,
}

impl TensorSource for Counting<'_> {
    fn load(&self, npu: bool, name: &str) -> Result<Tensor, String> {
        self.loads.fetch_add(1, Ordering::Relaxed);
        self.inner.load(npu, name)
    }
}

#[test]
fn resume_reuses_finished_rows() {
    let v = vectors("compare_e2e_tensor.json");
    let case = &v["cases"][0];
    let parse = |k: &str| {
        dumpfmt::json::parse(
            case[k].as_str().unwrap().as_bytes(),
            std::path::Path::new(k),
        )
        .unwrap()
    };
    let (npu, bench) = (parse("npu_dump_json"), parse("bench_dump_json"));
    let mut tensors = HashMap::new();
    for (side, is_npu) in [("npu", true), ("bench", false)] {
        for (name, a) in case["tensors"][side].as_object().unwrap() {
            tensors.insert((is_npu, name.clone()), array(a));
        }
    }
    let map = MapSource(tensors);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("compare_progress.tsv");
    let run = |resume: bool| {
        let journal = Journal::open(&path, "pair", resume).unwrap();
        let src = Counting {
            inner: &map,
            loads: AtomicUsize::new(0),
        };
        let cmp = compare_dumps(
            &npu,
            &bench,
            None,
            &MatchOptions::default(),
            &TableOptions {
                source: Some(&src),
                cache: Some(&journal),
                ..Default::default()
            },
            &(),
        )
        .unwrap();
        (
            to_csv(&cmp.table),
            src.loads.load(Ordering::Relaxed),
            journal.resumed_rows(),
        )
    };
    let (first, loads, resumed) = run(false);
    assert!(loads > 0);
    assert_eq!(resumed, 0);
    assert_csv_eq(
        &first,
        case["result_csv"].as_str().unwrap(),
        1e-12,
        0.0,
        "first run",
    );

    // A run killed mid-write leaves a torn last line: it is ignored.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| {
            use std::io::Write;
            f.write_all(b"Torch.x.0.forward.output.0.pt\tTorch.x")
        })
        .unwrap();
    let (second, loads, resumed) = run(true);
    assert_eq!(loads, 0, "every tensor row came from the journal");
    assert!(resumed > 0);
    assert_eq!(second, first);

    // Without resume the journal starts afresh.
    let (_, loads, resumed) = run(false);
    assert!(loads > 0);
    assert_eq!(resumed, 0);
}
