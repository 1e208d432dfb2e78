//! Instance, adapter and device setup, kept apart from the kernels.

use super::{AdapterChoice, GpuError};

/// The device and what we learned about it when it was opened.
pub(crate) struct Context {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// TIMESTAMP_QUERY was available and enabled.
    pub timestamps: bool,
    /// TIMESTAMP_QUERY_INSIDE_ENCODERS too (timing copies).
    pub encoder_timestamps: bool,
}

/// Why no adapter matched, with the driver a reader should install.
fn no_adapter(detail: &str) -> GpuError {
    GpuError::NoAdapter(format!(
        "{detail}; install a Vulkan driver (on Debian/Ubuntu without a GPU: \
         `apt-get install mesa-vulkan-drivers libvulkan1` for lavapipe; on NVIDIA: the Vulkan ICD, \
         libvulkan1 and libglvnd0/libglx0/libegl1), or point VK_DRIVER_FILES at its ICD json"
    ))
}

fn pick(adapters: Vec<wgpu::Adapter>, choice: &AdapterChoice) -> Result<wgpu::Adapter, GpuError> {
    let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let wanted: Box<dyn Fn(&wgpu::Adapter) -> bool> = match choice {
        AdapterChoice::Auto => Box::new(|_| true),
        AdapterChoice::Cpu => Box::new(|a| a.get_info().device_type == wgpu::DeviceType::Cpu),
        // Our own matching: wgpu's helper panics when nothing matches.
        AdapterChoice::NameContains(name) => {
            let name = name.to_lowercase();
            Box::new(move |a| a.get_info().name.to_lowercase().contains(&name))
        }
    };
    adapters
        .into_iter()
        .filter(|a| wanted(a))
        .min_by_key(rank)
        .ok_or_else(|| {
            if names.is_empty() {
                no_adapter("no Vulkan adapter found")
            } else {
                no_adapter(&format!(
                    "no Vulkan adapter matches {choice:?} (found: {})",
                    names.join(", ")
                ))
            }
        })
}

impl Context {
    pub fn open(choice: &AdapterChoice) -> Result<Context, GpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        // Only Vulkan is compiled in; an env override to another backend then finds nothing,
        // which the error names.
        if desc.backends.is_empty() {
            desc.backends = wgpu::Backends::VULKAN;
        }
        let instance = wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let adapter = pick(adapters, choice)?;
        let info = adapter.get_info();
        // The default limits cap bindings at 128 MiB and buffers at 256 MiB: take the adapter's.
        let limits = adapter.limits();
        // Timestamps only serve benchmarks; ask for them when they are there.
        let wanted =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        let required_features = adapter.features() & wanted;
        let timestamps = required_features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let encoder_timestamps = timestamps
            && required_features.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("numprobe stats"),
            required_features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::Device(format!("request_device on {}: {e}", info.name)))?;
        Ok(Context {
            device,
            queue,
            info,
            limits,
            timestamps,
            encoder_timestamps,
        })
    }
}
