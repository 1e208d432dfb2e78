//! Tensor records with statistics computed by stats-gpu straight from the tensor's memory.

use dumpfmt::dump::{Checksum, Md5Slot, Stat, TensorRecord};
use dumpfmt::json::Value;
use stats_gpu::summary::{self, Flavour, Options, SummaryMode};
use stats_gpu::torch_order::TorchThreads;
use stats_gpu::{Backend, DType, Engine, Exactness, TensorView};

use crate::error::{Error, Result};

/// The dtype of a torch dtype name (`torch.float32`…) whose statistics msprobe records;
/// `None` for float8 (its records carry no statistics keys here) and unknown names.
fn torch_dtype(name: &str) -> Option<DType> {
    DType::from_torch_name(name).filter(|d| !matches!(d, DType::F8E4M3FN | DType::F8E5M2))
}

/// The dtype of a MindSpore dtype name (`str(tensor.dtype)`: `Float32`, `BFloat16`…) as
/// msprobe's MindSpore rules see its `asnumpy()` buffer: Float8 tensors arrive as their
/// float32 copy and are recorded under float32's rules; `None` for names without known rules.
fn mindspore_dtype(name: &str) -> Option<DType> {
    if name.starts_with("Float8") {
        return Some(DType::F32);
    }
    DType::from_mindspore_name(name)
}

/// Capture computes on the calling thread's CPU (its statistics worker is the parallelism).
fn cpu(opts: &Options, exact: Exactness) -> Options {
    Options {
        backend: Backend::Cpu,
        exact,
        ..*opts
    }
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
    /// `Some(torch threads)`: float32 Mean/Norm are summed in PyTorch's CPU order for that
    /// many threads (what msprobe's `torch.mean`/`torch.norm` give), see
    /// [`Exactness::TorchCpu`]; `None`: stats-gpu's correctly rounded values.
    pub torch_threads: Option<usize>,
    /// float32 Mean and Norm already computed by torch itself (the adapter does so for
    /// non-contiguous tensors, whose reduction order follows their strides); they replace
    /// the computed ones where msprobe takes them from torch.
    pub torch_mean_norm: Option<(f64, f64)>,
    /// torch's intra-op threads, on which a large float32 tensor's thread chunks are read
    /// where torch wrote them ([`Engine::with_torch_threads`]); `None`: on this thread.
    pub on_torch_threads: Option<&'a dyn TorchThreads>,
}

/// The record of `info` without statistics: type, dtype, shape, requires_grad, data_name.
fn record_head(info: &TensorInfo<'_>) -> TensorRecord {
    let mut rec = TensorRecord::new("", "", Vec::new());
    head_into(info, &mut rec);
    rec
}

/// [`record_head`] written over `rec` ([`TensorRecord::reset`]: its strings and shape keep
/// their allocations).
fn head_into(info: &TensorInfo<'_>, rec: &mut TensorRecord) {
    rec.reset(
        info.type_name,
        info.dtype,
        info.shape.iter().map(|&d| d as u64),
    );
    rec.requires_grad = info.requires_grad;
    rec.data_name = info.data_name.map(str::to_owned);
}

/// The tensor type name msprobe writes for a flavour's tensors.
pub fn type_name(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::MindSpore => "mindspore.Tensor",
        Flavour::PyTorch => "torch.Tensor",
    }
}

/// The placeholder record of a tensor whose statistics are computed elsewhere (on its device)
/// and journaled later as a fill under `id` (see [`crate::state::PENDING_KEY`]): the statistic
/// keys in msprobe's order with `null` values, and in md5 mode the CRC-32 of `info.bytes` (the
/// tensor's host bytes: a checksum cannot be computed apart from them).
pub fn pending_record(info: &TensorInfo<'_>, opts: &Options, id: u64) -> Result<Value> {
    let mut rec = record_head(info);
    match opts.mode {
        SummaryMode::Xor => {
            return Err(Error::Tensor(
                "xor mode has no device statistics: its checksum needs the bytes".into(),
            ));
        }
        SummaryMode::Md5 => {
            let bytes = info.bytes.ok_or_else(|| {
                Error::Tensor("md5 mode needs the tensor's host bytes (crc)".into())
            })?;
            rec.md5 = Some(Checksum::Crc32(stats_gpu::checksum::crc32(bytes)));
            rec.md5_slot = Md5Slot::Last;
        }
        SummaryMode::Statistics => {}
    }
    rec.max = Some(Stat::Null);
    rec.min = Some(Stat::Null);
    rec.mean = Some(Stat::Null);
    rec.norm = Some(Stat::Null);
    let mut value = rec.to_value();
    if let Value::Object(m) = &mut value {
        m.insert(crate::state::PENDING_KEY, Value::Int(id as i64));
    }
    Ok(value)
}

/// Builds the tensor record msprobe 26.2 writes for `info` under `opts` (its flavour picks
/// PyTorch's or MindSpore's rules, see [`mindspore_record`]).
pub fn tensor_record(info: &TensorInfo<'_>, opts: &Options) -> Result<Value> {
    tensor_record_of(info, opts).map(|r| r.to_value())
}

/// [`tensor_record`] as a [`TensorRecord`] (which a writer may render without making a
/// [`Value`] of it: [`TensorRecord::write_python_at`]).
pub fn tensor_record_of(info: &TensorInfo<'_>, opts: &Options) -> Result<TensorRecord> {
    let mut rec = TensorRecord::new("", "", Vec::new());
    tensor_record_into(info, opts, &mut rec)?;
    Ok(rec)
}

/// [`tensor_record_of`] written over `rec`, whose strings and shape keep their allocations
/// (a capture writes hundreds of records a step, one at a time). Left unspecified on error.
pub fn tensor_record_into(
    info: &TensorInfo<'_>,
    opts: &Options,
    rec: &mut TensorRecord,
) -> Result<()> {
    if opts.flavour == Flavour::MindSpore {
        *rec = mindspore_record_of(info, opts)?;
        return Ok(());
    }
    let mode = opts.mode;
    head_into(info, rec);
    if let (Some(bytes), Some(dtype)) = (info.bytes, torch_dtype(info.dtype)) {
        let view = TensorView::new(dtype, info.shape, bytes)
            .map_err(|e| Error::Tensor(format!("{} {:?}: {e}", info.dtype, info.shape)))?;
        // torch's own Mean/Norm (of a strided tensor) replace the computed ones below.
        let exact = match (info.torch_threads, info.torch_mean_norm) {
            (Some(threads), None) => Exactness::TorchCpu { threads },
            _ => Exactness::Rounded,
        };
        let opts = cpu(opts, exact);
        let engine = match info.on_torch_threads {
            Some(t) => Engine::new().with_torch_threads(t),
            None => Engine::new(),
        };
        let r = summary::compute(&view, &opts, &engine)?;
        rec.max = r.max.map(stat);
        rec.min = r.min.map(stat);
        rec.mean = r.mean.map(stat);
        rec.norm = r.norm.map(stat);
        if let Some((mean, norm)) = info.torch_mean_norm
            && summary::torch_order_applies(&view, &opts)
            && rec.mean.is_some()
        {
            rec.mean = Some(Stat::Float(mean));
            rec.norm = Some(Stat::Float(norm));
        }
        rec.md5 = r.md5.map(checksum);
        rec.md5_slot = match mode {
            SummaryMode::Xor => Md5Slot::AfterShape,
            _ => Md5Slot::Last,
        };
    }
    Ok(())
}

/// The MindSpore record of `info` (spec §2.6.1, §3.3, §3.5): `info.dtype` is the MindSpore
/// dtype name and `info.bytes` the tensor's `asnumpy()` buffer, in which BFloat16 and Float8
/// tensors arrive as their float32 copy (what msprobe converts them to before numpy sees them).
/// Only `statistics` and `md5` modes exist for MindSpore.
pub fn mindspore_record(info: &TensorInfo<'_>, opts: &Options) -> Result<Value> {
    mindspore_record_of(info, opts).map(|r| r.to_value())
}

fn mindspore_record_of(info: &TensorInfo<'_>, opts: &Options) -> Result<TensorRecord> {
    let mut rec = record_head(info);
    rec.md5_slot = Md5Slot::Last;
    let Some(bytes) = info.bytes else {
        return Ok(rec);
    };
    let wants_crc = opts.mode == SummaryMode::Md5;
    let Some(elem) = mindspore_dtype(info.dtype) else {
        // A dtype without known rules: the statistics keys, null rather than guessed.
        rec.max = Some(Stat::Null);
        rec.min = Some(Stat::Null);
        rec.mean = Some(Stat::Null);
        rec.norm = Some(Stat::Null);
        rec.md5 = wants_crc.then(|| Checksum::Crc32(stats_gpu::checksum::crc32(bytes)));
        return Ok(rec);
    };
    let f32_len = info.shape.iter().try_fold(4usize, |n, &d| n.checked_mul(d));
    let bad =
        |e: stats_gpu::ViewError| Error::Tensor(format!("{} {:?}: {e}", info.dtype, info.shape));
    // BFloat16 through its float32 copy: back to bfloat16 (exact, every value came from one),
    // so Mean/Norm are rounded to bfloat16 and the CRC is taken over the float32 bytes again.
    let bf16_bytes;
    let bytes = if elem == DType::BF16 && f32_len == Some(bytes.len()) {
        bf16_bytes = f32_to_bf16_bytes(bytes);
        &bf16_bytes[..]
    } else {
        bytes
    };
    let view = TensorView::new(elem, info.shape, bytes).map_err(bad)?;
    let opts = Options {
        mode: if wants_crc {
            SummaryMode::Md5
        } else {
            SummaryMode::Statistics
        },
        ..cpu(opts, Exactness::MindSporeCpu)
    };
    let r = summary::compute(&view, &opts, &Engine::new())?;
    rec.max = r.max.map(stat);
    rec.min = r.min.map(stat);
    rec.mean = r.mean.map(stat);
    rec.norm = r.norm.map(stat);
    rec.md5 = r.md5.map(checksum);
    if elem.is_float() && !view.is_scalar() && matches!(rec.max, Some(Stat::Float(m)) if m.is_nan())
    {
        // MindSpore's CPU max/min kernels skip NaN (NaN only when every element is NaN);
        // Mean and Norm keep propagating it.
        if let Some((max, min)) = max_min_skipping_nan(&view) {
            rec.max = Some(Stat::Float(max));
            rec.min = Some(Stat::Float(min));
        }
    }
    if elem == DType::C64 && view.is_scalar() {
        // A 0-dim complex64 is recorded as Python's `abs` of its value: a float64 magnitude.
        let re = f32::from_le_bytes(bytes[0..4].try_into().expect("complex64 element"));
        let im = f32::from_le_bytes(bytes[4..8].try_into().expect("complex64 element"));
        let v = Stat::Float((re as f64).hypot(im as f64));
        rec.max = Some(v);
        rec.min = Some(v);
        rec.mean = Some(v);
        rec.norm = Some(v);
    }
    Ok(rec)
}

/// bfloat16 bytes of little-endian float32 values that are bfloat16 values.
fn f32_to_bf16_bytes(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() / 2);
    for c in b.chunks_exact(4) {
        // A bfloat16 is the upper half of the float32 with the same value.
        let x = u32::from_le_bytes(c.try_into().expect("4 bytes"));
        out.extend_from_slice(&((x >> 16) as u16).to_le_bytes());
    }
    out
}

/// Max and Min of a real float tensor's float32 values (MindSpore reduces Float64 as float32),
/// NaN skipped; `None` when every element is NaN.
fn max_min_skipping_nan(view: &TensorView<'_>) -> Option<(f64, f64)> {
    let cast;
    let b = if view.dtype() == DType::F32 {
        view.bytes()
    } else {
        cast = summary::to_f32_values(view);
        bytemuck::cast_slice(&cast)
    };
    let (max, min) = b
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .filter(|x| !x.is_nan())
        .fold(None, |acc: Option<(f32, f32)>, x| match acc {
            None => Some((x, x)),
            Some((mx, mn)) => Some((mx.max(x), mn.min(x))),
        })?;
    Some((max as f64, min as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms_json(dtype: &str, shape: &[usize], bytes: &[u8], mode: SummaryMode) -> String {
        let info = TensorInfo {
            type_name: "mindspore.Tensor",
            dtype,
            shape,
            bytes: Some(bytes),
            requires_grad: None,
            data_name: None,
            torch_threads: None,
            torch_mean_norm: None,
            on_torch_threads: None,
        };
        let opts = Options {
            mode,
            flavour: Flavour::MindSpore,
            ..Options::default()
        };
        let mut out = Vec::new();
        dumpfmt::json::write_python(&tensor_record(&info, &opts).unwrap(), &mut out);
        // One line, as `json.dumps` without indent writes it.
        let mut line = String::new();
        for l in String::from_utf8(out).unwrap().lines() {
            line.push_str(l.trim());
            if l.ends_with(',') {
                line.push(' ');
            }
        }
        line
    }

    fn f32s(xs: &[f32]) -> Vec<u8> {
        xs.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn mindspore_casts_integers_and_names_the_type() {
        let b: Vec<u8> = [40i64, -20, 30, 10]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let got = ms_json("Int64", &[2, 2], &b, SummaryMode::Statistics);
        assert_eq!(
            got,
            r#"{"type": "mindspore.Tensor", "dtype": "Int64", "shape": [2, 2], "Max": 40.0, "Min": -20.0, "Mean": 15.0, "Norm": 54.772254943847656}"#
        );
    }

    #[test]
    fn mindspore_max_min_skip_nan() {
        let b = f32s(&[1.0, f32::NAN, f32::INFINITY]);
        let got = ms_json("Float32", &[3], &b, SummaryMode::Statistics);
        assert!(
            got.ends_with(r#""Max": Infinity, "Min": 1.0, "Mean": NaN, "Norm": NaN}"#),
            "{got}"
        );
        let b = f32s(&[f32::NAN, f32::NAN]);
        let got = ms_json("Float32", &[2], &b, SummaryMode::Statistics);
        assert!(got.ends_with(r#""Max": NaN, "Min": NaN, "Mean": NaN, "Norm": NaN}"#));
        // A 0-dim NaN is its own value.
        let got = ms_json("Float32", &[], &f32s(&[f32::NAN]), SummaryMode::Statistics);
        assert!(got.ends_with(r#""Max": NaN, "Min": NaN, "Mean": NaN, "Norm": NaN}"#));
    }

    #[test]
    fn mindspore_bf16_arrives_as_float32_and_is_hashed_so() {
        // bfloat16 values: Norm sqrt(16.8125) = 4.1003… rounded to bfloat16.
        let xs = [1.5f32, -2.25, 3.0, 0.0, 0.5, -0.5];
        let b = f32s(&xs);
        let got = ms_json("BFloat16", &[2, 3], &b, SummaryMode::Md5);
        let crc = format!("{:08x}", stats_gpu::checksum::crc32(&b));
        assert_eq!(
            got,
            format!(
                r#"{{"type": "mindspore.Tensor", "dtype": "BFloat16", "shape": [2, 3], "Max": 3.0, "Min": -2.25, "Mean": 0.375, "Norm": 4.09375, "md5": "{crc}"}}"#
            )
        );
    }

    #[test]
    fn mindspore_scalars_bool_complex_empty() {
        let got = ms_json(
            "Int32",
            &[],
            &(-7i32).to_le_bytes(),
            SummaryMode::Statistics,
        );
        assert!(got.ends_with(r#""shape": [], "Max": -7, "Min": -7, "Mean": -7, "Norm": -7}"#));
        let got = ms_json("Bool", &[2], &[1, 0], SummaryMode::Statistics);
        assert!(got.ends_with(r#""Max": true, "Min": false, "Mean": null, "Norm": null}"#));
        let got = ms_json(
            "Complex64",
            &[2],
            &f32s(&[3.0, 4.0, 0.0, 1.0]),
            SummaryMode::Statistics,
        );
        assert!(
            got.ends_with(r#""Max": 5.0, "Min": 1.0, "Mean": 3.0, "Norm": 5.099019527435303}"#),
            "{got}"
        );
        // 0-dim complex64: Python's float64 abs of the value.
        let got = ms_json(
            "Complex64",
            &[],
            &f32s(&[0.1, 0.2]),
            SummaryMode::Statistics,
        );
        let v = (0.1f32 as f64).hypot(0.2f32 as f64);
        assert!(
            got.ends_with(&format!(
                r#""Max": {v:?}, "Min": {v:?}, "Mean": {v:?}, "Norm": {v:?}}}"#
            )),
            "{got}"
        );
        let got = ms_json("Float32", &[0, 3], &[], SummaryMode::Md5);
        assert!(got.ends_with(
            r#""Max": null, "Min": null, "Mean": null, "Norm": null, "md5": "00000000"}"#
        ));
    }

    #[test]
    fn mindspore_float16_rounds_and_float8_reads_float32() {
        let b: Vec<u8> = [1.1f32, 2.2, 3.3]
            .iter()
            .flat_map(|&x| half_bits(x).to_le_bytes())
            .collect();
        let got = ms_json("Float16", &[3], &b, SummaryMode::Statistics);
        assert!(
            got.contains(r#""Max": 3.30078125, "Min": 1.099609375, "Mean": 2.19921875"#),
            "{got}"
        );
        let got = ms_json(
            "Float8E4M3FN",
            &[2],
            &f32s(&[0.5, -1.0]),
            SummaryMode::Statistics,
        );
        assert!(
            got.ends_with(r#""Max": 0.5, "Min": -1.0, "Mean": -0.25, "Norm": 1.1180340051651}"#),
            "{got}"
        );
        // A buffer that does not hold shape's elements is an error, not a record.
        let info = TensorInfo {
            type_name: "mindspore.Tensor",
            dtype: "Float32",
            shape: &[3],
            bytes: Some(&[0u8; 8]),
            requires_grad: None,
            data_name: None,
            torch_threads: None,
            torch_mean_norm: None,
            on_torch_threads: None,
        };
        let opts = Options {
            flavour: Flavour::MindSpore,
            ..Options::default()
        };
        assert!(tensor_record(&info, &opts).is_err());
    }

    /// float16 bits of a float32 (round to nearest even; normal range only).
    fn half_bits(x: f32) -> u16 {
        let b = x.to_bits();
        let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
        let mant = b & 0x7f_ffff;
        let mut h = ((b >> 16) & 0x8000) | ((exp as u32) << 10) | (mant >> 13);
        let rest = mant & 0x1fff;
        if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
            h += 1;
        }
        h as u16
    }

    /// One record written over and over (what the capture's walk does) equals a record made
    /// afresh each time, whatever the record before it held: type, dtype, shape, data name,
    /// statistics or checksum keys, in either flavour and every summary mode.
    mod reused_record {
        use super::*;
        use proptest::prelude::*;

        const DTYPES: [(&str, usize); 6] = [
            ("torch.float32", 4),
            ("torch.bfloat16", 2),
            ("torch.int64", 8),
            ("torch.bool", 1),
            ("Float32", 4),
            ("torch.some_new_type", 4),
        ];

        fn case() -> impl Strategy<Value = (usize, Vec<usize>, Vec<u8>, u8, u8, bool, u8)> {
            (
                0..DTYPES.len(),
                prop::collection::vec(0usize..4, 0..3),
                prop::collection::vec(any::<u8>(), 0..512),
                0u8..3,
                0u8..3,
                any::<bool>(),
                0u8..3,
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn a_record_written_over_equals_a_fresh_one(cases in prop::collection::vec(case(), 1..8)) {
                let mut reused = TensorRecord::new("", "", Vec::new());
                for (d, shape, pool, rg, named, ms, mode) in cases {
                    let (dtype, size) = DTYPES[d];
                    let numel: usize = shape.iter().product();
                    let bytes: Vec<u8> = pool.iter().cycle().take(numel * size).copied().collect();
                    let bytes = if pool.is_empty() && numel > 0 { None } else { Some(&bytes[..]) };
                    let name = format!("Tensor.add.0.forward.input.{d}.pt");
                    let info = TensorInfo {
                        type_name: if ms { "mindspore.Tensor" } else { "torch.Tensor" },
                        dtype,
                        shape: &shape,
                        bytes,
                        requires_grad: [None, Some(false), Some(true)][rg as usize],
                        data_name: [None, Some("x.npy"), Some(name.as_str())][named as usize],
                        torch_threads: Some(1),
                        torch_mean_norm: None,
                        on_torch_threads: None,
                    };
                    let opts = Options {
                        mode: [SummaryMode::Statistics, SummaryMode::Md5, SummaryMode::Xor]
                            [mode as usize],
                        flavour: if ms { Flavour::MindSpore } else { Flavour::PyTorch },
                        ..Options::default()
                    };
                    let fresh = tensor_record_of(&info, &opts);
                    let into = tensor_record_into(&info, &opts, &mut reused);
                    prop_assert_eq!(fresh.is_ok(), into.is_ok());
                    if let Ok(fresh) = fresh {
                        prop_assert_eq!(&reused, &fresh);
                    }
                }
            }
        }
    }
}
