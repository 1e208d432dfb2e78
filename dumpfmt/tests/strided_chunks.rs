//! Strided `.pt` views read through their strides (`pt::open`, `for_each_chunk`) give the bytes
//! of the gathered C-order copy, chunk by chunk, whatever the chunk size.

use dumpfmt::pt::{self, MAX_VIEW_GROWTH, Stored};
use testsupport::testdata;

#[test]
fn chunks_concatenate_to_the_gathered_view() {
    let dir = testdata().join("hostile/strided");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pt"))
        .collect();
    files.push(testdata().join("hostile/expand_small.pt"));
    assert!(files.len() >= 11);
    for f in files {
        let Stored::Strided(s) = pt::open(&f).unwrap() else {
            panic!("{}: not strided", f.display());
        };
        let whole = s.materialize(MAX_VIEW_GROWTH).unwrap();
        assert_eq!(whole.dtype(), s.dtype());
        assert_eq!(whole.shape(), s.shape());
        // 1 and 13 round to 8; every chunk but the last holds a multiple of 8 elements.
        for max in [1usize, 13, 1000, 1 << 20] {
            let mut got = Vec::new();
            let mut lens = Vec::new();
            s.for_each_chunk(max, |v| -> Result<(), ()> {
                got.extend_from_slice(v.bytes());
                lens.push(v.numel());
                Ok(())
            })
            .unwrap();
            assert_eq!(got, whole.bytes(), "{} max {max}", f.display());
            let (last, rest) = lens.split_last().unwrap();
            assert!(rest.iter().all(|&n| n % 8 == 0 && n <= max.max(8)));
            assert!(*last <= max.max(8));
        }
        let (distinct, repeat) = s.layout().without_broadcast();
        assert_eq!(distinct.numel() * repeat, s.layout().numel());
        assert!(distinct.stride.iter().all(|&st| st != 0));
    }
}

#[test]
fn a_view_past_the_bound_is_refused_naming_file_and_limit() {
    let f = testdata().join("hostile/expand_2e31.pt");
    let Stored::Strided(s) = pt::open(&f).unwrap() else {
        panic!("not strided");
    };
    let e = s.materialize(MAX_VIEW_GROWTH).unwrap_err().to_string();
    assert!(
        e.contains("expand_2e31.pt") && e.contains("1073741824"),
        "{e}"
    );
    assert!(pt::read(&f).is_err());
}

/// `read_range` of any range gives those bytes of the gathered view (torch's files: broadcast,
/// transposed, sliced, offset).
#[test]
fn ranges_of_torch_views_are_slices_of_the_gathered_view() {
    let dir = testdata().join("hostile/strided");
    for e in std::fs::read_dir(&dir).unwrap() {
        let f = e.unwrap().path();
        if f.extension().is_none_or(|x| x != "pt") {
            continue;
        }
        let Stored::Strided(s) = pt::open(&f).unwrap() else {
            panic!("{}: not strided", f.display());
        };
        let whole = s.materialize(MAX_VIEW_GROWTH).unwrap();
        let (n, item) = (whole.numel(), s.dtype().size());
        let mut buf = Vec::new();
        for (a, b) in [
            (0, n),
            (0, 1),
            (n - 1, n),
            (n / 3, n / 2),
            (7.min(n), n),
            (0, 0),
        ] {
            s.read_range(a..b, &mut buf);
            assert_eq!(
                &buf[..],
                &whole.bytes()[a * item..b * item],
                "{}",
                f.display()
            );
        }
    }
}

proptest::proptest! {
    /// Views written with `write_view` read back (through `open`) as the same view, and any
    /// range of it is that slice of a naive per-element walk.
    #[test]
    fn written_views_read_back_and_ranges_match_a_naive_walk(
        dims in proptest::collection::vec((1u64..6, 0u64..7), 0..4),
        offset in 0u64..5,
        cut in (0.0f64..1.0, 0.0f64..1.0),
    ) {
        let size: Vec<u64> = dims.iter().map(|d| d.0).collect();
        let stride: Vec<u64> = dims.iter().map(|d| d.1).collect();
        let last = offset + size.iter().zip(&stride).map(|(n, s)| (n - 1) * s).sum::<u64>();
        let storage: Vec<f32> = (0..=last).map(|i| i as f32 * 1.5 - 3.0).collect();
        let shape = [storage.len()];
        let sv = dumpfmt::TensorView::from_slice(&shape, &storage[..]).unwrap();
        let view = pt::ViewOf { offset, size: size.clone(), stride: stride.clone() };
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("v.pt");
        pt::write_view(&p, sv, &view, "cpu").unwrap();
        let meta = pt::read_meta(&p).unwrap();
        proptest::prop_assert_eq!((meta.storage_offset, &meta.size, &meta.stride), (offset, &size, &stride));
        let n: usize = size.iter().product::<u64>() as usize;
        let mut want = Vec::new();
        for flat in 0..n {
            let (mut rem, mut elem) = (flat as u64, offset);
            for d in (0..size.len()).rev() {
                elem += (rem % size[d]) * stride[d];
                rem /= size[d];
            }
            want.extend_from_slice(&storage[elem as usize].to_le_bytes());
        }
        let mem = pt::StridedTensor::from_storage("mem", dumpfmt::DType::F32, sv.bytes(), &view).unwrap();
        let a = (cut.0 * n as f64) as usize;
        let b = a + ((cut.1 * (n - a) as f64) as usize);
        let mut buf = Vec::new();
        mem.read_range(a..b, &mut buf);
        proptest::prop_assert_eq!(&buf[..], &want[a * 4..b * 4]);
        // The file reads back the same elements, whether it is C-contiguous or strided.
        let got = dumpfmt::tensor::read_tensor(&p).unwrap();
        proptest::prop_assert_eq!(got.bytes(), &want[..]);
    }
}

#[test]
fn views_outside_their_storage_are_refused() {
    let storage = [0u8; 16];
    let sv = dumpfmt::TensorView::new(dumpfmt::DType::F32, &[4], &storage).unwrap();
    let view = pt::ViewOf {
        offset: 1,
        size: vec![2, 2],
        stride: vec![2, 1],
    };
    assert!(pt::StridedTensor::from_storage("mem", dumpfmt::DType::F32, &storage, &view).is_err());
    let mut out = Vec::new();
    assert!(pt::write_view_to(&mut out, "x", sv, &view, "cpu", &"0".repeat(40)).is_err());
}
