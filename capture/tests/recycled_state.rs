//! A session's in-memory dump is recycled for the next session (its allocations kept, its
//! content dropped): whatever the last step recorded, the next step's files must be those a
//! fresh state writes. Its own test binary, so no other test takes the recycled state first.

use capture::DumpState;
use capture::journal::{Fill, Meta, Record};
use capture::state::PENDING_KEY;
use dumpfmt::json::{Map, Value};
use proptest::prelude::*;

fn tensor(id: Option<u64>, max: f64) -> Value {
    let mut m = Map::new()
        .with("type", "torch.Tensor")
        .with("dtype", "torch.float32")
        .with("Max", Value::Float(max));
    if let Some(id) = id {
        m.insert(PENDING_KEY, Value::Int(id as i64));
    }
    Value::Object(m)
}

/// The records of one step: entries (some waiting for statistics, then filled), stacks by
/// frames and by group, construct parents, a removal and the meta.
fn step() -> impl Strategy<Value = Vec<Record>> {
    prop::collection::vec((0u8..5, 0u8..8, any::<bool>(), -1e3f64..1e3), 0..20).prop_map(|ops| {
        let mut recs = vec![Record::Meta(Meta {
            task: "statistics".into(),
            level: "L1".into(),
            framework: "pytorch".into(),
            dump_data_dir: None,
            extra_info: true,
        })];
        let mut groups = 0;
        for (i, (kind, n, flag, x)) in ops.into_iter().enumerate() {
            let name = format!("Torch.add.{n}.forward");
            let rec = match kind {
                0 => Record::Entry {
                    name,
                    body: Map::new().with("input_args", Value::Array(vec![tensor(None, x)])),
                    reinsert: flag,
                },
                1 => {
                    let id = i as u64;
                    recs.push(Record::PendingEntry {
                        name,
                        body: Map::new().with("output", Value::Array(vec![tensor(Some(id), x)])),
                        reinsert: flag,
                        pending: vec![id],
                    });
                    Record::Fill(vec![Fill {
                        id,
                        stats: [
                            Value::Float(x),
                            Value::Float(-x),
                            Value::Int(1),
                            Value::Null,
                        ],
                    }])
                }
                2 if flag && groups > 0 => Record::StackRef {
                    name,
                    group: usize::from(n) % groups,
                },
                2 => {
                    groups += 1;
                    Record::Stack {
                        name,
                        frames: vec![format!("File a.py, line {i}"), format!("{x}")],
                    }
                }
                3 => Record::Construct {
                    name,
                    parent: flag.then(|| format!("Module.layer.{n}.forward.0")),
                },
                _ => Record::Remove { name },
            };
            recs.push(rec);
        }
        recs
    })
}

fn files(s: &mut DumpState, recs: &[Record]) -> Vec<(&'static str, Vec<u8>)> {
    for r in recs {
        s.apply(r);
    }
    s.render_files()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_recycled_state_writes_what_a_fresh_one_does(last in step(), next in step()) {
        let mut old = DumpState::reused();
        files(&mut old, &last);
        old.recycle();
        let mut reused = DumpState::reused();
        prop_assert_eq!(reused.data_len(), 0);
        prop_assert_eq!(reused.stack_group_count(), 0);
        prop_assert_eq!(reused.pending_len(), 0);
        let got = files(&mut reused, &next);
        let want = files(&mut DumpState::new(), &next);
        prop_assert_eq!(got, want);
    }
}
