//! Checksum test vectors of spec §3.5/§3.6 and agreement of every CRC/XOR path.

use stats_gpu::summary::{self, Checksum, Options, SummaryMode};
use stats_gpu::{DType, Engine, TensorView, checksum, fast, reference};

fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const SPEC: [f32; 6] = [1.5, -2.25, 3.0, 0.1, 0.2, -0.3];

#[test]
fn crc32_of_spec_vector() {
    let b = f32_bytes(&SPEC);
    assert_eq!(checksum::crc32_hex(checksum::crc32(&b)), "7bb36c01");
    assert_eq!(reference::crc32(&b), 0x7bb3_6c01);
    let v = TensorView::new(DType::F32, &[2, 3], &b).unwrap();
    assert_eq!(fast::partials_and_crc32(&v).1, 0x7bb3_6c01);
    assert_eq!(checksum::crc32_hex(checksum::crc32(&[])), "00000000");
}

#[test]
fn xor_of_spec_vectors() {
    let abs: Vec<f32> = SPEC.iter().map(|x| x.abs()).collect();
    let b = f32_bytes(&abs);
    assert_eq!(checksum::xor_hex(checksum::xor(&b)), "0x4345555741cccccd");
    assert_eq!(reference::xor(&b), 0x4345_5557_41cc_cccd);
    let c = f32_bytes(&[1.0, 1.0, -3.0, 4.0]);
    assert_eq!(checksum::xor_hex(checksum::xor(&c)), "0x7f000000ffc00000");
    let v = TensorView::new(DType::C64, &[2], &c).unwrap();
    let r = summary::compute(
        &v,
        &Options {
            mode: SummaryMode::Xor,
            ..Options::default()
        },
        &Engine::new(),
    )
    .unwrap();
    assert_eq!(r.md5, Some(Checksum::Xor(0x7f00_0000_ffc0_0000)));
}

/// Odd lengths pad the last word with zeros; sizes above the parallel threshold combine CRC
/// states across chunks. Every path must agree with the bitwise reference.
#[test]
fn all_paths_agree_on_awkward_lengths() {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let big: Vec<u8> = (0..(5 << 20) + 3)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect();
    for n in [
        0usize,
        1,
        3,
        8,
        13,
        4096 + 5,
        (2 << 20) - 1,
        (2 << 20) + 1,
        big.len(),
    ] {
        let b = &big[..n];
        let want_crc = reference::crc32(b);
        let want_xor = reference::xor(b);
        assert_eq!(checksum::crc32(b), want_crc, "{n} bytes");
        assert_eq!(crc32fast::hash(b), want_crc, "{n} bytes");
        assert_eq!(checksum::xor(b), want_xor, "{n} bytes");
        let shape = [n];
        let v = TensorView::new(DType::U8, &shape, b).unwrap();
        assert_eq!(fast::partials_and_crc32(&v).1, want_crc, "{n} bytes");
        assert_eq!(fast::partials_and_xor(&v).1, want_xor, "{n} bytes");
    }
}
