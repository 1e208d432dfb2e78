//! Tensor-mode metrics of pairs whose sides are strided `.pt` views (sliced, transposed,
//! broadcast with stride 0, at an offset), read through their strides chunk by chunk in
//! lockstep: every cell and message is the one of the views gathered into C order, bit for bit
//! (NaN, ±Inf, ±0 and subnormals included; EucDist in OpenBLAS's order at several thread
//! counts).

use compare::tensor::{Side, TensorResult, compare_sides_blas, compare_tensors_blas};
use dumpfmt::DType;
use dumpfmt::pt::{MAX_VIEW_GROWTH, StridedTensor, ViewOf};
use proptest::prelude::*;

/// Every cell as text that tells apart every f64 bit pattern but NaN payloads (the cells hold
/// no NaN: msprobe writes those as the string `Nan`).
fn cells(r: &TensorResult) -> String {
    format!("{:?} | {} | {}", r.values, r.err_msg, r.error_flag)
}

/// The bytes of `values` as `dtype` (ints and bool from the value's integer part).
fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| -> Vec<u8> {
            match dtype {
                DType::F64 => v.to_le_bytes().to_vec(),
                DType::F32 => (v as f32).to_le_bytes().to_vec(),
                DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
                DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
                DType::I32 => (v as i32).to_le_bytes().to_vec(),
                DType::I64 => (v as i64).to_le_bytes().to_vec(),
                DType::U8 => vec![v as u8],
                DType::Bool => vec![(v != 0.0) as u8],
                other => unreachable!("{other:?}"),
            }
        })
        .collect()
}

/// Values that stress the metrics: NaN, ±Inf, ±0, subnormals of f32 and f64, ordinary values.
const POOL: [f64; 14] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0e-40,
    -3.0e-39,
    5.0e-310,
    1.0,
    -2.5,
    3.25,
    1.0e-3,
    65504.0,
    -7.0,
];

fn view(size: &[u64], stride: &[u64], offset: u64) -> ViewOf {
    ViewOf {
        offset,
        size: size.to_vec(),
        stride: stride.to_vec(),
    }
}

/// The storage a view needs: its last element's index plus one.
fn storage_len(v: &ViewOf) -> usize {
    (v.offset
        + v.size
            .iter()
            .zip(&v.stride)
            .map(|(n, s)| (n - 1) * s)
            .sum::<u64>()) as usize
        + 1
}

/// Compares the pair (a, b) as strided views, as a view against its C-order copy (both ways),
/// and as the two C-order copies: every way gives the same result, at each thread count.
fn assert_same_as_gathered(a: &StridedTensor, b: &StridedTensor, threads: &[usize]) {
    let (ga, gb) = (
        a.materialize(MAX_VIEW_GROWTH).unwrap(),
        b.materialize(MAX_VIEW_GROWTH).unwrap(),
    );
    for &t in threads {
        let want = compare_tensors_blas(&ga.view(), &gb.view(), t);
        let pairs = [
            (Side::strided(a), Side::strided(b)),
            (Side::strided(a), Side::view(gb.view())),
            (Side::view(ga.view()), Side::strided(b)),
        ];
        for (k, (x, y)) in pairs.iter().enumerate() {
            let got = compare_sides_blas(x, y, t);
            assert_eq!(
                cells(&got),
                cells(&want),
                "pair way {k}, {t} threads, {:?} / {:?}",
                a.layout(),
                b.layout()
            );
        }
    }
}

fn strided(name: &str, dtype: DType, values: &[f64], v: &ViewOf) -> StridedTensor {
    StridedTensor::from_storage(name, dtype, &encode(dtype, values), v).unwrap()
}

fn dtypes() -> impl Strategy<Value = (DType, DType)> {
    let one = prop::sample::select(vec![
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
    ]);
    // Mostly the same dtype on both sides (the common case), sometimes mixed.
    prop_oneof![
        3 => one.clone().prop_map(|d| (d, d)),
        1 => (one.clone(), one),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random shapes, strides (0 included), offsets, dtypes and values from [`POOL`]; the
    /// golden side either holds the same values at its own layout (inf/nan positions that
    /// match) or unrelated ones.
    #[test]
    fn paired_chunks_equal_the_gathered_views_bit_for_bit(
        dims in prop::collection::vec((1u64..6, 0u64..7, 0u64..7), 0..4),
        offsets in (0u64..4, 0u64..4),
        (da, db) in dtypes(),
        picks in prop::collection::vec(0usize..POOL.len(), 64),
        nudge in prop::collection::vec(prop::bool::ANY, 64),
        related in prop::bool::ANY,
    ) {
        let size: Vec<u64> = dims.iter().map(|d| d.0).collect();
        let va = view(&size, &dims.iter().map(|d| d.1).collect::<Vec<_>>(), offsets.0);
        let vb = view(&size, &dims.iter().map(|d| d.2).collect::<Vec<_>>(), offsets.1);
        let value = |i: usize| POOL[picks[i % picks.len()]];
        let xa: Vec<f64> = (0..storage_len(&va)).map(value).collect();
        let xb: Vec<f64> = (0..storage_len(&vb))
            .map(|i| {
                if related {
                    // The same logical element as side a where both layouts agree on it.
                    let v = value(i);
                    if v.is_finite() && nudge[i % nudge.len()] { v * 1.0009765625 } else { v }
                } else {
                    POOL[picks[(i * 7 + 3) % picks.len()]]
                }
            })
            .collect();
        let a = strided("a", da, &xa, &va);
        let b = strided("b", db, &xb, &vb);
        assert_same_as_gathered(&a, &b, &[1, 3]);
    }
}

/// Views spanning several of the pass's chunks (and OpenBLAS thread parts): a broadcast view
/// against a transposed one, both at offsets, with matching NaN/Inf columns; then one
/// mismatched NaN.
#[test]
fn views_over_many_chunks_equal_the_gathered_views() {
    let (rows, cols) = (700u64, 1001u64);
    // Side a: one row of `cols` values repeated `rows` times (stride 0), after 3 spare values.
    let row: Vec<f64> = (0..cols)
        .map(|j| match j % 97 {
            5 => f64::NAN,
            11 => f64::INFINITY,
            13 => 0.0,
            17 => 1.0e-41,
            _ => ((j as f64) * 0.37).sin() * 3.0,
        })
        .collect();
    let mut sa = vec![9.0; 3];
    sa.extend(&row);
    let va = view(&[rows, cols], &[0, 1], 3);
    // Side b: a (cols, rows) C-order array transposed, its values those of a, nudged.
    let mut sb = vec![0.0; 1];
    for j in 0..cols {
        for i in 0..rows {
            let v = row[j as usize];
            sb.push(if v.is_finite() && (i + j) % 3 == 0 {
                v * (1.0 + 4e-4 * (i % 5) as f64)
            } else {
                v
            });
        }
    }
    let vb = view(&[rows, cols], &[1, rows], 1);
    for dt in [DType::F32, DType::BF16, DType::F64] {
        let a = strided("a", dt, &sa, &va);
        let b = strided("b", dt, &sb, &vb);
        assert_same_as_gathered(&a, &b, &[1, 2, 7]);
        let got = compare_sides_blas(&Side::strided(&a), &Side::strided(&b), 2);
        assert!(!got.error_flag, "{dt:?}: {}", cells(&got));
    }
    // One NaN where side a has a finite value: every metric is N/A, as for the copies.
    let mut sb2 = sb.clone();
    sb2[1 + 3 * rows as usize + 200] = f64::NAN;
    let a = strided("a", DType::F32, &sa, &va);
    let b = strided("b", DType::F32, &sb2, &vb);
    assert_same_as_gathered(&a, &b, &[2]);
    let got = compare_sides_blas(&Side::strided(&a), &Side::strided(&b), 2);
    assert!(got.error_flag && format!("{:?}", got.values[0]).contains("N/A"));
}

/// A 0-d view and a one-element view of a larger storage take the scalar and length-1 paths.
#[test]
fn scalar_and_single_element_views() {
    let s = [1.5, -2.0, 0.0];
    let a = strided("a", DType::F32, &s, &view(&[], &[], 1));
    let b = strided("b", DType::F32, &s, &view(&[], &[], 2));
    assert_same_as_gathered(&a, &b, &[1]);
    let a = strided("a", DType::F16, &s, &view(&[1, 1], &[0, 5], 0));
    let b = strided("b", DType::F16, &s, &view(&[1, 1], &[3, 0], 1));
    assert_same_as_gathered(&a, &b, &[1]);
}
