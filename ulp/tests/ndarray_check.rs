//! `ulp::check` on ndarray arrays: the same verdict as `check_output` on views (itself checked
//! against msprobe's vectors) for every vector case, bf16 arrays widened as msprobe widens them,
//! any memory layout, and the views `check_output` has to copy.

mod common;

use common::*;
use ndarray::{Array2, ArrayD, IxDyn, array};
use ulp::numprobe_tensor::{Complex32, bf16};
use ulp::{CheckError, CheckOptions, DType, Output, Standard, Status, TensorView, Verdict};

fn arr<T: Clone>(v: &[T], shape: &[usize]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap()
}

/// `ulp::check` on the vector arrays; a bf16 device output becomes a bf16 array (its float32
/// values are bf16 values, so exactly).
fn check_arrays(
    api: &str,
    (b, bshape): (&Owned, &[usize]),
    (d, dshape): (&Owned, &[usize]),
    bf16_device: bool,
    opts: CheckOptions,
) -> Verdict {
    macro_rules! with_bench {
        ($bench:expr) => {
            match d {
                Owned::F32(v) if bf16_device => {
                    let v: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
                    ulp::check(api, &$bench, &arr(&v, dshape), opts)
                }
                Owned::F16(v) => ulp::check(api, &$bench, &arr(v, dshape), opts),
                Owned::F32(v) => ulp::check(api, &$bench, &arr(v, dshape), opts),
                Owned::F64(v) => ulp::check(api, &$bench, &arr(v, dshape), opts),
                _ => panic!("float vectors only"),
            }
        };
    }
    let verdict = match b {
        Owned::F16(v) => with_bench!(arr(v, bshape)),
        Owned::F32(v) => with_bench!(arr(v, bshape)),
        Owned::F64(v) => with_bench!(arr(v, bshape)),
        _ => panic!("float vectors only"),
    };
    verdict.unwrap()
}

#[test]
fn arrays_give_the_views_verdict_for_every_vector_case() {
    let v = vectors("run_ut_metrics.json");
    let cases = v["cases"].as_array().unwrap();
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let api = case["api_name"].as_str().unwrap();
        let (b, bshape) = array(&case["inputs"]["bench"]);
        let (d, dshape) = array(&case["inputs"]["device"]);
        let ddtype = DType::from_numpy_name(case["device_dtype"].as_str().unwrap()).unwrap();
        let opts = CheckOptions::default();
        let want = ulp::check_output(
            api,
            Output::new(b.view(&bshape)),
            Output::with_dtype(d.view(&dshape), ddtype),
            opts,
        )
        .unwrap();
        let got = check_arrays(
            api,
            (&b, &bshape),
            (&d, &dshape),
            ddtype == DType::BF16,
            opts,
        );
        // Debug text: NaN cells are equal there.
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{id}");
        assert_eq!(got.status.as_str(), got.row.status, "{id}");
        // Every standard's metrics: the same row and status.
        let all = CheckOptions {
            all_standards: true,
            ..opts
        };
        let wide = check_arrays(
            api,
            (&b, &bshape),
            (&d, &dshape),
            ddtype == DType::BF16,
            all,
        );
        assert_eq!(
            format!("{:?}", (wide.status, &wide.row)),
            format!("{:?}", (got.status, &got.row)),
            "{id}"
        );
        if !d.as_f64().is_empty() && ddtype != DType::F64 {
            let m = wide.metrics.as_ref().unwrap();
            assert!(
                m.absolute_threshold.is_some() && m.accumulative.is_some(),
                "{id}"
            );
        }
    }
}

#[test]
fn layout_does_not_matter() {
    let bench = Array2::from_shape_fn((48, 64), |(i, j)| ((i * 64 + j) as f64 * 0.37).sin());
    let device = bench.mapv(|x| (x * (1.0 + 3e-4)) as f32);
    let opts = CheckOptions::default();
    let transposed = ulp::check("add", &bench.t(), &device.t(), opts).unwrap();
    let copied = ulp::check(
        "add",
        &bench.t().as_standard_layout(),
        &device.t().as_standard_layout(),
        opts,
    )
    .unwrap();
    assert_eq!(transposed, copied);
    assert_eq!(transposed.row.dims, [64, 48]);
    assert_eq!(transposed.standard, Some(Standard::Benchmark));
}

#[test]
fn integer_outputs_and_rejected_dtypes() {
    let opts = CheckOptions::default();
    let v = ulp::check("eq", &array![1i64, 2, 3], &array![1i64, 2, 4], opts).unwrap();
    assert_eq!(v.status, Status::Error);
    assert_eq!(v.standard, Some(Standard::BinaryConsistency));
    assert!(v.metrics.is_none());
    assert_eq!(
        v.row.message,
        "Current int64 data, only perform binary comparison."
    );
    let q = ulp::check("npu_dynamic_quant", &array![1i8, 5], &array![2i8, 5], opts).unwrap();
    assert_eq!((q.status, q.standard), (Status::Pass, None));
    let c = [Complex32::new(1.0, 0.0)];
    let err = ulp::check("add", &array![1.0f32], &ndarray::arr1(&c), opts).unwrap_err();
    assert_eq!(
        err,
        CheckError::UnsupportedDtype {
            side: "device",
            dtype: DType::C64
        }
    );
    let empty = ulp::check(
        "add",
        &ArrayD::<f32>::zeros(vec![0, 3]),
        &ArrayD::<f32>::zeros(vec![0, 3]),
        opts,
    )
    .unwrap();
    assert_eq!((empty.status, empty.standard), (Status::Skip, None));
}

#[test]
fn unaligned_and_odd_bool_views_are_copied() {
    let bench: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.1).cos()).collect();
    let device: Vec<f32> = bench.iter().map(|&x| (x * (1.0 + 2e-4)) as f32).collect();
    let shape = [1000];
    let aligned = TensorView::from_slice(&shape, &device).unwrap();
    // The same bytes one or two bytes off a 4-byte boundary.
    let mut buf = vec![0u8; 4000 + 2];
    let off = if (buf.as_ptr() as usize + 1).is_multiple_of(4) {
        2
    } else {
        1
    };
    buf[off..off + 4000].copy_from_slice(aligned.bytes());
    let unaligned = TensorView::new(DType::F32, &shape, &buf[off..off + 4000]).unwrap();
    assert!(unaligned.typed::<f32>().is_err());
    let b = Output::new(TensorView::from_slice(&shape, &bench).unwrap());
    let opts = CheckOptions::default();
    assert_eq!(
        ulp::check_output("add", b, Output::new(unaligned), opts),
        ulp::check_output("add", b, Output::new(aligned), opts)
    );
    // A bool byte other than 0 or 1 reads as true.
    let odd = [0u8, 2, 1];
    let odd = TensorView::new(DType::Bool, &[3], &odd).unwrap();
    let plain = [false, true, true];
    let plain = TensorView::from_slice(&[3], &plain).unwrap();
    let v = ulp::check_output("eq", Output::new(plain), Output::new(odd), opts).unwrap();
    assert_eq!(v.status, Status::Pass);
}
