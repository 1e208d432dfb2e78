//! The index page of a compare with several tables (a whole distributed run, or a kernel dump
//! with several ranks or steps): one line per (step, rank) pair with its verdict counts, its
//! first divergence and links to its report and table, under the run's origin line. Plain
//! HTML with its style inline and no script: it opens from disk with no network.

use std::fmt::Write as _;
use std::path::Path;

use crate::Result;

/// How a pair ended.
pub enum State {
    /// Rows and their (pass, warning, error) counts.
    Compared { rows: usize, levels: [usize; 3] },
    /// The pair could not be compared (why).
    Failed(String),
    /// Present on one side only (which).
    Unpaired(&'static str),
}

/// One line of the index.
pub struct Entry {
    pub step: Option<u64>,
    pub rank: u64,
    pub state: State,
    /// The pair's first divergence, in words.
    pub first: Option<String>,
    /// Whether this pair holds its step's origin.
    pub origin: bool,
    /// The pair's report and table, relative to the index.
    pub report: Option<String>,
    pub table: Option<String>,
}

pub struct Index {
    pub title: String,
    pub target: String,
    pub golden: String,
    /// Lines above the table (the run's origin).
    pub lines: Vec<String>,
    pub entries: Vec<Entry>,
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A relative link: each path segment percent-encoded, so that no name can leave the
/// attribute or be read as a scheme.
fn href(rel: &str) -> String {
    let mut out = String::new();
    for (i, seg) in rel.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        for b in seg.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                out.push(b as char);
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

const STYLE: &str = "body{font:13px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 6px}.muted{color:#777}.origin{margin:10px 0;padding:8px 10px;border-left:4px solid #FF704D;background:#fff6f3}
table{border-collapse:collapse;margin-top:10px}th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#fafafa}tr.err td.v{background:#FF704D}tr.ok td.v{background:#FFFCF3}tr.warn td.v{background:#FFDC7F}tr.fail td.v,tr.unp td.v{background:#C7C7C7}
tr.org{outline:2px solid #c00}code{font-size:12px}";

/// The page.
pub fn render(index: &Index) -> String {
    let mut out = String::with_capacity(4096 + 512 * index.entries.len());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<link rel=\"icon\" href=\"data:,\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n<div class=\"muted\">target <code>{}</code> vs golden <code>{}</code></div>\n",
        esc(&index.title),
        esc(&index.title),
        esc(&index.target),
        esc(&index.golden)
    );
    for l in &index.lines {
        let _ = writeln!(out, "<div class=\"origin\" id=\"origin\">{}</div>", esc(l));
    }
    let with_steps = index.entries.iter().any(|e| e.step.is_some());
    out.push_str("<table id=\"pairs\">\n<tr>");
    if with_steps {
        out.push_str("<th>step</th>");
    }
    out.push_str(
        "<th>rank</th><th>result</th><th>first divergence</th><th>report</th><th>table</th></tr>\n",
    );
    for e in &index.entries {
        let (class, verdict) = match &e.state {
            State::Compared { rows, levels } => {
                let text = format!(
                    "{} error, {} warning, {} pass of {rows} rows",
                    levels[2], levels[1], levels[0]
                );
                // A pair whose values differ without error rows still diverges.
                let class = if levels[2] > 0 {
                    "err"
                } else if levels[1] > 0 || e.first.is_some() {
                    "warn"
                } else {
                    "ok"
                };
                (class, text)
            }
            State::Failed(why) => ("fail", format!("not compared: {why}")),
            State::Unpaired(side) => ("unp", format!("{side} only")),
        };
        let _ = write!(
            out,
            "<tr class=\"{class}{}\">",
            if e.origin { " org" } else { "" }
        );
        if with_steps {
            let _ = write!(
                out,
                "<td>{}</td>",
                e.step.map(|s| s.to_string()).unwrap_or_default()
            );
        }
        let _ = write!(
            out,
            "<td>{}</td><td class=\"v\">{}</td><td>{}{}</td>",
            e.rank,
            esc(&verdict),
            if e.origin { "<b>origin</b>: " } else { "" },
            e.first
                .as_deref()
                .map(esc)
                .unwrap_or_else(|| "<span class=\"muted\">none</span>".into())
        );
        for link in [&e.report, &e.table] {
            match link {
                Some(l) => {
                    let _ = write!(out, "<td><a href=\"{}\">{}</a></td>", href(l), esc(l));
                }
                None => out.push_str("<td></td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n</body>\n</html>\n");
    out
}

/// Writes the index atomically.
pub fn write(index: &Index, path: &Path) -> Result<()> {
    dumpfmt::outfile::write(path, render(index).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_break_out_of_the_page() {
        let index = Index {
            title: "t".into(),
            target: "<script>x</script>".into(),
            golden: "g".into(),
            lines: vec!["origin \"a\" <b>".into()],
            entries: vec![Entry {
                step: Some(1),
                rank: 0,
                state: State::Failed("<img src=x>".into()),
                first: Some("a&b".into()),
                origin: true,
                report: Some("step1/report \"x\".html".into()),
                table: Some("javascript:alert(1)".into()),
            }],
        };
        let page = render(&index);
        assert!(!page.contains("<script>x"), "{page}");
        assert!(!page.contains("<img"), "{page}");
        assert!(
            page.contains("href=\"step1/report%20%22x%22.html\""),
            "{page}"
        );
        assert!(
            page.contains("href=\"javascript%3Aalert%281%29\""),
            "{page}"
        );
        assert!(page.contains("a&amp;b"));
    }
}
