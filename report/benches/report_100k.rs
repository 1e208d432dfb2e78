//! The report at scale: a 100,000-row compare's report.html (size), and in headless Chromium
//! its first paint, the moment the viewer is drawn, and node expansion. Each figure is the
//! median of `NUMPROBE_REPORT_ROUNDS` runs (default 3), a fresh browser each.
//!
//! `cargo bench -p report --bench report_100k [-- ROWS]` (needs Chromium: `/usr/bin/chromium`
//! or `NUMPROBE_CHROMIUM`). The goals: under 25 MB, first paint within 2 s, expand within 100 ms.

#[path = "../tests/common/mod.rs"]
mod common;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rows: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let rounds: usize = std::env::var("NUMPROBE_REPORT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut all = Vec::new();
    for _ in 0..rounds {
        let dir = tempfile::tempdir().expect("temporary directory");
        let f = common::measure_large(rows, dir.path());
        f.print();
        all.push(f);
    }
    let m = |g: fn(&common::Figures) -> f64| median(all.iter().map(g).collect());
    println!(
        "median of {rounds}: {} rows, {:.2} MB, write {:.0} ms, load {:.0} ms, first paint {:.0} ms, viewer drawn {:.0} ms, expand {:.1} ms (worst {:.1} ms, next frame {:.1} ms)",
        all[0].rows,
        all[0].bytes as f64 / 1e6,
        m(|f| f.write_ms),
        m(|f| f.load_ms),
        m(|f| f.first_paint_ms),
        m(|f| f.ready_ms),
        m(|f| f.expand_ms),
        m(|f| f.expand_worst_ms),
        m(|f| f.expand_frame_ms),
    );
}
