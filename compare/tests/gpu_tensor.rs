//! Tensor mode on the GPU (`compare_tensors_gpu`) against the CPU path, cell by cell, for
//! float32 / float16 / bfloat16 pairs in every combination, over many small chunks. MaxAbsErr,
//! MaxRelativeErr and the two ratios are exact; Cosine (printed to 12 decimals) is allowed one
//! unit of the 12th decimal, EucDist (printed in full) 1e-13 relative: both are float64 sums
//! whose order differs between the paths (as it does between the CPU path and numpy's BLAS).

use compare::cell::Cell;
use compare::tensor::gpu::{Backend, Engine};
use compare::tensor::{TensorResult, compare_tensors, compare_tensors_gpu, compare_tensors_on};
use dumpfmt::{DType, TensorView};
use half::{bf16, f16};
use proptest::prelude::*;
use stats_gpu::gpu::Gpu;
use testsupport::{few_workgroups, gpu};

/// Bytes of `v` in `dtype`, in a u32-aligned buffer (as a mapped .npy/.pt payload is).
fn encode(v: &[f32], dtype: DType) -> Vec<u32> {
    let bytes: Vec<u8> = match dtype {
        DType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::F16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
        _ => unreachable!(),
    };
    let mut words = vec![0u32; bytes.len().div_ceil(4)];
    bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    words
}

fn raw<'a>(dtype: DType, shape: &'a [usize], words: &'a [u32], n: usize) -> TensorView<'a> {
    TensorView::new(
        dtype,
        shape,
        &bytemuck::cast_slice(words)[..n * dtype.size()],
    )
    .unwrap()
}

fn same(g: &TensorResult, c: &TensorResult) {
    assert_eq!(g.err_msg, c.err_msg);
    assert_eq!(g.error_flag, c.error_flag);
    for (k, (a, b)) in g.values.iter().zip(&c.values).enumerate() {
        match (k, a, b) {
            // One unit of the 12th decimal, counted in units: two values rounded to 12
            // decimals differ by that unit plus their binary representation error (up to
            // an ulp each, 1.1e-16 near 1), so an absolute bound just above 1e-12 is too
            // tight (0.858663840327 against 0.858663840326 exceeded 1.000001e-12).
            (0, Cell::Float(x), Cell::Float(y)) => {
                assert!(((x - y).abs() * 1e12).round() <= 1.0, "Cosine {x} vs {y}")
            }
            (1, Cell::Float(x), Cell::Float(y)) => assert!(
                (x - y).abs() <= 1e-13 * x.abs().max(*y),
                "EucDist {x} vs {y}"
            ),
            _ => assert_eq!(a, b, "column {k}"),
        }
    }
}

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn check(gpu: &Gpu, npu: &[f32], bench: &[f32], nd: DType, bd: DType, chunk: usize) {
    let n = npu.len();
    let shape = [n];
    let (nw, bw) = (encode(npu, nd), encode(bench, bd));
    let (nt, bt) = (raw(nd, &shape, &nw, n), raw(bd, &shape, &bw, n));
    let g = compare_tensors_gpu(&nt, &bt, gpu, chunk);
    let c = compare_tensors(&nt, &bt);
    same(&g, &c);
}

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -10f32..10f32,
        1 => -1e-3f32..1e-3f32,
        1 => prop::sample::select(vec![0.0f32, -0.0, 1.0, 1e-6, 3e4, -2.5e-5]),
    ]
}

fn pair() -> impl Strategy<Value = (f32, f32)> {
    value().prop_flat_map(|b| {
        prop_oneof![
            2 => Just(b),
            3 => prop::sample::select(vec![1e-4f32, 1e-3, 5e-3, -2e-3, 0.3])
                .prop_map(move |r| b * (1.0 + r)),
            1 => value(),
        ]
        .prop_map(move |n| (n, b))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    #[test]
    fn cells_match_cpu(
        pairs in prop::collection::vec(pair(), 2..1500),
        nd in 0usize..3,
        bd in 0usize..3,
        chunk in 64usize..600,
    ) {
        let Some(gpu) = gpu(few_workgroups) else { return Ok(()) };
        let (npu, bench): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
        check(gpu, &npu, &bench, DTYPES[nd], DTYPES[bd], chunk);
    }
}

#[test]
fn every_dtype_pair_over_many_chunks() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    let n = 20_001;
    let bench: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 2003) as f32 - 1000.0) * 1e-3)
        .collect();
    let npu: Vec<f32> = bench
        .iter()
        .enumerate()
        .map(|(i, &b)| b * (1.0 + (i % 9) as f32 * 7e-4))
        .collect();
    for nd in DTYPES {
        for bd in DTYPES {
            check(gpu, &npu, &bench, nd, bd, 1024);
        }
    }
    // The cells are not trivial: some elements sit on each side of both ratio thresholds.
    let shape = [n];
    let (nw, bw) = (encode(&npu, DType::F32), encode(&bench, DType::F32));
    let r = compare_tensors_gpu(
        &raw(DType::F32, &shape, &nw, n),
        &raw(DType::F32, &shape, &bw, n),
        gpu,
        1024,
    );
    match (&r.values[4], &r.values[5]) {
        (Cell::Float(a), Cell::Float(b)) => assert!(0.0 < *a && a < b && *b < 1.0, "{a} {b}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn tiny_differences_and_special_values_keep_the_cpu_cells() {
    let Some(gpu) = gpu(few_workgroups) else {
        return;
    };
    // Differences below 2^-40 (scaled sum), a zero bench (eps rule), and then inf / NaN
    // (handed to the CPU path, which zeroes matching positions).
    let bench: Vec<f32> = (0..500).map(|i| 1e-3 + i as f32 * 1e-6).collect();
    let mut npu: Vec<f32> = bench
        .iter()
        .map(|&b| f32::from_bits(b.to_bits() + 1))
        .collect();
    npu[3] = 1e-30;
    let mut bench0 = bench.clone();
    bench0[7] = 0.0;
    check(gpu, &npu, &bench0, DType::F32, DType::F32, 128);
    let tiny_b: Vec<f32> = bench.iter().map(|&b| b * 1e-20).collect();
    let tiny_n: Vec<f32> = npu.iter().map(|&b| b * 1e-20).collect();
    check(gpu, &tiny_n, &tiny_b, DType::F32, DType::F32, 128);
    let mut inf_n = npu.clone();
    let mut inf_b = bench.clone();
    inf_n[5] = f32::INFINITY;
    inf_b[5] = f32::INFINITY;
    inf_n[9] = f32::NAN;
    inf_b[9] = f32::NAN;
    check(gpu, &inf_n, &inf_b, DType::F32, DType::F32, 128);
    inf_b[9] = 1.0;
    check(gpu, &inf_n, &inf_b, DType::F32, DType::F32, 128);
    let zeros = vec![0.0f32; 300];
    check(gpu, &zeros, &bench[..300], DType::F32, DType::F32, 128);
    check(gpu, &zeros, &zeros, DType::F32, DType::F32, 128);
}

#[test]
fn auto_keeps_small_pairs_and_cpu_adapters_on_the_cpu() {
    // Runs without a GPU too: Auto never takes a CPU adapter or a small pair.
    let bench: Vec<f32> = (0..100).map(|i| i as f32 * 0.5).collect();
    let npu: Vec<f32> = bench.iter().map(|&b| b + 0.01).collect();
    let shape = [100];
    let (nw, bw) = (encode(&npu, DType::F32), encode(&bench, DType::F32));
    let (nt, bt) = (
        raw(DType::F32, &shape, &nw, 100),
        raw(DType::F32, &shape, &bw, 100),
    );
    let engine = Engine::new(Backend::Auto);
    let auto = compare_tensors_on(&nt, &bt, &engine);
    let cpu = compare_tensors_on(&nt, &bt, &Engine::new(Backend::Cpu));
    assert_eq!(format!("{auto:?}"), format!("{cpu:?}"));
}
