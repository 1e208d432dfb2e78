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
