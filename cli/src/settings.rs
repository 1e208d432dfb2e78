//! The environment variables the CLI reads, all of them, in one place (the README lists them).
//! The library crates read none: each takes these as options.

/// `WGPU_ADAPTER_NAME`: a case-insensitive part of the name of the adapter the GPU paths open
/// (`numprobe stats --device gpu|auto`, tensor-mode `compare`); unset or empty: the best one
/// (discrete before integrated before a CPU adapter). wgpu itself reads `WGPU_BACKEND`.
pub fn adapter_name() -> Option<String> {
    std::env::var("WGPU_ADAPTER_NAME")
        .ok()
        .filter(|name| !name.is_empty())
}
