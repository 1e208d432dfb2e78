//! Property tests: random tensors round-trip through both writers and readers; random damage to
//! valid files never panics a reader.

use std::path::Path;

use dumpfmt::TensorView;
use dumpfmt::tensor::{inspect, read_info, read_tensor};
use dumpfmt::{DType, npy, pt};
use proptest::prelude::*;

fn any_dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(DType::ALL.to_vec())
}

/// dtype, shape (0–4 dims of 0–5, or one long dim) and matching random bytes.
fn any_tensor() -> impl Strategy<Value = (DType, Vec<usize>, Vec<u8>)> {
    let shape = prop_oneof![
        4 => proptest::collection::vec(0usize..6, 0..5),
        1 => (300usize..2000).prop_map(|n| vec![n]),
    ];
    (any_dtype(), shape).prop_flat_map(|(d, s)| {
        let n = s.iter().product::<usize>() * d.size();
        let bytes = proptest::collection::vec(any::<u8>(), n).prop_map(move |mut b| {
            if d == DType::Bool {
                b.iter_mut().for_each(|x| *x &= 1);
            }
            b
        });
        (Just(d), Just(s), bytes)
    })
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// What np.save must hold for a tensor: float32 for bf16 / float8, the bytes otherwise.
fn npy_expected(d: DType, bytes: &[u8]) -> (DType, Vec<u8>) {
    let conv = |v: f32| v.to_le_bytes();
    match d {
        DType::BF16 => (
            DType::F32,
            bytes
                .chunks_exact(2)
                .flat_map(|c| {
                    conv(f32::from_bits(
                        (u16::from_le_bytes([c[0], c[1]]) as u32) << 16,
                    ))
                })
                .collect(),
        ),
        // float8 conversions are checked bit for bit against torch in torch_interop.rs.
        DType::F8E4M3FN | DType::F8E5M2 => {
            let t = npy_roundtrip_via_memory(d, bytes);
            (DType::F32, t)
        }
        _ => (d, bytes.to_vec()),
    }
}

fn npy_roundtrip_via_memory(d: DType, bytes: &[u8]) -> Vec<u8> {
    let shape = [bytes.len()];
    let mut out = Vec::new();
    npy::write_to(&mut out, TensorView::new(d, &shape, bytes).unwrap()).unwrap();
    let h = npy::parse_header(&out, Path::new("mem")).unwrap();
    out[h.data_offset..].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn pt_round_trips((d, shape, bytes) in any_tensor(), loc in prop_oneof![Just("cpu"), Just("cuda:0"), Just("npu:3")]) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pt");
        pt::write(&p, TensorView::new(d, &shape, &bytes).unwrap(), loc).unwrap();
        let t = read_tensor(&p).unwrap();
        prop_assert_eq!(t.dtype(), d);
        prop_assert_eq!(t.shape(), &shape[..]);
        prop_assert!(t.bytes() == &bytes[..]);
        prop_assert_eq!(read_info(&p).unwrap(), t.info());
        let m = pt::read_meta(&p).unwrap();
        prop_assert_eq!(m.location, loc);
        // Data start is 64-byte aligned in the file (torch's storage alignment).
        if !bytes.is_empty() {
            let file = std::fs::read(&p).unwrap();
            let e = pt::zipdir::entries(&file).unwrap();
            let data = e.iter().find(|e| e.name.ends_with(b"/data/0")).unwrap();
            prop_assert_eq!(data.data.start % 64, 0);
        }
    }

    #[test]
    fn npy_round_trips((d, shape, bytes) in any_tensor()) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.npy");
        npy::write(&p, TensorView::new(d, &shape, &bytes).unwrap()).unwrap();
        let (want_dtype, want) = npy_expected(d, &bytes);
        let t = read_tensor(&p).unwrap();
        prop_assert_eq!(t.dtype(), want_dtype);
        prop_assert_eq!(t.shape(), &shape[..]);
        prop_assert!(t.bytes() == &want[..]);
        prop_assert_eq!(read_info(&p).unwrap(), t.info());
        let h = npy::read_header(&p).unwrap().0;
        prop_assert_eq!(h.data_offset % 64, 0);
    }

    #[test]
    fn damaged_files_never_panic(
        (d, shape, bytes) in any_tensor(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        as_npy in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut file = Vec::new();
        let name = if as_npy {
            npy::write_to(&mut file, TensorView::new(d, &shape, &bytes).unwrap()).unwrap();
            "x.npy"
        } else {
            pt::write_to(&mut file, "x", TensorView::new(d, &shape, &bytes).unwrap(), "cpu", &"7".repeat(40)).unwrap();
            "x.pt"
        };
        for (at, v) in edits {
            let i = at.index(file.len());
            file[i] = v;
        }
        if let Some(c) = cut {
            file.truncate(c.index(file.len()));
        }
        let p = write_file(dir.path(), name, &file);
        let t = read_tensor(&p);
        let i = read_info(&p);
        let _ = inspect(&p);
        if let (Ok(t), Ok(i)) = (&t, &i) {
            prop_assert_eq!(&t.info(), i);
            prop_assert_eq!(t.bytes().len(), t.numel() * t.dtype().size());
        }
        prop_assert_eq!(t.is_ok(), i.is_ok());
    }
}
