"""Reading a dump.json for the replay: the forward and backward API entries and where the
tensor files are."""
import json
import os


class DumpError(Exception):
    """A dump.json the replay cannot use (with the file and the offending entry)."""


def load_api_info(path):
    """Returns (forward, backward, tensor_dir) of a dump.json.

    forward/backward map the API name without its direction (`Torch.matmul.0`) to the entry, in
    file order. Module/Cell entries are left out, as msprobe's checker does. tensor_dir is the
    `dump_tensor_data` folder beside the file (None when the dump names no data dir and the
    folder does not exist).
    """
    try:
        with open(path, encoding="utf-8") as f:
            # Python's json accepts the bare NaN/Infinity tokens msprobe writes.
            dump = json.load(f)
    except (OSError, ValueError) as e:
        raise DumpError(f"{path}: cannot read dump.json: {e}") from e
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise DumpError(f"{path}: no \"data\" object in dump.json")
    forward, backward = {}, {}
    for name, entry in dump["data"].items():
        if "Module" in name or "Cell" in name.split(".")[0]:
            continue
        parts = name.split(".")
        if parts[-1] == "forward":
            forward[".".join(parts[:-1])] = entry
        elif parts[-1] == "backward":
            backward[".".join(parts[:-1])] = entry
        elif "forward" in name or "backward" in name or "parameters_grad" in name:
            # Module-style names (`...forward.0`) and parameter gradients are not API calls.
            continue
        else:
            raise DumpError(f"{path}: data.{name}: not a forward or backward entry name")
    tensor_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "dump_tensor_data")
    if not dump.get("dump_data_dir") and not os.path.isdir(tensor_dir):
        tensor_dir = None
    return forward, backward, tensor_dir


def split_api_name(full_name):
    """(`Torch`, `matmul`) for `Torch.matmul.0`; (`Torch`, `linalg.inv`) for `Torch.linalg.inv.0`;
    (None, None) for any other shape of name."""
    parts = full_name.split(".")
    if len(parts) == 3:
        return parts[0], parts[1]
    if len(parts) == 4:
        return parts[0], parts[1] + "." + parts[2]
    return None, None


def dedup_forward(forward):
    """msprobe's `-f/--filter_api`: keep one call per API among calls whose inputs have the same
    dtypes/shapes/kwargs (statistics Max/Min ignored), first occurrence wins."""
    kept, seen = {}, {}
    for name, entry in forward.items():
        base = name.rsplit(".", 1)[0]
        args = [
            {k: v for k, v in a.items() if k not in ("Max", "Min")}
            for a in entry.get("input_args", [])
            if isinstance(a, dict)
        ]
        sig = (args, entry.get("input_kwargs"))
        variants = seen.setdefault(base, [])
        if any(sig == v for v in variants):
            continue
        variants.append(sig)
        kept[name] = entry
    return kept
