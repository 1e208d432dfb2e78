//! Interoperability with real torch and numpy (the venv's Python; NUMPROBE_PYTHON overrides).
//!
//! (a) `tests/torch/gen_cases.py` saves tensors of every dtype (0-dim, empty, strided views, npy
//! versions, files to refuse) with `torch.save` / `np.save`; we read them and compare with the raw
//! bytes the script dumped, and re-write every contiguous one and compare the files byte for byte
//! (the torch file's random serialization id reused).
//! (b) We write `.pt`/`.npy` for every dtype; `tests/torch/check_cases.py` loads them with
//! `torch.load(weights_only=True)` / `np.load(allow_pickle=False)` and compares bit for bit.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use dumpfmt::TensorView;
use dumpfmt::tensor::{FileInfo, inspect, read_info, read_tensor};
use dumpfmt::{DType, Error, npy, pt};

mod common;
use common::python;

fn script(name: &str) -> PathBuf {
    testsupport::manifest_dir().join("tests/torch").join(name)
}

fn run_script(name: &str, dir: &Path) -> String {
    let out = Command::new(python())
        .arg(script(name))
        .arg(dir)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn parse_shape(s: &str) -> Vec<usize> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect()
}

/// The 40 digits after the `.data/serialization_id` local header (name, "FB", padding length,
/// padding).
fn serialization_id(path: &Path) -> String {
    let b = std::fs::read(path).unwrap();
    let key = b"/.data/serialization_idFB";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    let pad = u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    String::from_utf8(b[at + 2 + pad..at + 2 + pad + 40].to_vec()).unwrap()
}

#[test]
fn reads_and_rewrites_what_torch_and_numpy_write() {
    let dir = tempfile::tempdir().unwrap();
    run_script("gen_cases.py", dir.path());
    let manifest = std::fs::read_to_string(dir.path().join("manifest.tsv")).unwrap();
    let mut seen_kinds = BTreeSet::new();
    let mut exact_pt = 0;
    let mut exact_npy = 0;
    for line in manifest.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let [name, file, dtype, shape, kind] = cols[..] else {
            panic!("bad manifest line {line}")
        };
        let path = dir.path().join(file);
        let shape = parse_shape(shape);
        let is_pt = file.ends_with(".pt");
        seen_kinds.insert(kind.split(':').next().unwrap().to_owned());
        match kind {
            "reject" => {
                let e = read_tensor(&path).expect_err(file);
                assert!(matches!(e, Error::Tensor { .. }), "{file}: {e}");
                assert!(read_info(&path).is_err(), "{file}");
                continue;
            }
            "text" => {
                match inspect(&path).unwrap() {
                    FileInfo::NpyText {
                        descr, shape: s, ..
                    } => {
                        assert_eq!(descr, dtype);
                        assert_eq!(s, shape);
                    }
                    other => panic!("{file}: {other:?}"),
                }
                assert!(read_info(&path).is_err());
                assert!(read_tensor(&path).is_err());
                continue;
            }
            _ => {}
        }
        let t = read_tensor(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.dtype().torch_name(), dtype, "{file}");
        assert_eq!(t.shape(), &shape[..], "{file}");
        let raw = std::fs::read(
            dir.path()
                .join(format!("{name}.{}", if is_pt { "raw" } else { "nraw" })),
        )
        .unwrap();
        assert!(
            t.bytes() == &raw[..],
            "{file}: bytes differ from what torch/numpy hold"
        );
        assert_eq!(read_info(&path).unwrap(), t.info(), "{file}");
        if name == "f32_big" {
            assert!(t.is_mapped(), "{file} should be memory-mapped");
            assert_eq!(
                t.bytes().as_ptr() as usize % 64,
                0,
                "{file} payload not 64-byte aligned"
            );
        }
        if kind == "view" {
            // The meta says what torch stored: full storage plus offset/stride.
            let m = pt::read_meta(&path).unwrap();
            assert!(m.storage_nbytes >= raw.len() as u64);
        }
        let mut written = Vec::new();
        if let Some(src_dtype) = kind.strip_prefix("npyconv:") {
            let d = DType::from_torch_name(src_dtype).unwrap();
            let src = std::fs::read(dir.path().join(format!("{name}.src"))).unwrap();
            npy::write_to(&mut written, TensorView::new(d, &shape, &src).unwrap()).unwrap();
            assert!(
                written == std::fs::read(&path).unwrap(),
                "{file}: npy of converted {src_dtype} differs from np.save"
            );
            exact_npy += 1;
        } else if kind == "exact" && is_pt {
            let sid = serialization_id(&path);
            pt::write_to(
                &mut written,
                &pt::archive_name(&path),
                t.view(),
                "cpu",
                &sid,
            )
            .unwrap();
            let want = std::fs::read(&path).unwrap();
            assert!(
                written == want,
                "{file}: our torch.save bytes differ ({} vs {} bytes)",
                written.len(),
                want.len()
            );
            exact_pt += 1;
        } else if kind == "exact" {
            npy::write_to(&mut written, t.view()).unwrap();
            assert!(
                written == std::fs::read(&path).unwrap(),
                "{file}: our np.save bytes differ"
            );
            exact_npy += 1;
        }
    }
    // Every dtype × every shape went through the byte-exact comparison.
    assert!(exact_pt > 17 * 8, "{exact_pt}");
    assert!(exact_npy >= 17 * 8, "{exact_npy}");
    for k in ["exact", "view", "read", "npyconv", "reject", "text"] {
        assert!(seen_kinds.contains(k), "no {k} case ran");
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(n: usize, seed: &mut u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            *seed ^= *seed >> 12;
            *seed ^= *seed << 25;
            *seed ^= *seed >> 27;
            (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn torch_and_numpy_load_what_we_write() {
    let dir = tempfile::tempdir().unwrap();
    let shapes: [&[usize]; 7] = [&[2, 3], &[], &[0], &[2, 0, 3], &[7], &[2, 3, 4, 5], &[1000]];
    let mut manifest = String::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut n = 0;
    for dtype in DType::ALL {
        for (i, shape) in shapes.iter().enumerate() {
            let numel: usize = shape.iter().product();
            let mut bytes = random_bytes(numel * dtype.size(), &mut seed);
            if dtype == DType::Bool {
                bytes.iter_mut().for_each(|b| *b &= 1);
            }
            let base = format!("{}_{i}", dtype.torch_name().trim_start_matches("torch."));
            // A device location other than cpu on some files: torch maps it to cpu on load.
            let location = if i == 1 { "cuda:0" } else { "cpu" };
            pt::write(
                &dir.path().join(format!("{base}.pt")),
                TensorView::new(dtype, shape, &bytes).unwrap(),
                location,
            )
            .unwrap();
            std::fs::write(dir.path().join(format!("{base}.raw")), &bytes).unwrap();
            let shape_s: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let shape_s = shape_s.join(",");
            manifest += &format!("{base}.pt\t{}\t{shape_s}\t{base}.raw\n", dtype.torch_name());
            npy::write(
                &dir.path().join(format!("{base}.npy")),
                TensorView::new(dtype, shape, &bytes).unwrap(),
            )
            .unwrap();
            let stored = npy::stored_dtype(dtype);
            if stored == dtype {
                manifest += &format!("{base}.npy\t{}\t{shape_s}\t{base}.raw\n", dtype.npy_descr());
            } else {
                // Python converts the original bytes with torch to check our float32 conversion.
                manifest += &format!(
                    "{base}.npy\t{}\t{shape_s}\t{base}.raw\t{}\n",
                    stored.npy_descr(),
                    dtype.torch_name()
                );
            }
            n += 2;
        }
    }
    std::fs::write(dir.path().join("manifest.tsv"), manifest).unwrap();
    let out = run_script("check_cases.py", dir.path());
    assert_eq!(out.trim(), format!("OK {n}"));
}
