//! First divergence on the e2e vector dumps.

mod common;

use common::*;
use compare::divergence::summarize;
use compare::matching::MatchOptions;
use compare::run::compare_dumps;
use compare::table::TableOptions;
use serde_json::Value as J;

fn case(file: &str, id: &str) -> J {
    let v = vectors(file);
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap()
        .clone()
}

fn parse(text: &str) -> dumpfmt::json::Value {
    dumpfmt::json::parse(text.as_bytes(), std::path::Path::new("vector")).unwrap()
}

#[test]
fn producer_is_matmul_not_its_followers() {
    let c = case(
        "compare_e2e_statistics.json",
        "compare_e2e/exact_match_statistics",
    );
    let (n, b) = (
        parse(c["npu_dump_json"].as_str().unwrap()),
        parse(c["bench_dump_json"].as_str().unwrap()),
    );
    let cmp = compare_dumps(
        &n,
        &b,
        None,
        &MatchOptions::default(),
        &TableOptions::default(),
        &(),
    )
    .unwrap();
    // Inputs differ by 0.01% everywhere: compared exactly, the difference already arrives
    // through the first API's inputs.
    let exact = summarize(&cmp.table, &cmp.npu, 0.0);
    let p = exact.producer.clone().expect("a first divergence");
    assert_eq!(p.key, "Functional.linear.0.forward");
    assert!(
        p.reason.starts_with("its tensor inputs already differ"),
        "{}",
        p.reason
    );
    assert!(exact.other_producers.is_empty());
    assert_eq!(
        exact.propagators,
        ["Torch.matmul.0.forward", "Tensor.__add__.0.forward"]
    );
    // With 0.1% tolerance the inputs agree and matmul's output (200% off) is the producer.
    let s = summarize(&cmp.table, &cmp.npu, 1e-3);
    let p = s.producer.clone().expect("a producer");
    assert_eq!(p.key, "Torch.matmul.0.forward");
    assert_eq!(p.reason, "outputs disagree while tensor inputs agree");
    assert_eq!(s.row_levels, [10, 0, 1]);
    assert_eq!(s.unmatched_rows, 2);
    assert!(
        s.to_markdown("t", "g", "x.csv")
            .contains("`Torch.matmul.0.forward`")
    );
}

#[test]
fn producer_carries_stack() {
    let c = case(
        "compare_e2e_statistics.json",
        "compare_e2e/stack_json_present",
    );
    let (n, b) = (
        parse(c["npu_dump_json"].as_str().unwrap()),
        parse(c["bench_dump_json"].as_str().unwrap()),
    );
    let st = parse(c["npu_stack_json"].as_str().unwrap());
    let cmp = compare_dumps(
        &n,
        &b,
        Some(&st),
        &MatchOptions::default(),
        &TableOptions::default(),
        &(),
    )
    .unwrap();
    let s = summarize(&cmp.table, &cmp.npu, 0.0);
    // The linear's inputs already differ (by up to 134%): the first divergence is that call,
    // reported with its stack.
    let p = s.producer.clone().expect("a first divergence");
    assert_eq!(p.key, "Functional.linear.0.forward");
    let stack = p.stack.expect("stack.json gives the stack");
    assert_eq!(stack.len(), 2);
    assert!(stack[0].contains("F.linear(x, w)"));
    let md = s.to_markdown("t", "g", "x.csv");
    assert!(md.contains("File /a/train.py, line 99"), "{md}");
    // Within a 1000% tolerance nothing differs.
    let s = summarize(&cmp.table, &cmp.npu, 10.0);
    assert!(s.producer.is_none());
}

#[test]
fn non_tensor_argument_change_is_a_producer() {
    let c = case(
        "compare_e2e_statistics.json",
        "compare_e2e/exact_match_statistics",
    );
    let npu_text = c["npu_dump_json"].as_str().unwrap().to_string();
    let bench_text = npu_text.replace(
        "\"input_kwargs\": {},\n   \"output\": [\n    {\n     \"type\": \"torch.Tensor\",\n     \"dtype\": \"torch.float32\",\n     \"shape\": [\n      4,\n      4\n     ],\n     \"Max\": 1.8001672969737927",
        "\"input_kwargs\": {\"approximate\": {\"type\": \"str\", \"value\": \"none\"}},\n   \"output\": [\n    {\n     \"type\": \"torch.Tensor\",\n     \"dtype\": \"torch.float32\",\n     \"shape\": [\n      4,\n      4\n     ],\n     \"Max\": 1.8001672969737927",
    );
    let npu_text = npu_text.replace(
        "\"input_kwargs\": {},\n   \"output\": [\n    {\n     \"type\": \"torch.Tensor\",\n     \"dtype\": \"torch.float32\",\n     \"shape\": [\n      4,\n      4\n     ],\n     \"Max\": 1.8001672969737927",
        "\"input_kwargs\": {\"approximate\": {\"type\": \"str\", \"value\": \"tanh\"}},\n   \"output\": [\n    {\n     \"type\": \"torch.Tensor\",\n     \"dtype\": \"torch.float32\",\n     \"shape\": [\n      4,\n      4\n     ],\n     \"Max\": 1.8001672969737927",
    );
    assert_ne!(npu_text, bench_text, "the edit applied");
    let cmp = compare_dumps(
        &parse(&npu_text),
        &parse(&bench_text),
        None,
        &MatchOptions::default(),
        &TableOptions::default(),
        &(),
    )
    .unwrap();
    let s = summarize(&cmp.table, &cmp.npu, 0.0);
    let p = s.producer.clone().expect("a producer");
    assert_eq!(p.key, "Functional.relu.0.forward");
    assert_eq!(p.reason, "non-tensor arguments differ");
}
