//! Parsing and writing msprobe's dump.json: MB/s of `json::parse` (from memory and from a
//! memory-mapped file), of `json::write_python`, and of the typed walk over every tensor record;
//! records per second of one tensor record's text (what the capture writes per tensor).
//!
//! The input is a generated dump of realistic entries (~32 MB): API forward/backward entries with
//! tensor records (statistics as Python writes them, NaN/Infinity included), scalar kwargs,
//! module entries with parameters, parameters_grad entries.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dumpfmt::dump::{self, Checksum, DumpFile, Stat, TensorRecord};
use dumpfmt::json::{self, Map, Value};
use dumpfmt::names::{self, Direction, Framework};

/// A small deterministic generator (xorshift) so every run benches the same bytes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f64 {
        // float32-rounded values widened to double, like real statistics.
        ((self.next() % 2_000_000) as f32 / 1000.0 - 1000.0) as f64 / 3.0f32 as f64
    }
}

fn tensor(rng: &mut Rng, name: &str, cat: &str, i: usize) -> Value {
    let mut r = TensorRecord::new(
        "torch.Tensor",
        "torch.float32",
        vec![4, 8, 32 + rng.next() % 64],
    );
    let special = rng.next().is_multiple_of(50);
    r.max = Some(Stat::Float(if special { f64::INFINITY } else { rng.f() }));
    r.min = Some(Stat::Float(rng.f()));
    r.mean = Some(Stat::Float(if special { f64::NAN } else { rng.f() }));
    r.norm = Some(Stat::Float(rng.f().abs()));
    r.requires_grad = Some(rng.next().is_multiple_of(2));
    r.data_name = Some(format!("{name}.{cat}.{i}.pt"));
    r.md5 = Some(Checksum::Crc32(rng.next() as u32));
    r.to_value()
}

/// Appends an entry (names are unique by construction) and adds its approximate file size: the
/// body serialized alone lacks the file's two extra indentation levels, close enough here.
fn push(data: &mut Map, size: &mut usize, name: &str, body: Value) {
    *size += name.len() + json::to_python_bytes(&body).len();
    data.push_unique(name, body);
}

fn generate(target_bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    // Entries go straight into the data map: `DumpFile::insert_entry` would look each name up.
    let mut data = Map::new();
    let apis = [
        "linear",
        "gelu",
        "layer_norm",
        "softmax",
        "matmul",
        "__add__",
        "dropout",
        "scaled_dot_product_attention",
    ];
    let mut n = 0u64;
    let mut size = 0usize;
    while size < target_bytes {
        let api = apis[(n % apis.len() as u64) as usize];
        let idx = n / apis.len() as u64;
        let fwd = names::api_name("Functional", api, idx, Direction::Forward);
        let args = (0..3).map(|i| tensor(&mut rng, &fwd, "input", i)).collect();
        let kwargs = Map::new()
            .with("dim", dump::scalar_record("int", -1i64))
            .with("approximate", dump::scalar_record("str", "tanh"))
            .with("training", dump::scalar_record("bool", true))
            .with("p", dump::scalar_record("float", 0.1));
        let out = vec![tensor(&mut rng, &fwd, "output", 0)];
        push(
            &mut data,
            &mut size,
            &fwd,
            dump::api_forward_body(args, kwargs, out),
        );
        let bwd = names::api_name("Functional", api, idx, Direction::Backward);
        let gi = vec![tensor(&mut rng, &bwd, "input", 0)];
        let go = vec![
            tensor(&mut rng, &bwd, "output", 0),
            Value::Null,
            tensor(&mut rng, &bwd, "output", 2),
        ];
        push(&mut data, &mut size, &bwd, dump::backward_body(gi, go));
        if n % 8 == 7 {
            let m = names::module_name(
                "Module",
                &format!("layers.{idx}.mlp"),
                "Linear",
                Direction::Forward,
                0,
            );
            let params = Map::new()
                .with("weight", tensor(&mut rng, &m, "parameters", 0))
                .with("bias", tensor(&mut rng, &m, "parameters", 1));
            let body = dump::module_forward_body(
                vec![tensor(&mut rng, &m, "input", 0)],
                Map::new(),
                vec![tensor(&mut rng, &m, "output", 0)],
                params,
            );
            push(&mut data, &mut size, &m, body);
            let g =
                names::parameters_grad_name("Module", &format!("layers.{idx}.mlp"), "Linear", 0);
            let body = Map::new()
                .with("bias", vec![tensor(&mut rng, &g, "bias", 0)])
                .with("weight", vec![tensor(&mut rng, &g, "weight", 0)]);
            push(&mut data, &mut size, &g, Value::Object(body));
        }
        n += 1;
    }
    let top = DumpFile::new(
        "bench/dump.json",
        "tensor",
        "mix",
        Framework::PyTorch,
        Some("./dump/step0/rank0/dump_tensor_data"),
    )
    .into_value();
    let mut top = top.as_object().unwrap().clone();
    top.insert("data", Value::Object(data));
    let d = DumpFile::from_value(Value::Object(top), "bench/dump.json").unwrap();
    d.to_bytes()
}

fn bench(c: &mut Criterion) {
    let bytes = generate(32 << 20);
    let file = Path::new("bench/dump.json");
    let value = json::parse(&bytes, file).unwrap();
    assert_eq!(json::to_python_bytes(&value), bytes);
    let tmp = tempfile::tempdir().unwrap();
    let on_disk = tmp.path().join("dump.json");
    std::fs::write(&on_disk, &bytes).unwrap();

    let mut g = c.benchmark_group("dump_json");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("parse", |b| {
        b.iter(|| json::parse(black_box(&bytes), file).unwrap())
    });
    g.bench_function("parse_file_mmap", |b| {
        b.iter(|| json::parse_file(black_box(&on_disk)).unwrap())
    });
    g.bench_function("write_python", |b| {
        let mut out = Vec::with_capacity(bytes.len());
        b.iter(|| {
            out.clear();
            json::write_python(black_box(&value), &mut out);
            out.len()
        })
    });
    let dumpf = DumpFile::from_value(value.clone(), file).unwrap();
    g.bench_function("schema_check", |b| {
        b.iter(|| DumpFile::schema_problems(black_box(&value), file).len())
    });
    g.bench_function("walk_tensor_records", |b| {
        b.iter(|| dumpf.entries().map(|e| e.tensors().len()).sum::<usize>())
    });
    g.finish();
}

/// `TensorRecord::write_python_at` of statistics records as the capture writes them while a
/// step runs (float32 statistics, `requires_grad`, five containers deep), records per second.
fn record_text(c: &mut Criterion) {
    let mut rng = Rng(0x2545f4914f6cdd1d);
    let records: Vec<TensorRecord> = (0..1024)
        .map(|_| {
            let mut r = TensorRecord::new(
                "torch.Tensor",
                "torch.float32",
                vec![2, 8, 16 + rng.next() % 64],
            );
            [r.max, r.min, r.mean, r.norm] = [0; 4].map(|_| Some(Stat::Float(rng.f())));
            r.requires_grad = Some(rng.next().is_multiple_of(2));
            r
        })
        .collect();
    let mut g = c.benchmark_group("record_text");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("statistics_record", |b| {
        let mut out = Vec::with_capacity(512 * records.len());
        b.iter(|| {
            out.clear();
            for r in black_box(&records) {
                r.write_python_at(5, &mut out);
            }
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench, record_text);
criterion_main!(benches);
