"""The replay's `.pt` loading (numprobe.pytorch.run_ut.inputs.load_tensor): numprobe's own reader
gives the tensor torch.load gives, for every dtype a dump holds, and refuses a damaged file with
an error naming it (the API becomes a SKIP row, the run goes on)."""
import os

import pytest
import torch

from numprobe.pytorch.run_ut import inputs


def saved(tmp_path, name, t):
    path = str(tmp_path / name)
    torch.save(t, path)
    return path


CASES = {
    "f32": torch.randn(3, 5),
    "f16": torch.randn(4, 2).half(),
    "bf16": torch.randn(7).bfloat16(),
    "f64": torch.randn(2, 2, 2, dtype=torch.float64),
    "i64": torch.arange(-5, 6),
    "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
    "u8": torch.arange(200, 210, dtype=torch.uint8),
    "bool": torch.tensor([True, False, True]),
    "scalar": torch.tensor(2.5),
    "empty": torch.empty(0, 3),
    "nan_inf": torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0]),
    # A transposed view and a slice with an offset: torch.save keeps the whole storage.
    "transposed": torch.randn(3, 4).t(),
    "sliced": torch.randn(6, 4)[2:5, 1:3],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reader_gives_torch_loads_tensor(tmp_path, name):
    path = saved(tmp_path, f"{name}.pt", CASES[name])
    ref = torch.load(path, weights_only=True)
    got = inputs.load_tensor(path)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert torch.equal(got.view(-1).view(torch.uint8) if got.numel() else got,
                       ref.contiguous().view(-1).view(torch.uint8) if ref.numel() else ref)
    # The replay writes into its inputs (in-place APIs): the tensor must own writable memory.
    if got.numel():
        got.view(-1)[0] = got.view(-1)[-1]


def test_damaged_file_is_an_input_error_naming_it(tmp_path):
    path = saved(tmp_path, "t.pt", torch.randn(64))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(inputs.InputError, match="t.pt"):
        inputs.load_tensor(path)
    with open(path, "wb") as f:
        f.write(b"not a zip")
    with pytest.raises(inputs.InputError, match="t.pt"):
        inputs.load_tensor(path)


def test_pickled_object_is_refused(tmp_path):
    path = saved(tmp_path, "d.pt", {"a": torch.ones(2)})
    with pytest.raises(inputs.InputError, match="d.pt"):
        inputs.load_tensor(path)


def test_data_names_stay_inside_the_tensor_directory(tmp_path):
    """A record's `data_name` comes from the dump, perhaps a stranger's: it names a file of the
    tensor directory or nothing. An absolute name, `..`, a link out of the directory or a FIFO
    is an input error naming it (the API becomes a SKIP row), never a read of another file of
    the machine; a missing file is no file (the replay draws from the statistics), and a link
    inside the directory is followed."""
    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    saved(data, "x.pt", torch.arange(3.0))
    secret = saved(tmp_path, "secret.pt", torch.full((2,), 7.0))
    os.symlink(secret, data / "out.pt")
    os.symlink("x.pt", data / "alias.pt")
    os.mkfifo(data / "fifo.pt")
    rec = lambda name: {"type": "torch.Tensor", "data_name": name}  # noqa: E731
    d = str(data)
    assert inputs.tensor_path(rec("x.pt"), d) == str(data / "x.pt")
    assert torch.equal(inputs.load_tensor(inputs.tensor_path(rec("alias.pt"), d)), torch.arange(3.0))
    assert inputs.tensor_path(rec("gone.pt"), d) is None
    for name, why in [(secret, "not a file name"), ("../secret.pt", "not a file name"),
                      ("out.pt", "outside the tensor directory"), ("fifo.pt", "not a regular file"),
                      ("", None)]:
        if why is None:  # no name: no file
            assert inputs.tensor_path(rec(name), d) is None
            continue
        with pytest.raises(inputs.InputError, match=why) as e:
            inputs.tensor_path(rec(name), d)
        assert name.split("/")[-1] in str(e.value)
