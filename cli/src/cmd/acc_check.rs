//! `numprobe acc-check --bench B.npy --device D.npy --api-name NAME`: judge one device output
//! against its benchmark with msprobe's accuracy standards; prints the row msprobe writes to
//! `accuracy_checking_details_*.csv`, or a JSON object with `--json`.

use super::CmdResult;
use clap::ValueEnum;
use dumpfmt::DType;
use dumpfmt::tensor::Tensor;
use std::borrow::Cow;
use std::path::PathBuf;
use std::process::ExitCode;
use ulp::{ArrayData, CheckOptions, TensorRef, TorchDtype};

#[derive(clap::Args)]
pub struct Args {
    /// Benchmark output (float32 for float16/bfloat16 devices, float64 for float32/float64).
    #[arg(long)]
    pub bench: PathBuf,
    /// Device output.
    #[arg(long)]
    pub device: PathBuf,
    /// API Name column, e.g. `Functional.relu.0.forward.output.0`; its bare name selects rules.
    #[arg(long)]
    pub api_name: String,
    /// The device dtype when it differs from the file's (bfloat16 data comes as float32 .npy).
    #[arg(long, value_enum)]
    pub device_dtype: Option<DeviceDtype>,
    /// Print a JSON object with every detail field and the CSV line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DeviceDtype {
    Float16,
    Bfloat16,
    Float32,
    Float64,
}

/// Typed elements of a tensor file, borrowed when the bytes are aligned (memory maps are),
/// copied otherwise.
enum Elems<'a> {
    F16(Cow<'a, [half::f16]>),
    F32(Cow<'a, [f32]>),
    F64(Cow<'a, [f64]>),
    Bool(Vec<bool>),
    U8(Cow<'a, [u8]>),
    I8(Cow<'a, [i8]>),
    I16(Cow<'a, [i16]>),
    U16(Cow<'a, [u16]>),
    I32(Cow<'a, [i32]>),
    U32(Cow<'a, [u32]>),
    I64(Cow<'a, [i64]>),
    U64(Cow<'a, [u64]>),
}

fn cast<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

fn elems(t: &Tensor) -> Result<Elems<'_>, String> {
    let b = t.bytes();
    Ok(match t.dtype() {
        DType::F16 => Elems::F16(cast(b)),
        DType::F32 => Elems::F32(cast(b)),
        DType::F64 => Elems::F64(cast(b)),
        DType::Bool => Elems::Bool(b.iter().map(|&x| x != 0).collect()),
        DType::U8 => Elems::U8(Cow::Borrowed(b)),
        DType::I8 => Elems::I8(cast(b)),
        DType::I16 => Elems::I16(cast(b)),
        DType::U16 => Elems::U16(cast(b)),
        DType::I32 => Elems::I32(cast(b)),
        DType::U32 => Elems::U32(cast(b)),
        DType::I64 => Elems::I64(cast(b)),
        DType::U64 => Elems::U64(cast(b)),
        other => {
            return Err(format!(
                "{} tensors are not supported by acc-check",
                other.torch_name()
            ));
        }
    })
}

impl Elems<'_> {
    fn data(&self) -> ArrayData<'_> {
        match self {
            Elems::F16(v) => ArrayData::F16(v),
            Elems::F32(v) => ArrayData::F32(v),
            Elems::F64(v) => ArrayData::F64(v),
            Elems::Bool(v) => ArrayData::Bool(v),
            Elems::U8(v) => ArrayData::U8(v),
            Elems::I8(v) => ArrayData::I8(v),
            Elems::I16(v) => ArrayData::I16(v),
            Elems::U16(v) => ArrayData::U16(v),
            Elems::I32(v) => ArrayData::I32(v),
            Elems::U32(v) => ArrayData::U32(v),
            Elems::I64(v) => ArrayData::I64(v),
            Elems::U64(v) => ArrayData::U64(v),
        }
    }
}

pub fn run(args: Args) -> CmdResult {
    let bench_t = dumpfmt::tensor::read_tensor(&args.bench)?;
    let device_t = dumpfmt::tensor::read_tensor(&args.device)?;
    let bench_e = elems(&bench_t).map_err(|e| format!("{}: {e}", args.bench.display()))?;
    let device_e = elems(&device_t).map_err(|e| format!("{}: {e}", args.device.display()))?;
    let bench = TensorRef::new(bench_e.data(), bench_t.shape());
    let mut device = TensorRef::new(device_e.data(), device_t.shape());
    if let Some(d) = args.device_dtype {
        device.torch_dtype = match d {
            DeviceDtype::Float16 => TorchDtype::Float16,
            DeviceDtype::Bfloat16 => TorchDtype::BFloat16,
            DeviceDtype::Float32 => TorchDtype::Float32,
            DeviceDtype::Float64 => TorchDtype::Float64,
        };
    }
    let bare = ulp::bare_api_name(&args.api_name).unwrap_or_else(|| args.api_name.clone());
    let row = ulp::check_output(&bare, bench, device, CheckOptions::default());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&row.to_json(&args.api_name))?
        );
    } else {
        println!("{}", row.csv_line(&args.api_name));
    }
    Ok(ExitCode::SUCCESS)
}
