"""The installed package's declarations agree with what it does: the type stub of the Rust
module lists its functions, classes and parameters; the README's table lists the environment
variables numprobe/_settings.py defines, and no other module reads the environment."""
import ast
import inspect
import os

import numprobe
from numprobe import _native, _settings

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(os.path.abspath(numprobe.__file__))
README = os.path.join(HERE, "..", "..", "README.md")


def _stub():
    with open(os.path.join(PKG, "_native.pyi")) as f:
        return ast.parse(f.read())


def _params(node):
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return [n for n in names if n != "self"]


def _runtime_params(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # no text signature
        return None
    return [n for n in sig.parameters if n not in ("self", "$self")]


def test_typing_files_are_installed():
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    assert os.path.isfile(os.path.join(PKG, "_native.pyi"))


def test_native_stub_lists_every_function_class_and_parameter():
    tree = _stub()
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    public = {n for n in dir(_native) if not n.startswith("_")}
    assert public == set(funcs) | set(classes)
    for name, node in funcs.items():
        got = _runtime_params(getattr(_native, name))
        assert got is None or got == _params(node), name
    for name, node in classes.items():
        cls = getattr(_native, name)
        members = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        runtime = {n for n in dir(cls) if not n.startswith("_")}
        assert runtime == {n for n in members if not n.startswith("_")}, name
        for m in runtime:
            got = _runtime_params(getattr(cls, m))
            if got is not None and not isinstance(inspect.getattr_static(cls, m), property):
                assert got == _params(members[m]), (name, m)
        if "__init__" in members:
            got = _runtime_params(cls)
            assert got is None or got == _params(members["__init__"]), name


def test_readme_lists_every_environment_variable():
    rows = []
    with open(README) as f:
        lines = f.read().split("## Environment variables of the Python package", 1)[1].splitlines()
    for line in lines:
        if line.startswith("| `NUMPROBE_"):
            name, default, meaning = (c.strip() for c in line.strip("|").split(" | "))
            rows.append((name.strip("`"), default.strip("`"), meaning))
    assert rows == [(k.name, k.default, k.meaning) for k in _settings.KNOBS]


def _reads_environment(tree):
    def is_environ(node):
        return (isinstance(node, ast.Attribute) and node.attr == "environ"
                and isinstance(node.value, ast.Name) and node.value.id == "os")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                return node.lineno
            if f.attr in ("get", "pop", "setdefault", "copy", "items") and is_environ(f.value):
                return node.lineno
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            return node.lineno
        if isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            return node.lineno
    return None


def test_only_settings_reads_the_environment():
    found = []
    for root, _, files in os.walk(PKG):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or path == os.path.join(PKG, "_settings.py"):
                continue
            with open(path) as f:
                line = _reads_environment(ast.parse(f.read()))
            if line is not None:
                found.append(f"{os.path.relpath(path, PKG)}:{line}")
    assert not found


def test_a_malformed_knob_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("NUMPROBE_DEVICE_STATS_BOUND", "many")
    try:
        _settings.device_stats_bound()
    except ValueError as e:
        assert "NUMPROBE_DEVICE_STATS_BOUND='many'" in str(e)
    else:
        raise AssertionError("a malformed bound was accepted")
    monkeypatch.setenv("NUMPROBE_DEVICE_STATS_BOUND", "12")
    assert _settings.device_stats_bound() == 12
    # Read as `auto`, `off` would start a compiler.
    for word in ("off", "yes"):
        monkeypatch.setenv("NUMPROBE_TORCH_SHIM", word)
        try:
            _settings.torch_shim_autobuild()
        except ValueError as e:
            assert f"NUMPROBE_TORCH_SHIM={word!r}" in str(e)
        else:
            raise AssertionError(f"NUMPROBE_TORCH_SHIM={word!r} was accepted")
    for word, use, build in (("auto", True, True), ("", True, True), ("1", True, False),
                             ("0", False, False)):
        monkeypatch.setenv("NUMPROBE_TORCH_SHIM", word)
        assert (_settings.torch_shim(), _settings.torch_shim_autobuild()) == (use, build)
