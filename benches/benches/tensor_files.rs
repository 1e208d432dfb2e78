//! Reading tensor files: `read_tensor` plus one pass over `bytes()` (a wrapping sum of u64 words,
//! so that a memory-mapped file is really read), for `.pt` and `.npy` files of 4 KiB, 1 MiB and
//! 64 MiB of float32 written to a temporary directory in setup. Throughput is file payload bytes.
//! A strided `.pt` view (gathered into C order) is measured at 1 MiB as well.
//!
//! `tensor_files/ndarray` measures the conversions an embedder makes around those reads, which
//! copy nothing and so cost the same at any size (64 MiB here): a read `Tensor` to an
//! `ndarray::ArrayViewD<f32>` (`Tensor::array`), and an `ndarray` array to a `TensorView` and
//! back (`TensorView::from_array`, `TensorView::to_ndarray`).
//!
//! Run: `cargo bench -p numprobe-benches --bench tensor_files`.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dumpfmt::TensorView;
use dumpfmt::tensor::read_tensor;
use dumpfmt::{DType, npy, pt};

fn payload(n_bytes: usize) -> Vec<u8> {
    (0..n_bytes / 4)
        .flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes())
        .collect()
}

fn touch(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut acc = 0u64;
    for w in &mut words {
        acc = acc.wrapping_add(u64::from_le_bytes(w.try_into().unwrap()));
    }
    words
        .remainder()
        .iter()
        .fold(acc, |a, &b| a.wrapping_add(b as u64))
}

fn read_and_touch(path: &Path) -> u64 {
    let t = read_tensor(path).expect("benchmark file reads");
    touch(t.bytes())
}

/// A `.pt` file holding a transposed view (size (rows, cols), stride (1, rows)), as torch saves
/// `x.t()`. The public writer only writes contiguous tensors, so a normal file's data.pkl is
/// replaced by the strided pickle (same length) and its CRC fixed.
fn write_strided_pt(path: &Path, rows: usize, cols: usize) {
    let bytes = payload(rows * cols * 4);
    let meta = dumpfmt::pickle::TensorMeta {
        dtype: DType::F32,
        storage_key: "0".into(),
        location: "cpu".into(),
        storage_nbytes: bytes.len() as u64,
        storage_offset: 0,
        size: vec![rows as u64, cols as u64],
        stride: vec![1, rows as u64],
        requires_grad: false,
    };
    let mut normal = Vec::new();
    pt::write_to(
        &mut normal,
        "v",
        TensorView::new(DType::F32, &[rows, cols], &bytes).unwrap(),
        "cpu",
        &"0".repeat(40),
    )
    .unwrap();
    let pkl = dumpfmt::pickle::write_tensor_pickle(&meta);
    let entries = pt::zipdir::entries(&normal).unwrap();
    let e = entries
        .iter()
        .find(|e| e.name.ends_with(b"data.pkl"))
        .unwrap();
    assert_eq!(
        pkl.len(),
        e.data.len(),
        "strided pickle must keep the entry length"
    );
    normal[e.data.clone()].copy_from_slice(&pkl);
    let crc = crc32(&pkl);
    normal[e.data.end + 4..e.data.end + 8].copy_from_slice(&crc.to_le_bytes());
    let cd = normal.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    normal[cd + 16..cd + 20].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, normal).unwrap();
}

fn crc32(b: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [
        ("4KiB", 4usize << 10),
        ("1MiB", 1 << 20),
        ("64MiB", 64 << 20),
    ];
    let mut files: Vec<(&str, &str, usize, PathBuf)> = Vec::new();
    for (label, n) in sizes {
        let bytes = payload(n);
        let shape = [n / 4];
        let p = dir.path().join(format!("t{label}.pt"));
        pt::write(
            &p,
            TensorView::new(DType::F32, &shape, &bytes).unwrap(),
            "cpu",
        )
        .unwrap();
        files.push(("pt", label, n, p));
        let p = dir.path().join(format!("t{label}.npy"));
        npy::write(&p, TensorView::new(DType::F32, &shape, &bytes).unwrap()).unwrap();
        files.push(("npy", label, n, p));
    }
    let strided = dir.path().join("strided.pt");
    write_strided_pt(&strided, 512, 512);
    files.push(("pt-strided", "1MiB", 1 << 20, strided));

    let mut g = c.benchmark_group("tensor_files/read_tensor+touch");
    for (kind, label, n, path) in &files {
        g.throughput(Throughput::Bytes(*n as u64));
        if *n >= 64 << 20 {
            g.sample_size(10);
        } else {
            g.sample_size(50);
        }
        g.bench_with_input(BenchmarkId::new(*kind, label), path, |b, p| {
            b.iter(|| black_box(read_and_touch(black_box(p))))
        });
    }
    g.finish();

    let big = &files
        .iter()
        .find(|(kind, label, ..)| *kind == "npy" && *label == "64MiB")
        .expect("the 64 MiB .npy file")
        .3;
    let tensor = read_tensor(big).unwrap();
    let array: ndarray::ArrayD<f32> = tensor.array::<f32>().unwrap().to_owned();
    let mut g = c.benchmark_group("tensor_files/ndarray");
    g.bench_function("Tensor::array", |b| {
        b.iter(|| black_box(black_box(&tensor).array::<f32>().unwrap().len()))
    });
    g.bench_function("from_array+to_ndarray", |b| {
        b.iter(|| {
            let v = TensorView::from_array(black_box(&array)).unwrap();
            black_box(v.to_ndarray::<f32>().unwrap().len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
