//! `report.html`: one file, its data as JSON in a `<script type="application/json">` block and
//! the viewer (hand-written JS and CSS, `assets/`) inline, so it opens from disk with no network.
//!
//! The data is laid out for size (a 100,000-row compare must stay under 25 MB): numbers with four
//! significant digits, long texts stored once and referred to by index (`[i]`), a row's name as
//! the suffix after its call's key, and the golden name only where it differs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use compare::cell::Cell;
use compare::model::Mode;

use crate::Result;
use crate::model::{Input, ItemKind, Model, TreeKind};

const TEMPLATE: &str = include_str!("../assets/report.html");
const SCRIPT: &str = include_str!("../assets/report.js");
const STYLE: &str = include_str!("../assets/report.css");

/// Columns the page leaves out: the stack is shown per API, tensor file names are not needed.
const SKIPPED: [&str; 4] = ["NPU Name", "Bench Name", "NPU_Stack_Info", "Data_name"];

fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("a str serialises"));
}

/// A number with four significant digits, in the shorter of fixed and exponent notation (the
/// page is for looking; the result table keeps every digit).
pub fn short_num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let e = format!("{v:.3e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let mant = if mant.contains('.') {
        mant.trim_end_matches('0').trim_end_matches('.')
    } else {
        mant
    };
    let exp_n: i32 = exp.parse().unwrap_or(0);
    let sci = if exp_n == 0 {
        mant.to_string()
    } else {
        format!("{mant}e{exp_n}")
    };
    if (-4..6).contains(&exp_n) {
        let decimals = (3 - exp_n).max(0) as usize;
        let fixed = format!("{v:.decimals$}");
        let fixed = if fixed.contains('.') {
            fixed
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        } else {
            fixed
        };
        if fixed.len() <= sci.len() {
            return fixed;
        }
    }
    sci
}

struct Interner {
    list: Vec<String>,
    index: HashMap<String, usize>,
}

impl Interner {
    fn id(&mut self, s: &str) -> usize {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), self.list.len() - 1);
        self.list.len() - 1
    }
}

fn cell_json(out: &mut String, c: &Cell, strings: &mut Interner) {
    let text = match c {
        Cell::Float(f) if f.is_finite() => {
            out.push_str(&short_num(*f));
            return;
        }
        Cell::Int(i) => {
            let _ = write!(out, "{i}");
            return;
        }
        Cell::None => {
            out.push_str("null");
            return;
        }
        Cell::Str(s) => match s.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) {
            Some(p) if p.is_finite() => format!("{}%", short_num(p)),
            _ => s.clone(),
        },
        other => other.py_str(),
    };
    if text.len() <= 3 {
        json_str(out, &text);
    } else {
        let _ = write!(out, "[{}]", strings.id(&text));
    }
}

fn opt_num(out: &mut String, v: Option<f64>) {
    match v {
        Some(v) if v.is_finite() => out.push_str(&short_num(v)),
        _ => out.push_str("null"),
    }
}

/// The first divergence as the page shows it: calls by key.
pub struct Divergence {
    /// The producer's call index (into [`Model::calls`]), why, and its figures.
    pub producer: Option<(usize, String, Vec<String>)>,
    /// Keys of later calls that only propagate the difference.
    pub propagators: Vec<String>,
    /// Keys of later calls that start differences of their own.
    pub others: Vec<String>,
}

/// What a page shows besides its tree: the result table's rows and the divergence.
pub struct Page<'a> {
    pub target_name: &'a str,
    pub golden_name: &'a str,
    pub header: &'a [String],
    /// Rows whose first two cells are the target's and golden's names (`N/A`: no partner).
    pub rows: &'a [Vec<Cell>],
    /// Each row's verdict (0 pass, 1 warning, 2 error).
    pub levels: Vec<u8>,
    pub divergence: Divergence,
    /// Rows, rows without a partner, and (pass, warning, error) counts of rows and of calls.
    pub counts: (usize, usize, [usize; 3], [usize; 3]),
    /// The plot's axes and guide lines (JSON), `None`: the mode's own.
    pub thresholds: Option<String>,
    /// A page this one belongs to (the run's index), relative to it: text and href.
    pub up: Option<(String, String)>,
}

impl<'a> Page<'a> {
    /// The page of an API compare.
    pub fn of_compare(input: &'a Input) -> Page<'a> {
        let table = &input.compared.table;
        let s = input.summary;
        Page {
            target_name: &input.target_name,
            golden_name: &input.golden_name,
            header: &table.header,
            rows: &table.rows,
            levels: table.verdicts.iter().map(|v| v.level as u8).collect(),
            divergence: Divergence {
                producer: s
                    .producer
                    .as_ref()
                    .map(|p| (p.call_index, p.reason.clone(), p.rows.clone())),
                propagators: s.propagators.clone(),
                others: s.other_producers.clone(),
            },
            counts: (s.rows, s.unmatched_rows, s.row_levels, s.api_levels),
            thresholds: None,
            up: None,
        }
    }
}

/// The page's data as JSON (safe to place inside a `<script>` element).
pub fn data_json(model: &Model, input: &Input) -> String {
    page_json(model, &Page::of_compare(input))
}

/// [`data_json`] of any page.
pub fn page_json(model: &Model, page: &Page) -> String {
    let keep: Vec<usize> = (0..page.header.len())
        .filter(|&i| !SKIPPED.contains(&page.header[i].as_str()))
        .collect();
    let mut strings = Interner {
        list: Vec::new(),
        index: HashMap::new(),
    };
    let mut out = String::with_capacity(256 * page.rows.len() + 4096);
    out.push('{');
    let mode = match model.mode {
        Mode::Statistics => "statistics",
        Mode::Tensor => "tensor",
        Mode::Md5 => "md5",
    };
    let _ = write!(out, "\"mode\":\"{mode}\",\"target\":");
    json_str(&mut out, page.target_name);
    out.push_str(",\"golden\":");
    json_str(&mut out, page.golden_name);
    let _ = write!(
        out,
        ",\"tree\":\"{}\"",
        match model.tree {
            TreeKind::Construct => "construct",
            TreeKind::Stack => "stack",
            TreeKind::Scope => "scope",
        }
    );
    if let Some((text, href)) = &page.up {
        out.push_str(",\"up\":[");
        json_str(&mut out, text);
        out.push(',');
        json_str(&mut out, href);
        out.push(']');
    }
    out.push_str(",\"cols\":[");
    for (n, &i) in keep.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        json_str(&mut out, &page.header[i]);
    }
    out.push(']');

    out.push_str(",\"rows\":[");
    let mut first_row = Vec::with_capacity(model.calls.len());
    let mut emitted = 0usize;
    for call in &model.calls {
        first_row.push(emitted);
        for &r in &call.rows {
            if emitted > 0 {
                out.push(',');
            }
            emitted += 1;
            let row = &page.rows[r];
            let name = row[0].py_str();
            let bench = row[1].py_str();
            out.push('[');
            match name.strip_prefix(call.key.as_str()) {
                Some(rest) if rest.starts_with('.') => json_str(&mut out, rest),
                _ => json_str(&mut out, &name),
            }
            out.push(',');
            if bench == name {
                out.push('0');
            } else {
                json_str(&mut out, &bench);
            }
            for &i in &keep {
                out.push(',');
                cell_json(&mut out, &row[i], &mut strings);
            }
            // The verdict's level as the judge left it (the Result cell may be blank).
            let _ = write!(out, ",{}", page.levels[r]);
            out.push(']');
        }
    }
    out.push(']');

    out.push_str(",\"calls\":[");
    for (ci, call) in model.calls.iter().enumerate() {
        if ci > 0 {
            out.push(',');
        }
        out.push('[');
        json_str(&mut out, &call.key);
        let dir = match call.direction.as_str() {
            "forward" => 0,
            "backward" => 1,
            _ => 2,
        };
        let verdict = call
            .verdict
            .map(|v| v.code().to_string())
            .unwrap_or_else(|| "null".into());
        let _ = write!(
            out,
            ",{dir},{verdict},{},{},{},",
            first_row[ci],
            call.rows.len(),
            call.stack.map(|s| s as i64).unwrap_or(-1)
        );
        opt_num(&mut out, call.err[0]);
        out.push(',');
        opt_num(&mut out, call.err[1]);
        out.push(',');
        match &call.golden {
            Some(g) => json_str(&mut out, g),
            None => out.push_str("null"),
        }
        let _ = write!(out, ",{}]", model.call_item[ci]);
    }
    out.push(']');

    out.push_str(",\"items\":[");
    for (i, it) in model.items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        json_str(&mut out, &it.label);
        let kind = match it.kind {
            ItemKind::Module => 0,
            ItemKind::Api => 1,
            ItemKind::Site => 2,
        };
        let worst = it.worst.map(|w| w.code() as i32).unwrap_or(-2);
        let _ = write!(
            out,
            ",{kind},{},{},{},{worst},{},{},{},{},",
            it.depth,
            it.end,
            it.call.map(|c| c as i64).unwrap_or(-1),
            it.counts[0],
            it.counts[1],
            it.counts[2],
            it.counts[3]
        );
        match &it.golden_link {
            Some(path) => {
                out.push('[');
                for (k, p) in path.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    json_str(&mut out, p);
                }
                out.push(']');
            }
            None => out.push_str("null"),
        }
        out.push(']');
    }
    out.push(']');

    out.push_str(",\"stacks\":[");
    for (i, s) in model.stacks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        for (k, f) in s.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let _ = write!(out, "{}", strings.id(f));
        }
        out.push(']');
    }
    out.push(']');

    // The first divergence: producer, and later APIs that propagate or start their own.
    let by_key: HashMap<&str, usize> = model
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.key.as_str(), i))
        .collect();
    let keys_json = |out: &mut String, keys: &[String]| {
        out.push('[');
        let mut first = true;
        for k in keys {
            if let Some(i) = by_key.get(k.as_str()) {
                if !first {
                    out.push(',');
                }
                first = false;
                let _ = write!(out, "{i}");
            }
        }
        out.push(']');
    };
    let d = &page.divergence;
    out.push_str(",\"div\":{");
    match &d.producer {
        Some((call, reason, figures)) => {
            let _ = write!(out, "\"producer\":{call},\"reason\":");
            json_str(&mut out, reason);
            out.push_str(",\"figures\":[");
            for (k, r) in figures.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                json_str(&mut out, r);
            }
            out.push(']');
        }
        None => out.push_str("\"producer\":null"),
    }
    out.push_str(",\"propagators\":");
    keys_json(&mut out, &d.propagators);
    out.push_str(",\"others\":");
    keys_json(&mut out, &d.others);
    out.push('}');
    let (rows, unmatched, row_levels, api_levels) = page.counts;
    let _ = write!(
        out,
        ",\"summary\":{{\"rows\":{rows},\"unmatched_rows\":{unmatched},\"row_levels\":[{},{},{}],\"api_levels\":[{},{},{}]}}",
        row_levels[0], row_levels[1], row_levels[2], api_levels[0], api_levels[1], api_levels[2]
    );
    // Guide lines of the plot: msprobe's judgement thresholds for the plotted quantities.
    let thr = match model.mode {
        _ if page.thresholds.is_some() => page.thresholds.as_deref().unwrap_or_default(),
        Mode::Statistics => {
            "{\"y1\":\"relative error of the norm\",\"y2\":\"relative error of the max\",\"lines\":[[0.1,1,\"10%: input drift msprobe tolerates\"],[0.5,2,\"50%: output NormRelativeErr error\"]]}"
        }
        Mode::Tensor => {
            "{\"y1\":\"1 - cosine\",\"y2\":\"max relative error\",\"lines\":[[0.01,1,\"cosine 0.99\"],[0.1,2,\"cosine drop 0.1 (msprobe warning)\"]]}"
        }
        Mode::Md5 => "{\"y1\":\"\",\"y2\":\"\",\"lines\":[]}",
    };
    let _ = write!(out, ",\"thr\":{thr}");
    out.push_str(",\"S\":[");
    for (i, s) in strings.list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_str(&mut out, s);
    }
    out.push_str("]}");
    // `<` only occurs inside JSON strings, where \u003c means the same: no `</script>` inside.
    out.replace('<', "\\u003c")
}

/// The whole page.
pub fn render(model: &Model, input: &Input) -> String {
    render_page(model, &Page::of_compare(input))
}

/// [`render`] of any page.
pub fn render_page(model: &Model, page: &Page) -> String {
    let data = page_json(model, page);
    let title = format!(
        "numprobe compare: {} vs {}",
        page.target_name, page.golden_name
    );
    let title = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    // Split on the markers rather than `replace`, so that no data text is ever searched.
    let mut out = String::with_capacity(data.len() + TEMPLATE.len() + SCRIPT.len() + STYLE.len());
    let mut rest = TEMPLATE;
    for (marker, value) in [
        ("{{TITLE}}", title.as_str()),
        ("{{STYLE}}", STYLE),
        ("{{DATA}}", data.as_str()),
        ("{{SCRIPT}}", SCRIPT),
    ] {
        let (head, tail) = rest
            .split_once(marker)
            .expect("the template holds each marker once, in order");
        out.push_str(head);
        out.push_str(value);
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// Writes `report.html` atomically (never through a planted link).
pub fn write(model: &Model, input: &Input, path: &Path) -> Result<()> {
    write_page(model, &Page::of_compare(input), path)
}

/// [`write()`] of any page.
pub fn write_page(model: &Model, page: &Page, path: &Path) -> Result<()> {
    dumpfmt::outfile::write(path, render_page(model, page).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::short_num;

    #[test]
    fn numbers_keep_four_significant_digits_in_the_shorter_notation() {
        assert_eq!(short_num(0.0), "0");
        assert_eq!(short_num(3.0), "3");
        assert_eq!(short_num(-1234.5678), "-1235");
        assert_eq!(short_num(0.012345678), "0.01235");
        assert_eq!(short_num(1.5e-7), "1.5e-7");
        assert_eq!(short_num(123456789.5), "1.235e8");
        assert_eq!(short_num(0.5), "0.5");
    }
}
