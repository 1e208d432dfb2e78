//! Broken inputs give typed errors that name the file and the JSON path or byte offset.

use std::path::{Path, PathBuf};

use dumpfmt::Error;
use dumpfmt::dump::DumpFile;
use dumpfmt::json::{self, Str, Value};

use testsupport::testdata;

fn l1_statistics() -> (PathBuf, String) {
    let p = testdata()
        .join("fixtures/msprobe-26.2.0-torch-h200/l1_statistics/dump_path/step0/proc503/dump.json");
    let text = std::fs::read_to_string(&p).unwrap();
    (p, text)
}

fn dump_from(text: &str) -> dumpfmt::Result<DumpFile> {
    let file = Path::new("/x/dump.json");
    let v = json::parse(text.as_bytes(), file)?;
    DumpFile::from_value(v, file)
}

#[test]
fn truncated_file_reports_end_offset() {
    let (_, text) = l1_statistics();
    // Cut after a line break: the value that should follow is missing at the very end.
    let cut = &text[..text[text.len() / 2..].find('\n').unwrap() + text.len() / 2 + 1];
    match json::parse(cut.as_bytes(), Path::new("/x/dump.json")) {
        Err(Error::Json {
            file,
            offset,
            line,
            msg,
            ..
        }) => {
            assert_eq!(file, Path::new("/x/dump.json"));
            assert_eq!(offset as usize, cut.len());
            assert_eq!(line as usize, cut.matches('\n').count() + 1);
            assert!(msg.contains("end of input"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn invalid_token_reports_line_and_column() {
    let (_, text) = l1_statistics();
    let at = text.find("true").unwrap();
    let bad = format!("{}tru {}", &text[..at], &text[at + 4..]);
    let e = json::parse(bad.as_bytes(), Path::new("d.json")).unwrap_err();
    let Error::Json {
        offset,
        line,
        column,
        ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*offset as usize, at);
    let line_start = text[..at].rfind('\n').unwrap() + 1;
    assert_eq!(*line as usize, text[..at].matches('\n').count() + 1);
    assert_eq!(*column as usize, at - line_start + 1);
    assert!(e.to_string().starts_with("d.json: invalid JSON at byte"));
}

#[test]
fn wrong_type_for_dtype_names_the_json_path() {
    let (_, text) = l1_statistics();
    let bad = text.replacen("\"dtype\": \"torch.float32\"", "\"dtype\": 5", 1);
    match dump_from(&bad) {
        Err(Error::Schema { file, path, msg }) => {
            assert_eq!(file, Path::new("/x/dump.json"));
            assert_eq!(path, r#"$.data["Torch.abs.0.forward"].input_args[0].dtype"#);
            assert!(msg.contains("string"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_dtype_is_its_own_error() {
    let (_, text) = l1_statistics();
    let bad = text.replacen(
        "\"dtype\": \"torch.float32\"",
        "\"dtype\": \"torch.float33\"",
        1,
    );
    match dump_from(&bad) {
        Err(Error::UnknownDtype { path, dtype, .. }) => {
            assert_eq!(path, r#"$.data["Torch.abs.0.forward"].input_args[0].dtype"#);
            assert_eq!(dtype, "torch.float33");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn schema_errors_for_structure() {
    let cases = [
        (r#"{"data": {}}"#, "$", "task"),
        (r#"{"task": "statistics"}"#, "$", "data"),
        (r#"{"task": 1, "data": {}}"#, "$.task", "string"),
        (r#"{"task": "statistics", "data": []}"#, "$.data", "object"),
        (
            r#"{"task": "t", "data": {"Torch.abs.0.forward": {"input_args": {}}}}"#,
            r#"$.data["Torch.abs.0.forward"].input_args"#,
            "array",
        ),
        (
            r#"{"task": "t", "data": {"Torch.abs.0.forward": [1]}}"#,
            r#"$.data["Torch.abs.0.forward"]"#,
            "entry object",
        ),
        (
            r#"{"task": "t", "data": {"Torch.abs.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "torch.int8", "shape": [2, -1]}]}}}"#,
            r#"$.data["Torch.abs.0.forward"].output[0].shape[1]"#,
            "non-negative",
        ),
        (
            r#"{"task": "t", "data": {"Torch.abs.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "torch.int8", "shape": [], "Max": "x"}]}}}"#,
            r#"$.data["Torch.abs.0.forward"].output[0].Max"#,
            "number",
        ),
        (
            r#"{"task": "t", "data": {"Torch.abs.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "torch.int8", "shape": [], "md5": "xyz"}]}}}"#,
            r#"$.data["Torch.abs.0.forward"].output[0].md5"#,
            "hex",
        ),
        (
            r#"{"task": "t", "data": {"Torch.abs.0.forward": {"output": [{"type": "torch.Tensor", "dtype": "torch.int8", "shape": [], "data_name": "../x.pt"}]}}}"#,
            r#"$.data["Torch.abs.0.forward"].output[0].data_name"#,
            "file name",
        ),
    ];
    for (text, want_path, want_msg) in cases {
        match dump_from(text) {
            Err(Error::Schema { path, msg, .. }) => {
                assert_eq!(path, want_path, "{text}");
                assert!(msg.contains(want_msg), "{text}: {msg}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    // Only task and data are required; unknown keys are carried.
    let d = dump_from(
        r#"{"task": "statistics", "data": {"Functional.relu.0.forward": {"is_recompute": false}}}"#,
    )
    .unwrap();
    assert_eq!(d.level(), None);
    assert_eq!(d.len(), 1);
}

#[test]
fn lexical_errors() {
    for bad in [
        &b""[..],
        b"   ",
        b"{",
        b"[1 2]",
        b"{\"a\" 1}",
        b"{'a': 1}",
        b"[1,]",
        b"{\"a\": 1,}",
        b"01",
        b"1.",
        b".5",
        b"1e",
        b"+1",
        b"-",
        b"nul",
        b"-NaN",
        b"infinity",
        b"\"abc",
        b"\"a\\x\"",
        b"\"\\u12\"",
        b"\"\\u12g4\"",
        b"\"tab\there\"",
        b"\"\xff\"",
        b"\xef\xbb\xbf{}",
        b"{} {}",
        b"[\"\xed\xa0\x80\"]",
    ] {
        let r = json::parse(bad, Path::new("b.json"));
        assert!(
            matches!(r, Err(Error::Json { .. })),
            "{:?} gave {r:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let deep = "[".repeat(json::MAX_DEPTH + 1) + &"]".repeat(json::MAX_DEPTH + 1);
    let e = json::parse(deep.as_bytes(), Path::new("deep.json")).unwrap_err();
    assert!(e.to_string().contains("nesting"), "{e}");
}

#[test]
fn lone_surrogates_survive() {
    let v = json::parse(br#"["\udc80x", "\ud83d\ude00"]"#, Path::new("s.json")).unwrap();
    let a = v.as_array().unwrap();
    assert_eq!(a[0].as_str(), None);
    let Value::Str(s) = &a[0] else { panic!() };
    assert_eq!(
        s.code_points().collect::<Vec<_>>(),
        vec![0xdc80, 'x' as u32]
    );
    assert_eq!(a[1].as_str(), Some("\u{1f600}"));
    assert_eq!(
        json::to_python_bytes(&v),
        b"[\n \"\\udc80x\",\n \"\\ud83d\\ude00\"\n]"
    );
    assert_eq!(
        Str::from_code_points([0xd800]).unwrap().to_string_lossy(),
        "\u{fffd}"
    );
}

#[test]
fn io_errors_name_the_file() {
    let e = json::parse_file(Path::new("/nonexistent/dump.json")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }));
    assert!(e.to_string().starts_with("/nonexistent/dump.json: "));
}
