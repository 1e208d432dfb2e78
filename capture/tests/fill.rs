//! Device statistics in the journal: placeholder records (`Record::PendingEntry`), their
//! later `Record::Fill`, fills that never came, recovery, and old journals.

use std::path::Path;

use capture::journal::{self, Fill, JournalWriter, Meta, Record};
use capture::state::PENDING_KEY;
use capture::stats::{TensorInfo, pending_record};
use capture::{DumpState, Session};
use dumpfmt::dump::{Checksum, Stat, TensorRecord};
use dumpfmt::json::{self, Map, Value};
use stats_gpu::summary::{Flavour, Options, Precision, SummaryMode};

fn meta() -> Meta {
    Meta {
        task: "statistics".into(),
        level: "L1".into(),
        framework: "pytorch".into(),
        dump_data_dir: None,
        extra_info: true,
    }
}

/// A tensor record as the adapter builds it, statistics filled in.
fn tensor(dtype: &str, shape: &[u64], stats: [Stat; 4]) -> Value {
    let mut r = TensorRecord::new("torch.Tensor", dtype, shape.to_vec());
    r.max = Some(stats[0]);
    r.min = Some(stats[1]);
    r.mean = Some(stats[2]);
    r.norm = Some(stats[3]);
    r.requires_grad = Some(true);
    r.to_value()
}

/// The placeholder the adapter journals for a tensor whose statistics come later under `id`.
fn placeholder(dtype: &str, shape: &[u64], id: u64) -> Value {
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let info = TensorInfo {
        type_name: "torch.Tensor",
        dtype,
        shape: &shape,
        bytes: None,
        requires_grad: Some(true),
        data_name: None,
        torch_threads: None,
        torch_mean_norm: None,
        on_torch_threads: None,
    };
    let opts = Options {
        mode: SummaryMode::Statistics,
        precision: Precision::Low,
        flavour: Flavour::PyTorch,
        ..Options::default()
    };
    pending_record(&info, &opts, id).unwrap()
}

const NULLS: [Stat; 4] = [Stat::Null; 4];

fn f32_stats() -> [Stat; 4] {
    [
        Stat::Float(3.0),
        Stat::Float(-2.25),
        Stat::Float(0.3749999701976776),
        Stat::Float(4.056168079376221),
    ]
}

fn fill(id: u64, s: [Stat; 4]) -> Fill {
    Fill {
        id,
        stats: s.map(|x| x.to_value()),
    }
}

fn pending_entry(name: &str, key: &str, records: Vec<Value>, ids: Vec<u64>) -> Record {
    Record::PendingEntry {
        name: name.into(),
        body: Map::new().with(key, Value::Array(records)),
        reinsert: false,
        pending: ids,
    }
}

/// Every object key anywhere below `v`.
fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, x)| *k == *key || has_key(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key(x, key)),
        _ => false,
    }
}

fn dump_bytes(s: &DumpState) -> Vec<u8> {
    json::to_python_bytes(&s.dump_value())
}

#[test]
fn pending_entries_and_fills_round_trip() {
    let recs = [
        pending_entry(
            "Torch.abs.0.forward",
            "input_args",
            vec![placeholder("torch.float32", &[2, 3], 7)],
            vec![7],
        ),
        Record::Fill(vec![
            fill(7, f32_stats()),
            fill(
                8,
                [
                    Stat::Float(f64::NAN),
                    Stat::Float(f64::NEG_INFINITY),
                    Stat::Float(f64::INFINITY),
                    Stat::Float(-0.0),
                ],
            ),
            fill(9, [Stat::Int(40), Stat::Int(-20), Stat::Null, Stat::Null]),
            fill(
                10,
                [Stat::Bool(true), Stat::Bool(false), Stat::Null, Stat::Null],
            ),
            fill(
                11,
                [
                    Stat::Int(u64::MAX as i128),
                    Stat::Int(0),
                    Stat::Null,
                    Stat::Null,
                ],
            ),
        ]),
        Record::Fill(vec![]),
    ];
    for r in recs {
        let back = Record::decode(&r.encode()).expect("decodes");
        // NaN != NaN: compare the encodings instead.
        assert_eq!(back.encode(), r.encode());
        if let (Record::Fill(a), Record::Fill(b)) = (&back, &r) {
            assert_eq!(a.len(), b.len());
            assert!(a.iter().zip(b).all(|(x, y)| x.id == y.id));
        }
    }
}

#[test]
fn malformed_fill_payloads_are_not_records() {
    // A statistic that is not a scalar, a short row, a negative id.
    for text in [
        r#"[[1, {"a": 1}, 2, 3, 4]]"#,
        r#"[[1, 2, 3, 4]]"#,
        r#"[[-1, 1, 2, 3, 4]]"#,
        r#"{"1": [1, 2, 3, 4]}"#,
    ] {
        let mut payload = vec![9u8];
        payload.extend_from_slice(text.as_bytes());
        assert!(Record::decode(&payload).is_none(), "{text}");
    }
    let mut payload = vec![8u8];
    payload.extend_from_slice(br#"["A.0.forward", {}, false, [-3]]"#);
    assert!(Record::decode(&payload).is_none());
}

/// Journals written before kinds 8 and 9 existed: these payload texts are exactly what the
/// earlier writer produced, and must replay as before.
#[test]
fn old_journals_replay_unchanged() {
    let payloads: [(u8, &str); 4] = [
        (
            1,
            r#"{"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "extra_info": true}"#,
        ),
        (
            2,
            r#"["Torch.abs.0.forward", {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": -1.0, "Mean": 0.0, "Norm": 1.4142135381698608, "requires_grad": false}]}, false]"#,
        ),
        (
            4,
            r#"["Torch.abs.0.forward", ["File a.py, line 1, in f, \n x"]]"#,
        ),
        (6, "null"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let rank = dir.path().join("proc1");
    std::fs::create_dir_all(&rank).unwrap();
    let mut bytes = journal::MAGIC.to_vec();
    for (kind, text) in payloads {
        let mut p = vec![kind];
        p.extend_from_slice(text.as_bytes());
        bytes.extend_from_slice(&(p.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&p).to_le_bytes());
        bytes.extend_from_slice(&p);
    }
    std::fs::write(rank.join(journal::FILE_NAME), &bytes).unwrap();
    let rec = capture::recover(dir.path()).unwrap();
    assert_eq!(rec[0].records, 4);
    assert_eq!(rec[0].entries, 1);
    assert_eq!(rec[0].unfilled, 0);
    let text = std::fs::read_to_string(rank.join("dump.json")).unwrap();
    assert!(text.contains("\"Norm\": 1.4142135381698608"), "{text}");
}

#[test]
fn fills_patch_placeholders_in_msprobe_key_order() {
    let mut s = DumpState::new();
    s.apply(&Record::Meta(meta()));
    s.apply(&pending_entry(
        "Torch.abs.0.forward",
        "input_args",
        vec![
            placeholder("torch.float32", &[2, 3], 0),
            Value::Object(Map::new().with("type", "int").with("value", 3)),
        ],
        vec![0],
    ));
    // The output arrives later, merged into the same entry, with a second placeholder.
    s.apply(&pending_entry(
        "Torch.abs.0.forward",
        "output",
        vec![placeholder("torch.int64", &[2, 2], 1)],
        vec![1],
    ));
    assert_eq!(s.pending_len(), 2);
    s.apply(&Record::Fill(vec![
        fill(1, [Stat::Int(40), Stat::Int(-20), Stat::Null, Stat::Null]),
        fill(0, f32_stats()),
    ]));
    assert_eq!(s.pending_len(), 0);
    assert_eq!(s.unfilled_records(), 0);

    // The same dump written straight from finished records (the host path).
    let mut want = DumpState::new();
    want.apply(&Record::Meta(meta()));
    want.apply(&Record::Entry {
        name: "Torch.abs.0.forward".into(),
        body: Map::new().with(
            "input_args",
            Value::Array(vec![
                tensor("torch.float32", &[2, 3], f32_stats()),
                Value::Object(Map::new().with("type", "int").with("value", 3)),
            ]),
        ),
        reinsert: false,
    });
    want.apply(&Record::Entry {
        name: "Torch.abs.0.forward".into(),
        body: Map::new().with(
            "output",
            Value::Array(vec![tensor(
                "torch.int64",
                &[2, 2],
                [Stat::Int(40), Stat::Int(-20), Stat::Null, Stat::Null],
            )]),
        ),
        reinsert: false,
    });
    assert_eq!(dump_bytes(&s), dump_bytes(&want));
    assert!(!has_key(&s.dump_value(), PENDING_KEY));
}

#[test]
fn missing_fills_write_null_statistics_and_later_fills_still_apply() {
    let dir = tempfile::tempdir().unwrap();
    let rank = dir.path().join("proc1");
    let mut s = Session::create(&rank, meta()).unwrap();
    s.record(pending_entry(
        "Torch.add.0.forward",
        "input_args",
        vec![
            placeholder("torch.float32", &[2, 3], 0),
            placeholder("torch.bool", &[4], 1),
        ],
        vec![0, 1],
    ))
    .unwrap();
    s.fill(vec![fill(0, f32_stats())]).unwrap();
    s.write_json().unwrap();
    let v = json::parse_file(&rank.join("dump.json")).unwrap();
    assert!(!has_key(&v, PENDING_KEY));
    let args = v
        .get("data")
        .and_then(|d| d.get("Torch.add.0.forward"))
        .and_then(|e| e.get("input_args"))
        .and_then(Value::as_array)
        .unwrap()
        .to_vec();
    assert_eq!(args[0], tensor("torch.float32", &[2, 3], f32_stats()));
    // Not filled yet: every key present, statistics null.
    assert_eq!(args[1], tensor("torch.bool", &[4], NULLS));
    // dumpfmt reads it as a valid dump.
    dumpfmt::dump::DumpFile::open(&rank.join("dump.json")).unwrap();

    // Writing did not drop the placeholder: the late fill still lands.
    assert_eq!(s.state().pending_len(), 1);
    assert_eq!(s.state().unfilled_records(), 1);
    assert!(has_key(
        &Value::Object(s.state().entry("Torch.add.0.forward").unwrap()),
        PENDING_KEY
    ));
    // The in-memory copy of the data reads as the file does.
    assert!(!has_key(&Value::Object(s.state().data()), PENDING_KEY));
    assert_eq!(
        json::to_python_bytes(&s.state().dump_value()),
        std::fs::read(rank.join("dump.json")).unwrap()
    );
    let bool_stats = [Stat::Bool(true), Stat::Bool(false), Stat::Null, Stat::Null];
    s.fill(vec![fill(1, bool_stats)]).unwrap();
    s.write_json().unwrap();
    let v = json::parse_file(&rank.join("dump.json")).unwrap();
    let rec = &v
        .get("data")
        .and_then(|d| d.get("Torch.add.0.forward"))
        .and_then(|e| e.get("input_args"))
        .and_then(Value::as_array)
        .unwrap()[1];
    assert_eq!(*rec, tensor("torch.bool", &[4], bool_stats));
}

/// A run killed between its hooks and the readback: recovery applies every fill that reached
/// the journal and writes the rest with null statistics.
#[test]
fn recovery_applies_fills_that_arrived_and_nulls_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let rank = dir.path().join("step0").join("proc1");
    let mut s = Session::create(&rank, meta()).unwrap();
    let names: Vec<String> = (0..6).map(|i| format!("Torch.mul.{i}.forward")).collect();
    for (i, n) in names.iter().enumerate() {
        let id = i as u64;
        s.record(pending_entry(
            n,
            "output",
            vec![placeholder("torch.float32", &[2, 3], id)],
            vec![id],
        ))
        .unwrap();
        if i == 3 {
            // The bound was passed here: the first four were read back.
            s.fill((0..4).map(|j| fill(j, f32_stats())).collect())
                .unwrap();
        }
    }
    // Killed: no readback for the last two, no JSON written.
    drop(s);
    let rec = capture::recover(dir.path()).unwrap();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].entries, 6);
    assert_eq!(rec[0].unfilled, 2);
    let v = json::parse_file(&rank.join("dump.json")).unwrap();
    assert!(!has_key(&v, PENDING_KEY));
    let data = v.get("data").and_then(Value::as_object).unwrap();
    let got: Vec<&str> = data.keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>());
    for (i, n) in names.iter().enumerate() {
        let out = &data.get(n).and_then(|e| e.get("output")).unwrap();
        let want = if i < 4 { f32_stats() } else { NULLS };
        assert_eq!(
            **out,
            Value::Array(vec![tensor("torch.float32", &[2, 3], want)]),
            "{n}"
        );
    }
    dumpfmt::dump::DumpFile::open(&rank.join("dump.json")).unwrap();
}

#[test]
fn fills_of_removed_or_overwritten_records_are_dropped() {
    let mut s = DumpState::new();
    s.apply(&pending_entry(
        "Module.fc.Linear.parameters_grad.0",
        "weight",
        vec![placeholder("torch.float32", &[2], 0)],
        vec![0],
    ));
    s.apply(&Record::Remove {
        name: "Module.fc.Linear.parameters_grad.0".into(),
    });
    s.apply(&pending_entry(
        "Torch.abs.0.forward",
        "output",
        vec![placeholder("torch.float32", &[2], 1)],
        vec![1],
    ));
    // The key is overwritten by a finished record before the fill comes.
    s.apply(&Record::Entry {
        name: "Torch.abs.0.forward".into(),
        body: Map::new().with(
            "output",
            Value::Array(vec![tensor("torch.float32", &[2], f32_stats())]),
        ),
        reinsert: false,
    });
    s.apply(&Record::Fill(vec![
        fill(0, f32_stats()),
        fill(1, NULLS),
        fill(99, f32_stats()),
    ]));
    assert_eq!(s.pending_len(), 0);
    assert_eq!(s.data_len(), 1);
    let body = s.entry("Torch.abs.0.forward").unwrap();
    let out = body.get("output").unwrap();
    assert_eq!(
        *out,
        Value::Array(vec![tensor("torch.float32", &[2], f32_stats())])
    );
}

/// The CRC-32 of md5 mode is computed on the host at hook time and sits after the
/// statistics: a fill keeps it last.
#[test]
fn fill_keeps_md5_last() {
    let mut r = TensorRecord::new("torch.Tensor", "torch.float32", vec![2, 3]);
    r.max = Some(Stat::Null);
    r.min = Some(Stat::Null);
    r.mean = Some(Stat::Null);
    r.norm = Some(Stat::Null);
    r.requires_grad = Some(false);
    r.md5 = Some(Checksum::Crc32(0x7bb3_6c01));
    let mut placeholder = r.to_value();
    if let Value::Object(m) = &mut placeholder {
        m.insert(PENDING_KEY, Value::Int(5));
    }
    let mut s = DumpState::new();
    s.apply(&Record::PendingEntry {
        name: "Torch.abs.0.forward".into(),
        body: Map::new().with("input_args", Value::Array(vec![placeholder])),
        reinsert: false,
        pending: vec![5],
    });
    s.apply(&Record::Fill(vec![fill(5, f32_stats())]));
    let [max, min, mean, norm] = f32_stats();
    r.max = Some(max);
    r.min = Some(min);
    r.mean = Some(mean);
    r.norm = Some(norm);
    let body = s.entry("Torch.abs.0.forward").unwrap();
    let args = body.get("input_args").unwrap();
    assert_eq!(
        json::to_python_bytes(args),
        json::to_python_bytes(&Value::Array(vec![r.to_value()]))
    );
    let keys: Vec<String> = args.as_array().unwrap()[0]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(keys.last().map(String::as_str), Some("md5"));
}

#[test]
fn writer_and_reader_agree_on_pending_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let recs = vec![
        Record::Meta(meta()),
        pending_entry(
            "Torch.abs.0.forward",
            "output",
            vec![placeholder("torch.float16", &[3], 0)],
            vec![0],
        ),
        Record::Fill(vec![fill(
            0,
            [
                Stat::Float(1.0),
                Stat::Float(-1.0),
                Stat::Float(0.33325195),
                Stat::Float(1.4140625),
            ],
        )]),
    ];
    let mut w = JournalWriter::create(&path).unwrap();
    for r in &recs {
        w.append(r).unwrap();
    }
    drop(w);
    let rp = journal::read(&path).unwrap();
    assert_eq!(rp.records, recs);
    assert_eq!(rp.ignored_tail, 0);
    assert!(Path::new(&path).exists());
}

/// One placeholder in two entries (the statistics thread's record of a tensor reused before its
/// statistics came): one fill completes both, and a fill journaled again after a later entry
/// reuses the placeholder completes that one too.
#[test]
fn one_fill_completes_every_entry_holding_its_placeholder() {
    let mut s = DumpState::new();
    s.apply(&Record::Meta(meta()));
    let p = placeholder("torch.float32", &[4096], 3);
    s.apply(&pending_entry(
        "Tensor.add_.0.forward",
        "output",
        vec![p.clone()],
        vec![3],
    ));
    s.apply(&pending_entry(
        "Tensor.add_.1.forward",
        "input_args",
        vec![p.clone()],
        vec![3],
    ));
    assert_eq!(s.pending_len(), 1);
    s.apply(&Record::Fill(vec![fill(3, f32_stats())]));
    let want = tensor("torch.float32", &[4096], f32_stats());
    for (name, key) in [
        ("Tensor.add_.0.forward", "output"),
        ("Tensor.add_.1.forward", "input_args"),
    ] {
        assert_eq!(
            s.entry(name).unwrap().get(key),
            Some(&Value::Array(vec![want.clone()])),
            "{name}"
        );
    }
    assert_eq!(s.pending_len(), 0);
    s.apply(&pending_entry(
        "Tensor.mul_.0.forward",
        "input_args",
        vec![p],
        vec![3],
    ));
    assert_eq!(s.unfilled_records(), 1);
    s.apply(&Record::Fill(vec![fill(3, f32_stats())]));
    assert_eq!(
        s.entry("Tensor.mul_.0.forward").unwrap().get("input_args"),
        Some(&Value::Array(vec![want]))
    );
    assert_eq!(s.unfilled_records(), 0);
    assert!(!has_key(&s.dump_value(), PENDING_KEY));
}
