//! The in-memory dump keeps each entry body rendered as dump.json text (rendered once when
//! recorded): the files it writes, the bodies it gives back and the journal payloads it makes
//! must be those of the JSON values themselves, whatever the values and the record order.

use capture::DumpState;
use capture::journal::{self, Fill, Record};
use capture::state::{PENDING_KEY, render_body};
use dumpfmt::json::{self, Map, Value};
use proptest::prelude::*;

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        prop_oneof![
            any::<f64>(),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(5e-324),
            Just(1e16),
        ]
        .prop_map(Value::Float),
        // Control characters, quotes, backslashes and non-ASCII text (escaped by the writer).
        "[a-z\"\\\\\u{0}-\u{1f}é€😀]{0,8}".prop_map(Value::from),
        Just(Value::BigInt("123456789012345678901234567890".into())),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_\u{0}é]{0,5}", inner), 0..4).prop_map(|kv| {
                let mut m = Map::new();
                for (k, v) in kv {
                    m.insert(k.as_str(), v);
                }
                Value::Object(m)
            }),
        ]
    })
}

fn body() -> impl Strategy<Value = Map> {
    prop::collection::vec(
        (
            "(input_args|input_kwargs|output|input|grad|k\u{e9})",
            value(),
        ),
        0..3,
    )
    .prop_map(|kv| {
        let mut m = Map::new();
        for (k, v) in kv {
            m.insert(k.as_str(), v);
        }
        m
    })
}

/// A tensor record waiting for its statistics under pending id `id`.
fn placeholder(id: u64) -> Value {
    Value::Object(
        Map::new()
            .with("type", "torch.Tensor")
            .with("Max", Value::Null)
            .with("Min", Value::Null)
            .with("Mean", Value::Null)
            .with("Norm", Value::Null)
            .with(PENDING_KEY, Value::Int(id as i64)),
    )
}

#[derive(Clone, Debug)]
enum Op {
    Entry(u8, Map, bool),
    Pending(u8, bool),
    Fill,
    Remove(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..6, body(), any::<bool>()).prop_map(|(n, b, r)| Op::Entry(n, b, r)),
        2 => (0u8..6, any::<bool>()).prop_map(|(n, r)| Op::Pending(n, r)),
        1 => Just(Op::Fill),
        1 => (0u8..6).prop_map(Op::Remove),
    ]
}

fn name(n: u8) -> String {
    format!("Torch.add.{n}.forward")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// dump.json from rendered bodies equals the JSON writer's text of the same data; the
    /// bodies read back equal what was recorded.
    #[test]
    fn rendered_dump_equals_the_written_values(ops in prop::collection::vec(op(), 0..24)) {
        let mut s = DumpState::new();
        let mut next_id = 0u64;
        let mut open = Vec::new();
        for op in ops {
            let rec = match op {
                Op::Entry(n, body, reinsert) => Record::Entry { name: name(n), body, reinsert },
                Op::Pending(n, reinsert) => {
                    let id = next_id;
                    next_id += 1;
                    open.push(id);
                    Record::PendingEntry {
                        name: name(n),
                        body: Map::new().with("output", Value::Array(vec![placeholder(id)])),
                        reinsert,
                        pending: vec![id],
                    }
                }
                Op::Fill => {
                    let Some(id) = open.pop() else { continue };
                    Record::Fill(vec![Fill {
                        id,
                        stats: [Value::Float(1.5), Value::Float(-0.0), Value::Int(2), Value::Null],
                    }])
                }
                Op::Remove(n) => Record::Remove { name: name(n) },
            };
            s.apply(&rec);
            let files = s.render_files();
            let want = json::to_python_bytes(&s.dump_value());
            prop_assert_eq!(String::from_utf8_lossy(&files[0].1), String::from_utf8_lossy(&want));
        }
        for (n, body) in s.data().iter() {
            let mut got = Value::Object(s.entry(n.as_str().unwrap()).unwrap());
            // Bodies read back keep the markers of statistics still to come; data() has not.
            strip(&mut got);
            prop_assert_eq!(&got, body);
        }
    }

    /// A rendered body read back as values (what a body holding placeholders is kept as)
    /// equals the values it was rendered from, placeholders included.
    #[test]
    fn rendered_body_reads_back_as_its_values(body in body(), id in 0u64..1 << 40) {
        let mut body = body;
        body.insert("output", Value::Array(vec![placeholder(id), Value::Null]));
        prop_assert_eq!(render_body(body.clone()).to_map(), body);
    }

    /// An entry journaled from its rendered body decodes to the record of its values.
    #[test]
    fn rendered_entry_payload_decodes_to_the_record(body in body(), reinsert in any::<bool>()) {
        let payload = journal::entry_payload("Tensor.mul.\u{e9}\"0.forward", render_body(body.clone()).iter(), reinsert);
        let want = Record::Entry { name: "Tensor.mul.\u{e9}\"0.forward".into(), body, reinsert };
        prop_assert_eq!(Record::decode(&payload), Some(want));
    }

    /// Entries journaled from their rendered bodies, each with or without its stack
    /// reference in the same write, read back as the records of their values, in order.
    #[test]
    fn journaled_rendered_entries_read_back_as_their_records(
        entries in prop::collection::vec((body(), any::<bool>(), prop::option::of(0usize..1 << 20)), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(journal::FILE_NAME);
        let mut w = journal::JournalWriter::create(&path).unwrap();
        let mut want = Vec::new();
        for (i, (body, reinsert, group)) in entries.into_iter().enumerate() {
            let name = format!("Tensor.mul.\u{e9}\"{i}.forward");
            w.append_entry(&name, render_body(body.clone()).iter(), reinsert, group).unwrap();
            want.push(Record::Entry { name: name.clone(), body, reinsert });
            if let Some(group) = group {
                want.push(Record::StackRef { name, group });
            }
        }
        drop(w);
        let got = journal::read(&path).unwrap();
        prop_assert_eq!(got.unread_frames(), 0);
        prop_assert_eq!(got.records, want);
    }
}

/// Frame lists as call stacks give them: source lines with quotes, backslashes, control
/// characters and non-ASCII text, and the empty list of a stack with no script frame.
fn frame_lists() -> impl Strategy<Value = Vec<Vec<String>>> {
    prop::collection::vec(
        prop::collection::vec("[a-z ,.\"\\\n\t\u{1}é😀]{0,40}", 0..4),
        1..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// stack.json from frames rendered once equals the JSON writer's text of its value; a
    /// stack journaled from rendered frames decodes to the record of its lines.
    #[test]
    fn rendered_stack_equals_the_written_value(
        lists in frame_lists(),
        ops in prop::collection::vec((0usize..8, 0usize..5, any::<bool>()), 0..16),
    ) {
        let mut s = DumpState::new();
        for (i, (n, which, by_ref)) in ops.into_iter().enumerate() {
            let frames = lists[which % lists.len()].clone();
            let name = format!("Functional.f{n}.{i}.forward");
            let rec = match s.stack_group_of(&frames) {
                Some(group) if by_ref => Record::StackRef { name, group },
                _ => Record::Stack { name, frames },
            };
            s.apply(&rec);
            let files = s.render_files();
            let want = json::to_python_bytes(&s.stack_value());
            prop_assert_eq!(files[1].0, "stack.json");
            prop_assert_eq!(String::from_utf8_lossy(&files[1].1), String::from_utf8_lossy(&want));
        }
        for frames in &lists {
            let name = "Tensor.add.\u{e9}\"0.forward";
            let payload = journal::stack_payload(name, &capture::Frames::new(frames.clone()));
            let want = Record::Stack { name: name.into(), frames: frames.clone() };
            // One journal form, whichever way the record is written.
            prop_assert_eq!(&want.encode(), &payload);
            prop_assert_eq!(Record::decode(&payload), Some(want));
            let payload = journal::stack_ref_payload(name, frames.len() * 1000);
            let want = Record::StackRef { name: name.into(), group: frames.len() * 1000 };
            prop_assert_eq!(&want.encode(), &payload);
            prop_assert_eq!(Record::decode(&payload), Some(want));
        }
    }
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove(PENDING_KEY);
            m.iter_mut().for_each(|(_, x)| strip(x));
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}
