//! `numprobe stats <file>`: the statistics msprobe would record for one tensor file, as one JSON
//! object with msprobe's keys. The file is memory-mapped and read once.

use super::CmdResult;
use clap::ValueEnum;
use stats_gpu::{Backend, Exactness, Flavour, Options, Precision, SummaryMode};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A `.pt` (torch.save) or `.npy` file.
    pub file: PathBuf,
    /// Where the reduction runs; `auto` uses a GPU for large tensors when one is present.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// msprobe's `summary_mode`: `md5` adds the CRC-32, `xor` replaces the four statistics.
    #[arg(long, value_enum, default_value_t = SummaryArg::Statistics)]
    pub summary: SummaryArg,
    /// msprobe's `precision` option.
    #[arg(long, value_enum, default_value_t = PrecisionArg::Low)]
    pub precision: PrecisionArg,
    /// Whose rules to follow; by default `.pt` files follow PyTorch's and `.npy` MindSpore's.
    #[arg(long, value_enum)]
    pub framework: Option<FrameworkArg>,
    /// float32 Mean/Norm under PyTorch's rules: `torch-cpu` sums in the order of PyTorch's CPU
    /// kernels (msprobe's bits for CPU tensors), `rounded` in f64 rounded once.
    #[arg(long, value_enum, default_value_t = ExactnessArg::TorchCpu)]
    pub exactness: ExactnessArg,
    /// torch threads of the run that made the tensor (`torch.get_num_threads()`), for
    /// `--exactness torch-cpu`; matters for tensors of 32768 elements and more.
    #[arg(long, default_value_t = 1)]
    pub torch_threads: usize,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Gpu,
    Auto,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SummaryArg {
    Statistics,
    Md5,
    Xor,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum PrecisionArg {
    Low,
    High,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum FrameworkArg {
    Pytorch,
    Mindspore,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ExactnessArg {
    TorchCpu,
    Rounded,
}

fn default_flavour(path: &Path) -> Flavour {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("npy") => Flavour::MindSpore,
        _ => Flavour::PyTorch,
    }
}

pub fn run(args: Args) -> CmdResult {
    let tensor = dumpfmt::tensor::read_tensor(&args.file)?;
    let opts = Options {
        mode: match args.summary {
            SummaryArg::Statistics => SummaryMode::Statistics,
            SummaryArg::Md5 => SummaryMode::Md5,
            SummaryArg::Xor => SummaryMode::Xor,
        },
        precision: match args.precision {
            PrecisionArg::Low => Precision::Low,
            PrecisionArg::High => Precision::High,
        },
        flavour: match args.framework {
            Some(FrameworkArg::Pytorch) => Flavour::PyTorch,
            Some(FrameworkArg::Mindspore) => Flavour::MindSpore,
            None => default_flavour(&args.file),
        },
        backend: match args.device {
            DeviceArg::Cpu => Backend::Cpu,
            DeviceArg::Gpu => Backend::Gpu,
            DeviceArg::Auto => Backend::Auto,
        },
        exact: match args.exactness {
            ExactnessArg::TorchCpu => Exactness::TorchCpu {
                threads: args.torch_threads,
            },
            ExactnessArg::Rounded => Exactness::Rounded,
        },
    };
    // float8 tensors give msprobe's record without statistics (four nulls).
    let record = super::stats_engine().compute(&tensor.view(), &opts)?;
    println!("{record}");
    Ok(ExitCode::SUCCESS)
}
