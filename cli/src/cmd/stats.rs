//! `numprobe stats <file>`: the statistics msprobe would record for one tensor file, as one JSON
//! object with msprobe's keys. The file is memory-mapped and read once; a strided `.pt` view
//! (sliced, transposed, broadcast) is read through its strides a chunk at a time, never
//! gathered whole.

use super::CmdResult;
use clap::ValueEnum;
use dumpfmt::pt::{CHUNK_ELEMS, Stored, StridedTensor};
use stats_gpu::{Backend, Exactness, Flavour, Options, Precision, Streamed, SummaryMode};
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

/// A strided view read through its strides, a chunk at a time: nothing of its C-order size is
/// allocated. Statistics need each distinct element once (a broadcast dimension repeats
/// them); checksums read every element in order.
fn strided_record(view: &StridedTensor, opts: &Options) -> stats_gpu::Record {
    let mut acc = Streamed::new(view.dtype(), opts);
    let ok: Result<(), std::convert::Infallible> = if opts.mode == SummaryMode::Statistics {
        let (distinct, repeat) = view.layout().without_broadcast();
        view.for_each_chunk_of(&distinct, CHUNK_ELEMS, |c| {
            acc.push_repeated(&c, repeat);
            Ok(())
        })
    } else {
        view.for_each_chunk(CHUNK_ELEMS, |c| {
            acc.push(&c);
            Ok(())
        })
    };
    let Ok(()) = ok;
    acc.finish()
}

fn default_flavour(path: &Path) -> Flavour {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("npy") => Flavour::MindSpore,
        _ => Flavour::PyTorch,
    }
}

pub fn run(args: Args) -> CmdResult {
    let stored = dumpfmt::tensor::open_tensor(&args.file)?;
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
    let record = match stored {
        // float8 tensors give msprobe's record without statistics (four nulls).
        Stored::Dense(tensor) => super::stats_engine().compute(&tensor.view(), &opts)?,
        Stored::Strided(view) => strided_record(&view, &opts),
    };
    println!("{record}");
    Ok(ExitCode::SUCCESS)
}
