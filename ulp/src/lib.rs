//! msprobe's accuracy checker metrics (run_ut / acc_check detail rows), the ULP error, the
//! routing of APIs to accuracy standards, and api_precision_compare — matching msprobe 26.2.0
//! cell for cell (see `shared/spec/accuracy-standards.md` §1-§4).

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
    ArrayData, CheckOptions, DETAIL_HEADER, DetailRow, TensorRef, check_output, rollup_statuses,
};
pub use fused::DeviceFamily;
pub use metrics::{
    AllMetrics, FloatData, MetricsError, all_metrics, all_metrics_shaped, fp8_ulp_errors,
};
pub use pyfmt::PyVal;
pub use routing::{Routing, Standard, TorchDtype, bare_api_name, standard_for};
