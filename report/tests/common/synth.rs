//! A large synthetic compare (statistics mode, mix level): `rows` table rows in blocks of
//! modules, four rows per API (three inputs, one output), forward then backward, with a drift
//! that grows along the run so every verdict occurs.

use std::fmt::Write as _;
use std::path::Path;

use compare::Compared;
use compare::divergence::Summary;
use compare::matching::MatchOptions;
use compare::table::TableOptions;
use dumpfmt::construct::{ConstructFile, Node};

pub struct Synthetic {
    pub compared: Compared,
    pub summary: Summary,
    pub construct: ConstructFile,
}

fn tensor(out: &mut String, seed: u64, scale: f64) {
    let f = |k: u64| {
        ((seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k * 1442695040888963407)
            >> 33)
            % 10_000) as f64
            / 10_000.0
    };
    let _ = write!(
        out,
        "{{\"type\":\"torch.Tensor\",\"dtype\":\"torch.float32\",\"shape\":[4,{}],\"Max\":{},\"Min\":{},\"Mean\":{},\"Norm\":{},\"requires_grad\":true}}",
        8 + seed % 64,
        (1.0 + f(1)) * scale,
        (-1.0 - f(2)) * scale,
        (f(3) - 0.5) * 0.01 * scale,
        (10.0 + f(4) * 5.0) * scale
    );
}

fn dump_json(apis: usize, drift: impl Fn(usize) -> f64) -> String {
    let mut s = String::with_capacity(apis * 800);
    s.push_str("{\"task\":\"statistics\",\"level\":\"mix\",\"framework\":\"pytorch\",\"dump_data_dir\":null,\"data\":{");
    for a in 0..apis {
        if a > 0 {
            s.push(',');
        }
        let (name, dir) = api_name(a, apis);
        let _ = write!(s, "\"{name}\":{{\"input_args\":[");
        for i in 0..3 {
            if i > 0 {
                s.push(',');
            }
            tensor(&mut s, (a * 4 + i) as u64, 1.0 + drift(a) * 0.1);
        }
        s.push_str("],\"input_kwargs\":{},\"output\":[");
        tensor(&mut s, (a * 4 + 3) as u64, 1.0 + drift(a));
        s.push_str("]}");
        let _ = dir;
    }
    s.push_str("}}");
    s
}

/// API `a` of `apis`: the first half runs forward, the second half backward in reverse.
pub fn api_name(a: usize, apis: usize) -> (String, &'static str) {
    let half = apis / 2;
    let (n, dir) = if a < half {
        (a, "forward")
    } else {
        (apis - 1 - a, "backward")
    };
    (format!("Functional.linear.{n}.{dir}"), dir)
}

/// The module an API sits in: blocks of ten layers of five APIs each.
fn module_of(n: usize, dir: &str) -> (String, String) {
    let layer = n / 5;
    let block = layer / 10;
    (
        format!("Module.blocks.{block}.layers.{layer}.Linear.{dir}.0"),
        format!("Module.blocks.{block}.Block.{dir}.0"),
    )
}

pub fn generate(rows: usize) -> Synthetic {
    let apis = rows.div_ceil(4);
    let path = Path::new("synthetic/dump.json");
    let npu = dumpfmt::json::parse(
        dump_json(apis, |a| if a % 97 == 0 { 0.8 } else { 0.0 }).as_bytes(),
        path,
    )
    .expect("synthetic target parses");
    let bench = dumpfmt::json::parse(dump_json(apis, |_| 0.0).as_bytes(), path)
        .expect("synthetic golden parses");
    let compared = compare::compare_dumps(
        &npu,
        &bench,
        None,
        &MatchOptions::default(),
        &TableOptions::default(),
        &(),
    )
    .expect("synthetic compare");
    let summary = compare::divergence::summarize(&compared.table, &compared.npu, 0.0);
    let mut nodes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for a in 0..apis {
        let (name, dir) = api_name(a, apis);
        let n: usize = name.split('.').nth(2).unwrap().parse().unwrap();
        let (layer, block) = module_of(n, dir);
        nodes.push(Node {
            name,
            parent: Some(layer.clone()),
            micro_step: None,
        });
        if seen.insert(layer.clone()) {
            nodes.push(Node {
                name: layer,
                parent: Some(block.clone()),
                micro_step: None,
            });
        }
        if seen.insert(block.clone()) {
            nodes.push(Node {
                name: block,
                parent: None,
                micro_step: None,
            });
        }
    }
    Synthetic {
        compared,
        summary,
        construct: ConstructFile {
            path: path.with_file_name("construct.json"),
            nodes,
            megatron_micro_step_number: None,
        },
    }
}
