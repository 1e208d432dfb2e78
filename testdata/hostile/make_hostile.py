"""Regenerates the hostile .pt files of this directory (numprobe's cli/tests/hostile_readers.rs).

Run: /var/cache/numprobe/venv/bin/python testdata/hostile/make_hostile.py (from the repository root).
"""
import os
import torch

here = os.path.dirname(os.path.abspath(__file__))


def save(obj, name):
    torch.save(obj, os.path.join(here, name))


# A stride-0 view: 4 bytes of storage, 2**31 float32 elements (8 GiB) in C order.
save(torch.zeros(1).expand(2**31), "expand_2e31.pt")
# The same idea asking for 4 TiB.
save(torch.zeros(1).expand(2**40), "expand_2e40.pt")
# A small broadcast view (12 bytes of storage, 48 in C order): read through its strides.
save(torch.arange(3.0).expand(4, 3), "expand_small.pt")
# What torch.save of a state_dict or of several tensors writes.
save({"weight": torch.zeros(2)}, "dict.pt")
save([torch.zeros(2), torch.ones(2)], "list.pt")


class Payload:
    """Unpickling runs os.system: a reader that executes pickles creates the canary file."""

    def __reduce__(self):
        return (os.system, ("touch numprobe_canary_pwned",))


save(Payload(), "payload_canary.pt")
