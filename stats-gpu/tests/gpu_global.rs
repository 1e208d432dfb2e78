//! The process-wide [`Gpu::global`] with its default chunk (128 MiB on lavapipe, 1 GiB on real
//! GPUs): realistic sizes, a large batch in one dispatch, resident data, and (behind
//! NUMPROBE_GPU_HUGE=1) a tensor larger than 1 GiB.

mod gpu_common;

use gpu_common::{Rng, check, random_bytes};
use stats_gpu::gpu::{Gpu, GpuOptions};
use stats_gpu::{ElemType, TensorView};
use testsupport::gpu;

/// Tests of this binary take turns, so that one can count the Gpu's submissions.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn global_is_one_instance_and_reports_its_adapter() {
    let _turn = serial();
    let Some(g) = gpu(GpuOptions::default) else {
        return;
    };
    let global = Gpu::global().expect("global Gpu");
    assert!(std::ptr::eq(global, Gpu::global().unwrap()));
    assert_eq!(global.adapter_info().name, g.adapter_info().name);
    assert!(g.chunk_bytes() >= 1 << 20 && g.chunk_bytes() <= 1 << 30);
    assert_eq!(g.chunk_bytes() % (1 << 20), 0);
}

#[test]
fn sixteen_mib_per_type() {
    let _turn = serial();
    let Some(g) = gpu(GpuOptions::default) else {
        return;
    };
    let mut rng = Rng(0x1234_5678);
    for (elem, scale) in [
        (ElemType::F32, 1e4),
        (ElemType::F16, 100.0),
        (ElemType::BF16, 1e30),
    ] {
        let n = (16 << 20) / elem.size() - 3;
        let mut bytes = random_bytes(elem, n, scale, &mut rng);
        // One NaN near the end, past the last whole word.
        let s = elem.size();
        bytes[(n - 1) * s..].fill(0xff);
        let shape = [n];
        let view = TensorView::new(elem, &shape, &bytes).unwrap();
        check(&g.partials(&view).unwrap(), &view).unwrap();
        let t = g.upload(&view).unwrap();
        check(&g.partials_resident(&t).unwrap(), &view).unwrap();
    }
}

#[test]
fn big_batch_is_one_dispatch_and_matches() {
    let _turn = serial();
    let Some(g) = gpu(GpuOptions::default) else {
        return;
    };
    let mut rng = Rng(99);
    let types = [ElemType::F32, ElemType::F16, ElemType::BF16];
    let data: Vec<(ElemType, Vec<u8>, [usize; 1])> = (0..1500)
        .map(|i| {
            let elem = types[i % 3];
            let n = [4096, 1, 0, 777, 20_000][i % 5];
            (elem, random_bytes(elem, n, 10.0, &mut rng), [n])
        })
        .collect();
    let views: Vec<TensorView> = data
        .iter()
        .map(|(e, b, s)| TensorView::new(*e, s, b).unwrap())
        .collect();
    let before = g.submissions();
    let got = g.partials_batch(&views).unwrap();
    // 1500 tensors, ~37 MiB: one chunk, so one submission (upload copy + dispatch + readback).
    assert_eq!(g.submissions() - before, 1);
    for (p, v) in got.iter().zip(&views) {
        check(p, v).unwrap();
    }
}

#[test]
fn huge_tensor_over_one_gib_when_asked() {
    if std::env::var("NUMPROBE_GPU_HUGE").as_deref() != Ok("1") {
        eprintln!("NUMPROBE_GPU_HUGE=1 not set: the >1 GiB case is not run");
        return;
    }
    let _turn = serial();
    let Some(g) = gpu(GpuOptions::default) else {
        return;
    };
    let n = (1usize << 28) + (1 << 24) + 5; // 1.06 GiB of f32
    let mut rng = Rng(5);
    let bytes = random_bytes(ElemType::F32, n, 1.0, &mut rng);
    let shape = [n];
    let view = TensorView::new(ElemType::F32, &shape, &bytes).unwrap();
    check(&g.partials(&view).unwrap(), &view).unwrap();
}
