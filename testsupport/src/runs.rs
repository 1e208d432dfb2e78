//! A synthesised distributed run for the whole-run compare's tests (compare's and report's):
//! statistics dumps of a tensor-parallel step, a matmul, an all_reduce over the group of every
//! rank, a relu.

use std::path::Path;

use serde_json::{Value, json};

fn tensor(max: f64, min: f64, mean: f64, norm: f64) -> Value {
    json!({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4],
           "Max": max, "Min": min, "Mean": mean, "Norm": norm, "requires_grad": false})
}

/// One rank's dump.json. `bump_matmul` changes this rank's matmul output (a difference
/// produced here); `bump_reduced` changes the all_reduce output and everything after it (a
/// difference that arrives through the collective).
pub fn rank_dump(world: u64, rank: u64, bump_matmul: bool, bump_reduced: bool) -> Value {
    let r = rank as f64;
    let x = tensor(1.0 + r, -1.0, 0.5, 2.0 + r);
    let mm = if bump_matmul {
        tensor(3.5 + r, -2.0, 1.25, 5.5 + r)
    } else {
        tensor(3.0 + r, -2.0, 1.0, 5.0 + r)
    };
    let red = if bump_reduced {
        tensor(12.5, -8.0, 4.25, 20.5)
    } else {
        tensor(12.0, -8.0, 4.0, 20.0)
    };
    let relu = if bump_reduced {
        tensor(12.5, 0.0, 6.25, 20.5)
    } else {
        tensor(12.0, 0.0, 6.0, 20.0)
    };
    let ranks: Vec<u64> = (0..world).collect();
    let group = json!({"type": "torch.ProcessGroup", "group_ranks": ranks, "group_id": "ab12cd34"});
    let op = json!({"type": "torch.distributed.ReduceOp", "value": "RedOpType.SUM"});
    json!({
        "task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": null,
        "data": {
            "Torch.matmul.0.forward": {"input_args": [x, tensor(1.0, -1.0, 0.0, 2.0)],
                                       "input_kwargs": {}, "output": [mm]},
            "Distributed.all_reduce.0.forward": {"input_args": [mm],
                                                  "input_kwargs": {"op": op, "group": group},
                                                  "output": [red, op, group]},
            "Torch.relu.0.forward": {"input_args": [red], "input_kwargs": {}, "output": [relu]},
        }
    })
}

/// Writes `root/step{s}/rank{r}/dump.json` for each step and rank.
pub fn write_run(root: &Path, steps: &[u64], world: u64, dump: impl Fn(u64, u64) -> Value) {
    for &s in steps {
        for r in 0..world {
            let dir = root.join(format!("step{s}/rank{r}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("dump.json"),
                serde_json::to_string_pretty(&dump(s, r)).unwrap(),
            )
            .unwrap();
        }
    }
}
