//! One module per subcommand. Each returns `Ok(exit code)` for a finished run (1 when it found
//! problems) and `Err` when it could not do its job (exit 2).

pub mod acc_check;
pub mod compare;
pub mod compare_run;
pub mod fmt;
pub mod inspect;
pub mod precision_compare;
pub mod recover;
pub mod stats;
pub mod validate;

/// Any error a subcommand reports; the chain of sources is printed by `main`.
pub type CmdError = Box<dyn std::error::Error + Send + Sync>;
pub type CmdResult = Result<std::process::ExitCode, CmdError>;

/// The statistics engine of a command: its GPU, opened on first use, is the adapter
/// [`crate::settings::adapter_name`] names, else the best one.
pub fn stats_engine() -> stats_gpu::Engine<'static> {
    #[cfg(feature = "gpu")]
    {
        use stats_gpu::gpu::{AdapterChoice, GpuOptions};
        let adapter = match crate::settings::adapter_name() {
            Some(name) => AdapterChoice::NameContains(name),
            None => AdapterChoice::Auto,
        };
        stats_gpu::Engine::with_gpu_options(GpuOptions {
            adapter,
            ..GpuOptions::default()
        })
    }
    #[cfg(not(feature = "gpu"))]
    stats_gpu::Engine::new()
}
