//! Broken tensor files give typed errors, never panics: truncations at every offset, flipped
//! bytes everywhere, missing zip entries, refused pickle contents, sizes that disagree.

use std::path::{Path, PathBuf};

use dumpfmt::TensorView;
use dumpfmt::tensor::{inspect, read_info, read_tensor};
use dumpfmt::{DType, Error, npy, pt};

fn pt_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    pt::write_to(
        &mut out,
        "t",
        TensorView::new(dtype, shape, bytes).unwrap(),
        "cpu",
        &"1".repeat(40),
    )
    .unwrap();
    out
}

fn npy_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    npy::write_to(&mut out, TensorView::new(dtype, shape, bytes).unwrap()).unwrap();
    out
}

fn f32_2x3() -> Vec<u8> {
    [1.5f32, -2.25, 3.0, 0.1, 0.2, -0.3]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn put(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

/// Reads with every entry point; returns the error of read_tensor (None if it succeeded) after
/// checking that the entry points agree and that a success is self-consistent.
fn read_all(p: &Path) -> Option<Error> {
    let t = read_tensor(p);
    let i = read_info(p);
    let _ = inspect(p);
    match (&t, &i) {
        (Ok(t), Ok(i)) => {
            assert_eq!(&t.info(), i);
            assert_eq!(t.bytes().len(), t.numel() * t.dtype().size());
        }
        (Err(_), Err(_)) => {}
        _ => panic!(
            "{}: read_tensor and read_info disagree: {:?} / {:?}",
            p.display(),
            t.as_ref().err(),
            i.as_ref().err()
        ),
    }
    t.err()
}

#[test]
fn every_truncation_is_an_error() {
    let s = Scratch::new();
    let files = [
        ("t.pt", pt_bytes(DType::F32, &[2, 3], &f32_2x3())),
        ("t.npy", npy_bytes(DType::F32, &[2, 3], &f32_2x3())),
        ("e.pt", pt_bytes(DType::I64, &[0, 3], &[])),
    ];
    for (name, full) in files {
        assert!(read_all(&s.put(name, &full)).is_none());
        for n in 0..full.len() {
            let e = read_all(&s.put(name, &full[..n]))
                .unwrap_or_else(|| panic!("{name} cut at {n} read"));
            assert!(matches!(e, Error::Tensor { .. }), "{name} cut at {n}: {e}");
        }
    }
}

#[test]
fn flipped_bytes_never_panic_and_checked_parts_fail() {
    let s = Scratch::new();
    let full = pt_bytes(DType::F32, &[2, 3], &f32_2x3());
    let data_pkl_end = full.windows(4).position(|w| w == b"PK\x07\x08").unwrap();
    let data_pkl_start = data_pkl_end - pt::zipdir::entries(&full).unwrap()[0].data.len();
    for i in 0..full.len() {
        let mut b = full.clone();
        b[i] ^= 0xff;
        let e = read_all(&s.put("t.pt", &b));
        // The pickle is CRC-checked: any change to it is caught.
        if (data_pkl_start..data_pkl_end).contains(&i) {
            assert!(e.is_some(), "flip at {i} in data.pkl accepted");
        }
    }
    let full = npy_bytes(DType::F32, &[2, 3], &f32_2x3());
    for i in 0..full.len() {
        let mut b = full.clone();
        b[i] ^= 0xff;
        let e = read_all(&s.put("t.npy", &b));
        // Any change to the header text but its padding breaks it.
        if (10..70).contains(&i) {
            assert!(e.is_some(), "flip at {i} in the npy header accepted");
        }
    }
}

/// Replaces every occurrence of `from` (zip names appear in local and central headers).
fn rename(b: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = b.to_vec();
    let mut i = 0;
    let mut hits = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            hits += 1;
        }
        i += 1;
    }
    assert!(hits > 0);
    out
}

/// Rewrites entry `suffix`'s data in place (same length) and fixes its CRC in the data descriptor
/// and the central directory, so that only the content is wrong.
fn patch_entry(b: &[u8], suffix: &str, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = b.to_vec();
    let e = pt::zipdir::entries(b)
        .unwrap()
        .into_iter()
        .find(|e| e.name.ends_with(suffix.as_bytes()))
        .unwrap();
    let mut data = b[e.data.clone()].to_vec();
    f(&mut data);
    assert_eq!(data.len(), e.data.len());
    out[e.data.clone()].copy_from_slice(&data);
    let crc = crc32fast::hash(&data).to_le_bytes();
    out[e.data.end + 4..e.data.end + 8].copy_from_slice(&crc);
    let mut i = 0;
    while let Some(at) = out[i..].windows(4).position(|w| w == b"PK\x01\x02") {
        let c = i + at;
        let n = u16::from_le_bytes([out[c + 28], out[c + 29]]) as usize;
        if out[c + 46..c + 46 + n] == e.name[..] {
            out[c + 16..c + 20].copy_from_slice(&crc);
        }
        i = c + 4;
    }
    out
}

fn swap(from: &'static [u8], to: &'static [u8]) -> impl FnOnce(&mut Vec<u8>) {
    move |d| {
        let i = d.windows(from.len()).position(|w| w == from).unwrap();
        d[i..i + from.len()].copy_from_slice(to);
    }
}

fn expect_err(s: &Scratch, bytes: &[u8], want: &str) {
    let p = s.put("t.pt", bytes);
    let e = read_all(&p).unwrap_or_else(|| panic!("accepted; wanted an error containing {want:?}"));
    let Error::Tensor { msg, .. } = &e else {
        panic!("{e}")
    };
    assert!(msg.contains(want), "{e} (wanted {want:?})");
}

#[test]
fn broken_archives_give_typed_errors() {
    let s = Scratch::new();
    let good = pt_bytes(DType::F32, &[2, 3], &f32_2x3());
    expect_err(
        &s,
        &rename(&good, b"t/data.pkl", b"t/data.pkX"),
        "no data.pkl",
    );
    expect_err(
        &s,
        &rename(&good, b"t/data/0", b"t/data/1"),
        "no storage entry",
    );
    expect_err(&s, &rename(&good, b"t/version", b"t/versioX"), "no version");
    // Old torch versions wrote no byteorder record: still little-endian.
    assert!(read_all(&s.put("t.pt", &rename(&good, b"t/byteorder", b"t/byteordeX"))).is_none());
    // Entries found by suffix: the archive name need not match the file name.
    let renamed = rename(&good, b"t/", b"u/");
    assert_eq!(
        read_tensor(&s.put("t.pt", &renamed)).unwrap().bytes(),
        &f32_2x3()[..]
    );
    expect_err(
        &s,
        &patch_entry(&good, "byteorder", swap(b"little", b"bigxxx")),
        "byteorder",
    );
    expect_err(
        &s,
        &patch_entry(&good, "/version", swap(b"3\n", b"x\n")),
        "version",
    );
    // CRC left stale.
    let mut stale = good.clone();
    let i = stale.windows(7).position(|w| w == b"storage").unwrap();
    stale[i] = b'S';
    expect_err(&s, &stale, "CRC");
    let pkl = |from, to| patch_entry(&good, "data.pkl", swap(from, to));
    expect_err(
        &s,
        &pkl(b"FloatStorage", b"FloatStorag_"),
        "disallowed global torch.FloatStorag_",
    );
    expect_err(
        &s,
        &pkl(
            b"torch._utils\n_rebuild_tensor_v2",
            b"torch._utils\n_rebuild_tensor_v9",
        ),
        "disallowed global",
    );
    expect_err(
        &s,
        &pkl(b"collections\nOrderedDict", b"collections\nOrderedDicX"),
        "disallowed global",
    );
    expect_err(&s, &pkl(b")R", b"}R"), "EMPTY_DICT");
    expect_err(&s, &pkl(b"\x89", b"N"), "NONE");
    expect_err(&s, &pkl(b"storageq", b"storagxq"), "persistent id");
    // Storage numel 6 → 7: the data entry no longer matches.
    expect_err(&s, &pkl(b"K\x06t", b"K\x07t"), "the pickle says");
    // Size (2, 3) → (3, 3): the view reaches past the storage.
    expect_err(
        &s,
        &pkl(b"K\x02K\x03\x86", b"K\x03K\x03\x86"),
        "reaches element",
    );
    // Storage offset 0 → 1 with the same size: past the end as well.
    expect_err(&s, &pkl(b"QK\x00", b"QK\x01"), "reaches element");
    // A compressed entry.
    let mut deflated = good.clone();
    let c = deflated
        .windows(4)
        .position(|w| w == b"PK\x01\x02")
        .unwrap();
    deflated[c + 10] = 8;
    expect_err(&s, &deflated, "compressed");
    // The error offset points into the file: the pickle's disallowed opcode.
    let p = s.put("t.pt", &pkl(b")R", b"}R"));
    let Error::Tensor { offset, .. } = read_tensor(&p).unwrap_err() else {
        panic!()
    };
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(bytes[offset as usize], b'}');
}

#[test]
fn npy_sizes_must_agree() {
    let s = Scratch::new();
    let good = npy_bytes(DType::F32, &[2, 3], &f32_2x3());
    let p = s.put("t.npy", &good[..good.len() - 4]);
    assert!(
        read_all(&p)
            .unwrap()
            .to_string()
            .contains("payload has 20 bytes")
    );
    let mut long = good.clone();
    long.push(0);
    assert!(read_all(&s.put("t.npy", &long)).is_some());
    // A header whose shape disagrees (same length): (2, 3) → (2, 4).
    let i = good.windows(6).position(|w| w == b"(2, 3)").unwrap();
    let mut b = good.clone();
    b[i + 4] = b'4';
    assert!(read_all(&s.put("t.npy", &b)).is_some());
    // Unknown extension: sniffed by magic.
    assert!(read_all(&s.put("t.bin", &good)).is_none());
    assert!(read_all(&s.put("u.bin", b"hello")).is_some());
}

/// Broadcast (stride-0) views: a few bytes of storage that describe gigabytes in C order are
/// refused by the reader, naming the file, while small ones read through their strides.
#[test]
fn broadcast_views_are_bounded_by_what_the_file_holds() {
    let hostile = testsupport::testdata().join("hostile");
    for (f, numel) in [("expand_2e31.pt", 1u64 << 31), ("expand_2e40.pt", 1 << 40)] {
        let p = hostile.join(f);
        assert_eq!(read_info(&p).unwrap().numel(), numel);
        let e = read_tensor(&p).unwrap_err();
        assert!(matches!(e, Error::ViewTooLarge { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(f) && msg.contains("strided view"), "{msg}");
        assert!(msg.contains("storage of 4 bytes"), "{msg}");
    }
    // torch.arange(3.0).expand(4, 3): 48 bytes from a 12-byte storage.
    let p = hostile.join("expand_small.pt");
    let t = read_tensor(&p).unwrap();
    assert_eq!(t.shape(), &[4, 3]);
    let got: Vec<f32> = t
        .bytes()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, [0.0, 1.0, 2.0].repeat(4));
    // The bound is what limits it: no growth allowed, the same file is refused.
    let e = pt::read_with_growth(&p, 0).unwrap_err();
    assert!(
        e.to_string().contains("more than the storage plus 0 bytes"),
        "{e}"
    );
    assert!(pt::read_with_growth(&p, 36).is_ok());
}

/// torch.save of a dict or list is not a tensor file; the error says what it holds.
#[test]
fn saved_dicts_and_lists_say_what_they_hold() {
    let hostile = testsupport::testdata().join("hostile");
    for (f, kind) in [("dict.pt", "dict"), ("list.pt", "list")] {
        let e = read_info(&hostile.join(f)).unwrap_err().to_string();
        assert!(e.contains(f), "{e}");
        assert!(e.contains(&format!("holds a {kind}, not a tensor")), "{e}");
    }
}
