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

/// The page of a kernel-dump compare (testdata/kernel-dumps, float32 with a perturbed input
/// against float32): the scope tree, the plot and the first divergence render, a click on the
/// first divergence opens its detail, and nothing is requested from the network.
#[test]
fn kernel_report_renders_and_needs_no_network() {
    let out = tempfile::tempdir().unwrap();
    let (outcome, written) =
        common::runs::kernel_compare("net_f32_noisy", "net_f32", Some(vec![0]), out.path());
    let first = outcome.tables[0].0.first_divergence(0.0).unwrap();
    let url = format!("file://{}", written.html.display());
    let mut b = Browser::launch();
    b.open(&url);
    assert_eq!(
        b.eval("new Promise(r => { const f = () => document.body.dataset.ready ? r(document.body.dataset.ready) : setTimeout(f, 20); f(); })"),
        Value::from("1")
    );
    let head = b.eval("document.getElementById('treeHead').textContent");
    assert!(head.as_str().unwrap().contains("scope"), "{head}");
    let rows =
        b.eval("[...document.querySelectorAll('#treeRows .row .lb')].map(e => e.textContent)");
    let rows: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for scope in [
        "Default",
        "network-WithLossCell",
        "_backbone-Net",
        "fc-Dense",
    ] {
        assert!(rows.contains(&scope), "tree lacks {scope}: {rows:?}");
    }
    // The producer's leaf is marked in the tree and named by the first-divergence card.
    let prod = b.eval("document.querySelector('#treeRows .row.prod .lb').textContent");
    let card = b.eval("document.getElementById('firstDiv').textContent");
    let card = card.as_str().unwrap();
    let leaf = prod.as_str().unwrap();
    assert!(!leaf.is_empty() && card.contains(leaf), "{leaf} / {card}");
    assert!(
        card.replace('/', "_").contains(&first.op_name),
        "{card} vs {first}"
    );
    // The plot: points drawn (any coloured pixel of the verdict palette).
    let drawn = b.eval(
        "(() => { const c = document.getElementById('plot'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && !(d[i] === d[i + 1] && d[i + 1] === d[i + 2]) && !(d[i] === 0xee && d[i + 1] === 0xf2)) n++; return n; })()",
    );
    assert!(drawn.as_u64().unwrap() > 20, "plot points: {drawn}");
    b.screenshot(&screenshot_dir().join("kernel-1-open.png"));

    b.click_selector("#firstDiv a.jump");
    let detail = b.eval("document.getElementById('detail').innerText");
    let detail = detail.as_str().unwrap();
    for part in [
        "first divergence",
        "outputs",
        "target",
        "golden",
        "dtype",
        "Cosine",
    ] {
        assert!(detail.contains(part), "detail lacks {part}: {detail}");
    }
    b.screenshot(&screenshot_dir().join("kernel-2-first-divergence.png"));

    let requests = b.requests();
    assert!(
        requests.iter().all(|u| *u == url || u.starts_with("data:")),
        "the page made network requests: {requests:?}"
    );
    assert!(
        b.exceptions().is_empty(),
        "the page threw: {:?}",
        b.exceptions()
    );
}

/// The index of a whole-run compare (four ranks, two steps; rank 1's matmul differs in step 1):
/// the origin line and every pair render, the origin's pair links to a page that opens and
/// renders its first divergence, and nothing is requested from the network.
#[test]
fn run_index_renders_and_links_each_pair() {
    let dir = tempfile::tempdir().unwrap();
    let (_, written, index) = common::runs::run_compare(dir.path());
    let url = format!("file://{}", index.display());
    let mut b = Browser::launch();
    b.open(&url);
    let origin = b.eval("document.getElementById('origin').textContent");
    assert_eq!(origin, "Origin: rank 1, API Torch.matmul.0.forward");
    let lines =
        b.eval("document.querySelectorAll('#pairs tr.err, #pairs tr.warn, #pairs tr.ok').length");
    assert_eq!(lines.as_u64().unwrap(), written.len() as u64);
    b.screenshot(&screenshot_dir().join("run-1-index.png"));
    let requests = b.requests();
    assert!(
        requests.iter().all(|u| *u == url || u.starts_with("data:")),
        "the index made network requests: {requests:?}"
    );

    // The origin's link opens its pair's page, whose first divergence is the matmul.
    let href = b.eval("document.querySelector('#pairs tr.org a').href");
    let href = href.as_str().unwrap().to_string();
    assert!(href.ends_with("step1/report_rank1.html"), "{href}");
    b.open(&href);
    let card = b.eval(
        "new Promise(r => { const f = () => document.body.dataset.ready ? r(document.getElementById('firstDiv').textContent) : setTimeout(f, 20); f(); })",
    );
    assert!(
        card.as_str().unwrap().contains("Torch.matmul.0.forward"),
        "{card}"
    );
    let up = b.eval("document.getElementById('up').getAttribute('href')");
    assert_eq!(up, "../report.html");
    b.screenshot(&screenshot_dir().join("run-2-pair.png"));
    let requests = b.requests();
    assert!(
        requests
            .iter()
            .all(|u| u.starts_with("file://") || u.starts_with("data:")),
        "network requests: {requests:?}"
    );
    assert!(
        b.exceptions().is_empty(),
        "the pages threw: {:?}",
        b.exceptions()
    );
}
