//! msprobe's accuracy standards in Rust: the metrics and the verdict run_ut / acc_check give a
//! device output against its benchmark (cosine, max abs error, the dual ratios, and the
//! benchmark, absolute threshold, binary consistency, ULP, thousandths and accumulative error
//! standards), the routing of APIs to standards, and api_precision_compare — matching
//! msprobe 26.2.0 cell for cell, CSV text included (see `shared/spec/accuracy-standards.md`
//! §1-§4).
//!
//! One call judges two `ndarray` arrays ([`check()`]); [`check_output`] does the same for two
//! borrowed [`TensorView`]s (a memory-mapped dump file, a framework tensor's memory), and
//! [`all_metrics`] gives the metrics alone. All of them read the pair once, in parallel, and
//! reproduce numpy's float32 summation order bit for bit.
//!
//! ```
//! use ndarray::array;
//!
//! let bench = array![[1.0f64, 2.0], [3.0, 4.0]];
//! let device = array![[1.0f32, 2.0], [3.0, 4.01]];
//! let verdict = ulp::check("add", &bench, &device, ulp::CheckOptions::default()).unwrap();
//! assert_eq!(verdict.status, ulp::Status::Error);
//! assert_eq!(verdict.standard, Some(ulp::Standard::Benchmark));
//! ```
//!
//! # Modules
//!
//! * [`check`](mod@check): one output pair → [`Verdict`] (status, standard, metrics) and the
//!   detail CSV row; [`rollup_statuses`] for an API's outputs.
//! * [`metrics`]: every standard's metrics of a float pair ([`all_metrics`]), typed as msprobe
//!   returns them.
//! * [`fused`]: the one-pass CPU kernel behind the metrics, its thresholds ([`fused::Params`])
//!   and the single-thread pool run_ut's replay uses.
//! * `gpu` (feature `gpu`): the same pass on a GPU through stats-gpu's pair kernel.
//! * [`reference`](mod@reference): a plain, array-at-a-time transcription of msprobe's numpy
//!   code, the oracle the fused pass is tested against.
//! * [`routing`]: the standards and which one judges an API ([`standard_for`]).
//! * [`precision_compare`]: api_precision_compare over two acc_check detail CSVs.
//! * [`elem`]: numpy's float arithmetic (rounding, summation order, promotion) on
//!   [`DType`].
//! * [`pyfmt`]: cells typed as Python / numpy values ([`PyVal`]) and their CSV text.

pub mod check;
pub mod elem;
pub mod fused;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod metrics;
pub mod precision_compare;
pub mod pyfmt;
pub mod reference;
pub mod routing;

pub use check::{
    CheckError, CheckOptions, DETAIL_HEADER, DetailRow, Output, Status, Verdict, check,
    check_output, rollup_statuses,
};
pub use fused::DeviceFamily;
pub use metrics::{AllMetrics, MetricsError, all_metrics, all_metrics_shaped, fp8_ulp_errors};
pub use pyfmt::PyVal;
pub use routing::{Routing, Standard, bare_api_name, standard_for};

// The types of the public API, so an embedder names the same versions.
pub use numprobe_tensor::{self, DType, Elems, TensorView, ndarray};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
