//! The typed model: building a dump entry by entry gives msprobe's bytes, and the record views
//! see what msprobe wrote.

use std::path::{Path, PathBuf};

use dumpfmt::DType;
use dumpfmt::dump::{self, Checksum, DumpFile, Record, Stat};
use dumpfmt::json::{self, Map, Value};
use dumpfmt::names::{Category, EntryName, Framework};

use testsupport::testdata;

fn h200(s: &str) -> PathBuf {
    testdata()
        .join("fixtures/msprobe-26.2.0-torch-h200")
        .join(s)
}

#[test]
fn rebuilding_a_dump_entry_by_entry_gives_msprobes_bytes() {
    for f in [
        "l1_statistics/dump_path/step0/proc503/dump.json",
        "l1_tensor/dump_path/step0/proc505/dump.json",
        "l0_statistics_md5/dump_path/step1/proc513/dump.json",
        "debug_save/dump_path/step0/proc516/debug.json",
    ] {
        let path = h200(f);
        let orig = DumpFile::open(&path).unwrap();
        let mut d = DumpFile::new(
            &path,
            orig.task(),
            orig.level().unwrap(),
            orig.framework(),
            orig.dump_data_dir(),
        );
        for e in orig.entries() {
            d.insert_entry(e.name, e.value.clone()).unwrap();
        }
        assert_eq!(d.to_bytes(), std::fs::read(&path).unwrap(), "{f}");
    }
}

#[test]
fn insert_replace_remove() {
    let mut d = DumpFile::new("x/dump.json", "statistics", "mix", Framework::PyTorch, None);
    let body = || dump::backward_body(vec![Value::Null], vec![]);
    for n in ["A.a.0.backward", "B.b.0.backward", "C.c.0.backward"] {
        d.insert_entry(n, body()).unwrap();
    }
    // Replacing keeps the position; remove + insert moves to the end (msprobe's module re-insert).
    d.insert_entry("A.a.0.backward", dump::backward_body(vec![], vec![]))
        .unwrap();
    let removed = d.remove_entry("B.b.0.backward").unwrap();
    d.insert_entry("B.b.0.backward", removed).unwrap();
    let names: Vec<_> = d.entries().map(|e| e.name.to_string()).collect();
    assert_eq!(
        names,
        ["A.a.0.backward", "C.c.0.backward", "B.b.0.backward"]
    );
    assert_eq!(
        d.entry("A.a.0.backward")
            .unwrap()
            .grad_input()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(d.entries_by_name().len(), 3);
    assert_eq!(d.tensor_dir(), Path::new("x/dump_tensor_data"));
    // Bad entries are refused with their path.
    let bad = Value::Object(Map::new().with("output", Value::from(1i64)));
    let e = d.insert_entry("Torch.x.0.forward", bad).unwrap_err();
    assert!(
        e.to_string()
            .contains(r#"$.data["Torch.x.0.forward"].output"#),
        "{e}"
    );
}

#[test]
fn records_of_every_kind_in_l1_statistics() {
    let d = DumpFile::open(&h200("l1_statistics/dump_path/step0/proc503/dump.json")).unwrap();
    assert_eq!(
        (d.task(), d.level(), d.framework()),
        ("statistics", Some("L1"), Framework::PyTorch)
    );
    assert_eq!(d.dump_data_dir(), None);
    let mut scalar_types = std::collections::BTreeSet::new();
    let (mut nulls, mut empties) = (0, 0);
    fn walk<'a>(v: &'a Value, f: &Path, out: &mut Vec<Record<'a>>) {
        let r = Record::from_value(v, f, "$").unwrap();
        match &r {
            Record::List(a) => a.iter().for_each(|x| walk(x, f, out)),
            Record::Dict(m) => m.values().for_each(|x| walk(x, f, out)),
            _ => {}
        }
        out.push(r);
    }
    for e in d.entries() {
        let mut recs = Vec::new();
        for s in e.sections() {
            walk(s.value, d.path(), &mut recs);
        }
        for r in recs {
            match r {
                Record::Scalar { type_name, .. } => {
                    scalar_types.insert(type_name.to_string());
                }
                Record::Null => nulls += 1,
                Record::Empty => empties += 1,
                _ => {}
            }
        }
    }
    for t in [
        "int",
        "float",
        "bool",
        "str",
        "slice",
        "ellipsis",
        "torch.Size",
        "torch.dtype",
        "torch.device",
        "float32",
    ] {
        assert!(
            scalar_types.contains(t),
            "{t} missing from {scalar_types:?}"
        );
    }
    assert!(nulls > 0 && empties > 0);

    // Typed fields of known records (spec §2.6.1 examples).
    let abs = d.entry("Torch.abs.0.forward").unwrap();
    assert_eq!(abs.kind(), EntryName::parse("Torch.abs.0.forward"));
    let t = &abs.tensors()[0];
    assert_eq!(
        t.json_path,
        r#"$.data["Torch.abs.0.forward"].input_args[0]"#
    );
    assert_eq!(
        (t.category, t.data_path.clone()),
        (Category::Input, vec!["0".to_string()])
    );
    let r = &t.record;
    assert_eq!((r.dtype(), r.shape.clone()), (Some(DType::F32), vec![2, 3]));
    assert_eq!(r.max, Some(Stat::Float(3.0)));
    assert_eq!(r.mean, Some(Stat::Float(0.3749999701976776)));
    assert_eq!(r.requires_grad, Some(true));
    // Integer and bool statistics keep their JSON types; NaN survives.
    let all: Vec<_> = d
        .entries()
        .flat_map(|e| e.tensors())
        .map(|t| t.record)
        .collect();
    assert!(
        all.iter()
            .any(|r| r.dtype == "torch.int64" && matches!(r.max, Some(Stat::Int(40))))
    );
    assert!(
        all.iter()
            .any(|r| r.dtype == "torch.bool" && matches!(r.max, Some(Stat::Bool(true))))
    );
    assert!(
        all.iter()
            .any(|r| matches!(r.max, Some(Stat::Float(f)) if f.is_nan()))
    );
    assert!(
        all.iter()
            .any(|r| r.shape == [0, 3] && r.max == Some(Stat::Null))
    );
}

#[test]
fn checksums() {
    let md5 = DumpFile::open(&h200("l1_md5/dump_path/step0/proc502/dump.json")).unwrap();
    let r = &md5.entry("Torch.abs.0.forward").unwrap().tensors()[0].record;
    // spec §3.5 test vector.
    assert_eq!(r.md5, Some(Checksum::Crc32(0x7bb36c01)));
    let xor = DumpFile::open(&h200("l1_xor/dump_path/step0/proc508/dump.json")).unwrap();
    let all: Vec<_> = xor
        .entries()
        .flat_map(|e| e.tensors())
        .map(|t| t.record)
        .collect();
    assert!(
        all.iter()
            .any(|r| r.md5 == Some(Checksum::Xor(0x4345555741cccccd)))
    );
    assert!(all.iter().any(|r| r.md5 == Some(Checksum::XorFloat(2.5))));
    assert!(all.iter().any(|r| r.md5 == Some(Checksum::Null)));
    assert!(all.iter().all(|r| r.max.is_none()));
}

#[test]
fn module_parameters_and_gradients() {
    let d = DumpFile::open(&h200("l0_statistics_md5/dump_path/step0/proc513/dump.json")).unwrap();
    let fwd = d.entry("Module.block.fc1.Linear.forward.0").unwrap();
    assert_eq!(fwd.parameters().unwrap().len(), 2);
    let params: Vec<_> = fwd
        .tensors()
        .into_iter()
        .filter(|t| t.category == Category::Parameters)
        .collect();
    assert_eq!(params[0].data_path, ["weight"]);
    assert_eq!(
        fwd.expected_data_name(&params[0], "pt"),
        "Module.block.fc1.Linear.forward.0.parameters.weight.pt"
    );
    let g = d
        .entry("Module.block.fc1.Linear.parameters_grad.0")
        .unwrap();
    let t = g.tensors();
    assert_eq!(t.len(), 2);
    assert_eq!(
        t[0].json_path,
        r#"$.data["Module.block.fc1.Linear.parameters_grad.0"].bias[0]"#
    );
    assert_eq!(
        g.expected_data_name(&t[0], "pt"),
        "Module.block.fc1.Linear.parameters_grad.0.bias.pt"
    );
}

#[test]
fn record_builders() {
    assert_eq!(
        json::to_python_bytes(&dump::slice_record(Some(0), Some(1), None)),
        b"{\n \"type\": \"slice\",\n \"value\": [\n  0,\n  1,\n  null\n ]\n}"
    );
    assert_eq!(
        dump::ellipsis_record().get("value").and_then(Value::as_str),
        Some("...")
    );
    assert_eq!(
        dump::size_record(&[2, 3])
            .get("type")
            .and_then(Value::as_str),
        Some("torch.Size")
    );
    let pg = dump::process_group_record(&[0, 1, 2, 3]);
    // format(zlib.crc32(b"[0, 1, 2, 3]"), "08x")
    assert_eq!(
        pg.get("group_id").and_then(Value::as_str).unwrap(),
        format!("{:08x}", crc32_of(b"[0, 1, 2, 3]"))
    );
}

fn crc32_of(b: &[u8]) -> u32 {
    // Bitwise reference CRC-32 (zlib), independent of the crate's helper.
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn construct_forms() {
    let f = Path::new("c.json");
    let v = json::parse(
        br#"{"Module.a.A.forward.0": ["Module.b.B.forward.0", 2], "Module.b.B.forward.0": [null, 2], "Torch.x.0.forward": "", "optimizer": null, "megatron_micro_step_number": 4}"#,
        f,
    )
    .unwrap();
    let c = dumpfmt::construct::ConstructFile::from_value(&v, f).unwrap();
    assert_eq!(c.megatron_micro_step_number, Some(4));
    assert_eq!(c.nodes.len(), 4);
    assert_eq!(
        c.parent_of("Module.a.A.forward.0"),
        Some("Module.b.B.forward.0")
    );
    assert_eq!(c.nodes[0].micro_step, Some(2));
    assert_eq!(c.parent_of("Torch.x.0.forward"), None);
    let bad = json::parse(br#"{"a": 3}"#, f).unwrap();
    let e = dumpfmt::construct::ConstructFile::from_value(&bad, f).unwrap_err();
    assert!(e.to_string().contains("$.a"), "{e}");
}

#[test]
fn stack_layouts_convert() {
    use dumpfmt::stack::{StackFile, StackFormat, frame_text};
    let f = Path::new("s.json");
    let frame = frame_text("/home/u/train.py", 105, "api_ops", "  r1 = torch.abs(x)\n");
    assert_eq!(
        frame,
        "File /home/u/train.py, line 105, in api_ops, \n r1 = torch.abs(x)"
    );
    let v = json::parse(
        format!(
            r#"{{"0": [["A.a.0.forward", "B.b.0.forward"], [{}]]}}"#,
            String::from_utf8(json::to_python_bytes(&Value::from(frame.as_str()))).unwrap()
        )
        .as_bytes(),
        f,
    )
    .unwrap();
    let s = StackFile::from_value(&v, f).unwrap();
    assert_eq!(
        s.names().collect::<Vec<_>>(),
        ["A.a.0.forward", "B.b.0.forward"]
    );
    let old = s.to_value(StackFormat::PerName);
    let back = StackFile::from_value(&old, f).unwrap();
    assert_eq!(back.format, StackFormat::PerName);
    assert_eq!(back.frames_of("B.b.0.forward").unwrap(), [frame]);
    let e = StackFile::from_value(&json::parse(br#"{"0": [["a"]]}"#, f).unwrap(), f).unwrap_err();
    assert!(e.to_string().contains("$[\"0\"]"), "{e}");
}
