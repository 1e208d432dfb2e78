//! The report in a real browser (headless Chromium over the DevTools protocol): the shipped
//! sample pair's report renders its tree, plot and first divergence, a click shows the detail,
//! the keyboard moves to the next error, and the page requests nothing from the network. Also
//! renders a generated 100,000-row report and prints its size and timings (benches/RESULTS.md
//! records and judges them).

mod common;

use common::cdp::Browser;
use serde_json::Value;

fn screenshot_dir() -> std::path::PathBuf {
    let d = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn sample_report_renders_and_needs_no_network() {
    let root = testsupport::repo_root().join("samples/tiny-bf16-vs-f32");
    let out = tempfile::tempdir().unwrap();
    let opts = compare::CompareOptions {
        target: root.join("target"),
        golden: root.join("golden"),
        out_dir: out.path().to_path_buf(),
        step: Some(0),
        timestamp: Some("20260101000000".into()),
        ..Default::default()
    };
    let (outcome, compared) = compare::run_keeping(&opts, &()).expect("compare the sample");
    let written = report::write_beside(&outcome, &compared, out.path(), None).unwrap();
    let producer = outcome
        .summary
        .producer
        .as_ref()
        .expect("the sample pair diverges")
        .key
        .clone();
    let url = format!("file://{}", written.html.display());

    let mut b = Browser::launch();
    b.open(&url);
    assert_eq!(
        b.eval("new Promise(r => { const f = () => document.body.dataset.ready ? r(document.body.dataset.ready) : setTimeout(f, 20); f(); })"),
        Value::from("1")
    );
    // The tree: rows drawn, the producer revealed and marked.
    let rows = b
        .eval("document.querySelectorAll('#treeRows .row').length")
        .as_u64()
        .unwrap();
    assert!(rows > 5, "tree rows drawn: {rows}");
    assert_eq!(
        b.eval("document.querySelector('#treeRows .row.prod .lb').textContent"),
        Value::from(producer.clone())
    );
    // The plot: coloured points on the canvas.
    let coloured = b.eval(
        "(() => { const c = document.getElementById('plot'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 1] < 140 && d[i + 2] < 100) n++; return n; })()",
    );
    assert!(
        coloured.as_u64().unwrap() > 50,
        "error points on the plot: {coloured}"
    );
    // The first-divergence panel names the producer.
    let first = b.eval("document.getElementById('firstDiv').textContent");
    assert!(first.as_str().unwrap().contains(&producer), "{first}");
    b.screenshot(&screenshot_dir().join("sample-1-open.png"));

    // One click on the first divergence shows its detail: rows of both sides, verdicts, stack.
    b.click_selector("#firstDiv a.jump");
    let detail = b.eval("document.getElementById('detail').innerText");
    let detail = detail.as_str().unwrap();
    assert!(detail.starts_with(&producer), "{detail}");
    for part in [
        "first divergence",
        "outputs",
        "target",
        "golden",
        "dtype",
        "Cosine",
        "stack",
    ] {
        assert!(detail.contains(part), "detail lacks {part}: {detail}");
    }
    assert_eq!(
        b.eval("document.querySelector('#treeRows .row.sel .lb').textContent"),
        Value::from(producer.clone())
    );
    b.screenshot(&screenshot_dir().join("sample-2-first-divergence.png"));

    // Keyboard: `n` selects the next error API after the producer.
    b.call(
        "Input.dispatchKeyEvent",
        serde_json::json!({"type": "keyDown", "key": "n", "text": "n"}),
    );
    let next = b.eval("document.querySelector('#detail h3').firstChild.textContent.trim()");
    assert_ne!(next, Value::from(producer.clone()));
    assert_eq!(
        b.eval("document.querySelector('#detail h3 .badge').textContent"),
        "error"
    );

    // Search and the errors-only filter narrow the tree.
    let found = b.eval(
        "(() => { const s = document.getElementById('search'); s.value = 'softmax'; s.dispatchEvent(new Event('input')); return [...document.querySelectorAll('#treeRows .row .lb')].map(e => e.textContent); })()",
    );
    let found: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        !found.is_empty() && found.iter().all(|l| l.to_lowercase().contains("softmax")),
        "{found:?}"
    );
    b.screenshot(&screenshot_dir().join("sample-3-search.png"));

    let requests = b.requests();
    assert!(
        requests.iter().all(|u| *u == url || u.starts_with("data:")),
        "the page made network requests: {requests:?}"
    );
    assert_eq!(
        requests.iter().filter(|u| **u == url).count(),
        1,
        "{requests:?}"
    );
    assert!(
        b.exceptions().is_empty(),
        "the page threw: {:?}",
        b.exceptions()
    );

    // `report.html#first` opens on the first divergence's detail.
    b.open(&format!("{url}#first"));
    let detail = b.eval(
        "new Promise(r => { const f = () => document.body.dataset.ready ? r(document.getElementById('detail').innerText) : setTimeout(f, 20); f(); })",
    );
    assert!(detail.as_str().unwrap().starts_with(&producer), "{detail}");
    println!("screenshots in {}", screenshot_dir().display());
}

#[test]
fn large_report_prints_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::measure_large(100_000, dir.path());
    assert!(f.rows >= 100_000, "{f:?}");
    assert!(
        f.bytes > 0 && f.ready_ms > 0.0 && f.expand_ms >= 0.0,
        "{f:?}"
    );
    f.print();
}

/// Each kind of dump draws without a script error: L0/mix statistics (construct.json tree, where
/// modules are dumped calls themselves), L0 and md5.
#[test]
fn every_mode_renders_without_script_errors() {
    let fx = testsupport::testdata().join("fixtures/msprobe-26.2.0-cpu");
    let dump = |name: &str| {
        let step = fx.join(name).join("dump/step0");
        let proc = std::fs::read_dir(&step)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        proc.join("dump.json")
    };
    let mut b = Browser::launch();
    for (target, golden, tree) in [
        ("pt_tiny_bf16_stat_mix", "pt_tiny_f32_stat_mix", "construct"),
        ("pt_tiny_f32_stat_L0", "pt_tiny_f32_stat_L0", "construct"),
        ("pt_tiny_bf16_md5_L1", "pt_tiny_f32_md5_L1", "stack"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let opts = compare::CompareOptions {
            target: dump(target),
            golden: dump(golden),
            out_dir: out.path().to_path_buf(),
            timestamp: Some("20260101000000".into()),
            ..Default::default()
        };
        let (outcome, compared) = compare::run_keeping(&opts, &()).unwrap();
        let written = report::write_beside(&outcome, &compared, out.path(), None).unwrap();
        b.open(&format!("file://{}", written.html.display()));
        let state = b.eval(
            "new Promise(r => { const f = () => document.body.dataset.ready ? r([document.querySelectorAll('#treeRows .row').length, document.getElementById('treeHead').textContent]) : setTimeout(f, 20); f(); })",
        );
        assert!(state[0].as_u64().unwrap() > 0, "{target}: {state}");
        let head = state[1].as_str().unwrap();
        assert!(
            head.contains(if tree == "construct" {
                "construct.json"
            } else {
                "stack"
            }),
            "{target}: {head}"
        );
        assert!(b.exceptions().is_empty(), "{target}: {:?}", b.exceptions());
        b.screenshot(&screenshot_dir().join(format!("mode-{target}.png")));
    }
}
