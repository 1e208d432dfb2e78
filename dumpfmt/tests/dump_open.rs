//! `Dump::open` → ranks → tensor entries → ndarray views, on recorded dumps, and the refusal of
//! data names that would lead outside `dump_tensor_data/`.

use std::path::Path;

use dumpfmt::layout::{RankId, resolve_data_name};
use dumpfmt::names::{Category, Direction, EntryName};
use dumpfmt::{DType, DataNameProblem, Dump, Error, TensorView, pt};

mod common;
use testsupport::testdata;

fn fixture(name: &str) -> std::path::PathBuf {
    testdata()
        .join("fixtures/msprobe-26.2.0-cpu")
        .join(name)
        .join("dump")
}

#[test]
fn every_tensor_of_a_recorded_dump_loads_as_its_record_says() {
    let root = fixture("pt_tiny_f32_tensor_L1");
    let dump = Dump::open(&root).unwrap();
    assert_eq!(dump.root(), root);
    assert_eq!(dump.steps(), [0, 1]);
    let mut files = 0;
    let mut ranks = 0;
    let mut stats_checked = 0;
    for rank in dump.ranks() {
        let rank = rank.unwrap();
        ranks += 1;
        assert_eq!(rank.rank(), Some(RankId::Proc(24674)));
        assert!(rank.dump().is_some() && rank.debug().is_none());
        let on_disk = std::fs::read_dir(rank.dir().dir.join("dump_tensor_data"))
            .unwrap()
            .count();
        let mut loaded = 0;
        for t in rank.tensors() {
            let rec = t.record();
            let name = t
                .data_name()
                .expect("a tensor dump names a file per record");
            assert_eq!(t.tensor_path().unwrap().file_name().unwrap(), name);
            let tensor = t.load_tensor().unwrap();
            assert_eq!(Some(tensor.dtype()), rec.dtype(), "{name}");
            let shape: Vec<u64> = tensor.shape().iter().map(|&d| d as u64).collect();
            assert_eq!(shape, rec.shape, "{name}");
            if tensor.dtype() != DType::F32 {
                // Integer arguments (indices, sizes) come as their own dtype.
                assert!(tensor.view().elems().is_ok(), "{name}");
                loaded += 1;
                continue;
            }
            let a = tensor.array::<f32>().unwrap();
            assert_eq!(a.shape(), tensor.shape());
            // msprobe's Max/Min of a float32 tensor are its largest and smallest element.
            if !a.is_empty() && a.iter().all(|x| x.is_finite()) {
                let max = a.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let min = a.iter().copied().fold(f32::INFINITY, f32::min);
                let stat = |s: Option<dumpfmt::dump::Stat>| s.and_then(|s| s.as_f64());
                assert_eq!(stat(rec.max), Some(max as f64), "{name}");
                assert_eq!(stat(rec.min), Some(min as f64), "{name}");
                stats_checked += 1;
            }
            // Rank::tensor reaches the same file by name.
            assert_eq!(rank.tensor(name).unwrap().bytes(), tensor.bytes());
            loaded += 1;
        }
        assert_eq!(loaded, on_disk);
        files += loaded;
    }
    assert_eq!(ranks, 2);
    assert_eq!(files, 796);
    assert!(stats_checked > 500, "{stats_checked}");
}

#[test]
fn entries_tell_api_call_direction_and_argument() {
    let dump = Dump::open(fixture("pt_tiny_f32_tensor_L1").join("step0")).unwrap();
    assert_eq!(dump.rank_dirs().len(), 1);
    let rank = dump.ranks().next().unwrap().unwrap();
    let t = rank.tensors().next().unwrap();
    assert_eq!(t.name(), "Functional.linear.0.forward");
    assert!(matches!(
        t.kind(),
        EntryName::Api {
            prefix: "Functional",
            api: "linear",
            index: 0,
            direction: Direction::Forward
        }
    ));
    assert_eq!(t.direction(), Some(Direction::Forward));
    assert_eq!(
        (t.category(), t.data_path()),
        (Category::Input, &["0".to_string()][..])
    );
    assert_eq!(t.record().shape, [4, 8, 16]);
    assert_eq!(
        t.json_path(),
        "$.data[\"Functional.linear.0.forward\"].input_args[0]"
    );
    assert_eq!(t.entry().name, t.name());
    assert_eq!(
        t.dump_file().path(),
        rank.dir().dump_json.as_deref().unwrap()
    );
    let categories: std::collections::HashSet<_> = rank.tensors().map(|t| t.category()).collect();
    assert!(categories.contains(&Category::Output));
    assert_eq!(rank.entries().count(), rank.dump().unwrap().len());
}

#[test]
fn mindspore_npy_files_and_every_level() {
    let root = fixture("ms_tiny_f32_tensor_L1");
    let rank_dir = root.join("step0/proc2856");
    assert_eq!(Dump::open(&root).unwrap().steps(), [0, 1]);
    for start in [root.join("step0"), rank_dir.clone()] {
        let dump = Dump::open(&start).unwrap();
        assert_eq!(dump.rank_dirs().len(), 1, "{}", start.display());
        let rank = dump.ranks().next().unwrap().unwrap();
        assert_eq!(rank.step(), Some(0));
        let mut n = 0;
        for t in rank.tensors() {
            let tensor = t.load_tensor().unwrap();
            assert!(t.data_name().unwrap().ends_with(".npy"));
            let v: TensorView<'_> = tensor.view();
            assert_eq!(v.shape().len(), t.record().shape.len());
            n += 1;
        }
        assert!(n > 0);
    }
    let e = Dump::open(rank_dir.join("dump.json")).unwrap_err();
    assert!(matches!(e, Error::Layout { .. }), "{e}");
}

#[test]
fn a_statistics_dump_has_records_but_no_files() {
    let dump = Dump::open(fixture("pt_tiny_f32_stat_L1")).unwrap();
    let rank = dump.ranks().next().unwrap().unwrap();
    let t = rank.tensors().next().unwrap();
    assert!(t.data_name().is_none() && t.record().max.is_some());
    let e = t.load_tensor().unwrap_err();
    assert!(
        matches!(&e, Error::Schema { path, .. } if path == t.json_path()),
        "{e}"
    );
}

/// `root/step0/rank0/{dump.json, dump_tensor_data/a.pt}` plus `root/outside.pt`; the record
/// names `data_name`.
fn tiny_dump(root: &Path, data_name: &str) -> std::path::PathBuf {
    let rank = root.join("step0/rank0");
    let data = rank.join("dump_tensor_data");
    std::fs::create_dir_all(&data).unwrap();
    let x = [1.0f32, 2.0];
    let view = TensorView::from_slice(&[2], &x).unwrap();
    pt::write(&data.join("a.pt"), view, "cpu").unwrap();
    pt::write(&root.join("outside.pt"), view, "cpu").unwrap();
    let json = format!(
        r#"{{"task": "tensor", "data": {{"Torch.abs.0.forward": {{"input_args": [{{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "data_name": {data_name:?}}}]}}}}}}"#
    );
    std::fs::write(rank.join("dump.json"), json).unwrap();
    rank
}

fn refusal(e: Error) -> (std::path::PathBuf, String, DataNameProblem) {
    match e {
        Error::DataName { dir, name, problem } => (dir, name, problem),
        other => panic!("expected a DataName error, got {other}"),
    }
}

#[test]
fn names_that_are_not_plain_file_names_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let rank_path = tiny_dump(tmp.path(), "a.pt");
    let dump = Dump::open(tmp.path()).unwrap();
    let rank = dump.ranks().next().unwrap().unwrap();
    assert_eq!(
        rank.tensors()
            .next()
            .unwrap()
            .load_tensor()
            .unwrap()
            .array::<f32>()
            .unwrap(),
        ndarray::arr1(&[1.0f32, 2.0]).into_dyn()
    );
    let outside = tmp.path().join("outside.pt");
    for name in [
        "../outside.pt",
        "..",
        ".",
        "",
        "sub/a.pt",
        "sub\\a.pt",
        outside.to_str().unwrap(),
        "/etc/passwd",
    ] {
        let (dir, got, problem) = refusal(rank.tensor(name).unwrap_err());
        assert_eq!(dir, rank_path.join("dump_tensor_data"));
        assert_eq!(
            (got.as_str(), problem),
            (name, DataNameProblem::NotAFileName)
        );
    }
    let e = rank.tensor("missing.pt").unwrap_err();
    assert!(e.to_string().contains("\"missing.pt\""), "{e}");
    assert_eq!(refusal(e).2, DataNameProblem::Missing);
    // A directory is no tensor file either, nor a FIFO (opening one would block forever).
    std::fs::create_dir(rank_path.join("dump_tensor_data/d.pt")).unwrap();
    assert_eq!(
        refusal(rank.tensor("d.pt").unwrap_err()).2,
        DataNameProblem::NotRegularFile
    );
    #[cfg(unix)]
    {
        let fifo = rank_path.join("dump_tensor_data/fifo.pt");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
        assert_eq!(
            refusal(rank.tensor("fifo.pt").unwrap_err()).2,
            DataNameProblem::NotRegularFile
        );
    }

    // In dump.json such a name is a schema error naming the record, before any file is read.
    for hostile in ["../outside.pt", "/etc/passwd", "sub/a.pt"] {
        let tmp = tempfile::tempdir().unwrap();
        tiny_dump(tmp.path(), hostile);
        let e = Dump::open(tmp.path())
            .unwrap()
            .ranks()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(&e, Error::Schema { path, msg, .. }
                if path.ends_with("input_args[0].data_name") && msg.contains("not a file name")),
            "{e}"
        );
    }
}

#[cfg(unix)]
#[test]
fn links_are_followed_only_inside_the_tensor_directory() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let rank_path = tiny_dump(tmp.path(), "evil.pt");
    let data = rank_path.join("dump_tensor_data");
    let outside = tmp.path().join("outside.pt");
    symlink(&outside, data.join("evil.pt")).unwrap();
    symlink("a.pt", data.join("alias.pt")).unwrap();
    symlink("gone.pt", data.join("dangling.pt")).unwrap();
    std::fs::create_dir(data.join("sub")).unwrap();
    std::fs::copy(data.join("a.pt"), data.join("sub/b.pt")).unwrap();
    symlink("sub/b.pt", data.join("nested.pt")).unwrap();

    let dump = Dump::open(tmp.path()).unwrap();
    let rank = dump.ranks().next().unwrap().unwrap();
    let t = rank.tensors().next().unwrap();
    let (dir, name, problem) = refusal(t.load_tensor().unwrap_err());
    assert_eq!((dir, name.as_str()), (data.clone(), "evil.pt"));
    assert_eq!(
        problem,
        DataNameProblem::OutsideDir {
            target: outside.canonicalize().unwrap()
        }
    );
    assert_eq!(rank.tensor("alias.pt").unwrap().dtype(), DType::F32);
    assert_eq!(rank.tensor("nested.pt").unwrap().numel(), 2);
    assert_eq!(
        refusal(rank.tensor("dangling.pt").unwrap_err()).2,
        DataNameProblem::Missing
    );

    // validate reports the escaping link at the record.
    let report = dumpfmt::validate::validate(tmp.path()).unwrap();
    let p = report
        .problems
        .iter()
        .find(|p| p.location.ends_with("input_args[0].data_name"))
        .expect("the link is a problem");
    assert!(p.message.contains("outside the tensor directory"), "{p}");

    // The tensor directory itself may be a link that stays inside its rank directory.
    let moved = rank_path.join("moved");
    std::fs::rename(&data, &moved).unwrap();
    symlink("moved", &data).unwrap();
    assert!(resolve_data_name(&data, "alias.pt").is_ok());
    assert!(resolve_data_name(&data, "evil.pt").is_err());

    // One that leads out of the rank directory would read another dump's files (or any):
    // refused for every name, by every reader.
    let away = tmp.path().join("away");
    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&moved, &away).unwrap();
    symlink(&away, &data).unwrap();
    let problem = refusal(resolve_data_name(&data, "alias.pt").unwrap_err()).2;
    assert_eq!(
        problem,
        DataNameProblem::DirOutsideDump {
            target: away.canonicalize().unwrap()
        }
    );
    let dump = Dump::open(tmp.path()).unwrap();
    let rank = dump.ranks().next().unwrap().unwrap();
    let e = rank.tensor("alias.pt").unwrap_err();
    assert!(e.to_string().contains("outside the rank directory"), "{e}");
    let report = dumpfmt::validate::validate(tmp.path()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.contains("outside the rank directory")),
        "{report}"
    );
}

/// A rank's dump.json that links out of its directory is an error naming it, not a rank
/// without a dump.json, and never read.
#[cfg(unix)]
#[test]
fn a_dump_json_linked_out_of_its_rank_directory_is_an_error() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("dump");
    let rank_path = tiny_dump(&root, "a.pt");
    let elsewhere = tmp.path().join("elsewhere.json");
    std::fs::rename(rank_path.join("dump.json"), &elsewhere).unwrap();
    symlink(&elsewhere, rank_path.join("dump.json")).unwrap();
    let dump = Dump::open(&root).unwrap();
    let e = dump.ranks().next().unwrap().unwrap_err();
    match &e {
        Error::LinkOutside { file, target } => {
            assert_eq!(file, &rank_path.join("dump.json"));
            assert_eq!(target, &elsewhere.canonicalize().unwrap());
        }
        other => panic!("{other}"),
    }
    // Linked inside the rank directory: read.
    std::fs::remove_file(rank_path.join("dump.json")).unwrap();
    std::fs::rename(&elsewhere, rank_path.join("real.json")).unwrap();
    symlink("real.json", rank_path.join("dump.json")).unwrap();
    let dump = Dump::open(&root).unwrap();
    let rank = dump.ranks().next().unwrap().unwrap();
    assert!(rank.dump().is_some());
}

/// A step or rank directory that is a link leading out of the dump is not entered: opening the
/// dump is an error naming it, and validate reports it; a link that stays inside the dump (a
/// step moved and linked back) is entered.
#[cfg(unix)]
#[test]
fn step_and_rank_directories_linked_out_of_the_dump_are_refused() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("dump");
    tiny_dump(&root, "a.pt");
    // What the links lead to: a well-formed dump outside, which a walk that follows them
    // would take as this one's.
    let elsewhere = tmp.path().join("elsewhere");
    tiny_dump(&elsewhere, "a.pt");
    for (link, to) in [
        ("step0/rank1", elsewhere.join("step0/rank0")),
        ("step1", elsewhere.join("step0")),
    ] {
        symlink(&to, root.join(link)).unwrap();
        match Dump::open(&root).unwrap_err() {
            Error::DirOutsideDump {
                dir,
                target,
                root: r,
            } => {
                assert_eq!(dir, root.join(link));
                assert_eq!(target, to.canonicalize().unwrap());
                assert_eq!(r, root);
            }
            other => panic!("{link}: {other}"),
        }
        let report = dumpfmt::validate::validate(&root).unwrap();
        assert_eq!(report.ranks, 1, "{link}: {report}");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file == root.join(link) && p.message.contains("outside the dump")),
            "{link}: {report}"
        );
        std::fs::remove_file(root.join(link)).unwrap();
    }
    // Inside the dump: entered.
    std::fs::rename(root.join("step0"), root.join("kept")).unwrap();
    symlink("kept", root.join("step0")).unwrap();
    symlink("rank0", root.join("kept/rank1")).unwrap();
    let dump = Dump::open(&root).unwrap();
    assert_eq!(dump.rank_dirs().len(), 2);
    let report = dumpfmt::validate::validate(&root).unwrap();
    assert!(report.problems.is_empty(), "{report}");
}
