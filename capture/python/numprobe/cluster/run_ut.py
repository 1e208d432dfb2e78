"""`python -m numprobe.cluster run_ut -api_info FILE -o OUT --address auto`: the replay of
`python -m numprobe.pytorch run_ut`, its APIs sharded over Ray tasks.

Every option of run_ut is taken and means the same; the CSVs are written by run_ut's own code
on this machine, each shard's records handed over in dump order, so they are the same records
as a single-process run's. Each task reads the dump (and its tensor files) from storage every
node shares and replays a contiguous run of APIs with this machine's torch thread count (CPU
reductions split their work by thread count: another count would change the last bits). APIs
are seeded one by one (`--seed-scope api`, run_ut's default), so a row does not depend on the
shard it ran in. A task whose worker or node is lost is run again (`--max-retries`): replaying
an API twice gives the same records.
"""
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._ray import RayMissing, connected

Record = Tuple[str, Tuple[str, List[str]], bool, Optional[Dict[str, Any]]]


def replay_shard(spec: Dict[str, Any], names: List[str], threads: int, keep_tensors: bool) -> List[Record]:
    """Replays `names` of the dump `spec` describes on whichever node Ray runs it; the records
    (name, (result line, detail lines), failed, tensors to save) in order."""
    import torch

    from ..pytorch.run_ut.dump import load_api_info
    from ..pytorch.run_ut.runner import Job, run_all

    torch.set_num_threads(threads)
    forward, backward, tensor_dir = load_api_info(spec["api_info_file"])
    missing = [n for n in names if n not in forward]
    if missing:
        raise ValueError(f"{spec['api_info_file']}: {len(missing)} APIs of the shard are not in the dump "
                         f"(first {missing[0]}): every node must see the same file")
    job = Job(forward, backward, tensor_dir, spec["white_list"], spec["black_list"], spec["routing"],
              "api", spec["device_output"])
    out: List[Record] = []
    run_all(job, names, lambda name, lines, failed, tensors: out.append((name, lines, failed, tensors)),
            1, keep_tensors=keep_tensors)
    return out


def _shards(names: Sequence[str], count: int) -> List[List[str]]:
    """`count` contiguous runs of `names`, sizes differing by at most one."""
    count = max(1, min(count, len(names)))
    size, extra = divmod(len(names), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(names[start:end]))
        start = end
    return out


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m numprobe.cluster run_ut") -> int:
    """Exit status as run_ut's: 0 no error row, 1 an error row, 2 bad options, unreadable
    inputs, or a shard that failed after its retries."""
    from ..pytorch.run_ut import cli

    parser = cli.build_parser(prog, False)
    parser.add_argument("--address", default=None,
                        help="Ray cluster to run on (`auto`: the one this machine belongs to; "
                        "default: a Ray instance started here)")
    parser.add_argument("--shards", type=int, default=0,
                        help="tasks the APIs are split into (default: twice the cluster's CPUs)")
    parser.add_argument("--max-retries", dest="max_retries", type=int, default=3,
                        help="times Ray runs a lost shard again (default 3)")
    failed: List[str] = []

    def replay(args, job, names, sink, keep_tensors):
        if args.seed_scope == "run":
            raise cli.OptionError("--seed-scope run replays on one process: use python -m numprobe.pytorch run_ut")
        if args.shards < 0 or args.max_retries < 0:
            raise cli.OptionError("--shards and --max-retries must be at least 0")
        if not names:
            return
        import torch

        spec = {"api_info_file": args.api_info_file, "white_list": job.white_list,
                "black_list": job.black_list, "routing": job.routing, "device_output": job.device_output}
        threads = torch.get_num_threads()
        with connected(args.address) as ray:
            count = args.shards or max(1, 2 * int(ray.cluster_resources().get("CPU", 1)))
            task = ray.remote(replay_shard).options(num_cpus=1, max_retries=args.max_retries,
                                                    retry_exceptions=[OSError])
            refs = [task.remote(spec, shard, threads, keep_tensors) for shard in _shards(names, count)]
            # Shards are written in dump order: a later shard's records wait for the earlier ones.
            for ref in refs:
                try:
                    records = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - retries spent: -csv_path replays the rest
                    failed.append(str(e))
                    break
                for name, lines, bad, tensors in records:
                    sink(name, lines, bad, tensors)

    try:
        code = cli.main(argv, prog=prog, parser=parser, replay=replay)
    except RayMissing as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if failed:
        print(f"{prog}: error: a shard failed after its retries (continue with -csv_path): {failed[0]}",
              file=sys.stderr)
        return 2
    return code
