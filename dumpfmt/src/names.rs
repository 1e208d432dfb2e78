//! Entry names (`Torch.abs.0.forward`, `Module.block.fc1.Linear.forward.0`, …) and tensor data
//! names (`Torch.cat.0.forward.input.0.1.pt`), both directions (spec §2.3, §2.4, §2.7).
//!
//! Every separator is `.`; the grammar is decided by the prefix (`Module`/`Cell` → module names)
//! and the trailing segments (`{n}.forward|backward` for APIs, `forward|backward.{n}` for modules,
//! `parameters_grad[.{k}]`, `{c}.debug`).

use std::fmt;

/// Forward or backward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Forward,
    Backward,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
    }

    fn parse(s: &str) -> Option<Direction> {
        match s {
            "forward" => Some(Direction::Forward),
            "backward" => Some(Direction::Backward),
            _ => None,
        }
    }
}

/// The framework flavour that a prefix or a dtype spelling belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Framework {
    PyTorch,
    MindSpore,
    /// MSAdapter: PyTorch names on the MindSpore runtime.
    MindTorch,
    Unknown,
}

impl Framework {
    /// The `framework` value of dump.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Framework::PyTorch => "pytorch",
            Framework::MindSpore => "mindspore",
            Framework::MindTorch => "mindtorch",
            Framework::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Framework {
        match s {
            "pytorch" => Framework::PyTorch,
            "mindspore" => Framework::MindSpore,
            "mindtorch" => Framework::MindTorch,
            _ => Framework::Unknown,
        }
    }

    /// Extension of tensor files (`pt` for PyTorch and MSAdapter, `npy` for MindSpore).
    pub fn tensor_ext(self) -> &'static str {
        match self {
            Framework::MindSpore => "npy",
            _ => "pt",
        }
    }

    /// Module prefix (`Module` / `Cell`).
    pub fn module_prefix(self) -> &'static str {
        match self {
            Framework::MindSpore => "Cell",
            _ => "Module",
        }
    }
}

/// API prefixes of the PyTorch flavour (spec §2.4), `Module` excluded.
pub const PYTORCH_API_PREFIXES: &[&str] = &[
    "Tensor",
    "Torch",
    "Functional",
    "NPU",
    "VF",
    "Aten",
    "Distributed",
    "MindSpeed",
    "Triton",
];

/// API prefixes of the MindSpore flavour (spec §2.4), `Cell` excluded.
pub const MINDSPORE_API_PREFIXES: &[&str] = &[
    "Tensor",
    "Functional",
    "Mint",
    "MintFunctional",
    "Distributed",
    "MintDistributed",
    "Primitive",
    "Jit",
];

/// Prefixes of module / cell entries.
pub const MODULE_PREFIXES: &[&str] = &["Module", "Cell"];

/// A parsed entry name. Borrowed from the name it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryName<'a> {
    /// `{prefix}.{api}.{index}.{direction}`. For `Primitive.{attr}.{Class}` the prefix is
    /// `Primitive` and `api` is `{attr}.{Class}`; otherwise `api` is the last segment before the
    /// index and `prefix` everything before it (custom prefixes may contain dots).
    Api {
        prefix: &'a str,
        api: &'a str,
        index: u64,
        direction: Direction,
    },
    /// `{prefix}.{path}.{class}.{direction}.{index}` (`prefix` = `Module` or `Cell`; `path` may
    /// start with the model index `{i}.` and is the user's name for `module_dump`).
    Module {
        prefix: &'a str,
        path: &'a str,
        class: &'a str,
        direction: Direction,
        index: u64,
    },
    /// `{prefix}.{path}.{class}.parameters_grad.{k}`; `k` is absent in [≤8.x] names.
    ParametersGrad {
        prefix: &'a str,
        path: &'a str,
        class: &'a str,
        k: Option<u64>,
    },
    /// `{name}.{count}.debug` (debug.json); gradients are saved under `{name}_grad`.
    Debug { name: &'a str, count: u64 },
    /// Anything else (construct-only markers `optimizer`, `clip_grad`, hand-made names).
    Other(&'a str),
}

fn parse_index(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// Splits `s` at its last `.`: (before, after).
fn rsplit_dot(s: &str) -> Option<(&str, &str)> {
    s.rsplit_once('.')
}

impl<'a> EntryName<'a> {
    pub fn parse(name: &'a str) -> EntryName<'a> {
        Self::try_parse(name).unwrap_or(EntryName::Other(name))
    }

    fn try_parse(name: &'a str) -> Option<EntryName<'a>> {
        let (rest, last) = rsplit_dot(name)?;
        if last == "debug" {
            let (n, c) = rsplit_dot(rest)?;
            return Some(EntryName::Debug {
                name: n,
                count: parse_index(c)?,
            });
        }
        let (first, _) = name.split_once('.')?;
        if MODULE_PREFIXES.contains(&first) {
            let body = &name[first.len() + 1..];
            // parameters_grad with or without the counter.
            if let Some((pc, k)) = rsplit_dot(body)
                && let Some(pc) = pc.strip_suffix(".parameters_grad")
                && let Some(k) = parse_index(k)
            {
                let (path, class) = rsplit_dot(pc)?;
                return Some(EntryName::ParametersGrad {
                    prefix: first,
                    path,
                    class,
                    k: Some(k),
                });
            }
            if let Some(pc) = body.strip_suffix(".parameters_grad") {
                let (path, class) = rsplit_dot(pc)?;
                return Some(EntryName::ParametersGrad {
                    prefix: first,
                    path,
                    class,
                    k: None,
                });
            }
            let (pcd, n) = rsplit_dot(body)?;
            let index = parse_index(n)?;
            let (pc, d) = rsplit_dot(pcd)?;
            let direction = Direction::parse(d)?;
            let (path, class) = rsplit_dot(pc)?;
            return Some(EntryName::Module {
                prefix: first,
                path,
                class,
                direction,
                index,
            });
        }
        let direction = Direction::parse(last)?;
        let (pa, n) = rsplit_dot(rest)?;
        let index = parse_index(n)?;
        if let Some(api) = pa.strip_prefix("Primitive.") {
            return Some(EntryName::Api {
                prefix: "Primitive",
                api,
                index,
                direction,
            });
        }
        let (prefix, api) = rsplit_dot(pa)?;
        if prefix.is_empty() || api.is_empty() {
            return None;
        }
        Some(EntryName::Api {
            prefix,
            api,
            index,
            direction,
        })
    }

    /// Forward/backward for API and module entries.
    pub fn direction(&self) -> Option<Direction> {
        match self {
            EntryName::Api { direction, .. } | EntryName::Module { direction, .. } => {
                Some(*direction)
            }
            _ => None,
        }
    }

    /// The name of the matching forward entry for a backward entry (same `n`).
    pub fn forward_name(&self) -> Option<String> {
        match *self {
            EntryName::Api {
                direction: Direction::Backward,
                ..
            }
            | EntryName::Module {
                direction: Direction::Backward,
                ..
            } => Some(
                EntryName::with_direction(self, Direction::Forward)
                    .expect("api/module")
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn with_direction(&self, d: Direction) -> Option<EntryName<'a>> {
        match *self {
            EntryName::Api {
                prefix, api, index, ..
            } => Some(EntryName::Api {
                prefix,
                api,
                index,
                direction: d,
            }),
            EntryName::Module {
                prefix,
                path,
                class,
                index,
                ..
            } => Some(EntryName::Module {
                prefix,
                path,
                class,
                direction: d,
                index,
            }),
            _ => None,
        }
    }
}

impl fmt::Display for EntryName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryName::Api {
                prefix,
                api,
                index,
                direction,
            } => write!(f, "{prefix}.{api}.{index}.{}", direction.as_str()),
            EntryName::Module {
                prefix,
                path,
                class,
                direction,
                index,
            } => write!(f, "{prefix}.{path}.{class}.{}.{index}", direction.as_str()),
            EntryName::ParametersGrad {
                prefix,
                path,
                class,
                k: Some(k),
            } => write!(f, "{prefix}.{path}.{class}.parameters_grad.{k}"),
            EntryName::ParametersGrad {
                prefix,
                path,
                class,
                k: None,
            } => write!(f, "{prefix}.{path}.{class}.parameters_grad"),
            EntryName::Debug { name, count } => write!(f, "{name}.{count}.debug"),
            EntryName::Other(s) => f.write_str(s),
        }
    }
}

/// `{prefix}.{api}.{n}.{forward|backward}`.
pub fn api_name(prefix: &str, api: &str, index: u64, direction: Direction) -> String {
    format!("{prefix}.{api}.{index}.{}", direction.as_str())
}

/// `{prefix}.[{i}.]{path}.{class}.{forward|backward}.{n}`.
pub fn module_name(
    prefix: &str,
    path: &str,
    class: &str,
    direction: Direction,
    index: u64,
) -> String {
    format!("{prefix}.{path}.{class}.{}.{index}", direction.as_str())
}

/// `{prefix}.{path}.{class}.parameters_grad.{k}`.
pub fn parameters_grad_name(prefix: &str, path: &str, class: &str, k: u64) -> String {
    format!("{prefix}.{path}.{class}.parameters_grad.{k}")
}

/// The framework an API prefix belongs to, when only one has it.
pub fn framework_of_prefix(prefix: &str) -> Option<Framework> {
    let pt = PYTORCH_API_PREFIXES.contains(&prefix) || prefix == "Module";
    let ms = MINDSPORE_API_PREFIXES.contains(&prefix) || prefix == "Cell";
    match (pt, ms) {
        (true, false) => Some(Framework::PyTorch),
        (false, true) => Some(Framework::MindSpore),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Tensor data names

/// What part of an entry a tensor file belongs to (spec §2.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Forward positional args, and backward `input` (incoming gradients).
    Input,
    /// Forward keyword args.
    Kwargs,
    /// Forward output, and backward `output` (produced gradients).
    Output,
    /// Module forward parameters.
    Parameters,
    /// `parameters_grad` entries: no category segment, the path is the parameter name.
    ParametersGrad,
    /// debug.json entries: the entry name ends with `.debug`, no further category segment.
    Debug,
}

impl Category {
    /// The segment written into the file name (`None` for the two kinds without one).
    pub fn segment(self) -> Option<&'static str> {
        match self {
            Category::Input => Some("input"),
            Category::Kwargs => Some("kwargs"),
            Category::Output => Some("output"),
            Category::Parameters => Some("parameters"),
            Category::ParametersGrad | Category::Debug => None,
        }
    }
}

/// `{entry}.{category}[.{path…}].{ext}`; `path` = arg index, nested list indices, dict keys.
pub fn tensor_data_name(entry: &str, category: Category, path: &[String], ext: &str) -> String {
    let mut s = String::with_capacity(entry.len() + 32);
    s.push_str(entry);
    if let Some(c) = category.segment() {
        s.push('.');
        s.push_str(c);
    }
    for p in path {
        s.push('.');
        s.push_str(p);
    }
    s.push('.');
    s.push_str(ext);
    s
}

/// A tensor file name taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataName<'a> {
    pub entry: &'a str,
    pub category: Category,
    /// The dotted path after the category (may be empty).
    pub path: Vec<&'a str>,
    pub ext: &'a str,
}

/// Parses a tensor file name (`Torch.cat.0.forward.input.0.1.pt`). Returns `None` for names
/// that follow none of msprobe's patterns.
pub fn parse_data_name(file_name: &str) -> Option<DataName<'_>> {
    let (stem, ext) = file_name.rsplit_once('.')?;
    if ext.is_empty() {
        return None;
    }
    let segs: Vec<&str> = stem.split('.').collect();
    // Byte offset where segment i ends.
    let end_of = |i: usize| -> usize { segs[..=i].iter().map(|s| s.len()).sum::<usize>() + i };
    let category_of = |s: &str| match s {
        "input" => Some(Category::Input),
        "kwargs" => Some(Category::Kwargs),
        "output" => Some(Category::Output),
        "parameters" => Some(Category::Parameters),
        _ => None,
    };
    let rest_after =
        |i: usize| -> Vec<&str> { segs.get(i + 1..).map(|r| r.to_vec()).unwrap_or_default() };
    for j in 1..segs.len() {
        let s = segs[j];
        // API: `{n}.{forward|backward}.{category}`
        if Direction::parse(s).is_some()
            && parse_index(segs[j - 1]).is_some()
            && let Some(cat) = segs.get(j + 1).and_then(|c| category_of(c))
        {
            return Some(DataName {
                entry: &stem[..end_of(j)],
                category: cat,
                path: rest_after(j + 1),
                ext,
            });
        }
        // Module: `{forward|backward}.{n}.{category}`
        if Direction::parse(segs[j - 1]).is_some()
            && parse_index(s).is_some()
            && let Some(cat) = segs.get(j + 1).and_then(|c| category_of(c))
        {
            return Some(DataName {
                entry: &stem[..end_of(j)],
                category: cat,
                path: rest_after(j + 1),
                ext,
            });
        }
        // parameters_grad: `parameters_grad.{k}.{param}` (or `[≤8.x]` `parameters_grad.{param}`).
        if s == "parameters_grad" && j + 1 < segs.len() {
            let entry_end = if parse_index(segs[j + 1]).is_some() && j + 2 < segs.len() {
                j + 1
            } else {
                j
            };
            return Some(DataName {
                entry: &stem[..end_of(entry_end)],
                category: Category::ParametersGrad,
                path: rest_after(entry_end),
                ext,
            });
        }
        // debug: `{name}.{c}.debug[.{path}]`
        if s == "debug" && parse_index(segs[j - 1]).is_some() {
            return Some(DataName {
                entry: &stem[..end_of(j)],
                category: Category::Debug,
                path: rest_after(j),
                ext,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_round_trip() {
        for n in [
            "Functional.relu.0.forward",
            "Tensor.__add__.3.backward",
            "Module.block.fc1.Linear.forward.0",
            "Module.0.layers.0.attn.Attention.backward.12",
            "Cell.conv2.Conv2d.forward.0",
            "Module.head.Linear.parameters_grad.0",
            "Module.head.Linear.parameters_grad",
            "Primitive.conv2d.Conv2D.0.forward",
            "Jit.AlexNet.0.forward",
            "my_var.0.debug",
            "my_var_grad.3.debug",
            "my.custom.pkg.op.2.forward",
        ] {
            let p = EntryName::parse(n);
            assert!(!matches!(p, EntryName::Other(_)), "{n}");
            assert_eq!(p.to_string(), n);
        }
        assert_eq!(
            EntryName::parse("Primitive.conv2d.Conv2D.0.forward"),
            EntryName::Api {
                prefix: "Primitive",
                api: "conv2d.Conv2D",
                index: 0,
                direction: Direction::Forward
            }
        );
        assert_eq!(EntryName::parse("optimizer"), EntryName::Other("optimizer"));
        assert_eq!(
            EntryName::parse("Torch.abs.01.forward"),
            EntryName::Other("Torch.abs.01.forward")
        );
        assert_eq!(
            EntryName::parse("Torch.abs.4.backward")
                .forward_name()
                .as_deref(),
            Some("Torch.abs.4.forward")
        );
    }

    #[test]
    fn data_names() {
        let d = parse_data_name("Torch.cat.0.forward.input.0.1.pt").unwrap();
        assert_eq!(
            (d.entry, d.category, d.path, d.ext),
            ("Torch.cat.0.forward", Category::Input, vec!["0", "1"], "pt")
        );
        let d = parse_data_name("Module.output.Linear.forward.0.output.0.pt").unwrap();
        assert_eq!(
            (d.entry, d.category),
            ("Module.output.Linear.forward.0", Category::Output)
        );
        let d = parse_data_name("Module.block.fc1.Linear.parameters_grad.0.bias.pt").unwrap();
        assert_eq!(
            (d.entry, d.category, d.path),
            (
                "Module.block.fc1.Linear.parameters_grad.0",
                Category::ParametersGrad,
                vec!["bias"]
            )
        );
        let d = parse_data_name("my_var.0.debug.lst.0.pt").unwrap();
        assert_eq!(
            (d.entry, d.category, d.path),
            ("my_var.0.debug", Category::Debug, vec!["lst", "0"])
        );
        let d = parse_data_name("Cell.conv1.Conv2d.forward.0.parameters.weight.npy").unwrap();
        assert_eq!(
            (d.entry, d.category, d.ext),
            ("Cell.conv1.Conv2d.forward.0", Category::Parameters, "npy")
        );
        assert_eq!(
            tensor_data_name(
                "Torch.cat.0.forward",
                Category::Input,
                &["0".into(), "1".into()],
                "pt"
            ),
            "Torch.cat.0.forward.input.0.1.pt"
        );
        assert_eq!(parse_data_name("random.pt"), None);
    }
}
