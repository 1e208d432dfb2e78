//! Every entry name and tensor file name in the fixtures follows the grammar and rebuilds to
//! itself.

use dumpfmt::construct::ConstructFile;
use dumpfmt::dump::DumpFile;
use dumpfmt::layout::discover;
use dumpfmt::names::{Category, EntryName, parse_data_name, tensor_data_name};

use testsupport::testdata;

fn rank_dirs() -> Vec<dumpfmt::layout::RankDir> {
    let fx = testdata().join("fixtures");
    let mut out = Vec::new();
    for d in ["msprobe-26.2.0-cpu", "msprobe-26.2.0-torch-h200"] {
        for e in std::fs::read_dir(fx.join(d)).unwrap() {
            let p = e.unwrap().path();
            for root in ["dump", "dump_path"] {
                if p.join(root).is_dir() {
                    out.extend(discover(&p.join(root)).unwrap().ranks().to_vec());
                }
            }
        }
    }
    out
}

#[test]
fn entry_names_parse_and_rebuild() {
    let mut kinds = [0usize; 4];
    for r in rank_dirs() {
        for f in [&r.dump_json, &r.debug_json].into_iter().flatten() {
            let d = DumpFile::open(f).unwrap();
            for e in d.entries() {
                let k = e.kind();
                let i = match k {
                    EntryName::Api { .. } => 0,
                    EntryName::Module { .. } => 1,
                    EntryName::ParametersGrad { .. } => 2,
                    EntryName::Debug { .. } => 3,
                    EntryName::Other(n) => panic!("{}: unparsed entry name {n}", f.display()),
                };
                kinds[i] += 1;
                assert_eq!(k.to_string(), e.name);
            }
        }
        if let Some(c) = &r.construct_json {
            // construct.json also names nodes without entries; all follow the grammar except
            // the optimizer markers of the mix level.
            for n in ConstructFile::open(c).unwrap().nodes {
                let marker = n.name == "optimizer" || n.name == "clip_grad";
                assert!(
                    marker || !matches!(EntryName::parse(&n.name), EntryName::Other(_)),
                    "{}",
                    n.name
                );
            }
        }
    }
    assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
}

#[test]
fn tensor_file_names_parse_and_rebuild() {
    let mut n = 0;
    for r in rank_dirs() {
        let Some(td) = &r.tensor_dir else { continue };
        let dump = DumpFile::open(r.dump_json.as_ref().unwrap()).unwrap();
        for e in std::fs::read_dir(td).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            let d = parse_data_name(&name).unwrap_or_else(|| panic!("{name}"));
            assert!(
                dump.entry(d.entry).is_some(),
                "{name}: no entry {}",
                d.entry
            );
            let path: Vec<String> = d.path.iter().map(|s| s.to_string()).collect();
            assert_eq!(tensor_data_name(d.entry, d.category, &path, d.ext), name);
            if d.category == Category::ParametersGrad {
                assert_eq!(path.len(), 1, "{name}");
            }
            n += 1;
        }
    }
    assert!(n > 3000, "{n}");
}
