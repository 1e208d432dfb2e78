//! Shared by the browser tests and the report bench.
#![allow(dead_code)]

pub mod cdp;
pub mod runs;
pub mod synth;

use std::path::Path;

/// What the 100,000-row figures are made of.
#[derive(Debug)]
pub struct Figures {
    pub rows: usize,
    pub bytes: u64,
    pub write_ms: f64,
    /// Navigation to the load event.
    pub load_ms: f64,
    /// First contentful paint, from navigation start (Paint Timing API).
    pub first_paint_ms: f64,
    /// The viewer's script finished (tree, plot and panels drawn), from navigation start.
    pub ready_ms: f64,
    /// Expanding a collapsed node: click handler, rebuild and layout (median of five).
    pub expand_ms: f64,
    /// The worst of the five expansions.
    pub expand_worst_ms: f64,
    /// The same expansion until the next frame is painted (median).
    pub expand_frame_ms: f64,
}

/// Writes a `rows`-row synthetic report into `dir` and measures it in headless Chromium.
pub fn measure_large(rows: usize, dir: &Path) -> Figures {
    let s = synth::generate(rows);
    let input = report::Input {
        compared: &s.compared,
        summary: &s.summary,
        target_construct: Some(&s.construct),
        golden_construct: Some(&s.construct),
        target_name: "synthetic target".into(),
        golden_name: "synthetic golden".into(),
    };
    let t = std::time::Instant::now();
    let model = report::Model::build(&input);
    let path = dir.join("report.html");
    report::html::write(&model, &input, &path).expect("write report.html");
    let write_ms = t.elapsed().as_secs_f64() * 1000.0;
    let bytes = std::fs::metadata(&path).unwrap().len();
    let mut b = cdp::Browser::launch();
    let load_ms = b.open(&format!("file://{}", path.display()));
    let v = b.eval(
        "new Promise(r => { const f = () => document.body.dataset.ready === '1' ? r([window.__readyAt, (performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime]) : setTimeout(f, 20); f(); })",
    );
    let ready_ms = v[0].as_f64().unwrap();
    let first_paint_ms = v[1].as_f64().unwrap();
    // Collapse everything, then expand collapsed nodes one at a time (a GC pause can land in
    // any one of them: the median and the worst of five are kept).
    let v = b.eval(
        r#"new Promise(async r => {
            const frame = () => new Promise(f => requestAnimationFrame(() => requestAnimationFrame(f)));
            for (const e of [...document.querySelectorAll('#treeRows .row')]) if (e.querySelector('.tw').textContent === '▾') e.querySelector('.tw').click();
            await frame();
            const sync = [], painted = [];
            for (let k = 0; k < 5; k++) {
                const closed = [...document.querySelectorAll('#treeRows .row')].filter(e => e.querySelector('.tw').textContent === '▸');
                const tw = closed[k].querySelector('.tw');
                const t0 = performance.now();
                tw.click();
                void document.body.offsetHeight;
                sync.push(performance.now() - t0);
                await frame();
                painted.push(performance.now() - t0);
                tw.click();
                await frame();
            }
            const med = a => a.slice().sort((x, y) => x - y)[2];
            r([med(sync), Math.max(...sync), med(painted), sync]);
        })"#,
    );
    println!("expand samples (ms): {}", v[3]);
    assert!(
        b.exceptions().is_empty(),
        "the page threw: {:?}",
        b.exceptions()
    );
    Figures {
        rows: s.compared.table.rows.len(),
        bytes,
        write_ms,
        load_ms,
        first_paint_ms,
        ready_ms,
        expand_ms: v[0].as_f64().unwrap(),
        expand_worst_ms: v[1].as_f64().unwrap(),
        expand_frame_ms: v[2].as_f64().unwrap(),
    }
}

impl Figures {
    pub fn print(&self) {
        println!(
            "report: {} rows, {:.2} MB, written in {:.0} ms; Chromium: load {:.0} ms, first paint {:.0} ms, ready {:.0} ms, node expand {:.1} ms (worst of five {:.1} ms; {:.1} ms to the next frame)",
            self.rows,
            self.bytes as f64 / 1e6,
            self.write_ms,
            self.load_ms,
            self.first_paint_ms,
            self.ready_ms,
            self.expand_ms,
            self.expand_worst_ms,
            self.expand_frame_ms
        );
    }
}
