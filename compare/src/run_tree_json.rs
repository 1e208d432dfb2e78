//! The texts of a whole-run compare ([`crate::run_tree`]): the run's summary.md, its
//! `run_summary.json`, and msprobe's `-da` result (`diff_analyze_{ts}.json`) for the origin.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::cell::Cell;
use crate::model::{Dump, State};
use crate::run_tree::{FirstDiff, Origin, PairOutcome, RunOptions, StepView, Unpaired};

fn cell_json(c: &Cell) -> Value {
    match c {
        Cell::None => Value::Null,
        Cell::Bool(b) => json!(b),
        Cell::Int(i) => json!(i),
        Cell::Float(f) if f.is_finite() => json!(f),
        other => json!(other.py_str()),
    }
}

/// msprobe's `-da` result for the origin: `{"rank_R": [{"op_name", "data_info": {"input":
/// {row: metrics}, "output": {row: metrics}}, "stack_info"}]}`, the metrics being the target
/// side's statistics (`NPU max`, `NPU min`, `NPU mean`, `NPU l2norm`) or checksum (`NPU MD5`),
/// read from the origin rank's dump.json (and stack.json).
pub fn diff_analyze(rank_dir: &Path, origin: &Origin) -> crate::Result<String> {
    let dump_path = rank_dir.join("dump.json");
    let dump = dumpfmt::json::parse_found(&dump_path)?;
    let stack_path = rank_dir.join("stack.json");
    let stack = if stack_path.is_file() {
        Some(dumpfmt::json::parse_found(&stack_path)?)
    } else {
        None
    };
    let model = Dump::from_json(&dump, stack.as_ref())?;
    let md5 = model.mode(&dump)? == crate::model::Mode::Md5;
    let mut inputs = Map::new();
    let mut outputs = Map::new();
    let mut stack_info = Value::Null;
    if let Some(call) = model.calls.iter().find(|c| c.key == origin.key) {
        for leaf in &call.leaves {
            let metrics = if md5 {
                json!({"NPU MD5": leaf.md5})
            } else {
                let [max, min, mean, norm] = &leaf.stats;
                json!({
                    "NPU max": cell_json(max),
                    "NPU min": cell_json(min),
                    "NPU mean": cell_json(mean),
                    "NPU l2norm": cell_json(norm),
                })
            };
            match leaf.state {
                State::Input => inputs.insert(leaf.name.clone(), metrics),
                State::Output => outputs.insert(leaf.name.clone(), metrics),
                _ => None,
            };
        }
        if let Some(Cell::List(items)) = &call.stack {
            stack_info = Value::Array(items.iter().map(|c| json!(c.py_str())).collect());
        }
    }
    let node = json!({
        "op_name": origin.key,
        "data_info": {"input": inputs, "output": outputs},
        "stack_info": stack_info,
    });
    let mut top = Map::new();
    top.insert(format!("rank_{}", origin.rank), json!([node]));
    Ok(serde_json::to_string_pretty(&Value::Object(top)).expect("JSON values serialize"))
}

fn step_label(step: Option<u64>) -> String {
    step.map_or_else(|| "the step".into(), |s| format!("step {s}"))
}

/// The line summary.md gives the run's origin: the origin of the first step that has one.
pub fn origin_line(views: &[StepView]) -> String {
    match views.iter().find_map(|v| v.origin.as_ref()) {
        Some(o) => format!("Origin: rank {}, API {}", o.rank, o.key),
        None if views.iter().any(|v| !v.firsts.is_empty()) => {
            "Origin: not found (every diverging rank received its difference through a collective from a rank that was not compared)".into()
        }
        None => "Origin: none (every compared rank agrees with the golden run)".into(),
    }
}

/// The run's summary.md: the origin line, pairs and their verdicts, and per step each rank's
/// first divergence.
pub fn summary_markdown(
    opts: &RunOptions,
    pairs: &[PairOutcome],
    unpaired: &Unpaired,
    views: &[StepView],
) -> String {
    let mut s = String::new();
    s.push_str("# numprobe compare: whole run\n\n");
    s.push_str(&format!(
        "- target: `{}`\n- golden: `{}`\n- pairs: {}\n\n",
        opts.target.display(),
        opts.golden.display(),
        pairs.len()
    ));
    s.push_str(&origin_line(views));
    s.push_str("\n\n## Pairs\n\n| step | rank | table | pass | warning | error |\n|---|---|---|---|---|---|\n");
    for p in pairs {
        let step = p.step.map_or("-".into(), |s| s.to_string());
        match &p.result {
            Ok((path, sm)) => s.push_str(&format!(
                "| {step} | {} | `{}` | {} | {} | {} |\n",
                p.rank,
                path.file_name().unwrap_or_default().to_string_lossy(),
                sm.row_levels[0],
                sm.row_levels[1],
                sm.row_levels[2]
            )),
            Err(e) => s.push_str(&format!(
                "| {step} | {} | not compared: {} | | | |\n",
                p.rank,
                e.replace('|', "\\|").replace('\n', " ")
            )),
        }
    }
    let list = |v: &[(Option<u64>, u64)]| {
        v.iter()
            .map(|(st, r)| match st {
                Some(st) => format!("step{st}/rank{r}"),
                None => format!("rank{r}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !unpaired.target_only.is_empty() {
        s.push_str(&format!(
            "\nOnly in the target run (not compared): {}\n",
            list(&unpaired.target_only)
        ));
    }
    if !unpaired.golden_only.is_empty() {
        s.push_str(&format!(
            "\nOnly in the golden run (not compared): {}\n",
            list(&unpaired.golden_only)
        ));
    }
    for l in &unpaired.links_out {
        s.push_str(&format!("\nNot compared: {}\n", l.to_error()));
    }
    s.push_str("\n## Across ranks\n");
    for v in views {
        s.push_str(&format!("\n### {}\n\n", step_label(v.step)));
        match &v.origin {
            Some(o) => s.push_str(&format!(
                "Origin of {}: rank {}, `{}` ({}).\n\n",
                step_label(v.step),
                o.rank,
                o.key,
                o.reason
            )),
            None if v.firsts.is_empty() => {
                s.push_str("Every compared rank agrees.\n\n");
                continue;
            }
            None => s.push_str("No rank produced the difference among those compared.\n\n"),
        }
        s.push_str("| rank | first divergence | how |\n|---|---|---|\n");
        for (rank, f) in &v.firsts {
            let how = match f {
                FirstDiff::Local { reason, .. } => format!("produced here: {reason}"),
                FirstDiff::Received { .. } => {
                    "received through this collective (its inputs agree here): propagator".into()
                }
            };
            s.push_str(&format!("| {rank} | `{}` | {how} |\n", f.key()));
        }
        if !v.unexplained.is_empty() {
            s.push_str(&format!(
                "\nRanks {:?} received a difference through a group that does not hold the origin: a second origin among ranks not compared.\n",
                v.unexplained
            ));
        }
    }
    s
}

/// `run_summary.json`: the same view as summary.md, for tools.
pub fn run_json(pairs: &[PairOutcome], unpaired: &Unpaired, views: &[StepView]) -> String {
    let pairs: Vec<Value> = pairs
        .iter()
        .map(|p| match &p.result {
            Ok((path, sm)) => json!({
                "step": p.step, "rank": p.rank,
                "table": path.file_name().unwrap_or_default().to_string_lossy(),
                "rows": {"pass": sm.row_levels[0], "warning": sm.row_levels[1], "error": sm.row_levels[2]},
            }),
            Err(e) => json!({"step": p.step, "rank": p.rank, "error": e}),
        })
        .collect();
    let steps: Vec<Value> = views
        .iter()
        .map(|v| {
            let firsts: Map<String, Value> = v
                .firsts
                .iter()
                .map(|(r, f)| {
                    let (kind, layer) = match f {
                        FirstDiff::Local { layer, .. } => ("produced", *layer),
                        FirstDiff::Received { layer, .. } => ("received", *layer),
                    };
                    (
                        format!("rank_{r}"),
                        json!({"op_name": f.key(), "kind": kind, "collectives_before": layer}),
                    )
                })
                .collect();
            json!({
                "step": v.step,
                "origin": v.origin.as_ref().map(|o| json!({"rank": o.rank, "op_name": o.key, "reason": o.reason})),
                "first_divergence": firsts,
                "unexplained_ranks": v.unexplained,
            })
        })
        .collect();
    let origin = views.iter().find_map(|v| {
        v.origin
            .as_ref()
            .map(|o| json!({"step": v.step, "rank": o.rank, "op_name": o.key}))
    });
    let only = |v: &[(Option<u64>, u64)]| -> Vec<Value> {
        v.iter()
            .map(|(s, r)| json!({"step": s, "rank": r}))
            .collect()
    };
    serde_json::to_string_pretty(&json!({
        "origin": origin,
        "pairs": pairs,
        "steps": steps,
        "target_only": only(&unpaired.target_only),
        "golden_only": only(&unpaired.golden_only),
        "not_entered": unpaired.links_out.iter().map(|l| json!({
            "dir": l.dir.to_string_lossy(),
            "target": l.target.to_string_lossy(),
            "reason": l.to_error().to_string(),
        })).collect::<Vec<_>>(),
    }))
    .expect("JSON values serialize")
}
