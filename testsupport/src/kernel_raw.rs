//! Raw (headerless) kernel-dump trees made from the shipped `.npy` ones: what MindSpore writes on
//! Ascend with `file_format: "bin"`, which no machine here can produce.

use std::path::Path;

/// Copies the kernel dump `src` to `dst`, every `.npy` tensor file written as its raw payload
/// under the same name without `.npy`. With `statistic_csv`, each iteration folder also gets a
/// `statistic.csv` naming every tensor's shape except those whose file name contains
/// `no_row_for` (those are read as one dimension).
pub fn raw_copy(src: &Path, dst: &Path, statistic_csv: bool, no_row_for: Option<&str>) {
    std::fs::create_dir_all(dst).unwrap();
    let mut rows = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names {
        let (from, to) = (src.join(&name), dst.join(&name));
        let text = name.to_str().unwrap();
        if from.is_dir() {
            raw_copy(&from, &to, statistic_csv, no_row_for);
            continue;
        }
        let Some(parsed) = dumpfmt::kernel::KernelFileName::parse(text) else {
            std::fs::copy(&from, &to).unwrap();
            continue;
        };
        let t = dumpfmt::npy::read(&from).unwrap();
        let stem = text.strip_suffix(".npy").unwrap();
        std::fs::write(dst.join(stem), t.bytes()).unwrap();
        if no_row_for.is_some_and(|s| text.contains(s)) {
            continue;
        }
        let shape: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
        rows.push(format!(
            "{},{},{},{},{},{},{},{},{},\"({})\"\n",
            parsed.op_type,
            parsed.op_name,
            parsed.task_id,
            parsed.stream_id,
            parsed.timestamp,
            parsed.io,
            parsed.slot,
            t.bytes().len(),
            parsed.dtype_name.as_deref().unwrap_or(""),
            shape.join(", ")
        ));
    }
    if statistic_csv && !rows.is_empty() {
        let mut text = dumpfmt::kernel::STATISTIC_FIXED_COLUMNS.join(",") + "\n";
        text.extend(rows);
        std::fs::write(dst.join("statistic.csv"), text).unwrap();
    }
}
