//! Pairing the rows of the target (NPU) dump with those of the golden (bench) dump.

use std::collections::HashMap;

use crate::model::{Dump, Leaf, Mode};

/// Where a row lives: call index and leaf index inside the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowRef {
    pub call: usize,
    pub leaf: usize,
}

/// Options that change the pairing.
#[derive(Clone, Debug, Default)]
pub struct MatchOptions {
    pub fuzzy: bool,
    /// `-dm`: NPU full row name -> bench full row name.
    pub data_mapping: Option<Vec<(String, String)>>,
    /// `-cm`: MindSpore cells against PyTorch modules; `Some(empty)` renames `Cell` to
    /// `Module` only, entries map cell paths (exact, else substring).
    pub cell_mapping: Option<Vec<(String, String)>>,
    /// `-am`: MindSpore APIs against PyTorch APIs (`Functional.matmul` -> `Torch.matmul`); the
    /// caller supplies the table (msprobe ships one as `ms_to_pt_api.yaml`).
    pub api_mapping: Option<Vec<(String, String)>>,
}

/// msprobe's API mapping of one NPU row name.
fn map_api(name: &str, table: &HashMap<&str, &str>) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() < 2 {
        return name.to_string();
    }
    let api = format!("{}.{}", parts[0], parts[1]);
    match parts[0] {
        "Mint" => name.replace("Mint", "Torch"),
        "MintFunctional" => name.replace("MintFunctional", "Functional"),
        _ => match table.get(api.as_str()) {
            Some(pt) => name.replace(&api, pt),
            None => name.to_string(),
        },
    }
}

/// msprobe's cell mapping of one NPU row name.
fn map_cell(name: &str, table: &[(String, String)]) -> String {
    let grad = name.split('.').any(|p| p == "parameters_grad");
    if name.is_empty() || (!grad && !name.contains(".forward.") && !name.contains(".backward.")) {
        return "N/A".to_string();
    }
    let mut out = name.replacen("Cell", "Module", 1);
    if !table.is_empty() {
        let tail = out
            .split_once('.')
            .map(|(_, t)| t)
            .unwrap_or(&out)
            .to_string();
        let cut = [".forward.", ".backward.", ".parameters_grad."]
            .iter()
            .filter_map(|m| tail.find(m))
            .min()
            .unwrap_or(tail.len());
        let cell = tail[..cut].to_string();
        let new_cell = match table.iter().find(|(k, _)| *k == cell) {
            Some((_, v)) => v.clone(),
            None => {
                let mut c = cell.clone();
                for (k, v) in table {
                    if c.contains(k.as_str()) {
                        c = c.replacen(k.as_str(), v, 1);
                    }
                }
                c
            }
        };
        if new_cell != cell {
            out = out.replacen(&cell, &new_cell, 1);
        }
    }
    out
}

/// The key an NPU row is matched on (msprobe's `compare_key`).
fn npu_keys(nf: &[Flat], opts: &MatchOptions) -> Vec<String> {
    if let Some(api) = &opts.api_mapping {
        let t: HashMap<&str, &str> = api.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        nf.iter().map(|n| map_api(&n.full_name, &t)).collect()
    } else if let Some(cells) = &opts.cell_mapping {
        nf.iter().map(|n| map_cell(&n.full_name, cells)).collect()
    } else if let Some(dm) = &opts.data_mapping {
        let t: HashMap<&str, &str> = dm.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        nf.iter()
            .map(|n| {
                t.get(n.full_name.as_str())
                    .copied()
                    .unwrap_or(&n.full_name)
                    .to_string()
            })
            .collect()
    } else {
        nf.iter().map(|n| n.name_update.clone()).collect()
    }
}

/// One output row: an NPU row and its bench partner, if any.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    pub npu: RowRef,
    pub bench: Option<RowRef>,
}

struct Flat {
    r: RowRef,
    /// Row name after backward renumbering (the exact-match key).
    name_update: String,
    full_name: String,
}

fn flatten(d: &Dump, renumber_backward: bool) -> Vec<Flat> {
    let mut backward_count: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for (ci, call) in d.calls.iter().enumerate() {
        let order = if call.direction == "backward" {
            let c = backward_count
                .entry(call.op_no_number.as_str())
                .or_insert(0);
            *c += 1;
            *c - 1
        } else {
            0
        };
        let call_part = if renumber_backward && call.direction == "backward" {
            match call.call_part.rsplit_once('.') {
                Some((head, tail)) => {
                    let digit = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
                    let head = if digit(head) {
                        order.to_string()
                    } else {
                        head.to_string()
                    };
                    let tail = if digit(tail) {
                        order.to_string()
                    } else {
                        tail.to_string()
                    };
                    Some(format!("{head}.{tail}"))
                }
                None => None,
            }
        } else {
            None
        };
        for (li, leaf) in call.leaves.iter().enumerate() {
            let name_update = match &call_part {
                Some(cp) => {
                    let suffix = leaf.name.replace(&call.key, "");
                    format!("{}.{}{}", call.op_no_number, cp, suffix)
                }
                None => leaf.name.clone(),
            };
            out.push(Flat {
                r: RowRef { call: ci, leaf: li },
                name_update,
                full_name: leaf.name.clone(),
            });
        }
    }
    out
}

/// `{api}.{name}.{index}.{direction}.rest` -> `{api}.{name}.{direction}.rest`, msprobe's fuzzy key.
pub fn rename_api(op_name: &str) -> String {
    let process = if op_name.contains("forward") {
        "forward"
    } else if op_name.contains("backward") {
        "backward"
    } else {
        return op_name.to_string();
    };
    let pieces: Vec<&str> = op_name.split(process).collect();
    let (func_index, in_out) = (pieces[0], pieces.get(1).copied().unwrap_or(""));
    let head = func_index.rsplitn(3, '.').last().unwrap_or("");
    format!("{head}.{process}{in_out}")
}

const FLOAT_GROUPS: [[&str; 4]; 2] = [
    ["Float16", "Float32", "Float64", "BFloat16"],
    [
        "torch.float16",
        "torch.float32",
        "torch.float64",
        "torch.bfloat16",
    ],
];

/// Across frameworks msprobe compares dtype families, not dtypes (Int32 against torch.int64
/// is a match).
fn cross_dtype(d: &str) -> &str {
    match d {
        "Int8" | "UInt8" | "Int16" | "UInt16" | "Int32" | "UInt32" | "Int64" | "UInt64"
        | "torch.int8" | "torch.uint8" | "torch.int16" | "torch.uint16" | "torch.int32"
        | "torch.uint32" | "torch.int64" | "torch.uint64" => "int",
        "Float16" | "Float32" | "Float64" | "BFloat16" | "torch.float16" | "torch.float32"
        | "torch.float64" | "torch.bfloat16" => "float",
        "Bool" | "torch.bool" => "bool",
        "Complex64" | "Complex128" | "torch.complex64" | "torch.complex128" => "complex",
        other => other,
    }
}

/// Whether a matched pair's dtypes allow comparing (equal, or both floating).
pub fn dtype_compatible(npu: &Leaf, bench: &Leaf, cross_frame: bool) -> bool {
    let (a, b) = if cross_frame {
        (cross_dtype(&npu.dtype), cross_dtype(&bench.dtype))
    } else {
        (npu.dtype.as_str(), bench.dtype.as_str())
    };
    a == b
        || FLOAT_GROUPS
            .iter()
            .any(|g| g.contains(&a) && g.contains(&b))
}

/// Pairs the rows; output follows the NPU dump order. Unmatched NPU rows stay, unmatched bench
/// rows are dropped (as msprobe does).
pub fn match_rows(npu: &Dump, bench: &Dump, mode: Mode, opts: &MatchOptions) -> Vec<Pair> {
    let cross_frame = npu.framework != bench.framework
        && !npu.framework.is_empty()
        && !bench.framework.is_empty();

    let nf = flatten(npu, !opts.fuzzy);
    let bf = flatten(bench, !opts.fuzzy);
    let keys = npu_keys(&nf, opts);
    let join = |nf: &[Flat], bf: &[Flat]| -> Vec<Pair> {
        let mut by_key: HashMap<&str, Vec<RowRef>> = HashMap::new();
        for b in bf {
            by_key.entry(b.name_update.as_str()).or_default().push(b.r);
        }
        let mut out = Vec::new();
        for (n, key) in nf.iter().zip(&keys) {
            match by_key.get(key.as_str()) {
                Some(bs) => out.extend(bs.iter().map(|b| Pair {
                    npu: n.r,
                    bench: Some(*b),
                })),
                None => out.push(Pair {
                    npu: n.r,
                    bench: None,
                }),
            }
        }
        out
    };
    if opts.data_mapping.is_some() {
        // A left join without the dtype filter.
        return join(&nf, &bf);
    }
    let pairs = if opts.fuzzy {
        if mode != Mode::Tensor {
            // msprobe 26.2.0 mis-aligns its fuzzy table for dumps without data_name columns,
            // so statistics and md5 dumps come out with every row unmatched (spec 5.6.4, quirk 8).
            return nf
                .iter()
                .map(|n| Pair {
                    npu: n.r,
                    bench: None,
                })
                .collect();
        }
        fuzzy(&nf, &bf, &keys)
    } else {
        join(&nf, &bf)
    };
    pairs
        .into_iter()
        .map(|p| match p.bench {
            Some(b) if !dtype_compatible(leaf_of(npu, p.npu), leaf_of(bench, b), cross_frame) => {
                Pair {
                    npu: p.npu,
                    bench: None,
                }
            }
            _ => p,
        })
        .collect()
}

fn leaf_of(d: &Dump, r: RowRef) -> &Leaf {
    &d.calls[r.call].leaves[r.leaf]
}

/// msprobe's fuzzy walk: both lists advance together; the newest NPU row is tried against
/// the pending bench rows, then the newest bench row against the pending NPU rows.
fn fuzzy(nf: &[Flat], bf: &[Flat], npu_keys: &[String]) -> Vec<Pair> {
    let keys_n: Vec<String> = npu_keys.iter().map(|k| rename_api(k)).collect();
    let keys_b: Vec<String> = bf.iter().map(|f| rename_api(&f.name_update)).collect();
    let mut nq: Vec<usize> = Vec::new();
    let mut bq: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    let max_len = nf.len().max(bf.len());
    for i in 0..max_len {
        if i < nf.len() {
            nq.push(i);
        }
        if i < bf.len() {
            bq.push(i);
        }
        if nq.is_empty() != bq.is_empty() {
            break;
        }
        let Some((np, bp)) = match_point(&nq, &bq, &keys_n, &keys_b) else {
            continue;
        };
        out.extend(nq[..np].iter().map(|&n| Pair {
            npu: nf[n].r,
            bench: None,
        }));
        out.push(Pair {
            npu: nf[nq[np]].r,
            bench: Some(bf[bq[bp]].r),
        });
        nq.drain(..=np);
        bq.drain(..=bp);
    }
    out.extend(nq.iter().map(|&n| Pair {
        npu: nf[n].r,
        bench: None,
    }));
    out
}

fn match_point(nq: &[usize], bq: &[usize], kn: &[String], kb: &[String]) -> Option<(usize, usize)> {
    let (n_last, b_last) = (nq.len() - 1, bq.len() - 1);
    let newest_n = &kn[nq[n_last]];
    if let Some(bi) = bq[..b_last].iter().position(|&b| &kb[b] == newest_n) {
        return Some((n_last, bi));
    }
    if &kb[bq[b_last]] == newest_n {
        return Some((n_last, b_last));
    }
    let newest_b = &kb[bq[b_last]];
    nq[..n_last]
        .iter()
        .position(|&n| &kn[n] == newest_b)
        .map(|ni| (ni, b_last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename() {
        assert_eq!(
            rename_api("Functional.gelu.3.forward.input.0"),
            "Functional.gelu.forward.input.0"
        );
        assert_eq!(
            rename_api("Module.fc.Linear.forward.0.output.0"),
            "Module.fc.forward.0.output.0"
        );
        assert_eq!(rename_api("x.y"), "x.y");
    }
}
