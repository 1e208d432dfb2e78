//! MindSpore kernel-level dumps made by MindSpore 2.7.1 on CPU (testdata/kernel-dumps, regenerated
//! by its make_kernel_dumps.py): the tree, the file-name grammar, the `'<E2'` bfloat16 files and
//! the execution-order files, as they are on disk.

use std::path::PathBuf;

use dumpfmt::DType;
use dumpfmt::kernel::{self, Io};
use half::bf16;

fn case(name: &str) -> PathBuf {
    testsupport::testdata().join("kernel-dumps").join(name)
}

#[test]
fn graph_mode_training_net_tree() {
    let root = case("net_f32");
    assert!(kernel::is_kernel_dump(&root));
    assert!(kernel::is_kernel_dump(&root.join("rank_0")));
    assert!(!kernel::is_kernel_dump(&testsupport::testdata()));
    let dump = kernel::open(&root).unwrap();
    assert_eq!(dump.ranks.len(), 1);
    let rank = &dump.ranks[0];
    assert_eq!(rank.rank, 0);
    let steps: Vec<(u32, u64)> = rank
        .steps
        .iter()
        .map(|s| (s.graph_id, s.iteration))
        .collect();
    assert_eq!(steps, [(0, 0), (0, 1)], "two training steps of one graph");
    assert!(rank.steps.iter().all(|s| s.net_name == "Net"));

    let order = rank.execution_order(0).unwrap().unwrap();
    assert_eq!(
        order[0], "Default/network-WithLossCell/_backbone-Net/Add-op0",
        "{order:?}"
    );
    assert!(order.iter().any(|s| s.ends_with("SGD-op0")));

    for step in &rank.steps {
        let c = step.contents().unwrap();
        assert!(c.unparsed.is_empty(), "{:?}", c.unparsed);
        assert!(c.not_regular.is_empty());
        assert!(c.statistics.is_none());
        assert!(c.tensors.len() > 30, "{}", c.tensors.len());
        // Time order; every file's header agrees with the dtype its name states.
        assert!(
            c.tensors
                .windows(2)
                .all(|w| w[0].name.timestamp <= w[1].name.timestamp)
        );
        for t in &c.tensors {
            let info = dumpfmt::tensor::read_info(&t.path).unwrap();
            assert_eq!(Some(info.dtype), t.name.dtype(), "{}", t.path.display());
        }
        // The kernels of the forward pass are in the execution order file, `/` for `_`.
        let relu = c
            .tensors
            .iter()
            .find(|t| t.name.op_type == "ReLU" && t.name.io == Io::Output)
            .unwrap();
        assert!(
            order
                .iter()
                .any(|s| s.replace('/', "_") == relu.name.op_name)
        );
    }
}

#[test]
fn bfloat16_files_with_mindspores_descr_are_read() {
    let dump = kernel::open(&case("net_bf16")).unwrap();
    let step = &dump.ranks[0].steps[0];
    let c = step.contents().unwrap();
    let cast = c
        .tensors
        .iter()
        .find(|t| {
            t.name.op_type == "Cast"
                && t.name.io == Io::Output
                && t.name.dtype() == Some(DType::BF16)
        })
        .expect("the Cast to bfloat16");
    let header = std::fs::read(&cast.path).unwrap();
    assert!(
        String::from_utf8_lossy(&header[..128]).contains("'<E2'"),
        "MindSpore's own bfloat16 descr"
    );
    let x = c
        .tensors
        .iter()
        .find(|t| t.name.op_type == "Parameter" && t.name.op_name == "inputs0")
        .expect("the net's input");
    let xs = dumpfmt::tensor::read_tensor(&x.path).unwrap();
    let cast = dumpfmt::tensor::read_tensor(&cast.path).unwrap();
    assert_eq!(cast.dtype(), DType::BF16);
    assert_eq!(cast.shape(), xs.shape());
    let want: Vec<u16> = bytemuck::cast_slice::<u8, f32>(xs.bytes())
        .iter()
        .map(|&v| bf16::from_f32(v).to_bits())
        .collect();
    let got: &[u16] = bytemuck::cast_slice(cast.bytes());
    assert_eq!(
        got,
        want.as_slice(),
        "round to nearest even, as MindSpore's Cast"
    );
}

#[test]
fn pynative_jit_function_dumps_one_iteration_per_call() {
    let dump = kernel::open(&case("jit_f32")).unwrap();
    let its: Vec<u64> = dump.steps().map(|s| s.iteration).collect();
    assert_eq!(its, [0, 1]);
    let c = dump.ranks[0].steps[1].contents().unwrap();
    let kinds: std::collections::BTreeSet<&str> =
        c.tensors.iter().map(|t| t.name.op_type.as_str()).collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["MatMul", "Mul", "Parameter", "ReLU"]
    );
}

#[test]
fn statistic_and_mapping_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let step = tmp.path().join("rank_3/Net/1/4");
    std::fs::create_dir_all(&step).unwrap();
    std::fs::create_dir_all(tmp.path().join("rank_3/execution_order")).unwrap();
    std::fs::write(
        step.join("statistic.csv"),
        "\u{feff}Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,Avg Value,L2Norm Value\n\
         MatMul,Default/fc/MatMul-op0,2,0,1700,input,0,24,float32,\"(2,3)\",1.5,-2,0.25,3.1\n\
         ReLU,Default/ReLU-op0,3,0,1701,output,0,6,bool,\"(6)\",True,False,null,\n",
    )
    .unwrap();
    // A shortened name and its original.
    let long = "Add.Default_net_Add-op1.5.0.1702.output.0.DefaultFormat.Float32";
    std::fs::write(
        step.join("mapping.csv"),
        format!("File Name,Op Name\n1234,{long}\n"),
    )
    .unwrap();
    dumpfmt::npy::write(
        &step.join("1234.npy"),
        dumpfmt::Tensor::from_vec(DType::F32, vec![2], vec![0; 8])
            .unwrap()
            .view(),
    )
    .unwrap();

    let dump = kernel::open(tmp.path()).unwrap();
    assert_eq!(dump.ranks[0].rank, 3);
    let s = &dump.ranks[0].steps[0];
    assert_eq!((s.graph_id, s.iteration), (1, 4));
    let c = s.contents().unwrap();
    let rows = c.statistics.as_ref().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].shape, [2, 3]);
    assert_eq!(rows[0].compare_key(), "Default/fc/MatMul-op0.2.input.0");
    assert_eq!(rows[0].value("Max Value"), Some(1.5));
    assert_eq!(rows[1].value("Max Value"), Some(1.0));
    assert!(rows[1].value("Avg Value").unwrap().is_nan());
    assert_eq!(rows[1].value("MD5"), None);
    assert_eq!(c.tensors.len(), 1);
    assert_eq!(c.tensors[0].name.op_name, "Default_net_Add-op1");
    assert_eq!(c.tensors[0].name.task_id, 5);
}

#[test]
fn malformed_statistic_csv_names_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("statistic.csv");
    std::fs::write(&p, "Op Type,Op Name\nA,B\n").unwrap();
    let e = kernel::read_statistic_csv(&p).unwrap_err().to_string();
    assert!(e.contains("statistic.csv") && e.contains("Task ID"), "{e}");
    std::fs::write(
        &p,
        "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value\n\
         A,B,1,0,5,sideways,0,4,float32,(1),1\n",
    )
    .unwrap();
    let e = kernel::read_statistic_csv(&p).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("sideways"), "{e}");
    std::fs::write(&p, "").unwrap();
    assert!(kernel::read_statistic_csv(&p).is_err());
}

#[cfg(unix)]
#[test]
fn links_and_fifos_in_a_kernel_dump_are_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let step = tmp.path().join("rank_0/Net/0/0");
    std::fs::create_dir_all(&step).unwrap();
    std::fs::create_dir_all(tmp.path().join("rank_0/execution_order")).unwrap();
    let secret = outside.path().join("secret.npy");
    dumpfmt::npy::write(
        &secret,
        dumpfmt::Tensor::from_vec(DType::F32, vec![1], vec![0; 4])
            .unwrap()
            .view(),
    )
    .unwrap();
    let name = "Add.op.0.0.1.output.0.DefaultFormat.Float32.npy";
    std::os::unix::fs::symlink(&secret, step.join(name)).unwrap();
    // A whole iteration folder linked out of the dump is not entered.
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("rank_0/Net/0/1")).unwrap();
    let fifo = step.join("statistic.csv");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let dump = kernel::open(tmp.path()).unwrap();
    assert_eq!(
        dump.ranks[0].steps.len(),
        1,
        "the linked iteration is not a step"
    );
    let c = dump.ranks[0].steps[0].contents().unwrap();
    assert!(c.tensors.is_empty());
    assert!(c.statistics.is_none());
    assert_eq!(c.not_regular.len(), 2);
}

#[test]
fn validate_accepts_mindspores_trees() {
    for name in ["net_f32", "net_bf16", "jit_f32"] {
        let r = dumpfmt::validate::validate(&case(name)).unwrap();
        assert!(r.is_ok(), "{r}");
        assert!(r.warnings.is_empty(), "{r}");
        assert_eq!(r.ranks, 1);
        assert_eq!(r.steps, 2);
        assert!(r.tensor_files > 20);
        assert!(
            r.summary().contains("MindSpore kernel dump"),
            "{}",
            r.summary()
        );
    }
}

/// A copy of a recorded tree, to damage.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

#[test]
fn validate_names_each_damaged_file() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&case("jit_f32"), tmp.path());
    let step = tmp.path().join("rank_0/Net/0/0");
    let mut files: Vec<_> = std::fs::read_dir(&step)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // A name off the grammar; a name stating another dtype than its header; a truncated file.
    let off = step.join("not-a-kernel-file.npy");
    std::fs::rename(&files[0], &off).unwrap();
    let f32_name = files[1].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(f32_name.ends_with(".Float32.npy"), "{f32_name}");
    let lying = step.join(f32_name.replace(".Float32.npy", ".Float16.npy"));
    std::fs::rename(&files[1], &lying).unwrap();
    let bytes = std::fs::read(&files[2]).unwrap();
    std::fs::write(&files[2], &bytes[..bytes.len() - 1]).unwrap();
    std::fs::remove_file(
        tmp.path()
            .join("rank_0/execution_order/ms_execution_order_graph_0.csv"),
    )
    .unwrap();

    let r = dumpfmt::validate::validate(tmp.path()).unwrap();
    assert!(!r.is_ok());
    let text = r.to_string();
    assert_eq!(r.problems.len(), 3, "{text}");
    assert!(
        r.problems
            .iter()
            .any(|p| p.file == off && p.message.contains("not a kernel dump file name")),
        "{text}"
    );
    assert!(
        r.problems
            .iter()
            .any(|p| p.file == lying && p.message.contains("Float16")),
        "{text}"
    );
    assert!(r.problems.iter().any(|p| p.file == files[2]), "{text}");
    assert_eq!(r.warnings.len(), 1, "{text}");
    assert!(
        r.warnings[0]
            .message
            .contains("ms_execution_order_graph_0.csv"),
        "{text}"
    );
}

#[cfg(unix)]
#[test]
fn kernel_csvs_that_are_links_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.csv");
    std::fs::write(
        &secret,
        "File Name,Op Name\n1,Add.op.0.0.1.output.0.DefaultFormat.npy\n",
    )
    .unwrap();
    let step = tmp.path().join("rank_0/Net/0/0");
    std::fs::create_dir_all(&step).unwrap();
    std::fs::create_dir_all(tmp.path().join("rank_0/execution_order")).unwrap();
    std::os::unix::fs::symlink(&secret, step.join("mapping.csv")).unwrap();
    std::os::unix::fs::symlink(
        &secret,
        tmp.path()
            .join("rank_0/execution_order/ms_execution_order_graph_0.csv"),
    )
    .unwrap();
    let dump = kernel::open(tmp.path()).unwrap();
    let e = dump.ranks[0].steps[0].contents().unwrap_err().to_string();
    assert!(
        e.contains("mapping.csv") && e.contains("symbolic link"),
        "{e}"
    );
    let e = dump.ranks[0].execution_order(0).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    let r = dumpfmt::validate::validate(tmp.path()).unwrap();
    assert!(!r.is_ok(), "{r}");
}
