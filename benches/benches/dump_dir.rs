//! What an embedder calls to read a dump: `Dump::open` → ranks → tensor entries → `load_tensor`
//! → `Tensor::array::<f32>()`, on a generated dump of 2 steps × 2 ranks × 256 API calls (one
//! 16 KiB float32 input and output each, 2048 `.pt` files) written to a temporary directory with
//! dumpfmt's own writers. Throughput is tensor payload bytes for the load pass.
//!
//! * `open+iterate`: directory walk, dump.json parse and schema check, every tensor record
//!   visited (no tensor file read).
//! * `open+iterate+load`: the same, plus each record's file resolved in `dump_tensor_data/`,
//!   read, viewed as an `ndarray` and summed (so the bytes are really read).
//!
//! Run: `cargo bench -p numprobe-benches --bench dump_dir`.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dumpfmt::dump::{DumpFile, Stat, TensorRecord, api_forward_body};
use dumpfmt::json::Map;
use dumpfmt::names::{Category, Framework, tensor_data_name};
use dumpfmt::{Dump, TensorView, pt};

const CALLS: usize = 256;
const ELEMS: usize = 4096;

fn write_rank(dir: &Path, seed: f32) {
    let data = dir.join("dump_tensor_data");
    std::fs::create_dir_all(&data).unwrap();
    let mut dump = DumpFile::new(
        dir.join("dump.json"),
        "tensor",
        "L1",
        Framework::PyTorch,
        None,
    );
    let values: Vec<f32> = (0..ELEMS).map(|i| (i as f32 * 0.25 + seed).sin()).collect();
    let shape = [64, ELEMS / 64];
    let view = TensorView::from_slice(&shape, &values).unwrap();
    for call in 0..CALLS {
        let entry = format!("Torch.matmul.{call}.forward");
        let record = |category: Category| {
            let name = tensor_data_name(&entry, category, &["0".into()], "pt");
            pt::write(&data.join(&name), view, "cpu").unwrap();
            let mut r = TensorRecord::new("torch.Tensor", "torch.float32", vec![64, 64]);
            r.max = Some(Stat::Float(1.0));
            r.min = Some(Stat::Float(-1.0));
            r.data_name = Some(name);
            r.to_value()
        };
        let body = api_forward_body(
            vec![record(Category::Input)],
            Map::new(),
            vec![record(Category::Output)],
        );
        dump.insert_entry(&entry, body).unwrap();
    }
    dump.write(&dir.join("dump.json")).unwrap();
}

fn iterate(root: &Path) -> usize {
    let dump = Dump::open(root).unwrap();
    let mut n = 0;
    for rank in dump.ranks() {
        n += rank.unwrap().tensors().count();
    }
    n
}

fn iterate_and_load(root: &Path) -> f32 {
    let dump = Dump::open(root).unwrap();
    let mut sum = 0.0;
    for rank in dump.ranks() {
        for t in rank.unwrap().tensors() {
            sum += t.load_tensor().unwrap().array::<f32>().unwrap().sum();
        }
    }
    sum
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for step in 0..2 {
        for rank in 0..2 {
            let seed = (step * 2 + rank) as f32;
            write_rank(&dir.path().join(format!("step{step}/rank{rank}")), seed);
        }
    }
    let files = 2 * 2 * CALLS * 2;
    assert_eq!(iterate(dir.path()), files);

    let mut g = c.benchmark_group("dump_dir");
    g.sample_size(20);
    g.bench_function("open+iterate", |b| {
        b.iter(|| black_box(iterate(black_box(dir.path()))))
    });
    g.throughput(Throughput::Bytes((files * ELEMS * 4) as u64));
    g.bench_function("open+iterate+load", |b| {
        b.iter(|| black_box(iterate_and_load(black_box(dir.path()))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
