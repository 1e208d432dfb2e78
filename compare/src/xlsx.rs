//! The result table as `.xlsx` (msprobe's `--xlsx`): the same rows as the CSV, written the way
//! pandas' `to_excel` writes msprobe's table — numbers as numbers, `None`/NaN as empty cells,
//! infinities as the texts `inf`/`-inf`, a bold bordered header, and sheets split once a table
//! would pass Excel's row limit.

use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::table::Table;
use rust_xlsxwriter::{Format, FormatAlign, FormatBorder, Workbook, Worksheet, XlsxError};
use std::path::Path;

/// msprobe's largest sheet (data rows); longer tables go to `part_{i}` sheets of equal size.
pub const MAX_SHEET_ROWS: usize = 1_048_500;

/// Excel keeps at most this many characters in a cell.
const MAX_CELL_CHARS: usize = 32_767;

/// Writes `t` to `path` as an xlsx workbook.
pub fn write_xlsx(t: &Table, path: &Path) -> Result<()> {
    write_xlsx_sliced(t, path, MAX_SHEET_ROWS)
}

/// [`write_xlsx`] with the sheet size as a parameter, so tests can cover the split.
pub fn write_xlsx_sliced(t: &Table, path: &Path, max_rows: usize) -> Result<()> {
    let err = |e: XlsxError| Error::Format(format!("{}: writing xlsx: {e}", path.display()));
    let header_fmt = Format::new()
        .set_bold()
        .set_border(FormatBorder::Thin)
        .set_align(FormatAlign::Center)
        .set_align(FormatAlign::Top);
    let mut wb = Workbook::new();
    let n = t.rows.len();
    let slices: Vec<(String, std::ops::Range<usize>)> = if n < max_rows.max(1) {
        vec![("Sheet1".to_string(), 0..n)]
    } else {
        let parts = n.div_ceil(max_rows);
        let size = n.div_ceil(parts);
        (0..parts)
            .map(|i| (format!("part_{i}"), i * size..((i + 1) * size).min(n)))
            .collect()
    };
    for (name, range) in slices {
        let ws = wb.add_worksheet_with_constant_memory().map_err(err)?;
        ws.set_name(&name).map_err(err)?;
        for (c, h) in t.header.iter().enumerate() {
            ws.write_string_with_format(0, col(c)?, pyrepr::formula_safe(h).as_ref(), &header_fmt)
                .map_err(err)?;
        }
        for (r, row) in t.rows[range].iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                write_cell(ws, (r + 1) as u32, col(c)?, cell).map_err(err)?;
            }
        }
    }
    // Through dumpfmt's output writer: a failed save (a full disk) leaves the previous file,
    // never a 0-byte or half-zipped workbook under the final name; links are refused.
    let mut out = dumpfmt::outfile::AtomicFile::create(path)?;
    wb.save_to_writer(out.file()).map_err(err)?;
    Ok(out.commit()?)
}

fn col(c: usize) -> Result<u16> {
    u16::try_from(c).map_err(|_| Error::Format(format!("xlsx: column {c} out of range")))
}

fn write_cell(
    ws: &mut Worksheet,
    r: u32,
    c: u16,
    cell: &Cell,
) -> std::result::Result<(), XlsxError> {
    match cell {
        Cell::None => {}
        Cell::Float(f) if f.is_nan() => {}
        Cell::Float(f) if f.is_infinite() => {
            ws.write_string(r, c, if *f > 0.0 { "inf" } else { "-inf" })?;
        }
        Cell::Float(f) => {
            ws.write_number(r, c, *f)?;
        }
        // Excel numbers are doubles, as pandas writes an int64 cell.
        Cell::Int(i) => {
            ws.write_number(r, c, *i as f64)?;
        }
        Cell::Bool(b) => {
            ws.write_boolean(r, c, *b)?;
        }
        Cell::Str(_) | Cell::List(_) => {
            // Text from the dump (API names, dtypes, stacks): a formula cell gets a leading
            // `'`, as in the CSV.
            let text = cell.py_str();
            ws.write_string(r, c, clip(&pyrepr::formula_safe(&text)))?;
        }
    }
    Ok(())
}

/// Excel refuses longer cells; a very deep stack keeps its first 32,767 characters (the CSV
/// keeps everything).
fn clip(s: &str) -> &str {
    match s.char_indices().nth(MAX_CELL_CHARS) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
