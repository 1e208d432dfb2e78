"""numprobe's run_ut / acc_check replay on dumps of the fixture's tiny model captured by numprobe.

Row names, dtypes, shapes, statuses and messages are compared with what msprobe 26.2.0's own
acc_check wrote for the same model and seed (testdata/fixtures/.../acccheck-cpu_patched_*, made
with its device patched to the CPU); metric digits differ between machines' CPU kernels, so they
are not compared with the fixture. With msprobe importable, msprobe's acc_check also runs live
on a part of the very dump numprobe replays.
"""
import collections
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TESTDATA = os.path.realpath(os.environ.get("NUMPROBE_TESTDATA") or os.path.join(HERE, "..", "..", "testdata"))
FIX = os.path.join(TESTDATA, "fixtures", "msprobe-26.2.0-cpu")
DRIVER = os.path.join(HERE, "drive_model.py")
VERDICTS = {"pass", "warning", "error", "SKIP"}
BOM = b"\xef\xbb\xbf"
# Cells compared exactly with msprobe: name, Bench/DEVICE Dtype, Shape, Status, Message.
EXACT_CELLS = (0, 1, 2, 3, 21, 22)


def have_msprobe():
    try:
        import msprobe  # noqa: F401
        return True
    except Exception:
        return False


def capture(tmp, fixture):
    """Runs one training step of the tiny model under numprobe with the fixture's config."""
    with open(os.path.join(FIX, fixture, "config.json")) as f:
        cfg = json.load(f)
    cfg["dump_path"] = os.path.join(tmp, "dump")
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    subprocess.run([sys.executable, DRIVER, "--config", cfg_path, "--steps", "1"], check=True,
                   cwd=tmp, capture_output=True)
    (dump_json,) = glob.glob(os.path.join(tmp, "dump", "step0", "*", "dump.json"))
    return dump_json


def run_ut(api_info, out, *extra, command="run_ut", check=True, rc=0):
    """Runs the CLI; with `check`, asserts exit status `rc` (1: some row is an error)."""
    r = subprocess.run([sys.executable, "-m", "numprobe.pytorch", command, "-api_info", str(api_info),
                        "-o", str(out), *map(str, extra)], capture_output=True, text=True)
    if check:
        assert r.returncode == rc, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def closing_line(r):
    (line,) = [ln for ln in r.stderr.splitlines() if " replayed " in ln]
    return line


def outputs(folder):
    (res,) = glob.glob(os.path.join(folder, "accuracy_checking_result_*.csv"))
    det = res.replace("accuracy_checking_result_", "accuracy_checking_details_")
    return res, det


def read_csv(path):
    with open(path, "rb") as f:
        assert f.read(3) == BOM, path
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def msprobe_fixture(name):
    return outputs(os.path.join(FIX, name))


def subset(src_json, dst, names):
    """A dump.json holding only `names` (forward and backward entries), with copies of their
    tensor files, so tests can edit them."""
    with open(src_json) as f:
        dump = json.load(f)
    data = {k: v for k, v in dump["data"].items() if k.rsplit(".", 1)[0] in names}
    dump["data"] = data
    os.makedirs(dst, exist_ok=True)
    src_dir = os.path.join(os.path.dirname(src_json), "dump_tensor_data")
    if os.path.isdir(src_dir):
        os.makedirs(os.path.join(dst, "dump_tensor_data"), exist_ok=True)
        prefixes = tuple(data)
        for fn in os.listdir(src_dir):
            if fn.startswith(prefixes):
                shutil.copy(os.path.join(src_dir, fn), os.path.join(dst, "dump_tensor_data", fn))
    path = os.path.join(dst, "dump.json")
    with open(path, "w") as f:
        json.dump(dump, f, indent=1)
    return path


def forward_names(dump_json):
    with open(dump_json) as f:
        return [k.rsplit(".", 1)[0] for k in json.load(f)["data"] if k.endswith(".forward")]


@pytest.fixture(scope="module")
def tensor_dump(tmp_path_factory):
    return capture(str(tmp_path_factory.mktemp("cap_tensor")), "pt_tiny_f32_tensor_L1")


@pytest.fixture(scope="module")
def stat_dump(tmp_path_factory):
    return capture(str(tmp_path_factory.mktemp("cap_stat")), "pt_tiny_f32_stat_L1")


@pytest.fixture(scope="module")
def tensor_run(tensor_dump, tmp_path_factory):
    out = tmp_path_factory.mktemp("ru_tensor")
    run_ut(tensor_dump, out)
    return outputs(out)


def assert_like_msprobe(ours, theirs):
    """Same result rows; same detail rows with the same exact cells."""
    assert read_csv(ours[0]) == read_csv(theirs[0])
    mine, ref = read_csv(ours[1]), read_csv(theirs[1])
    assert mine[0] == ref[0]
    assert [r[0] for r in mine] == [r[0] for r in ref]
    for a, b in zip(mine[1:], ref[1:]):
        assert len(a) == len(b) == 23, a[0]
        assert [a[i] for i in EXACT_CELLS] == [b[i] for i in EXACT_CELLS], a[0]


def assert_every_row_judged(paths, dump_json):
    result, details = read_csv(paths[0]), read_csv(paths[1])
    assert result[0] == ["API name", "Forward Test Success", "Backward Test Success", "Message"]
    assert [r[0] for r in result[1:]] == forward_names(dump_json)
    for r in result[1:]:
        assert r[1] in VERDICTS and r[2] in VERDICTS | {" "}, r
    assert len(details) > len(result)
    for r in details[1:]:
        assert r[21] in VERDICTS and r[22] is not None, r


def test_tensor_dump_replay_matches_msprobe(tensor_dump, tensor_run):
    assert_every_row_judged(tensor_run, tensor_dump)
    assert_like_msprobe(tensor_run, msprobe_fixture("acccheck-cpu_patched_f32_tensor"))


def test_statistics_dump_replay_matches_msprobe(stat_dump, tmp_path):
    run_ut(stat_dump, tmp_path, "--api_info_file", stat_dump)
    paths = outputs(tmp_path)
    assert_every_row_judged(paths, stat_dump)
    assert_like_msprobe(paths, msprobe_fixture("acccheck-cpu_patched_f32_stat"))


def test_bf16_fixture_dump_gives_msprobe_verdicts(tmp_path):
    """Low-precision outputs: bf16 saved outputs against the fp32 golden (warnings and an error)."""
    (dump_json,) = glob.glob(os.path.join(FIX, "pt_tiny_bf16_tensor_L1", "dump", "step0", "*", "dump.json"))
    # Its one error row is a backward one (Functional.layer_norm.4, every forward row passes or
    # warns): it alone makes the exit status 1, and the closing line counts it.
    r = run_ut(dump_json, tmp_path, command="acc_check", rc=1)
    paths = outputs(tmp_path)
    assert_like_msprobe(paths, msprobe_fixture("acccheck-cpu_patched_bf16_tensor"))
    result = read_csv(paths[0])[1:]
    fwd = collections.Counter(row[1] for row in result)
    bwd = collections.Counter(row[2] for row in result)
    assert fwd["error"] == 0 and bwd["error"] == 1
    assert closing_line(r).startswith(
        f"run_ut replayed {len(result)} APIs: forward warning {fwd['warning']}, pass {fwd['pass']}; "
        f"backward error 1, warning {bwd['warning']}, pass {bwd['pass']} (no backward: {bwd[' ']}); results in ")
    statuses = {r[21] for r in read_csv(paths[1])[1:]}
    assert {"warning", "error"} <= statuses


def test_parallel_workers_write_the_same_rows(tensor_dump, tensor_run, tmp_path):
    run_ut(tensor_dump, tmp_path, "-n", "2", command="multi_run_ut")
    ours = outputs(tmp_path)
    for a, b in zip(ours, tensor_run):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read(), a


@pytest.mark.parametrize("overlap", ["1", "0"])
def test_overlapped_and_inline_judge_write_the_same_bytes(tensor_dump, tensor_run, tmp_path, overlap):
    """The CLI with the metrics thread forced on or off (by default it follows the machine's
    idle cores) writes the very bytes of the default run."""
    env = dict(os.environ, NUMPROBE_RUN_UT_OVERLAP=overlap)
    r = subprocess.run([sys.executable, "-m", "numprobe.pytorch", "run_ut", "-api_info", str(tensor_dump),
                        "-o", str(tmp_path)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    for a, b in zip(outputs(tmp_path), tensor_run):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read(), a


def test_perturbed_saved_output_is_flagged(tensor_dump, tmp_path):
    names = ["Functional.linear.2", "Functional.gelu.0", "Tensor.__add__.0"]
    dump_json = subset(tensor_dump, str(tmp_path / "dump"), names)
    victim = tmp_path / "dump" / "dump_tensor_data" / "Functional.linear.2.forward.output.0.pt"
    t = torch.load(victim)
    t.view(-1)[::3] += 0.05
    torch.save(t, victim)
    err_root = tmp_path / "err"
    err_root.mkdir()
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"task": "acc_check", "acc_check": {"error_data_path": str(err_root)}}))
    r = run_ut(dump_json, tmp_path / "out", "-save_error_data", "-config", cfg, rc=1)
    assert "replayed 3 APIs: forward error 1, pass 2; backward pass 3;" in closing_line(r)
    result, details = (read_csv(p) for p in outputs(tmp_path / "out"))
    status = {r[0]: r[1] for r in result[1:]}
    assert status == {"Functional.linear.2": "error", "Functional.gelu.0": "pass", "Tensor.__add__.0": "pass"}
    row = next(r for r in details if r[0] == "Functional.linear.2.forward.output.0")
    assert row[21] == "error" and "consider as error" in row[22]
    # The backward replay is untouched by the edit.
    assert all(r[21] in ("pass", "SKIP") for r in details[1:] if ".backward." in r[0])
    (err_dir,) = glob.glob(str(err_root / "ut_error_data*"))
    saved = sorted(os.listdir(err_dir))
    assert "Functional.linear.2.forward.output.device.0.pt" in saved
    assert "Functional.linear.2.forward.output.bench.0.pt" in saved
    assert all(n.startswith("Functional.linear.2.") for n in saved)
    dev = torch.load(os.path.join(err_dir, "Functional.linear.2.forward.output.device.0.pt"))
    assert torch.equal(dev, t)


def test_outputs_are_never_written_through_planted_links(tensor_dump, tmp_path):
    """The result and details CSVs and the error-data folder are named after the second the
    run starts: links planted under every such name of the next minutes (an output folder
    shared with others) are refused, naming them, and what they lead to is left as it was."""
    dump_json = subset(tensor_dump, str(tmp_path / "dump"), ["Functional.gelu.0"])
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    now = time.time()
    stamps = [time.strftime("%Y%m%d%H%M%S", time.localtime(now + s)) for s in range(-5, 180)]
    for kind in ("result", "details"):
        out = tmp_path / f"out_{kind}"
        out.mkdir()
        for st in stamps:
            os.symlink(victim, out / f"accuracy_checking_{kind}_{st}.csv")
        r = run_ut(dump_json, out, rc=2)
        assert "symbolic link" in r.stderr and f"accuracy_checking_{kind}_" in r.stderr, r.stderr
        assert victim.read_text() == "precious"
    err_root = tmp_path / "err"
    err_root.mkdir()
    for st in stamps:
        os.symlink(victim_dir, err_root / f"ut_error_data{st}")
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"task": "acc_check", "acc_check": {"error_data_path": str(err_root)}}))
    r = run_ut(dump_json, tmp_path / "out", "-save_error_data", "-config", cfg, rc=2)
    assert "symbolic link" in r.stderr and "ut_error_data" in r.stderr, r.stderr
    assert os.listdir(victim_dir) == []


def test_unsupported_and_failing_apis_are_skipped(tmp_path):
    def rec(shape, lo=-1.0, hi=1.0, dtype="torch.float32"):
        return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": hi, "Min": lo,
                "Mean": 0.0, "Norm": 1.0, "requires_grad": False}

    data = {
        "Distributed.all_reduce.0.forward": {"input_args": [rec([4])], "input_kwargs": {}, "output": [rec([4])]},
        "Torch.no_such_api.0.forward": {"input_args": [rec([4])], "input_kwargs": {}, "output": [rec([4])]},
        "Torch.matmul.0.forward": {"input_args": [rec([2, 3]), rec([4, 5])], "input_kwargs": {},
                                   "output": [rec([2, 5])]},
        "Tensor.to.0.forward": {"input_args": [rec([4]), {}], "input_kwargs": {}, "output": [rec([4])]},
        "Functional.gelu.0.forward": {"input_args": [rec([4, 4])], "input_kwargs": {}, "output": [rec([4, 4])]},
        "Functional.relu.0.forward": {"input_args": [rec([4, 4])], "input_kwargs": {}, "output": [rec([4, 4])]},
        # fp32 convolutions keep an fp32 golden (HF32-rounded inputs), as msprobe's do.
        "Functional.conv2d.0.forward": {"input_args": [rec([1, 2, 5, 5]), rec([3, 2, 3, 3])],
                                        "input_kwargs": {"padding": {"type": "int", "value": 1}},
                                        "output": [rec([1, 3, 5, 5])]},
    }
    dump_json = tmp_path / "dump.json"
    dump_json.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                     "dump_data_dir": None, "data": data}))
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"task": "acc_check", "acc_check": {"black_list": ["gelu"]}}))
    run_ut(dump_json, tmp_path / "out", "-config", cfg)
    result, details = (read_csv(p) for p in outputs(tmp_path / "out"))
    rows = {r[0]: r[1:] for r in result[1:]}
    assert rows["Distributed.all_reduce.0"] == ["SKIP", "SKIP", "API Distributed.all_reduce.0 not support for acc_check. SKIP."]
    assert rows["Torch.no_such_api.0"] == ["SKIP", "SKIP", "API Torch.no_such_api.0 not support for acc_check. SKIP."]
    assert rows["Tensor.to.0"] == ["SKIP", "SKIP", "API to in black list or not in white list. SKIP."]
    assert rows["Functional.gelu.0"] == ["SKIP", "SKIP", "API gelu in black list or not in white list. SKIP."]
    assert rows["Torch.matmul.0"][:2] == ["SKIP", "SKIP"] and "mat1 and mat2 shapes cannot be multiplied" in rows["Torch.matmul.0"][2]
    assert rows["Functional.relu.0"] == ["pass", " "]
    assert rows["Functional.conv2d.0"] == ["pass", " "]
    conv = next(r for r in details if r[0] == "Functional.conv2d.0.forward.output.0")
    assert conv[1:4] == ["torch.float32", "torch.float32", "(1, 3, 5, 5)"] and conv[21] == "pass"
    skip_rows = [r for r in details[1:] if r[21] == "SKIP"]
    assert [r[0] for r in skip_rows] == [n + ".forward.output.0" for n in rows if rows[n][0] == "SKIP"]
    assert all(cell == " " for r in skip_rows for cell in r[1:21])


def _stat_job(tmp_path):
    """A statistics-mode Job whose APIs cover each kind of row: judged (one output of several
    numpy blocks, one with backward), skipped by name, failing in torch."""
    from numprobe.pytorch.run_ut import Job
    from numprobe.pytorch.run_ut.dump import load_api_info

    def rec(shape, requires_grad=False):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": 1.0, "Min": -1.0,
                "Mean": 0.0, "Norm": 1.0, "requires_grad": requires_grad}

    data = {
        "Functional.gelu.0.forward": {"input_args": [rec([4, 4])], "input_kwargs": {}, "output": [rec([4, 4])]},
        "Distributed.all_reduce.0.forward": {"input_args": [rec([4])], "input_kwargs": {}, "output": [rec([4])]},
        "Torch.matmul.0.forward": {"input_args": [rec([2, 3]), rec([4, 5])], "input_kwargs": {},
                                   "output": [rec([2, 5])]},
        "Functional.relu.0.forward": {"input_args": [rec([160, 160], True)], "input_kwargs": {},
                                      "output": [rec([160, 160])]},
        "Functional.relu.0.backward": {"input": [rec([160, 160])], "output": [rec([160, 160])]},
        "Tensor.__mul__.0.forward": {"input_args": [rec([8, 8]), rec([8, 8])], "input_kwargs": {},
                                     "output": [rec([8, 8])]},
        "Tensor.to.0.forward": {"input_args": [rec([4]), {}], "input_kwargs": {}, "output": [rec([4])]},
    }
    dump_json = tmp_path / "dump.json"
    dump_json.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                     "dump_data_dir": None, "data": data}))
    forward, backward, tensor_dir = load_api_info(str(dump_json))
    return Job(forward, backward, tensor_dir, [], []), list(forward)


def _collect(job, names, overlap):
    from numprobe.pytorch.run_ut import run_all

    got = []
    run_all(job, names, lambda name, lines, failed, tensors: got.append((name, lines, failed)), overlap=overlap)
    return got


def test_overlapped_judge_keeps_rows_and_order(tmp_path, monkeypatch):
    """The metrics on the metrics thread while the next API runs (the one-process default)
    give the very records of the inline judge, in dump order; a judge that raises, at once or
    when its rows are waited for, leaves its API's SKIP row, as an inline failure does."""
    from numprobe.pytorch.run_ut import ApiResult, compare, runner

    job, names = _stat_job(tmp_path)
    inline = _collect(job, names, overlap=False)
    assert [n for n, _, _ in inline] == names
    result = {n: lines[0] for n, lines, _ in inline}
    assert result["Functional.relu.0"] == "Functional.relu.0,pass,pass\r\n"
    assert result["Distributed.all_reduce.0"].startswith("Distributed.all_reduce.0,SKIP,SKIP,API ")
    assert "mat1 and mat2 shapes cannot be multiplied" in result["Torch.matmul.0"]
    assert _collect(job, names, overlap=True) == inline

    judge_api = runner.judge_api

    def failing(r, *args, **kwargs):
        if r.name == "Tensor.__mul__.0":
            raise RuntimeError("judge failed")
        return judge_api(r, *args, **kwargs)

    monkeypatch.setattr(runner, "judge_api", failing)
    skipped = ApiResult.skipped("Tensor.__mul__.0", "judge failed").lines()
    expected = [(n, skipped, True) if n == "Tensor.__mul__.0" else (n, lines, f) for n, lines, f in inline]
    assert _collect(job, names, overlap=False) == expected
    assert _collect(job, names, overlap=True) == expected
    monkeypatch.undo()

    class FailingWait:
        def done(self):
            return True

        def wait(self):
            raise RuntimeError("metrics failed")

    real = compare._native

    class PartlyFailing:
        """A PendingBatch whose APIs at `failing` come back failed."""

        def __init__(self, pending, failing):
            self.pending, self.failing = pending, failing

        def done(self):
            return self.pending.done()

        def wait(self):
            results = self.pending.wait()
            for i in self.failing:
                results[i] = (False, "metrics failed", [])
            return results

    class Native:
        """numprobe._native whose deferred rows of relu fail when waited for (alone or in a
        batch: relu's float32 outputs are batched)."""

        def __getattr__(self, name):
            return getattr(real, name)

        def check_output_async(self, api_name, *args):
            pending = real.check_output_async(api_name, *args)
            return FailingWait() if api_name == "relu" else pending

        def check_outputs_async(self, items, *args):
            failing = [i for i, item in enumerate(items) if item[0] == "relu"]
            return PartlyFailing(real.check_outputs_async(items, *args), failing)

    monkeypatch.setattr(compare, "_native", Native())
    skipped = ApiResult.skipped("Functional.relu.0", "metrics failed").lines()
    expected = [(n, skipped, True) if n == "Functional.relu.0" else (n, lines, f) for n, lines, f in inline]
    assert _collect(job, names, overlap=True) == expected


def test_overlapped_sink_error_propagates(tmp_path):
    from numprobe.pytorch.run_ut import run_all

    job, names = _stat_job(tmp_path)
    seen = []

    def sink(name, lines, failed, tensors):
        seen.append(name)
        if len(seen) == 2:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        run_all(job, names, sink, overlap=True)
    assert seen == names[:2]


def test_pending_row_equals_check_output():
    """check_output_async: the same row as check_output (small and multi-block outputs),
    argument errors raised at once, one wait per row, unread rows safe to drop."""
    import gc

    from numprobe import _native
    from numprobe.pytorch.run_ut import compare as cmp

    torch.manual_seed(0)
    pending = []
    for n in (100, 8192 * 5 + 17):
        bench = torch.randn(n, dtype=torch.float64)
        device = (bench + 1e-6 * torch.randn(n, dtype=torch.float64)).float()
        rows = [cmp.compare_tensor("gelu", bench, device, False, "26.2", defer=flag) for flag in (False, True)]
        assert (rows[1].status is None) == (n > cmp.DEFER_MIN_NUMEL)  # small ones run at once
        assert rows[0].line("x") == rows[1].line("x")
        assert rows[1].status == rows[0].status and rows[1].message == rows[0].message
        sides = (cmp._side(bench, bench), cmp._side(device, device))
        p = _native.check_output_async("gelu", *sides, (bench, device))
        assert p.wait().csv_line("x") == rows[0].line("x")
        with pytest.raises(RuntimeError):
            p.wait()
        pending.append(_native.check_output_async("gelu", *sides, (bench, device)))
    del bench, device, rows, p
    pending.clear()  # dropped unread: each waits for the metrics thread before releasing its tensors
    gc.collect()
    t = torch.zeros(4, dtype=torch.float32)
    bad = (t.data_ptr(), 5, "float32", [4], "torch.float32")
    with pytest.raises(ValueError, match="holds 4 elements, but numel is 5"):
        _native.check_output_async("gelu", bad, bad, t)


def test_pending_batch_equals_check_outputs():
    """check_outputs_async: per API the status and rows of check_outputs (small and
    multi-block outputs), an API with bad sides failed alone with check_outputs' message, one
    wait per batch, an unread batch safe to drop."""
    import gc

    from numprobe import _native
    from numprobe.pytorch.run_ut import compare as cmp

    torch.manual_seed(1)
    apis = []
    for n in (100, 8192 * 5 + 17):
        pairs = []
        for scale in (1e-6, 1e-2):
            bench = torch.randn(n, dtype=torch.float64)
            pairs.append((bench, (bench + scale * torch.randn(n, dtype=torch.float64)).float()))
        apis.append(("gelu", pairs))
    t = torch.zeros(4, dtype=torch.float32)
    bad = (t.data_ptr(), 5, "float32", [4], "torch.float32")
    items = [(name, cmp._plain_sides(pairs, None), False) for name, pairs in apis]
    items.insert(1, ("gelu", [(bad, bad)], False))
    keep = [pairs for _, pairs in apis] + [t]
    batch = _native.check_outputs_async(items, keep)
    got = batch.wait()
    assert got[1] == (False, "shape [4] holds 4 elements, but numel is 5", [])
    for (name, pairs), (ok, status, rows) in zip(apis, [got[0], got[2]]):
        want = _native.check_outputs(name, cmp._plain_sides(pairs, None), False, "26.2")
        assert ok and (status, rows) == want
    assert got[2][2][0] != got[2][2][1]  # rows follow their own pair (1e-6 vs 1e-2 noise)
    with pytest.raises(RuntimeError):
        batch.wait()
    unread = _native.check_outputs_async(items, keep)
    del unread  # waits for the metrics thread before releasing the kept tensors
    gc.collect()


def test_grouped_judging_keeps_rows_and_order(tmp_path, monkeypatch):
    """APIs with small outputs are replayed a group at a time before they are judged: any group
    size gives the records of one API at a time, inline and overlapped."""
    from numprobe.pytorch.run_ut import runner

    job, names = _stat_job(tmp_path)
    monkeypatch.setattr(runner, "GROUP", 1)
    one = _collect(job, names, overlap=False)
    assert len(one) == len(names)
    for size in (1, 2, 3, 64):
        monkeypatch.setattr(runner, "GROUP", size)
        monkeypatch.setattr(runner, "OVERLAP_GROUP", size)
        assert _collect(job, names, overlap=False) == one
        assert _collect(job, names, overlap=True) == one


def test_groups_hold_only_small_tensors():
    """An API is held for its group's judging only while the tensors it keeps are small: its
    outputs, and its inputs too when they are kept for -save_error_data."""
    from numprobe.pytorch.run_ut import runner

    r = runner.Replayed()
    r.bench_out = r.device_out = [torch.zeros(4), None]
    r.bench_grads = r.device_grads = None
    r.args, r.kwargs, r.grad = ([torch.zeros(runner.cmp.DEFER_MIN_NUMEL + 1)],), {}, None
    assert runner._small(r, keep_tensors=False)
    assert not runner._small(r, keep_tensors=True)
    r.args, r.kwargs = (), {"x": {"y": torch.zeros(runner.cmp.DEFER_MIN_NUMEL + 1)}}
    assert not runner._small(r, keep_tensors=True)
    r.kwargs = {}
    r.bench_grads = (torch.zeros(runner.cmp.DEFER_MIN_NUMEL + 1),)
    assert not runner._small(r, keep_tensors=False)


def test_check_outputs_equals_check_output():
    """One native call for all the outputs of an API: the rows, texts and rolled-up status of
    check_output one output at a time, for floats, integers, empty and mismatched outputs;
    argument errors raised as check_output raises them."""
    from numprobe import _native
    from numprobe.pytorch.run_ut import compare as cmp

    torch.manual_seed(1)
    b = torch.randn(3, 300, dtype=torch.float64)
    pairs = [
        (b, (b + 1e-7 * torch.randn_like(b)).float()),  # pass
        (b, (b * 1.01).float()),  # error
        (torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float32)),
        (torch.arange(6), torch.arange(6)),
        (torch.tensor([True, False]), torch.tensor([True, True])),
        (torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, 3)),
        (b, torch.zeros(2, 2)),  # shapes differ
        (torch.tensor(2.5, dtype=torch.float64), torch.tensor(2.5)),  # 0-d
        (b[0].float(), b[0].half()),  # float16 device: float32 metric cells
        (torch.tensor([1.0, float("nan"), float("inf"), 0.0], dtype=torch.float64),
         torch.tensor([1.0, float("nan"), 3.0, float("-inf")])),  # non-finite cells
    ]
    sides = cmp._plain_sides(pairs)
    assert sides is not None
    status, rows = _native.check_outputs("matmul", sides, False, "26.2")
    singles = [_native.check_output("matmul", sb, sd, False, "26.2") for sb, sd in sides]
    assert [(s, m) for s, m, _ in rows] == [(r.status, r.message) for r in singles]
    assert [t for _, _, t in rows] == [r.csv_line("") for r in singles]
    assert status == _native.rollup_statuses([r.status for r in singles]) == "error"
    assert {r.status for r in singles} >= {"pass", "error", "SKIP"}
    # Through compare_outputs: the same records, under names that need quoting too.
    got_status, got = cmp.compare_outputs("matmul", [p[0] for p in pairs], [p[1] for p in pairs], False)
    assert got_status == status
    for name in ("Torch.matmul.0.forward.output.0", 'we,ird "name"\n', ""):
        assert [r.line(name) for r in got] == [r.csv_line(name) for r in singles]
    t = torch.zeros(4)
    bad = (t.data_ptr(), 5, "float32", [4], "torch.float32")
    with pytest.raises(ValueError, match="holds 4 elements, but numel is 5"):
        _native.check_outputs("gelu", [sides[0], (bad, bad)])
    # What the native call does not take goes one output at a time.
    assert cmp._plain_sides([(b.t(), b.t())]) is None  # not contiguous
    assert cmp._plain_sides([(b.bfloat16(), b.bfloat16())]) is None  # numpy has no bf16
    assert cmp._plain_sides([(torch.zeros(cmp.DEFER_MIN_NUMEL + 1), torch.zeros(cmp.DEFER_MIN_NUMEL + 1))]) is None
    assert cmp._plain_sides([(b, None)]) is None


@pytest.mark.parametrize("cells", [
    ["Torch.add.0", "pass", "pass"], ["a", "b,c"], ['q"', "x"], ["line\nbreak"], ["cr\r"], [""], ["", ""],
    ["x", " ", 0], ["x", None], [], ["üñí", "ok"],
])
def test_csv_line_is_the_csv_writers(cells):
    import io

    from numprobe.pytorch.run_ut import compare as cmp

    buf = io.StringIO()
    csv.writer(buf).writerow(cells)
    assert cmp.csv_line(cells) == buf.getvalue()


def test_resume_with_csv_path_appends(tensor_dump, tmp_path):
    names = forward_names(tensor_dump)[:6]
    dump_json = subset(tensor_dump, str(tmp_path / "dump"), names)
    full = tmp_path / "full"
    run_ut(dump_json, full)
    full_res, full_det = outputs(full)
    # An interrupted run: the first two APIs done.
    part = tmp_path / "part"
    part.mkdir()
    res_path = part / os.path.basename(full_res)
    det_path = part / os.path.basename(full_det)
    with open(full_res, "rb") as f:
        lines = f.read().split(b"\r\n")
    res_path.write_bytes(b"\r\n".join(lines[:3]) + b"\r\n")
    done = tuple(n + "." for n in names[:2])
    det_rows = read_csv(full_det)
    keep = [r for r in det_rows[1:] if r[0].startswith(done)]
    with open(det_path, "w", encoding="utf-8-sig", newline="") as f:
        csv.writer(f).writerows([det_rows[0]] + keep)
    r = run_ut(dump_json, tmp_path / "unused", "-csv_path", res_path)
    assert "replayed 4 APIs" in r.stderr
    for a, b in ((res_path, full_res), (det_path, full_det)):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read(), a
    assert not (tmp_path / "unused").exists() or not os.listdir(tmp_path / "unused")


def test_filter_api_keeps_one_of_identical_calls(stat_dump, tmp_path):
    with open(stat_dump) as f:
        dump = json.load(f)
    relu = dump["data"]["Functional.relu.0.forward"]
    dump["data"] = {"Functional.relu.0.forward": relu, "Functional.relu.1.forward": relu}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    run_ut(path, tmp_path / "all")
    run_ut(path, tmp_path / "filtered", "-f")
    assert [r[0] for r in read_csv(outputs(tmp_path / "all")[0])[1:]] == ["Functional.relu.0", "Functional.relu.1"]
    assert [r[0] for r in read_csv(outputs(tmp_path / "filtered")[0])[1:]] == ["Functional.relu.0"]


def numprobe_cli():
    exe = os.environ.get("NUMPROBE_BIN")
    if exe:
        return [exe]
    for target in filter(None, [os.environ.get("CARGO_TARGET_DIR"), os.path.join(REPO, "target")]):
        for profile in ("debug", "release"):
            cand = os.path.join(target, profile, "numprobe")
            if os.path.isfile(cand):
                return [cand]
    if shutil.which("cargo"):
        return ["cargo", "run", "-q", "--manifest-path", os.path.join(REPO, "Cargo.toml"), "-p", "numprobe",
                "--"]
    pytest.skip("no numprobe binary (set NUMPROBE_BIN) and no cargo")


def test_details_feed_precision_compare(tensor_run, tmp_path):
    """Our details CSVs are accepted by `numprobe precision-compare`; on the fixture's bf16 and
    fp32 dumps its verdicts are those of msprobe's api_precision_compare on msprobe's CSVs."""
    exe = numprobe_cli()
    r = subprocess.run(exe + ["precision-compare", "--npu", tensor_run[1], "--gpu", tensor_run[1],
                              "--out", str(tmp_path / "self"), "--timestamp", "20260101000000"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    res = read_csv(str(tmp_path / "self" / "api_precision_compare_result_20260101000000.csv"))
    assert len(res) > 30
    verdicts = {}
    for kind in ("bf16", "f32"):
        (dump_json,) = glob.glob(os.path.join(FIX, f"pt_tiny_{kind}_tensor_L1", "dump", "step0", "*", "dump.json"))
        run_ut(dump_json, tmp_path / kind, rc=1 if kind == "bf16" else 0)
        verdicts[kind] = outputs(tmp_path / kind)[1]
    r = subprocess.run(exe + ["precision-compare", "--npu", verdicts["bf16"], "--gpu", verdicts["f32"],
                              "--out", str(tmp_path / "pc"), "--timestamp", "20260101000000"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    ours = read_csv(str(tmp_path / "pc" / "api_precision_compare_result_20260101000000.csv"))
    (theirs_path,) = glob.glob(os.path.join(FIX, "acccheck-api_precision_compare_bf16_vs_f32",
                                            "api_precision_compare_result_*.csv"))
    theirs = read_csv(theirs_path)
    assert ours[0] == theirs[0]
    # API name, forward and backward verdicts.
    assert [r[:3] for r in ours] == [r[:3] for r in theirs]


def test_live_msprobe_acc_check_agrees(tensor_dump, tmp_path):
    """msprobe's own acc_check (device patched to the CPU, as the fixtures were made) on a part of
    the dump numprobe captured: same rows and verdicts."""
    if not have_msprobe():
        pytest.skip("msprobe is not installed")
    names = ["Functional.linear.0", "Functional.layer_norm.0", "Torch.matmul.0", "Functional.softmax.0",
             "Functional.cross_entropy.0", "Tensor.add_.0"]
    dump_json = subset(tensor_dump, str(tmp_path / "dump"), names)
    ms_out = tmp_path / "msprobe"
    ms_out.mkdir()
    r = subprocess.run([sys.executable, os.path.join(FIX, "scripts", "acc_check_cpu.py"), "-api_info", dump_json,
                        "-o", str(ms_out)], capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_ut(dump_json, tmp_path / "ours")
    assert_like_msprobe(outputs(tmp_path / "ours"), outputs(ms_out))


def test_record_writer_writes_whole_batches_details_first(tmp_path):
    """The CLI's writer holds records back for at most its interval, then writes the details
    before the results, so a result line always has its details on disk."""
    from numprobe.pytorch.run_ut.cli import RecordWriter

    order = []

    class File:
        def __init__(self, name):
            self.name, self.text = name, ""

        def write(self, s):
            order.append(self.name)
            self.text += s

        def flush(self):
            pass

    rf, df = File("result"), File("details")
    w = RecordWriter(rf, df, interval=3600)
    w.add("a,pass\r\n", ["a.0,x\r\n", "a.1,y\r\n"])
    w.add("b,error\r\n", ["b.0,z\r\n"])
    assert rf.text == df.text == ""
    w.flush()
    assert order == ["details", "result"]
    assert rf.text == "a,pass\r\nb,error\r\n"
    assert df.text == "a.0,x\r\na.1,y\r\nb.0,z\r\n"
    w = RecordWriter(rf, df, interval=0)
    w.add("c,pass\r\n", ["c.0,w\r\n"])
    assert rf.text.endswith("c,pass\r\n") and df.text.endswith("c.0,w\r\n")


def _stat_record(shape, lo, hi, requires_grad=False, dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": hi, "Min": lo,
            "Mean": (lo + hi) / 2, "Norm": 1.0, "requires_grad": requires_grad}


def _layer_norm_entries(rows=100, hidden=100):
    """A statistics-mode layer_norm call (weight and bias passed by keyword, as a module does
    not, so the draw order of keyword arguments matters) and its backward entry."""
    fwd = {"input_args": [_stat_record((rows, hidden), -3.0, 3.0, True),
                          {"type": "torch.Size", "value": [hidden]}],
           "input_kwargs": {"weight": _stat_record((hidden,), 0.5, 1.5, True),
                            "bias": _stat_record((hidden,), -0.1, 0.1, True),
                            "eps": {"type": "float", "value": 1e-5}},
           "output": [_stat_record((rows, hidden), -4.0, 4.0)]}
    bwd = {"input": [_stat_record((rows, hidden), -1.0, 1.0)],
           "output": [_stat_record((rows, hidden), -1.0, 1.0), None, None]}
    return fwd, bwd


def test_drawn_gradient_is_independent_of_the_inputs_and_reproducible():
    """The random output gradient of a statistics-mode replay is not an affine copy of the
    first input (a generator re-seeded between the two draws made it one: |r| > 0.999), and
    the same seed draws the same inputs and gradient again, whatever ran before."""
    from numprobe.pytorch.run_ut.runner import execute_api

    fwd, bwd = _layer_norm_entries()
    first = execute_api("Functional.layer_norm.0", fwd, bwd, None)
    x, g = first.args[0].flatten().double(), first.grad.flatten().double()
    assert x.numel() == g.numel() == 10_000
    r = torch.corrcoef(torch.stack([x, g]))[0, 1].item()
    assert abs(r) < 0.1, r
    torch.manual_seed(99)
    torch.rand(1000)  # another generator state before the second replay
    again = execute_api("Functional.layer_norm.0", fwd, bwd, None)
    assert torch.equal(again.args[0], first.args[0])
    assert torch.equal(again.kwargs["weight"], first.kwargs["weight"])
    assert torch.equal(again.grad, first.grad)
    # Random APIs draw after the inputs too: dropout's mask does not follow its input.
    drop = {"input_args": [_stat_record((100, 100), 0.0, 1.0, True)],
            "input_kwargs": {"p": {"type": "float", "value": 0.5}, "training": {"type": "bool", "value": True}},
            "output": [_stat_record((100, 100), 0.0, 2.0)]}
    rd = execute_api("Functional.dropout.0", drop, None, None)
    kept = (rd.bench_out != 0).flatten().double()
    r = torch.corrcoef(torch.stack([rd.args[0].flatten().double(), kept]))[0, 1].item()
    assert abs(r) < 0.1, r


def test_draws_follow_msprobes_order():
    """From the same generator state, the replay draws the inputs (keyword arguments first) and
    then the output gradient exactly as msprobe's acc_check data generation does."""
    try:
        from msprobe.pytorch.api_accuracy_checker.acc_check.data_generate import gen_api_params, gen_args
    except Exception:
        pytest.skip("msprobe is not installed")
    from numprobe.pytorch.run_ut.runner import SEED, execute_api

    fwd, bwd = _layer_norm_entries(rows=8, hidden=16)
    ours = execute_api("Functional.layer_norm.0", fwd, bwd, None)
    torch.manual_seed(SEED)
    args, kwargs, _ = gen_api_params(fwd, "layer_norm", True, None, None)
    torch.nn.functional.layer_norm(*args, **kwargs)  # layer_norm draws nothing itself
    grads = gen_args(bwd["input"], "layer_norm", {"real_data_path": None})
    assert torch.equal(ours.args[0], args[0].detach())
    assert torch.equal(ours.kwargs["weight"], kwargs["weight"].detach())
    assert torch.equal(ours.kwargs["bias"], kwargs["bias"].detach())
    assert torch.equal(ours.grad, grads[0])


@pytest.fixture(scope="module")
def bert_stat_dump(tmp_path_factory):
    """A statistics-mode dump of one training step of a tiny BERT-like encoder (five
    layer_norm calls with weight 1 and bias 0)."""
    tmp = tmp_path_factory.mktemp("bert_stat")
    with open(os.path.join(FIX, "pt_tiny_f32_stat_L1", "config.json")) as f:
        cfg = json.load(f)
    cfg["dump_path"] = str(tmp / "dump")
    (tmp / "config.json").write_text(json.dumps(cfg))
    subprocess.run([sys.executable, os.path.join(HERE, "bert_like_model.py"), "--config", str(tmp / "config.json")],
                   check=True, cwd=str(tmp), capture_output=True)
    (dump_json,) = glob.glob(str(tmp / "dump" / "step0" / "*" / "dump.json"))
    return dump_json


def test_layer_norm_backward_on_statistics_dump_passes(bert_stat_dump, tmp_path):
    """BERT's layer_norm backward rows: with the gradient drawn as a copy of the input they
    judged rounding noise and were errors where msprobe says pass."""
    r = run_ut(bert_stat_dump, tmp_path)
    result = read_csv(outputs(tmp_path)[0])[1:]
    norms = [row for row in result if row[0].startswith("Functional.layer_norm.")]
    assert len(norms) == 5
    assert all(row[1:3] == ["pass", "pass"] for row in norms), norms
    assert all(row[1] == "pass" and row[2] in ("pass", " ") for row in result), result
    backward = sum(row[2] == "pass" for row in result)
    assert closing_line(r).startswith(
        f"run_ut replayed {len(result)} APIs: forward pass {len(result)}; backward pass {backward}")
    # Seeded per API: two worker processes draw the same data, so write the same rows.
    run_ut(bert_stat_dump, tmp_path / "n2", "-n", "2", command="multi_run_ut")
    for a, b in zip(outputs(tmp_path), outputs(tmp_path / "n2")):
        assert read_csv(a) == read_csv(b)


# Cells that depend on summation order (cosine, error balance, RMSE, mean relative error, mean
# ULP error): equal to a relative 1e-6 (clarifications, issue "ulp").
SUMMED_CELLS = (4, 10, 11, 14, 19)


def assert_details_equal(mine, ref):
    assert len(mine) == len(ref)
    for a, b in zip(mine, ref):
        assert len(a) == len(b), a[0]
        for i, (x, y) in enumerate(zip(a, b)):
            if x == y:
                continue
            assert i in SUMMED_CELLS, (a[0], i, x, y)
            assert float(x) == pytest.approx(float(y), rel=1e-6, abs=1e-12), (a[0], i, x, y)


def test_statistics_dump_draws_match_msprobe(bert_stat_dump, tmp_path):
    """msprobe's acc_check on the BERT-like statistics dump: the same verdicts as numprobe's
    default replay; with --seed-scope run numprobe draws msprobe's very data (one seed for the
    whole run, same draw order), so every detail cell agrees too."""
    if not have_msprobe():
        pytest.skip("msprobe is not installed")
    ms_out = tmp_path / "msprobe"
    ms_out.mkdir()
    m = subprocess.run([sys.executable, os.path.join(FIX, "scripts", "acc_check_cpu.py"), "-api_info", bert_stat_dump,
                        "-o", str(ms_out)], capture_output=True, text=True, cwd=str(tmp_path))
    assert m.returncode == 0, m.stdout[-3000:] + m.stderr[-3000:]
    theirs = outputs(ms_out)
    run_ut(bert_stat_dump, tmp_path / "api")
    assert read_csv(outputs(tmp_path / "api")[0]) == read_csv(theirs[0])
    run_ut(bert_stat_dump, tmp_path / "run", "--seed-scope", "run")
    ours = outputs(tmp_path / "run")
    assert read_csv(ours[0]) == read_csv(theirs[0])
    assert_details_equal(read_csv(ours[1]), read_csv(theirs[1]))


def test_run_seed_scope_needs_one_process(bert_stat_dump, tmp_path):
    r = run_ut(bert_stat_dump, tmp_path, "--seed-scope", "run", "-n", "2", command="multi_run_ut", rc=2)
    assert "-n 1" in r.stderr


def test_resumed_run_exit_status_counts_earlier_rows(stat_dump, tmp_path):
    """-csv_path: the exit status judges the whole result file, earlier rows included."""
    names = forward_names(stat_dump)[:3]
    dump_json = subset(stat_dump, str(tmp_path / "dump"), names)
    run_ut(dump_json, tmp_path / "full")
    res, det = outputs(tmp_path / "full")
    rows = read_csv(res)
    # The interrupted run had judged the first API an error (as a perturbed output would be).
    rows = [rows[0], [rows[1][0], "error", rows[1][2]]]
    with open(res, "w", encoding="utf-8-sig", newline="") as f:
        csv.writer(f).writerows(rows)
    r = run_ut(dump_json, tmp_path / "unused", "-csv_path", res, rc=1)
    assert "replayed 2 APIs: forward pass 2; backward pass 2;" in closing_line(r)
    assert "1 APIs were in the result file already: forward error 1; backward pass 1" in r.stderr


def test_exit_status_two_when_it_cannot_run(tmp_path):
    r = run_ut(tmp_path / "missing.json", tmp_path / "out", rc=2)
    assert "error" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    run_ut(bad, tmp_path / "out2", rc=2)
