//! For every tensor file of the msprobe 26.2.0 tensor-mode fixtures, the record computed here
//! equals the one msprobe wrote: Max/Min (and bool/int/0-dim values) exactly, Mean/Norm within
//! 2 ulp in the tensor dtype (device reductions differ in the last bits, spec §10.4). The CRC-32
//! and XOR of the H200 run's files equal the `md5` values of its md5 and xor runs (same ops,
//! same device; spec Appendix B).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dumpfmt::json::Value;
use stats_gpu::summary::{self, Checksum, Flavour, Options, Record, Stat, SummaryMode};
use stats_gpu::{DType, Engine};

use testsupport::testdata;

fn fixtures() -> PathBuf {
    testdata().join("fixtures")
}

fn dump_jsons(root: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            dump_jsons(&p, out);
        } else if p.file_name().is_some_and(|n| n == "dump.json") {
            out.push(p);
        }
    }
}

/// Tensor records of a dump.json, keyed by entry name and the JSON path inside the entry.
fn tensor_records<'a>(v: &'a Value, path: String, out: &mut Vec<(String, &'a dumpfmt::json::Map)>) {
    match v {
        Value::Object(m) => {
            let is_tensor = m
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("Tensor") && m.contains_key("dtype"));
            if is_tensor {
                out.push((path, m));
                return;
            }
            for (k, x) in m.iter() {
                tensor_records(x, format!("{path}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                tensor_records(x, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn data_of(dump: &Value) -> &Value {
    dump.get("data").expect("dump.json has data")
}

/// Distance in units in the last place of `dt` between two finite values.
fn ulps(a: f64, b: f64, dt: DType) -> u64 {
    fn ordered(bits: i64, sign_bit: i64) -> i64 {
        if bits & sign_bit != 0 {
            -(bits & (sign_bit - 1))
        } else {
            bits
        }
    }
    let (x, y) = match dt {
        DType::F16 => (
            ordered(half::f16::from_f64(a).to_bits() as i64, 1 << 15),
            ordered(half::f16::from_f64(b).to_bits() as i64, 1 << 15),
        ),
        DType::BF16 => (
            ordered(half::bf16::from_f64(a).to_bits() as i64, 1 << 15),
            ordered(half::bf16::from_f64(b).to_bits() as i64, 1 << 15),
        ),
        DType::F64 | DType::C128 => (
            ordered(a.to_bits() as i64 & i64::MAX, 1 << 62) * a.signum() as i64,
            ordered(b.to_bits() as i64 & i64::MAX, 1 << 62) * b.signum() as i64,
        ),
        _ => (
            ordered((a as f32).to_bits() as i64, 1 << 31),
            ordered((b as f32).to_bits() as i64, 1 << 31),
        ),
    };
    x.abs_diff(y)
}

fn same_exact(got: Stat, want: &Value) -> bool {
    match (got, want) {
        (Stat::Null, Value::Null) => true,
        (Stat::Bool(a), Value::Bool(b)) => a == *b,
        (Stat::Int(a), Value::Int(b)) => a == *b as i128,
        (Stat::Int(a), Value::BigInt(b)) => a.to_string() == **b,
        (Stat::Float(a), Value::Float(b)) => a == *b || (a.is_nan() && b.is_nan()),
        _ => false,
    }
}

fn same_within(got: Stat, want: &Value, dt: DType, max_ulps: u64, abs_tol: f64) -> bool {
    match (got, want) {
        (Stat::Float(a), Value::Float(b)) if a.is_finite() && b.is_finite() => {
            ulps(a, *b, dt) <= max_ulps || (a - b).abs() <= abs_tol
        }
        _ => same_exact(got, want),
    }
}

/// Unit roundoff of the dtype Mean/Norm are reported in.
fn unit_roundoff(dt: DType) -> f64 {
    match dt {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F64 | DType::C128 => 2f64.powi(-53),
        _ => 2f64.powi(-24),
    }
}

/// Absolute tolerance of a Norm: CPU torch sums float32 squares in float32 (sequentially for
/// strided inputs: ✔ 1024-element transposed matmul inputs differ from the exact norm by 3-5
/// float32 ulps), so the error grows with `n` beyond 2 ulps: allow `4·u·log2(n)` relative.
fn norm_tolerance(dt: DType, n: usize, norm: f64) -> f64 {
    4.0 * unit_roundoff(dt) * (n.max(2) as f64).log2() * norm
}

/// Absolute tolerance of a Mean. A mean that cancels to near zero (✔ `[0.1, 0.2, -0.3]` in
/// float32: exact −2.48e-9, CPU torch 0.0, CUDA −4.97e-9) is off by many ulps of itself on
/// every device, because frameworks accumulate in float32 (half types) or the tensor dtype; the
/// error is bounded relative to the summands instead: about `u·log2(n)·Σ|x|/n`, and
/// `Σ|x|/n ≤ Norm/√n`.
fn mean_tolerance(dt: DType, n: usize, norm: f64) -> f64 {
    let n = n.max(1) as f64;
    4.0 * unit_roundoff(dt) * n.log2().max(1.0) * norm / n.sqrt()
}

/// The dtype Mean/Norm are rounded to: the tensor dtype, float32 for complex64 and for
/// MindSpore's float32 casts.
fn result_dtype(elem: DType, flavour: Flavour) -> DType {
    match elem {
        DType::C64 => DType::F32,
        DType::C128 => DType::F64,
        DType::F16 | DType::BF16 if flavour == Flavour::PyTorch => elem,
        DType::F16 | DType::BF16 => elem,
        DType::F64 if flavour == Flavour::PyTorch => DType::F64,
        _ => DType::F32,
    }
}

struct Checked {
    records: usize,
    /// Mean/Norm values checked, and how many of them equal msprobe's bit for bit.
    approx: usize,
    exact: usize,
    failures: Vec<String>,
}

/// Reads the tensor behind a record and computes its record with `opts`.
fn compute_for(
    dir: &Path,
    rec: &dumpfmt::json::Map,
    opts: &Options,
) -> Result<(DType, Record), String> {
    let name = rec
        .get("data_name")
        .and_then(Value::as_str)
        .ok_or("no data_name")?;
    let path = dir.join("dump_tensor_data").join(name);
    let t = dumpfmt::tensor::read_tensor(&path).map_err(|e| e.to_string())?;
    let opts = Options {
        backend: stats_gpu::Backend::Cpu,
        ..*opts
    };
    let r =
        summary::compute(&t.view(), &opts, &Engine::new()).map_err(|e| format!("{name}: {e}"))?;
    Ok((t.dtype(), r))
}

fn check_stats(dump_json: &Path, max_ulps: u64) -> Checked {
    let dump = dumpfmt::json::parse_file(dump_json).expect("fixture dump.json parses");
    let flavour = match dump.get("framework").and_then(Value::as_str) {
        Some("mindspore") => Flavour::MindSpore,
        _ => Flavour::PyTorch,
    };
    let opts = Options {
        flavour,
        ..Options::default()
    };
    let dir = dump_json.parent().expect("dump.json has a directory");
    let mut recs = Vec::new();
    tensor_records(data_of(&dump), String::new(), &mut recs);
    let mut out = Checked {
        records: 0,
        approx: 0,
        exact: 0,
        failures: Vec::new(),
    };
    for (path, rec) in recs {
        if !rec.contains_key("data_name") || !rec.contains_key("Max") {
            continue;
        }
        let (elem, got) = match compute_for(dir, rec, &opts) {
            Ok(x) => x,
            Err(e) => {
                out.failures
                    .push(format!("{}{path}: {e}", dump_json.display()));
                continue;
            }
        };
        out.records += 1;
        let dt = result_dtype(elem, flavour);
        let numel = rec.get("shape").and_then(Value::as_array).map_or(1, |s| {
            s.iter().filter_map(Value::as_i64).product::<i64>() as usize
        });
        let (mean_tol, norm_tol) = match rec.get("Norm").and_then(Value::as_f64) {
            Some(norm) if norm.is_finite() => (
                mean_tolerance(dt, numel, norm),
                norm_tolerance(dt, numel, norm),
            ),
            _ => (0.0, 0.0),
        };
        let fields = [
            ("Max", got.max, 0, 0.0),
            ("Min", got.min, 0, 0.0),
            ("Mean", got.mean, max_ulps, mean_tol),
            ("Norm", got.norm, max_ulps, norm_tol),
        ];
        for (key, stat, tol, abs_tol) in fields {
            let want = rec.get(key).expect("checked above");
            let stat = stat.expect("statistics mode has all four keys");
            if abs_tol > 0.0 {
                out.approx += 1;
                out.exact += same_exact(stat, want) as usize;
                // STATS_ULPS=1 prints each distance, for tuning the tolerances above.
                if let (Some(_), Stat::Float(a), Some(b)) =
                    (std::env::var_os("STATS_ULPS"), stat, want.as_f64())
                {
                    eprintln!("ULPS {elem:?} {key} {}", ulps(a, b, dt));
                }
            }
            if !same_within(stat, want, dt, tol, abs_tol) {
                out.failures.push(format!(
                    "{}{path} ({elem:?} {numel}) {key}: computed {} msprobe {want:?}",
                    dump_json.display(),
                    stat.to_json()
                ));
            }
        }
    }
    out
}

fn check_dirs(roots: &[PathBuf], max_ulps: u64) -> usize {
    let mut total = 0;
    let (mut approx, mut exact) = (0, 0);
    let mut failures = Vec::new();
    for root in roots {
        let mut files = Vec::new();
        dump_jsons(root, &mut files);
        assert!(!files.is_empty(), "no dump.json under {}", root.display());
        let mut in_root = 0;
        for f in files {
            let c = check_stats(&f, max_ulps);
            in_root += c.records;
            approx += c.approx;
            exact += c.exact;
            failures.extend(c.failures);
        }
        assert!(
            in_root > 0,
            "no file-backed tensor record under {}",
            root.display()
        );
        total += in_root;
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{total} records; {exact} of {approx} finite Mean/Norm values equal msprobe's exactly"
    );
    total
}

#[test]
fn cpu_fixtures_statistics_match_msprobe() {
    let base = fixtures().join("msprobe-26.2.0-cpu");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&base)
        .expect("fixtures present")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                (n.starts_with("pt_") || n.starts_with("ms_")) && n.contains("_tensor_")
            })
        })
        .collect();
    roots.sort();
    assert!(roots.iter().any(|r| r.ends_with("ms_tiny_f32_tensor_L1")));
    roots.push(fixtures().join("msprobe-26.2.0-torch-h200/l1_cpu_tensor"));
    let n = check_dirs(&roots, 2);
    assert!(n > 1000, "only {n} records checked");
}

#[test]
fn cuda_fixture_statistics_match_msprobe_within_two_ulp() {
    let n = check_dirs(&[fixtures().join("msprobe-26.2.0-torch-h200/l1_tensor")], 2);
    assert!(n >= 80, "only {n} records checked");
}

/// The single dump.json of a one-step, one-rank fixture.
fn only_dump(root: &Path) -> PathBuf {
    let mut files = Vec::new();
    dump_jsons(root, &mut files);
    assert_eq!(files.len(), 1, "{}", root.display());
    files.remove(0)
}

#[test]
fn checksums_of_h200_files_match_md5_and_xor_runs() {
    let h200 = fixtures().join("msprobe-26.2.0-torch-h200");
    let tensor_json = only_dump(&h200.join("l1_tensor"));
    let tensor_dump = dumpfmt::json::parse_file(&tensor_json).unwrap();
    let dir = tensor_json.parent().unwrap();
    let mut recs = Vec::new();
    tensor_records(data_of(&tensor_dump), String::new(), &mut recs);
    let mut failures = Vec::new();
    for (run, mode) in [("l1_md5", SummaryMode::Md5), ("l1_xor", SummaryMode::Xor)] {
        let other = dumpfmt::json::parse_file(&only_dump(&h200.join(run))).unwrap();
        let mut theirs = Vec::new();
        tensor_records(data_of(&other), String::new(), &mut theirs);
        let theirs: HashMap<String, &dumpfmt::json::Map> = theirs.into_iter().collect();
        let opts = Options {
            mode,
            ..Options::default()
        };
        let mut checked = 0;
        for (path, rec) in &recs {
            if !rec.contains_key("data_name") {
                continue;
            }
            let want = theirs
                .get(path)
                .and_then(|r| r.get("md5"))
                .unwrap_or_else(|| panic!("{run} lacks {path}"));
            let (_, got) = compute_for(dir, rec, &opts).unwrap();
            let got = got.md5.expect("md5/xor modes set md5");
            let same = match (got, want) {
                (Checksum::XorScalarFloat(a), Value::Float(b)) => a == *b,
                (Checksum::Null, Value::Null) => true,
                (c, Value::Str(_)) => c.to_json() == format!("\"{}\"", want.as_str().unwrap()),
                _ => false,
            };
            if !same {
                failures.push(format!(
                    "{run}{path}: computed {} msprobe {want:?}",
                    got.to_json()
                ));
            }
            checked += 1;
        }
        assert!(checked >= 80, "{run}: only {checked} records");
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
