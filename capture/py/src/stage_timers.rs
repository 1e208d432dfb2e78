//! Time spent in each stage of a recorded API call, for `benches/peers/capture_stages.py`:
//! compiled in with the `stage-timers` feature only (a lap is two clock reads, ≈ 40 ns, on
//! the path it measures); without it every call here is empty and `stage_times()` gives
//! nothing.

/// The stages of [`crate::api_call::ApiCalls::call`] and of a backward hook.
#[derive(Clone, Copy)]
pub(crate) enum Stage {
    /// Counter, entry name, session, call-site key of the stack.
    Head,
    /// The input values walked and their records written as text (statistics included).
    InputWalk,
    /// The input entry journaled and merged into the dump.
    InputCommit,
    /// Device statistics read back past their bound; a new call site's frames recorded.
    StackRecord,
    /// The API itself.
    Run,
    OutputWalk,
    OutputCommit,
    /// The gradient function looked up and the backward hook registered on it.
    HookRegister,
    /// A backward hook's call, from autograd: the gradients walked and committed.
    BackwardHook,
    /// Statistics of tensors read in place, and their records (inside the walks above).
    Statistics,
}

const NAMES: [&str; 10] = [
    "head",
    "input_walk",
    "input_commit",
    "stack_record",
    "run",
    "output_walk",
    "output_commit",
    "hook_register",
    "backward_hook",
    "statistics",
];

#[cfg(feature = "stage-timers")]
mod on {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    use super::{NAMES, Stage};

    static NS: [AtomicU64; NAMES.len()] = [const { AtomicU64::new(0) }; NAMES.len()];
    static COUNT: [AtomicU64; NAMES.len()] = [const { AtomicU64::new(0) }; NAMES.len()];

    pub(crate) struct Lap(Instant);

    impl Lap {
        pub(crate) fn start() -> Lap {
            Lap(Instant::now())
        }

        /// Adds the time since the last lap (or the start) to `stage`.
        pub(crate) fn lap(&mut self, stage: Stage) {
            let now = Instant::now();
            let ns = u64::try_from((now - self.0).as_nanos()).unwrap_or(u64::MAX);
            NS[stage as usize].fetch_add(ns, Ordering::Relaxed);
            COUNT[stage as usize].fetch_add(1, Ordering::Relaxed);
            self.0 = now;
        }
    }

    pub(crate) fn take() -> Vec<(&'static str, u64, u64)> {
        NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let ns = NS[i].swap(0, Ordering::Relaxed);
                (*n, ns, COUNT[i].swap(0, Ordering::Relaxed))
            })
            .collect()
    }
}

#[cfg(not(feature = "stage-timers"))]
mod on {
    use super::Stage;

    pub(crate) struct Lap;

    impl Lap {
        #[inline(always)]
        pub(crate) fn start() -> Lap {
            Lap
        }

        #[inline(always)]
        pub(crate) fn lap(&mut self, _stage: Stage) {}
    }

    pub(crate) fn take() -> Vec<(&'static str, u64, u64)> {
        let _ = super::NAMES;
        Vec::new()
    }
}

pub(crate) use on::Lap;

/// `[(stage, nanoseconds, laps)]` since the last call, reset to zero; empty in a build
/// without the `stage-timers` feature.
#[pyo3::pyfunction]
pub(crate) fn stage_times() -> Vec<(&'static str, u64, u64)> {
    on::take()
}
