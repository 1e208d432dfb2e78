//! `numprobe stats <file>`: the statistics msprobe would record for one tensor file, as one JSON
//! object with msprobe's keys. The file is memory-mapped and read once.

use super::CmdResult;
use clap::ValueEnum;
use dumpfmt::DType;
use stats_gpu::summary::{self, Device, Flavour, Options, Precision, SummaryMode};
use stats_gpu::{ElemType, TensorView};
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

/// The kernels' element type for a file dtype; `None` for dtypes msprobe records no statistics
/// for (float8).
pub fn elem_type(d: DType) -> Option<ElemType> {
    Some(match d {
        DType::Bool => ElemType::Bool,
        DType::U8 => ElemType::U8,
        DType::I8 => ElemType::I8,
        DType::I16 => ElemType::I16,
        DType::I32 => ElemType::I32,
        DType::I64 => ElemType::I64,
        DType::U16 => ElemType::U16,
        DType::U32 => ElemType::U32,
        DType::U64 => ElemType::U64,
        DType::F16 => ElemType::F16,
        DType::BF16 => ElemType::BF16,
        DType::F32 => ElemType::F32,
        DType::F64 => ElemType::F64,
        DType::C64 => ElemType::C64,
        DType::C128 => ElemType::C128,
        DType::F8E4M3FN | DType::F8E5M2 => return None,
    })
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
    };
    let device = match args.device {
        DeviceArg::Cpu => Device::Cpu,
        DeviceArg::Gpu => Device::Gpu,
        DeviceArg::Auto => Device::Auto,
    };
    let fields = match elem_type(tensor.dtype()) {
        Some(elem) => {
            let view = TensorView::new(elem, tensor.shape(), tensor.bytes())?;
            summary::compute(&view, &opts, device)?.to_json_fields()
        }
        // msprobe records float8 tensors with null statistics.
        None => ["Max", "Min", "Mean", "Norm"]
            .into_iter()
            .map(|k| (k, "null".to_string()))
            .collect(),
    };
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("\"{k}\": {v}"))
        .collect();
    println!("{{{}}}", body.join(", "));
    Ok(ExitCode::SUCCESS)
}
