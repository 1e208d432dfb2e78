//! `stats`, `acc-check`, `precision-compare` and `compare` end to end, against what msprobe
//! recorded or computed.

mod common;
use common::*;
use dumpfmt::DType;
use dumpfmt::TensorView;
use std::path::{Path, PathBuf};

fn l1_cpu_rank() -> PathBuf {
    let step = testdata().join("fixtures/msprobe-26.2.0-torch-h200/l1_cpu_tensor/dump_path/step0");
    std::fs::read_dir(step)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

/// `numprobe stats` on a tensor file prints the record msprobe wrote for it (CPU run: exact).
#[test]
fn stats_match_msprobe_records() {
    let rank = l1_cpu_rank();
    let dump = dumpfmt::dump::DumpFile::open(&rank.join("dump.json")).unwrap();
    let mut checked = 0;
    for entry in dump.entries() {
        for t in entry.tensors() {
            let Some(name) = t.record.data_name.as_deref() else {
                continue;
            };
            let o = numprobe([
                Path::new("stats"),
                &rank.join("dump_tensor_data").join(name),
                Path::new("--device"),
                Path::new("cpu"),
            ]);
            assert!(o.status.success(), "{name}: {}", stderr(&o));
            let got = stdout(&o);
            let rec = t.record.to_value();
            let obj = rec.as_object().unwrap();
            for key in ["Max", "Min"] {
                let want = dumpfmt::json::to_python_bytes(obj.get(key).unwrap());
                let want = String::from_utf8(want).unwrap();
                assert!(
                    got.contains(&format!("\"{key}\": {want}")),
                    "{name} {key}: want {want}, got {got}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 80, "only {checked} tensor files checked");

    // md5 mode: CRC-32 of the raw bytes (spec test vector).
    let o = numprobe([
        Path::new("stats"),
        &rank.join("dump_tensor_data/Torch.abs.0.forward.input.0.pt"),
        Path::new("--summary"),
        Path::new("md5"),
    ]);
    assert!(
        stdout(&o).contains("\"md5\": \"7bb36c01\""),
        "{}",
        stdout(&o)
    );
}

fn value_f64(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::String(s) if s == "nan" => f64::NAN,
        serde_json::Value::String(s) if s == "inf" => f64::INFINITY,
        serde_json::Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        other => other.as_f64().expect("number"),
    }
}

/// Writes a vector array as an .npy numprobe can read (bf16 as float32, as the CLI expects).
fn write_vector_npy(arr: &serde_json::Value, path: &Path) -> bool {
    let Some(data) = arr.get("data").and_then(|d| d.as_array()) else {
        return false;
    };
    let shape: Vec<usize> = arr["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let vals: Vec<f64> = data.iter().map(value_f64).collect();
    let (dtype, bytes): (DType, Vec<u8>) = match arr["dtype"].as_str().unwrap() {
        "float64" => (
            DType::F64,
            vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        "float32" | "bfloat16" => (
            DType::F32,
            vals.iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
        ),
        "float16" => (
            DType::F16,
            vals.iter()
                .flat_map(|&v| half::f16::from_f64(v).to_le_bytes())
                .collect(),
        ),
        _ => return false,
    };
    dumpfmt::npy::write(path, TensorView::new(dtype, &shape, &bytes).unwrap()).unwrap();
    true
}

/// Splits one CSV record (msprobe quotes fields with commas, quotes or newlines).
fn csv_cells(line: &str) -> Vec<String> {
    let (mut cells, mut cur, mut quoted, mut chars) = (
        Vec::new(),
        String::new(),
        false,
        line.trim_end_matches(['\r', '\n']).chars().peekable(),
    );
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    cells.push(cur);
    cells
}

/// `numprobe acc-check` prints msprobe's detail row for every vector case with inline data:
/// exact, except the five cells that depend on BLAS or numpy's summation order (relative 1e-6).
#[test]
fn acc_check_rows_match_msprobe() {
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(testdata().join("vectors/accuracy/run_ut_metrics.json")).unwrap(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (bench, device) = (tmp.path().join("bench.npy"), tmp.path().join("device.npy"));
    let mut checked = 0;
    for case in v["cases"].as_array().unwrap() {
        let inputs = &case["inputs"];
        if !write_vector_npy(&inputs["bench"], &bench)
            || !write_vector_npy(&inputs["device"], &device)
        {
            continue;
        }
        let want = case["run_ut"]["csv_line"].as_str().unwrap();
        let name = csv_cells(want)[0].clone();
        let dtype = case["device_dtype"].as_str().unwrap();
        let o = numprobe([
            "acc-check",
            "--bench",
            bench.to_str().unwrap(),
            "--device",
            device.to_str().unwrap(),
            "--api-name",
            &name,
            "--device-dtype",
            dtype,
        ]);
        let got = stdout(&o);
        let (g, w) = (csv_cells(got.trim_end_matches('\n')), csv_cells(want));
        // Exit 1 exactly when msprobe's verdict (the Status cell) is `error`.
        let want_code = if w.iter().any(|c| c == "error") { 1 } else { 0 };
        assert_eq!(
            o.status.code(),
            Some(want_code),
            "{}: {}",
            case["id"],
            stderr(&o)
        );
        assert_eq!(g.len(), w.len(), "{}: {got}", case["id"]);
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            if a == b {
                continue;
            }
            let tolerant = [4, 10, 11, 14, 19].contains(&i);
            let close = match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(x), Ok(y)) => (x - y).abs() <= 1e-6 * y.abs().max(1e-300),
                _ => false,
            };
            assert!(
                tolerant && close,
                "{} cell {i}: got {a:?}, want {b:?}",
                case["id"]
            );
        }
        checked += 1;
    }
    assert!(checked >= 100, "only {checked} cases checked");
}

/// `numprobe precision-compare` on msprobe's own acc_check outputs writes msprobe's two files.
#[test]
fn precision_compare_reproduces_msprobe_outputs() {
    let fx = testdata().join("fixtures/msprobe-26.2.0-cpu");
    let details = |dir: &str| {
        std::fs::read_dir(fx.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("accuracy_checking_details")
            })
            .unwrap()
    };
    let out = tempfile::tempdir().unwrap();
    let o = numprobe([
        Path::new("precision-compare"),
        Path::new("--npu"),
        &details("acccheck-cpu_patched_bf16_tensor"),
        Path::new("--gpu"),
        &details("acccheck-cpu_patched_f32_tensor"),
        Path::new("--out"),
        out.path(),
        Path::new("--timestamp"),
        Path::new("20261129234918"),
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    for kind in ["result", "details"] {
        let name = format!("api_precision_compare_{kind}_20261129234918.csv");
        let want = std::fs::read(
            fx.join("acccheck-api_precision_compare_bf16_vs_f32")
                .join(&name),
        )
        .unwrap();
        let got = std::fs::read(out.path().join(&name)).unwrap();
        assert!(
            got.starts_with("\u{feff}".as_bytes()),
            "{name} lacks the BOM"
        );
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{name}"
        );
    }
}

/// The README's first command: the shipped pair, a table and the first divergence.
#[test]
fn compare_the_shipped_sample_pair() {
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let out = tempfile::tempdir().unwrap();
    let o = numprobe([
        Path::new("compare"),
        &s.join("target"),
        &s.join("golden"),
        Path::new("--out"),
        out.path(),
    ]);
    // The pair has error rows: the comparison ran and found problems.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("## First divergence"), "{text}");
    assert!(text.contains("Functional.softmax.1.backward"), "{text}");
    let csv: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("compare_result_") && n.ends_with(".csv"))
        .collect();
    assert_eq!(csv.len(), 1, "{csv:?}");
    assert!(out.path().join("summary.md").exists());
    // The visual report beside them, and its path on the terminal.
    let report = out.path().join("report.html");
    assert!(report.exists());
    assert!(
        text.contains(&format!("report:       {}", report.display())),
        "{text}"
    );

    // As the README runs it: `--exit-zero` reports the same findings with exit 0.
    let again = tempfile::tempdir().unwrap();
    let z = numprobe([
        Path::new("compare"),
        &s.join("target"),
        &s.join("golden"),
        Path::new("--out"),
        again.path(),
        Path::new("--exit-zero"),
    ]);
    assert_eq!(z.status.code(), Some(0), "{}", stderr(&z));
    // The two runs may fall in different seconds: the table's timestamp is set aside.
    let again_csv = std::fs::read_dir(again.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("compare_result_") && n.ends_with(".csv"))
        .unwrap();
    assert_eq!(
        stdout(&z)
            .replace(&again.path().display().to_string(), "OUT")
            .replace(&again_csv, "TABLE"),
        text.replace(&out.path().display().to_string(), "OUT")
            .replace(&csv[0], "TABLE")
    );
}

#[test]
fn compare_writes_xlsx_when_asked() {
    let s = repo_root().join("samples/tiny-bf16-vs-f32");
    let out = tempfile::tempdir().unwrap();
    let o = numprobe([
        Path::new("compare"),
        &s.join("target"),
        &s.join("golden"),
        Path::new("--out"),
        out.path(),
        Path::new("--xlsx"),
        Path::new("--timestamp"),
        Path::new("20261130120000"),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let xlsx = out.path().join("compare_result_20261130120000.xlsx");
    assert!(
        stdout(&o).contains(&xlsx.display().to_string()),
        "{}",
        stdout(&o)
    );
    // A zip container (xlsx) with at least the header row.
    let bytes = std::fs::read(&xlsx).unwrap();
    assert_eq!(&bytes[..4], b"PK\x03\x04");
    assert!(
        !out.path()
            .join("compare_result_20261130120000.csv")
            .exists()
    );
}
