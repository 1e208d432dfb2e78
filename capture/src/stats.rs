//! Tensor records with statistics computed by stats-gpu straight from the tensor's memory.

use dumpfmt::dump::{Checksum, Md5Slot, Stat, TensorRecord};
use dumpfmt::json::Value;
use stats_gpu::summary::{self, Device, Options, SummaryMode};
use stats_gpu::{ElemType, TensorView};

use crate::error::{Error, Result};

/// stats-gpu's element type for a torch dtype name (`torch.float32`…); `None` for dtypes
/// msprobe records without statistics (float8…).
pub fn elem_type(torch_dtype: &str) -> Option<ElemType> {
    Some(match torch_dtype {
        "torch.bool" => ElemType::Bool,
        "torch.uint8" => ElemType::U8,
        "torch.int8" => ElemType::I8,
        "torch.int16" => ElemType::I16,
        "torch.int32" => ElemType::I32,
        "torch.int64" => ElemType::I64,
        "torch.uint16" => ElemType::U16,
        "torch.uint32" => ElemType::U32,
        "torch.uint64" => ElemType::U64,
        "torch.float16" => ElemType::F16,
        "torch.bfloat16" => ElemType::BF16,
        "torch.float32" => ElemType::F32,
        "torch.float64" => ElemType::F64,
        "torch.complex64" => ElemType::C64,
        "torch.complex128" => ElemType::C128,
        _ => return None,
    })
}

fn stat(s: summary::Stat) -> Stat {
    match s {
        summary::Stat::Null => Stat::Null,
        summary::Stat::Bool(b) => Stat::Bool(b),
        summary::Stat::Int(i) => Stat::Int(i),
        summary::Stat::Float(f) => Stat::Float(f),
    }
}

fn checksum(c: summary::Checksum) -> Checksum {
    match c {
        summary::Checksum::Crc32(v) => Checksum::Crc32(v),
        summary::Checksum::Xor(v) => Checksum::Xor(v),
        summary::Checksum::XorScalarFloat(v) => Checksum::XorFloat(v),
        summary::Checksum::Null => Checksum::Null,
    }
}

/// What to put in one tensor record.
pub struct TensorInfo<'a> {
    pub type_name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [usize],
    /// The tensor's contiguous little-endian bytes (`None` when statistics are not wanted).
    pub bytes: Option<&'a [u8]>,
    pub requires_grad: Option<bool>,
    pub data_name: Option<&'a str>,
}

/// Builds the tensor record msprobe 26.2 writes for `info` under `mode`.
pub fn tensor_record(info: &TensorInfo<'_>, opts: &Options) -> Result<Value> {
    let mode = opts.mode;
    let mut rec = TensorRecord::new(
        info.type_name,
        info.dtype,
        info.shape.iter().map(|&d| d as u64).collect(),
    );
    rec.requires_grad = info.requires_grad;
    rec.data_name = info.data_name.map(str::to_owned);
    if let (Some(bytes), Some(elem)) = (info.bytes, elem_type(info.dtype)) {
        let view = TensorView::new(elem, info.shape, bytes)
            .map_err(|e| Error::Tensor(format!("{} {:?}: {e}", info.dtype, info.shape)))?;
        let r = summary::compute(&view, opts, Device::Cpu)?;
        rec.max = r.max.map(stat);
        rec.min = r.min.map(stat);
        rec.mean = r.mean.map(stat);
        rec.norm = r.norm.map(stat);
        rec.md5 = r.md5.map(checksum);
        rec.md5_slot = match mode {
            SummaryMode::Xor => Md5Slot::AfterShape,
            _ => Md5Slot::Last,
        };
    }
    Ok(rec.to_value())
}
