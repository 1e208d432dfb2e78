"""numprobe's torch reader (numprobe/pytorch/torch_shim.cpp, built against the installed torch by
`python -m numprobe.pytorch build-torch-shim`) replaces the native walk's Python reads of each
tensor. What a user relies on:

- what it reads of a tensor equals torch's own attributes, over the layouts the walk meets;
- the records do not change: the same script dumps the same bytes with the reader, with torch's
  DLPack export and with plain attributes, over hostile layouts and on a HuggingFace model;
- it is loaded only when it is safe: built for this very torch, from this numprobe's source,
  in a folder and file of this user's that no one else can write, never through a link; a
  failed build leaves nothing under any name the loader looks for, and a foreign or damaged
  library is refused with the reason.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from numprobe import _native
from numprobe.pytorch import _torch_shim, _values
from test_dlpack_walk import SCRIPT as HOSTILE_SCRIPT
from test_native_call_path import dump_files

HERE = Path(__file__).resolve().parent


def _compiler():
    return shutil.which(os.environ.get("CXX") or "c++")


@pytest.fixture(scope="module")
def shim_cache(tmp_path_factory):
    """A cache folder holding a reader built for the running torch (built once per run)."""
    if _compiler() is None:
        pytest.fail("no C++ compiler: the torch reader's tests need one (CI installs g++)")
    base = tmp_path_factory.mktemp("npcache")
    path = _torch_shim.build(base / "torch-shim", quiet=True)
    assert path == _torch_shim.library_path(base / "torch-shim")
    return base


@pytest.fixture(scope="module")
def shim(shim_cache):
    return _torch_shim.load(_torch_shim.library_path(shim_cache / "torch-shim"))


def _env(cache, on=True):
    env = dict(os.environ)
    env["NUMPROBE_CACHE_DIR"] = str(cache)
    env["NUMPROBE_TORCH_SHIM"] = "1" if on else "0"
    return env


def _same_dumps_with_and_without_reader(shim_cache, base, args, timeout=600, cwd=None):
    """Runs `args` (a script and its arguments, "{on}" and "{dump}" filled in) with the reader
    on and off, each into a dump of its own (`base` + "_True" / "_False"); asserts both ran and
    wrote the same bytes, and returns the files of the run with the reader (`dump_files`)."""
    got = {}
    for on in (True, False):
        dump = f"{base}_{on}"
        cmd = [sys.executable] + [a.format(on="on" if on else "off", dump=dump) for a in args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                           env=_env(shim_cache, on=on))
        assert r.returncode == 0, r.stderr[-3000:]
        got[on] = dump_files(dump)
    assert got[True] and set(got[True]) == set(got[False])
    for k in got[True]:
        assert got[True][k] == got[False][k], (base, k)
    return got[True]


def _tensors():
    base = torch.randn(6, 8)
    big = torch.randn(300, 128)
    c = torch.randn(5, dtype=torch.complex64)
    with torch.inference_mode():
        inference = torch.ones(3, 4)
    shared = torch.randn(4)
    return [
        base, base[2:], base[:, 3:], base.t(), base[1:, ::2], torch.randn(1, 8).expand(6, 8),
        torch.zeros(0, 3), torch.tensor(2.5), torch._neg_view(base), c, c.conj(), c.conj().imag,
        base.to(torch.float16), base.to(torch.bfloat16), (base * 10).to(torch.int64), base > 0,
        torch.randn(4, 3, requires_grad=True), torch.nn.Parameter(torch.randn(3, 4)),
        big[7:], inference, shared.add_(1), torch.randn(2, 3, 4).permute(2, 0, 1),
    ]


def test_reader_reads_what_torch_says(shim):
    table = dict(_values.shim_dtypes(shim))
    dtypes = [d for d, _ in _values.walker_types()[4]]
    # Every common dtype is known to the walk through the reader.
    for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
              torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64):
        assert any(dtypes[i] is d for i in table.values()), d
    for t in _tensors():
        got = shim.read(t)
        assert got is not None, t
        assert dtypes[table[got["scalar_type"]]] is t.dtype
        assert got["strided"] and got["cpu"]
        assert got["shape"] == list(t.shape) and got["strides"] == list(t.stride())
        assert got["contiguous"] == t.is_contiguous()
        assert got["neg"] == t.is_neg() and got["conj"] == t.is_conj()
        assert got["requires_grad"] == t.requires_grad
        assert got["storage"] == t.untyped_storage()._cdata
        assert got["storage_nbytes"] == t.untyped_storage().nbytes()
        if t.numel():
            assert got["data_ptr"] == t.data_ptr()
            assert got["storage_data"] <= got["data_ptr"]
        if t.is_inference():
            assert got["version"] is None
        else:
            assert got["version"] == t._version
    shared = torch.zeros(3)
    before = shim.read(shared)["version"]
    shared.add_(1)
    assert shim.read(shared)["version"] == before + 1
    # Not a strided CPU tensor: said so, and the walk leaves it to the recorder.
    assert not shim.read(torch.randn(3, 3).to_sparse())["strided"]
    assert not shim.read(torch.empty(2, device="meta"))["cpu"]
    # Not a tensor at all: refused before the library sees it.
    assert shim.read(3.5) is None and shim.read([torch.ones(1)]) is None
    assert shim.read("x") is None
    assert shim.grad_enabled() is torch.is_grad_enabled()
    with torch.no_grad():
        assert shim.grad_enabled() is False


def test_reader_mean_and_norm_are_torchs_own(shim):
    # The float32 Mean/Norm msprobe records where the statistics pass does not follow torch's
    # order (under 8 elements; views whose reduction order their strides set): torch.mean and
    # torch.norm (its vector_norm), bit for bit, on the view itself, at any thread count.
    threads = torch.get_num_threads()
    g = torch.Generator().manual_seed(11)
    base = torch.randn(64, 900, generator=g) * 3
    views = [base, base[:, 300:600], base[::2, 7:], base.t()[5:], base[:3, :2], base[1, :5],
             torch.randn(1, 900, generator=g).expand(40, 900), torch.randn(5, generator=g),
             torch.tensor([1e30, -3e-39, 2.0]), base.view(64, 30, 30).transpose(0, 2)[::3]]
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            for v in views:
                want = (torch.mean(v).item(), torch.norm(v).item())
                assert want[1] == torch.linalg.vector_norm(v).item()
                assert shim.mean_norm(v) == want, (n, v.shape, v.stride())
    finally:
        torch.set_num_threads(threads)
    # No gradient graph is made of a tensor that requires one.
    w = torch.randn(4, 6, requires_grad=True)[:, 1:4]
    fn = w.grad_fn
    assert shim.mean_norm(w) == (torch.mean(w).item(), torch.norm(w).item())
    assert w.grad_fn is fn and w._version == 0
    assert shim.mean_norm(3.5) is None and shim.mean_norm([w]) is None


VIEWS = r"""
import json, sys, zlib
import torch
import numprobe.pytorch._torch_shim as shim_mod
from numprobe.pytorch import PrecisionDebugger
assert (shim_mod.load() is not None) == (sys.argv[1] == "on")
dump, summary = sys.argv[2], sys.argv[4]
torch.set_num_threads(int(sys.argv[3]))
cfg = dump + ".config.json"
with open(cfg, "w") as f:
    json.dump({"task": "statistics", "dump_path": dump, "level": "L1", "rank": [], "step": [],
               "statistics": {"summary_mode": summary}}, f)
dbg = PrecisionDebugger(config_path=cfg)
g = torch.Generator().manual_seed(5)
qkv = torch.randn(4, 16, 3 * 96, generator=g)
x = torch.randn(50, 70, generator=g) * 4
big = torch.randn(300, 400, generator=g)
row = torch.randn(1, 70, generator=g)
small = torch.randn(5, generator=g)
dbg.start()
q, k, v = qkv.chunk(3, dim=-1)  # views with gaps, as a fused projection's
heads = (q.view(4, 16, 4, 24).transpose(1, 2), k.view(4, 16, 4, 24).permute(0, 2, 3, 1))
torch.matmul(*heads)
views = {"Torch.add.0.forward": x[::2, 3:], "Torch.add.1.forward": row.expand(50, 70),
         "Torch.add.2.forward": small, "Torch.add.3.forward": x[:3, :2],
         "Torch.add.4.forward": big[:, 100:300], "Torch.add.5.forward": v.transpose(0, 1)}
for t in views.values():
    torch.add(t, 1)
dbg.stop()
dbg.step()
stats = lambda t: ([torch.max(t).item(), torch.min(t).item(), torch.mean(t).item(),
                    torch.norm(t).item()],
                   f"{zlib.crc32(t.contiguous().numpy().tobytes()):08x}")
want = {name: [stats(t)] for name, t in views.items()}
want["Torch.matmul.0.forward"] = [stats(t) for t in heads]
with open(dump + ".torch.json", "w") as f:
    json.dump(want, f)
"""


@pytest.mark.parametrize("threads,summary", [(1, "statistics"), (2, "statistics"), (2, "md5")])
def test_strided_views_give_torchs_statistics_through_the_reader(tmp_path, shim_cache,
                                                                  threads, summary):
    # Slices of a fused projection (chunk), their transposes, stepped views, small and large:
    # with the reader the walk copies them and takes torch's own Mean/Norm, without it the
    # recorder's Python path does (and with it for an expanded view, whose copy would be
    # larger than its memory); the dumps are the same bytes and the records torch's own
    # statistics of each view (in md5 mode with the CRC-32 of the view's elements in order).
    script = tmp_path / "views.py"
    script.write_text(VIEWS)
    files = _same_dumps_with_and_without_reader(
        shim_cache, tmp_path / "views", [str(script), "{on}", "{dump}", str(threads), summary])
    data = json.loads(files[("step0", "dump.json")])["data"]
    want = json.loads((tmp_path / "views_True.torch.json").read_text())
    assert set(want) == set(data)
    for name, args in want.items():
        for i, (stats, crc) in enumerate(args):
            rec = data[name]["input_args"][i]
            assert [rec["Max"], rec["Min"], rec["Mean"], rec["Norm"]] == stats, (name, i)
            assert rec.get("md5") == (crc if summary == "md5" else None), (name, i)


SHIM_MODE = r"""
import warnings
import numprobe.pytorch._torch_shim as shim_mod
if mode == "shim":
    assert shim_mod.load() is not None, "the torch reader was not loaded"
    mode = "dlpack"
else:
    assert shim_mod.load() is None
"""


# The dtypes the hostile script leaves out, some of which torch's mul refuses after the
# inputs are recorded (the float8 types): the records before the refusal must agree too.
LOOP = "    for t in tensors:\n        torch.mul(t, 1)\n"
MORE_DTYPES = """with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    tensors += [base.to(torch.float8_e4m3fn), base.to(torch.float8_e5m2),
                (base * 10).to(torch.uint16), (base * 10).to(torch.uint32),
                base.to(torch.complex128), base.to(torch.int16), base.to(torch.float64)[:, ::2],
                torch.quantize_per_tensor(base, 0.1, 0, torch.quint8),
                torch.randn(2, 3).as_strided((2, 2), (0, 1))]
"""
LOOP_TOLERANT = """    for t in tensors:
        try:
            torch.mul(t, 1)
        except (NotImplementedError, RuntimeError):
            pass
"""


def test_reader_export_and_attributes_give_the_same_records(tmp_path, shim_cache):
    # The hostile-layout script of test_dlpack_walk, run with the reader too: with it, the
    # walk never calls torch's DLPack export for the script's tensors.
    marker = 'dump, mode = sys.argv[1], sys.argv[2]\n'
    steps = "for step in range(2):\n"
    assert marker in HOSTILE_SCRIPT and LOOP in HOSTILE_SCRIPT and steps in HOSTILE_SCRIPT
    script = tmp_path / "script.py"
    script.write_text(HOSTILE_SCRIPT.replace(marker, marker + SHIM_MODE)
                      .replace(steps, MORE_DTYPES + steps).replace(LOOP, LOOP_TOLERANT))
    for summary in ("statistics", "md5"):
        got, calls = {}, {}
        for mode in ("shim", "dlpack", "attributes"):
            dump = str(tmp_path / f"{summary}_{mode}")
            r = subprocess.run([sys.executable, str(script), dump, mode, summary],
                               capture_output=True, text=True, timeout=600,
                               env=_env(shim_cache, on=mode == "shim"))
            assert r.returncode == 0, r.stderr[-3000:]
            calls[mode] = json.loads(r.stdout.strip().splitlines()[-1])["calls"]
            got[mode] = dump_files(dump)
        assert calls["shim"] == 0, calls
        assert calls["dlpack"] >= 2 * 25, calls
        assert got["shim"] and set(got["shim"]) == set(got["dlpack"]) == set(got["attributes"])
        for k in got["shim"]:
            assert got["shim"][k] == got["dlpack"][k] == got["attributes"][k], (summary, k)
        text = got["shim"][("step1", "dump.json")].decode()
        for dtype in ("float8_e4m3fn", "uint16", "uint32", "complex128", "quint8", "int16"):
            assert f'"torch.{dtype}"' in text, dtype


RUN_HF = r"""
import runpy, sys
import numprobe.pytorch._torch_shim as shim_mod
want = sys.argv[1] == "on"
assert (shim_mod.load() is not None) == want
sys.argv = sys.argv[2:]  # hf_model.py and its arguments
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# GPT-2 splits its fused q/k/v projection into views with gaps, which the walk copies with the
# reader and the recorder's path copies without.
@pytest.mark.parametrize("family", ["llama", "bert", "gpt2"])
def test_hf_model_dumps_the_same_bytes_with_the_reader(tmp_path, shim_cache, family):
    pytest.importorskip("transformers")
    runner = tmp_path / "run_hf.py"
    runner.write_text(RUN_HF)
    files = _same_dumps_with_and_without_reader(
        shim_cache, tmp_path / "dump",
        [str(runner), "{on}", str(HERE / "hf_model.py"), "--family", family, "--tool",
         "numprobe", "--task", "statistics", "--dump-path", "{dump}"],
        timeout=900, cwd=str(HERE))
    data = json.loads(next(v for k, v in files.items() if k[1] == "dump.json"))["data"]
    assert len(data) > 50


def test_only_a_private_library_for_this_torch_is_loaded(tmp_path, shim_cache):
    lib = _torch_shim.library_path(shim_cache / "torch-shim")
    tensor_base = torch._C.TensorBase
    # Another torch (or another numprobe source): refused, naming both.
    with pytest.raises(OSError, match="built for"):
        _native.TorchShim.load(str(lib), "torch 0.0 git x", tensor_base)
    # Not a reader at all.
    c10 = Path(torch.__file__).parent / "lib" / "libc10.so"
    with pytest.raises(OSError, match="numprobe_shim_abi"):
        _native.TorchShim.load(str(c10), _torch_shim.identity(), tensor_base)
    # Not a library.
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF but not really")
    with pytest.raises(OSError):
        _native.TorchShim.load(str(junk), _torch_shim.identity(), tensor_base)

    # The loader's checks: a link, a file or folder others may write, are refused with a
    # warning and the capture goes on without the reader.
    folder = tmp_path / "cache" / "torch-shim"
    folder.mkdir(parents=True, mode=0o700)
    placed = _torch_shim.library_path(folder)
    os.symlink(lib, placed)
    with pytest.warns(RuntimeWarning, match="links are not followed"):
        assert _torch_shim.load(placed) is None
    placed.unlink()
    shutil.copyfile(lib, placed)
    os.chmod(placed, 0o722)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert _torch_shim.load(placed) is None
    os.chmod(placed, 0o700)
    os.chmod(folder, 0o777)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert _torch_shim.load(placed) is None
    os.chmod(folder, 0o700)
    assert _torch_shim.load(placed) is not None
    # The build refuses a shared folder too, before it compiles anything.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    os.chmod(shared, 0o777)
    with pytest.raises(_torch_shim.ShimUnsafe):
        _torch_shim.build(shared, quiet=True)
    assert list(shared.iterdir()) == []


def test_a_failed_build_leaves_nothing(tmp_path):
    folder = tmp_path / "torch-shim"
    # A compiler that fails: the error carries its output, and no file stays behind.
    with pytest.raises(RuntimeError, match="compiling torch_shim.cpp failed"):
        _torch_shim.build(folder, cxx="false", quiet=True)
    assert list(folder.iterdir()) == []
    # A "compiler" that writes garbage: not loadable, so never put in place.
    fake = tmp_path / "fake-cxx"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho junk > "$2"\n')
    fake.chmod(0o700)
    with pytest.raises(OSError):
        _torch_shim.build(folder, cxx=str(fake), quiet=True)
    assert list(folder.iterdir()) == []


def test_build_command_line(tmp_path, monkeypatch):
    # The command a user runs: prints the library's path, which the capture then finds.
    monkeypatch.setenv("NUMPROBE_CACHE_DIR", str(tmp_path))
    check = [sys.executable, "-m", "numprobe.pytorch", "build-torch-shim", "--check"]
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "not built for this torch" in r.stderr, r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-m", "numprobe.pytorch", "build-torch-shim"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = Path(r.stdout.strip().splitlines()[-1])
    assert printed == _torch_shim.library_path(tmp_path / "torch-shim")
    assert printed.is_file() and "built" in r.stderr
    r = subprocess.run([sys.executable, "-c", "import numprobe.pytorch._torch_shim as s; "
                        "print(s.load().path)"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert Path(r.stdout.strip()) == printed
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and Path(r.stdout.strip()) == printed, r.stderr[-3000:]
    # A library others may write is refused, and --check says why.
    os.chmod(printed, 0o722)
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "writable by others" in r.stderr, r.stderr[-3000:]
    os.chmod(printed, 0o700)
    # Switched off, it is not loaded.
    monkeypatch.setenv("NUMPROBE_TORCH_SHIM", "0")
    r = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "NUMPROBE_TORCH_SHIM=0" in r.stderr, r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-c", "import numprobe.pytorch._torch_shim as s; "
                        "assert s.load() is None"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


CAPTURE = """
import json, os, sys, tempfile
import torch
from numprobe.pytorch import PrecisionDebugger, _torch_shim
dump = tempfile.mkdtemp()
cfg = os.path.join(dump, "config.json")
with open(cfg, "w") as f:
    json.dump({"task": "statistics", "dump_path": dump, "level": "L1", "rank": [], "step": []}, f)
dbg = PrecisionDebugger(config_path=cfg)
dbg.start()
torch.add(torch.ones(40), 1)
dbg.stop()
print("reader" if _torch_shim.load() is not None else "no reader")
"""


def _fake_compiler(tmp_path, shim_cache, runs, gate=None, fail=False):
    """A `CXX` that counts its runs in `runs`, waits until the file `gate` exists (so a test
    decides when the build ends, whatever the machine's speed), then fails or writes the
    reader built by the fixture (the same bytes a real compile of this source gives)."""
    lib = _torch_shim.library_path(shim_cache / "torch-shim")
    fake = tmp_path / ("failing-cxx" if fail else "copying-cxx")
    wait = f'n=0; while [ ! -e "{gate}" ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done\n' \
        if gate else ""
    body = "exit 1" if fail else f'while [ "$1" != "-o" ]; do shift; done\ncp "{lib}" "$2"'
    fake.write_text(f'#!/bin/sh\necho run >> "{runs}"\n{wait}{body}\n')
    fake.chmod(0o700)
    return fake


def _auto_env(cache, cxx):
    env = dict(os.environ)
    env.pop("NUMPROBE_TORCH_SHIM", None)  # the default: auto
    env["NUMPROBE_CACHE_DIR"] = str(cache)
    env["CXX"] = str(cxx)
    return env


def _capture(tmp_path, env):
    script = tmp_path / "capture.py"
    script.write_text(CAPTURE)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1], r.stderr


def _check(env):
    return subprocess.run([sys.executable, "-m", "numprobe.pytorch", "build-torch-shim",
                           "--check"], env=env, capture_output=True, text=True, timeout=300)


def _wait_for(path, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def test_a_capture_without_a_reader_builds_one_for_later_runs(tmp_path, shim_cache):
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    env = _auto_env(tmp_path / "cache", _fake_compiler(tmp_path, shim_cache, runs, gate))
    folder = tmp_path / "cache" / "torch-shim"
    lib = _torch_shim.library_path(folder)
    # What a build killed an hour ago left behind goes; a build's file of now stays.
    folder.mkdir(parents=True, mode=0o700)
    stale, fresh = folder / ".building-old.so", folder / ".building-new.so"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    said, err = _capture(tmp_path, env)
    # The capture did not wait for the compiler: it ended without the reader, saying a build
    # runs, and the build is still running.
    assert said == "no reader" and "building the torch reader" in err, err
    assert not lib.exists()
    r = _check(env)
    assert r.returncode == 1 and "a build is running in the background" in r.stderr, r.stderr
    # Captures meanwhile start no second build.
    assert _capture(tmp_path, env)[0] == "no reader"
    gate.touch()
    _wait_for(lib)
    # Later captures read through it; one compiler run in all.
    said, err = _capture(tmp_path, env)
    assert said == "reader" and "building" not in err, err
    assert runs.read_text().split() == ["run"]
    assert _check(env).returncode == 0
    assert not stale.exists() and fresh.exists()


def test_concurrent_captures_start_one_build(tmp_path, shim_cache):
    runs, gate = tmp_path / "runs", tmp_path / "gate"
    env = _auto_env(tmp_path / "cache", _fake_compiler(tmp_path, shim_cache, runs, gate))
    script = tmp_path / "capture.py"
    script.write_text(CAPTURE)
    # The build runs until all four captures are done, so every one of them meets it.
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert [o.strip().splitlines()[-1] for o, _ in outs] == ["no reader"] * 4
    errs = [e for _, e in outs]
    gate.touch()
    _wait_for(_torch_shim.library_path(tmp_path / "cache" / "torch-shim"))
    assert sum("building the torch reader" in e for e in errs) == 1, errs
    assert runs.read_text().split() == ["run"]


def test_a_failed_background_build_is_left_to_the_user(tmp_path, shim_cache):
    runs = tmp_path / "runs"
    cache = tmp_path / "cache"
    env = _auto_env(cache, _fake_compiler(tmp_path, shim_cache, runs, fail=True))
    log = _torch_shim.failure_log(cache / "torch-shim")
    assert _capture(tmp_path, env)[0] == "no reader"
    _wait_for(log)
    assert "compiling torch_shim.cpp failed" in log.read_text()
    # Not tried again by captures; --check points at the log.
    said, err = _capture(tmp_path, env)
    assert said == "no reader" and "building" not in err, err
    assert runs.read_text().split() == ["run"]
    r = _check(env)
    assert r.returncode == 1 and str(log) in r.stderr, r.stderr
    # The command tries again (with a working compiler here) and clears the log.
    env["CXX"] = str(_fake_compiler(tmp_path, shim_cache, runs))
    r = subprocess.run([sys.executable, "-m", "numprobe.pytorch", "build-torch-shim"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not log.exists() and _capture(tmp_path, env)[0] == "reader"


def test_no_background_build_when_told_or_unsafe(tmp_path, shim_cache):
    runs = tmp_path / "runs"
    cache = tmp_path / "cache"
    env = _auto_env(cache, _fake_compiler(tmp_path, shim_cache, runs))
    # NUMPROBE_TORCH_SHIM=1 uses a reader but never builds one; 0 neither; no compiler found.
    for knob, cxx in (("1", env["CXX"]), ("0", env["CXX"]), (None, str(tmp_path / "no-cxx"))):
        e = dict(env, CXX=cxx)
        if knob is not None:
            e["NUMPROBE_TORCH_SHIM"] = knob
        said, err = _capture(tmp_path, e)
        assert said == "no reader" and "building" not in err, (knob, err)
    assert not runs.exists() and not (cache / "torch-shim").exists()
    # A lock planted as a link is not followed: the capture goes on without a build.
    folder = cache / "torch-shim"
    folder.mkdir(parents=True, mode=0o700)
    target = tmp_path / "elsewhere"
    os.symlink(target, folder / ".build.lock")
    said, err = _capture(tmp_path, env)
    assert said == "no reader" and "links are not followed" in err, err
    assert not target.exists() and not runs.exists()
    # A cache folder that cannot be made: the capture says so, and how to go on.
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    said, err = _capture(tmp_path, dict(env, NUMPROBE_CACHE_DIR=str(blocked)))
    assert said == "no reader" and "no torch reader built" in err, err
    assert "NUMPROBE_TORCH_SHIM=1 stops trying" in err and not runs.exists()


def test_backward_hooks_registered_natively_see_what_torch_hooks_see(shim):
    import threading
    import weakref

    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)
    out = torch.mm(x, w)
    seen = {}

    def native(grad_inputs, grad_outputs):
        seen["native"] = (grad_inputs, grad_outputs)
        return "ignored"  # the gradients stay as they are whatever the hook returns

    def python(grad_inputs, grad_outputs):
        seen["python"] = (grad_inputs, grad_outputs)

    assert shim.add_post_hook(out, native) is True
    out.grad_fn.register_hook(python)
    g = torch.randn(4, 5)
    out.backward(g)
    (ni, no), (pi, po) = seen["native"], seen["python"]
    assert isinstance(ni, tuple) and isinstance(no, tuple) and len(ni) == len(pi) == 2
    for a, b in zip(ni + no, pi + po):
        assert (a is None and b is None) or torch.equal(a, b)
    assert torch.equal(no[0], g)
    assert torch.equal(x.grad, g @ w.t()) and torch.equal(w.grad, x.t() @ g)

    # An input needing no gradient gets None, as torch's own hooks see it.
    seen.clear()
    y = torch.mul(torch.randn(3, requires_grad=True), torch.randn(3))
    assert shim.add_post_hook(y, native) is True
    y.grad_fn.register_hook(python)
    y.sum().backward()
    assert seen["native"][0][1] is None and seen["python"][0][1] is None

    # A leaf has no gradient function; not a tensor is refused before the library sees it.
    assert shim.add_post_hook(torch.randn(2, requires_grad=True), native) is False
    assert shim.add_post_hook(torch.randn(2), native) is False
    assert shim.add_post_hook([1], native) is None

    # The hook's error is backward()'s error, with its type and message.
    def failing(grad_inputs, grad_outputs):
        raise KeyError("hook failed here")

    z = torch.randn(3, requires_grad=True).exp()
    assert shim.add_post_hook(z, failing) is True
    with pytest.raises(KeyError, match="hook failed here"):
        z.sum().backward()

    # A backward run on another thread calls the hook there.
    threads = []

    def where(grad_inputs, grad_outputs):
        threads.append(threading.get_ident())

    v = torch.randn(3, requires_grad=True).sin()
    assert shim.add_post_hook(v, where) is True
    t = threading.Thread(target=lambda: v.sum().backward())
    t.start()
    t.join()
    assert threads == [t.ident]

    # The hook lives as long as the graph: freed with it, not leaked.
    class Hook:
        def __call__(self, grad_inputs, grad_outputs):
            pass

    hook = Hook()
    ref = weakref.ref(hook)
    u = torch.randn(3, requires_grad=True).cos()
    assert shim.add_post_hook(u, hook) is True
    del hook
    assert ref() is not None
    u.sum().backward()
    del u
    assert ref() is None


def test_large_tensors_are_read_on_the_threads_torch_cut_them_for(shim):
    # torch's elementwise operators cut a tensor of GRAIN (32768) elements or more into one
    # chunk per thread; the reader's parallel_for gives the statistics the same chunks on the
    # same threads (torch's own OpenMP pool: no thread of its own is started).
    openmp = "parallel backend: OpenMP" in torch.__config__.parallel_info()
    if sys.platform == "linux" and openmp:
        # pip's torch loads its libgomp.so.1: the reader must be built to share its pool.
        assert _torch_shim._openmp_flags() == ("-fopenmp",)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.ones(100_000).mul_(2)  # torch's pool is up
        before = set(os.listdir("/proc/self/task"))
        got = shim.chunks_on_threads(100_000, 32768)
        assert [(b, e) for b, e, _ in got] == [(0, 50_000), (50_000, 100_000)]
        assert [here for _, _, here in got] == ([True, False] if _torch_shim._openmp_flags()
                                                else [True, True])
        # No thread of its own (another test's leftover thread may end meanwhile).
        assert not set(os.listdir("/proc/self/task")) - before
        # Under the grain torch runs on the calling thread, and so do the statistics.
        assert shim.chunks_on_threads(32768, 32768) == [(0, 32768, True)]
        torch.set_num_threads(3)
        got = shim.chunks_on_threads(100_000, 32768)
        assert [(b, e) for b, e, _ in got] == [(0, 33_334), (33_334, 66_668), (66_668, 100_000)]
        torch.set_num_threads(1)
        assert shim.chunks_on_threads(100_000, 32768) == [(0, 100_000, True)]
    finally:
        torch.set_num_threads(threads)


LARGE = r"""
import json, os, sys
import torch
import numprobe.pytorch._torch_shim as shim_mod
from numprobe.pytorch import PrecisionDebugger
assert (shim_mod.load() is not None) == (sys.argv[1] == "on")
dump, summary = sys.argv[2], sys.argv[3]
torch.set_num_threads(int(sys.argv[4]))
torch.manual_seed(0)
cfg = dump + ".config.json"
with open(cfg, "w") as f:
    json.dump({"task": "statistics", "dump_path": dump, "level": "L1", "rank": [], "step": [],
               "statistics": {"summary_mode": summary}}, f)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
dbg = PrecisionDebugger(config_path=cfg)
x = torch.randn(96, 256)
for step in range(2):
    dbg.start()
    y = model(x)
    # Lengths that cut into whole groups and not (40_000 / 2 is no multiple of 32).
    z = torch.nn.functional.silu(torch.randn(40_000)) * 3 + torch.randn(200, 320).sum()
    (y.square().mean() + z.mean()).backward()
    opt.step()
    opt.zero_grad()
    dbg.stop()
    dbg.step()
"""


@pytest.mark.parametrize("summary", ["statistics", "md5"])
def test_large_tensors_read_on_torch_threads_give_the_same_records(tmp_path, shim_cache,
                                                                   summary):
    # Weights, activations and AdamW's in-place updates of 65536 to 131072 elements at one,
    # two and three torch threads: with the reader each thread chunk is read on its torch
    # thread, without it all on the calling thread; the dumps are the same bytes.
    script = tmp_path / "large.py"
    script.write_text(LARGE)
    for threads in (1, 2, 3):
        files = _same_dumps_with_and_without_reader(
            shim_cache, tmp_path / f"{summary}_{threads}",
            [str(script), "{on}", "{dump}", summary, str(threads)])
        data = json.loads(files[("step1", "dump.json")])["data"]
        update = data["Tensor.addcdiv_.0.forward"]["input_args"][0]
        assert update["shape"] == [512, 256] and update["Norm"] > 0
