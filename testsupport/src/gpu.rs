//! The Gpu of a test binary. A missing adapter fails the test (naming the missing driver) unless
//! `NUMPROBE_ALLOW_NO_GPU=1`, so no GPU test passes by skipping on its own.

use std::sync::OnceLock;

use stats_gpu::gpu::{Gpu, GpuError, GpuOptions};

/// Opens a Gpu for a test: with no adapter the test fails naming the missing driver, unless the
/// caller opted out with `NUMPROBE_ALLOW_NO_GPU=1`, in which case this says so on stderr and
/// returns `None` (the test then returns early). Any other error fails, opt-out or not.
pub fn open_gpu(opts: GpuOptions) -> Option<Gpu> {
    match Gpu::new(opts) {
        Ok(g) => Some(g),
        Err(e @ GpuError::NoAdapter(_))
            if std::env::var("NUMPROBE_ALLOW_NO_GPU").is_ok_and(|v| v == "1") =>
        {
            eprintln!("NUMPROBE_ALLOW_NO_GPU=1: GPU test not run: {e}");
            None
        }
        Err(e @ GpuError::NoAdapter(_)) => {
            panic!("{e} (set NUMPROBE_ALLOW_NO_GPU=1 to allow running without a GPU)")
        }
        Err(e) => panic!("{e}"),
    }
}

/// The one Gpu of a test binary, opened on first use with `opts` (later calls get the same one,
/// whatever options they pass: a test binary is one process and opens one Gpu), under
/// [`open_gpu`]'s rules.
pub fn gpu(opts: impl FnOnce() -> GpuOptions) -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| open_gpu(opts())).as_ref()
}

/// Two workgroups: lavapipe runs fastest with few, and each invocation then covers several
/// elements, as on a real GPU with big tensors.
pub fn few_workgroups() -> GpuOptions {
    GpuOptions {
        workgroups: Some(2),
        ..GpuOptions::default()
    }
}
