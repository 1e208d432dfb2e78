//! One module per subcommand. Each returns `Ok(exit code)` for a finished run (1 when it found
//! problems) and `Err` when it could not do its job (exit 2).

pub mod acc_check;
pub mod compare;
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

/// Writes `bytes` to `path` through a temporary file in the same directory, so an interrupted or
/// failed write never leaves a half-written file where a good one stood.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
