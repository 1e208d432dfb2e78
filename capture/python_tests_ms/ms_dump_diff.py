"""Differences between two MindSpore dumps of the same script (msprobe's and numprobe's):
entry names and order, every record (arguments, keyword arguments, statistics bit for bit,
checksums, data names), construct.json, the stack of every entry (the frames of msprobe's own
API wrapper left out, see `tool_frames_dropped`) and the tensor files, bit for bit.

    python ms_dump_diff.py DUMP_A DUMP_B    (prints the differences; exit 1 if any)
"""
import glob
import json
import os
import sys
import zlib

import numpy as np

# MindSpore's CPU BatchNorm2d leaves its outputs [1] and [2] uninitialised: their records (and
# files) differ between any two runs, so they are not compared.
UNINITIALISED = ("output.1", "output.2")


def _rank_dirs(root):
    """{step: rank directory} of a dump root."""
    out = {}
    for d in sorted(glob.glob(os.path.join(root, "step*", "*"))):
        if os.path.isdir(d):
            out[os.path.basename(os.path.dirname(d))] = d
    return out


def _load(path):
    with open(path) as f:
        return json.load(f)


def _batchnorm(name):
    return ".BatchNorm" in name or "BatchNorm." in name or "batch_norm" in name.lower()


def _inputs_judged(name, rec_a, rec_b, truth):
    """`rec_a`, `rec_b` with the md5 of a BatchNorm's inputs that the op updates in place (its
    moving statistics) set to "judged" where B's is the CRC-32 of the tensor itself
    (`truth(name, i)`, from a tensor run of the same script). msprobe computes checksums on a
    background thread without a copy, so the op's update of those inputs races it: its value
    may be the one after the update; numprobe's must be the tensor's at the call."""
    if truth is None or not _batchnorm(name):
        return rec_a, rec_b
    args_a, args_b = rec_a.get("input_args"), rec_b.get("input_args")
    if not (isinstance(args_a, list) and isinstance(args_b, list) and len(args_a) == len(args_b)):
        return rec_a, rec_b
    rec_a, rec_b = dict(rec_a), dict(rec_b)
    rec_a["input_args"], rec_b["input_args"] = list(args_a), list(args_b)
    for i, (x, y) in enumerate(zip(args_a, args_b)):
        if (isinstance(x, dict) and isinstance(y, dict) and "md5" in x and "md5" in y
                and x["md5"] != y["md5"] and y["md5"] == truth(name, i)):
            rec_a["input_args"][i] = dict(x, md5="judged")
            rec_b["input_args"][i] = dict(y, md5="judged")
    return rec_a, rec_b


def tensor_truth(tensor_root, step):
    """`truth(name, i)` of `_inputs_judged`: the CRC-32 (as msprobe writes md5) of input `i`
    of entry `name` in the tensor files of step `step` of `tensor_root`, None if none."""
    rank_dir = _rank_dirs(tensor_root).get(step)
    if rank_dir is None:
        return None
    data = _load(os.path.join(rank_dir, "dump.json"))["data"]

    def truth(name, i):
        args = data.get(name, {}).get("input_args")
        if not isinstance(args, list) or i >= len(args) or not isinstance(args[i], dict):
            return None
        fname = args[i].get("data_name")
        if not fname:
            return None
        x = np.load(os.path.join(rank_dir, "dump_tensor_data", fname))
        return f"{zlib.crc32(np.ascontiguousarray(x).tobytes()):08x}"

    return truth


def _strip_uninitialised(name, rec):
    if _batchnorm(name) and isinstance(rec.get("output"), list):
        rec = dict(rec)
        rec["output"] = [o if i == 0 else "uninitialised" for i, o in enumerate(rec["output"])]
    return rec


# msprobe runs each Functional/Tensor/Mint/MintFunctional API inside a wrapper Cell, so its
# stacks of those entries start with three frames of MindSpore's Cell machinery; numprobe's
# start at the code that called the API.
_API_PREFIXES = ("Functional.", "Tensor.", "Mint.", "MintFunctional.", "Distributed.",
                 "MintDistributed.")
_WRAPPER_FRAMES = ("in jit_forbidden,", "in _run_construct,", "in __call__,")


def tool_frames_dropped(name, frames):
    """The stack of entry `name` without the capture tool's own wrapper frames."""
    if name.startswith(_API_PREFIXES) and len(frames) >= 3 and all(
            w in f and "/mindspore/" in f for w, f in zip(_WRAPPER_FRAMES, frames)):
        return frames[3:]
    return frames


def _stacks(rank_dir):
    """{entry name: frames without tool frames}."""
    path = os.path.join(rank_dir, "stack.json")
    if not os.path.exists(path):
        return {}
    out = {}
    for _, (names, frames) in _load(path).items():
        for n in names:
            out[n] = tool_frames_dropped(n, frames)
    return out


def _field_diffs(a, b, path="", limit=6):
    """'path: A != B' for the leaves where two records differ (the first `limit` of them), so a
    failure names the argument and statistic that moved instead of two truncated records."""
    out = []

    def walk(x, y, p):
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in list(x) + [k for k in y if k not in x]:
                walk(x.get(k, "<absent>"), y.get(k, "<absent>"), f"{p}.{k}" if p else k)
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{p}[{i}]")
        elif x != y:
            out.append(f"{p}: {json.dumps(x)[:200]} != {json.dumps(y)[:200]}")

    walk(a, b, path)
    return out


def _tensor_files(rank_dir):
    d = os.path.join(rank_dir, "dump_tensor_data")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def diff(root_a, root_b, limit=30, truth_root=None):
    """The differences of dump B (numprobe's) from dump A (msprobe's). `truth_root`: a tensor
    run of the same script, against whose files B's checksums of in-place updated BatchNorm
    inputs are judged where A's differ (`_inputs_judged`)."""
    errs = []
    ra, rb = _rank_dirs(root_a), _rank_dirs(root_b)
    if list(ra) != list(rb):
        return [f"steps {list(ra)} != {list(rb)}"]
    for step in ra:
        a, b = ra[step], rb[step]
        da = _load(os.path.join(a, "dump.json"))["data"]
        db = _load(os.path.join(b, "dump.json"))["data"]
        if list(da) != list(db):
            missing = [k for k in da if k not in db]
            extra = [k for k in db if k not in da]
            errs.append(f"{step}: names differ: only in A {missing[:10]}, only in B {extra[:10]}")
            if not missing and not extra:
                first = next(i for i, (x, y) in enumerate(zip(da, db)) if x != y)
                errs.append(f"{step}: order differs at {first}: {list(da)[first]} vs {list(db)[first]}")
        truth = tensor_truth(truth_root, step) if truth_root else None
        for name in da:
            if name in db:
                x, y = _strip_uninitialised(name, da[name]), _strip_uninitialised(name, db[name])
                x, y = _inputs_judged(name, x, y, truth)
                if x != y:
                    errs.append(f"{step} {name}: " + "; ".join(_field_diffs(x, y)))
        ca, cb = (os.path.join(d, "construct.json") for d in (a, b))
        if os.path.exists(ca) or os.path.exists(cb):
            ja, jb = _load(ca), _load(cb)
            if ja != jb:
                ks = [k for k in set(ja) | set(jb) if ja.get(k, "-") != jb.get(k, "-")]
                errs.append(f"{step} construct.json: {[(k, ja.get(k, '-'), jb.get(k, '-')) for k in ks[:8]]}")
            elif list(ja) != list(jb):
                errs.append(f"{step} construct.json: key order differs")
        sa, sb = _stacks(a), _stacks(b)
        if set(sa) != set(sb):
            errs.append(f"{step} stack.json names: {sorted(set(sa) ^ set(sb))[:10]}")
        for n in sa:
            if n in sb and sa[n] != sb[n]:
                errs.append(f"{step} stack of {n}: {sa[n][:3]} != {sb[n][:3]}")
        fa, fb = _tensor_files(a), _tensor_files(b)
        if fa != fb:
            errs.append(f"{step} tensor files: only A {sorted(set(fa) - set(fb))[:8]}, "
                        f"only B {sorted(set(fb) - set(fa))[:8]}")
        for fname in fa:
            if fname in fb and not (_batchnorm(fname) and any(u in fname for u in UNINITIALISED)):
                xa = np.load(os.path.join(a, "dump_tensor_data", fname))
                xb = np.load(os.path.join(b, "dump_tensor_data", fname))
                if xa.dtype != xb.dtype or xa.shape != xb.shape or xa.tobytes() != xb.tobytes():
                    errs.append(f"{step} tensor file {fname} differs")
    return errs[:limit] + ([f"... {len(errs) - limit} more"] if len(errs) > limit else [])


if __name__ == "__main__":
    found = diff(sys.argv[1], sys.argv[2])
    print("\n".join(found))
    sys.exit(1 if found else 0)
