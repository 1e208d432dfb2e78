//! Generated values and dump files survive write → parse unchanged, and no byte string makes
//! the readers panic.

use std::path::Path;

use dumpfmt::DType;
use dumpfmt::dump::{self, Checksum, DumpFile, Md5Slot, Stat, TensorRecord};
use dumpfmt::json::{self, Map, Str, Value};
use dumpfmt::names::{self, Direction, Framework};
use proptest::prelude::*;

fn any_str() -> impl Strategy<Value = Str> {
    prop_oneof![
        4 => any::<String>().prop_map(Str::from),
        1 => "[a-z\"\\\\\n\t\u{0}-\u{1f}\u{7f}]{0,8}".prop_map(Str::from),
        // Lone surrogates mixed with other code points, as Python strings may hold them.
        1 => prop::collection::vec(prop_oneof![0xd800u32..0xe000, 0x20u32..0x80, 0x10000u32..0x10ffff], 0..6)
            .prop_map(|cps| Str::from_code_points(cps).unwrap()),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        // Integers beyond i64, kept as digits.
        (1u32..9, "[0-9]{19,40}").prop_map(|(d, rest)| Value::BigInt(format!("{d}{rest}").into())),
        (1u32..9, "[0-9]{19,40}").prop_map(|(d, rest)| Value::BigInt(format!("-{d}{rest}").into())),
        any::<f64>().prop_map(Value::Float),
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(5e-324)
        ]
        .prop_map(Value::Float),
        any_str().prop_map(Value::Str),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(8, 128, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any_str(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn values_round_trip(v in value()) {
        let bytes = json::to_python_bytes(&v);
        let back = json::parse(&bytes, Path::new("p.json")).unwrap();
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(json::to_python_bytes(&back), bytes);
    }

    #[test]
    fn deep_nesting_round_trips(depth in 1usize..json::MAX_DEPTH) {
        let mut v = Value::Int(1);
        for i in 0..depth {
            v = if i % 2 == 0 { Value::Array(vec![v]) } else { Value::Object(Map::new().with("k", v)) };
        }
        let bytes = json::to_python_bytes(&v);
        prop_assert_eq!(json::parse(&bytes, Path::new("d.json")).unwrap(), v);
    }

    #[test]
    fn mutated_dump_never_panics(cuts in prop::collection::vec((0usize..4000, any::<u8>()), 1..8)) {
        let mut bytes = br#"{"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "data": {"Torch.abs.0.forward": {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 3.0, "Min": -2.25, "Mean": NaN, "Norm": Infinity, "requires_grad": true, "md5": "7bb36c01"}], "input_kwargs": {"dim": {"type": "int", "value": 1}}, "output": [null, [{}], "\ud800"]}, "Module.a.Linear.parameters_grad.0": {"bias": [{"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [], "md5": "0x0000000000000001"}]}}}"#.to_vec();
        for (at, b) in cuts {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        if let Ok(v) = json::parse(&bytes, Path::new("m.json")) {
            let _ = DumpFile::schema_problems(&v, Path::new("m.json"));
            if let Ok(d) = DumpFile::from_value(v, "m.json") {
                for e in d.entries() {
                    let _ = e.tensors();
                    let _ = e.kind();
                }
            }
        }
    }
}

fn stat() -> impl Strategy<Value = Stat> {
    prop_oneof![
        Just(Stat::Null),
        any::<bool>().prop_map(Stat::Bool),
        any::<i64>().prop_map(|i| Stat::Int(i as i128)),
        any::<u64>().prop_map(|i| Stat::Int(i as i128)),
        any::<f64>().prop_map(Stat::Float),
    ]
}

fn record() -> impl Strategy<Value = TensorRecord> {
    (
        0..DType::ALL.len(),
        prop::collection::vec(0u64..5, 0..4),
        prop::option::of((stat(), stat(), stat(), stat())),
        prop_oneof![
            Just(None),
            any::<u32>().prop_map(|c| Some((Checksum::Crc32(c), Md5Slot::Last))),
            any::<u64>().prop_map(|x| Some((Checksum::Xor(x), Md5Slot::AfterShape))),
            any::<f64>().prop_map(|x| Some((Checksum::XorFloat(x), Md5Slot::AfterShape))),
            Just(Some((Checksum::Null, Md5Slot::AfterShape))),
        ],
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(d, shape, stats, md5, rg, ms)| {
            let dt = DType::ALL[d];
            let (ty, name) = if ms {
                ("mindspore.Tensor", dt.mindspore_name())
            } else {
                ("torch.Tensor", dt.torch_name())
            };
            let mut r = TensorRecord::new(ty, name, shape);
            if let Some((a, b, c, e)) = stats {
                r.max = Some(a);
                r.min = Some(b);
                r.mean = Some(c);
                r.norm = Some(e);
            }
            if let Some((c, slot)) = md5 {
                r.md5 = Some(c);
                r.md5_slot = slot;
            }
            r.requires_grad = if ms { None } else { rg };
            r
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn dump_files_round_trip_through_the_typed_model(
        entries in prop::collection::vec((0u8..4, "[a-z_]{1,8}", 0u64..3, prop::collection::vec(record(), 0..4), any::<bool>()), 0..12)
    ) {
        let mut d = DumpFile::new("/r/step0/rank0/dump.json", "statistics", "mix", Framework::PyTorch, None);
        let mut expected: Vec<(String, Vec<TensorRecord>)> = Vec::new();
        for (kind, api, n, mut recs, with_files) in entries {
            let name = match kind {
                0 => names::api_name("Torch", &api, n, Direction::Forward),
                1 => names::api_name("Tensor", &api, n, Direction::Backward),
                2 => names::module_name("Module", &format!("layers.{n}"), "Linear", Direction::Forward, n),
                _ => names::parameters_grad_name("Module", &api, "Linear", n),
            };
            if expected.iter().any(|(e, _)| *e == name) {
                continue;
            }
            let body = match kind {
                0..=2 => {
                    let first = recs.len() / 2;
                    // Name files the way msprobe does, from the position of each record.
                    let (a, b): (Vec<_>, Vec<_>) = recs.iter_mut().enumerate().partition(|(i, _)| *i < first);
                    let (cat_a, cat_b) = ("input", "output");
                    let vals = |part: Vec<(usize, &mut TensorRecord)>, cat: &str, off: usize| -> Vec<Value> {
                        part.into_iter().map(|(i, r)| {
                            if with_files {
                                r.data_name = Some(format!("{name}.{cat}.{}.pt", i - off));
                            }
                            r.to_value()
                        }).collect()
                    };
                    let a = vals(a, cat_a, 0);
                    let b = vals(b, cat_b, first);
                    match kind {
                        0 => dump::api_forward_body(a, Map::new().with("dim", dump::scalar_record("int", 1i64)), b),
                        1 => dump::backward_body(a, b),
                        _ => dump::module_forward_body(a, Map::new(), b, Map::new()),
                    }
                }
                _ => {
                    let mut m = Map::new();
                    for (i, r) in recs.iter().enumerate() {
                        m.insert(format!("p{i}"), Value::Array(vec![r.to_value()]));
                    }
                    Value::Object(m)
                }
            };
            d.insert_entry(&name, body).unwrap();
            expected.push((name, recs));
        }
        let bytes = d.to_bytes();
        let back = DumpFile::from_value(json::parse(&bytes, d.path()).unwrap(), d.path()).unwrap();
        prop_assert_eq!(back.value(), d.value());
        prop_assert_eq!(back.framework(), Framework::PyTorch);
        let got: Vec<(String, Vec<TensorRecord>)> = back
            .entries()
            .map(|e| (e.name.to_string(), e.tensors().into_iter().map(|t| t.record).collect()))
            .collect();
        prop_assert_eq!(&got, &expected);
        for e in back.entries() {
            for t in e.tensors() {
                if let Some(dn) = &t.record.data_name {
                    prop_assert_eq!(dn, &e.expected_data_name(&t, "pt"));
                }
            }
        }
    }
}

/// A record with every optional part drawn, extra keys included (some repeating a fixed key,
/// which replaces it in place).
fn full_record() -> impl Strategy<Value = TensorRecord> {
    (
        record(),
        any_str(),
        prop::option::of("[a-zA-Z0-9_.\"\u{e9}]{0,12}"),
        prop::collection::vec(
            (
                prop_oneof![
                    Just("layout"),
                    Just("Max"),
                    Just("md5"),
                    Just("device_mesh")
                ],
                leaf(),
            ),
            0..3,
        ),
        prop_oneof![
            Just(Md5Slot::AfterShape),
            Just(Md5Slot::BeforeDataName),
            Just(Md5Slot::Last)
        ],
    )
        .prop_map(|(mut r, ty, data_name, extra, slot)| {
            if r.requires_grad.is_some() {
                r.type_name = ty.as_str().unwrap_or("torch.Tensor").to_owned();
            }
            r.data_name = data_name;
            if r.md5.is_some() && !r.md5.as_ref().is_some_and(Checksum::is_xor) {
                r.md5_slot = slot;
            }
            r.extra = extra.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            r
        })
}

proptest! {
    #[test]
    fn records_written_directly_equal_their_values_written(r in full_record(), level in 0usize..6) {
        let mut direct = b"prefix".to_vec();
        r.write_python_at(level, &mut direct);
        let mut via_value = b"prefix".to_vec();
        json::write_python_at(&r.to_value(), level, &mut via_value);
        prop_assert_eq!(String::from_utf8_lossy(&direct), String::from_utf8_lossy(&via_value));
    }
}
