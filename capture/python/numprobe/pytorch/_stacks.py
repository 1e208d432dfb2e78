"""Call stacks for stack.json: cached by code object and instruction offset, and journaled as a
reference to their group when a call site repeats within a session (the session keeps the
groups by key: ``Session.site_group``, ``Session.stack_site``)."""
import linecache
import os
import sys

import torch.overrides

from .._native import CallSites, StackFrames
from .._native import stack_key as _stack_key

# Frames of numprobe itself and of torch's dispatch to the mode are not the script's.
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OVERRIDES_FILE = os.path.abspath(torch.overrides.__file__)


class Stacks:
    """The recorder's stack part (a mixin of ``Recorder``)."""

    def _init_stacks(self):
        # Call-site key -> frames, kept with the sites' code objects; read by the native call
        # path too (``ApiCalls``).
        self.stack_cache = CallSites()

    def stack(self, skip_code=None):
        """The caller's frames (from two levels up) as stack.json lines, and their key (see
        ``stack_at``)."""
        return self.stack_at(sys._getframe(2), skip_code)

    def stack_at(self, frame, skip_code=None, key=None):
        """The frames from `frame` outwards as stack.json lines (a ``StackFrames``), and the
        key they are cached under: the ids of the frames' code objects and their instruction
        offsets, packed by the native walk (the cached value keeps the code objects alive, so
        an id cannot be reused while it is a key). `key`: that key, when the caller took it
        already."""
        if key is None:
            key = _stack_key(frame, id(skip_code))
        hit = self.stack_cache.get(key)
        if hit is not None:
            return key, hit
        frames, codes = [], [skip_code]
        f = frame
        while f is not None:
            code = f.f_code
            codes.append(code)
            fn = code.co_filename
            if code is not skip_code and not fn.startswith(_PKG_DIR) and fn != _OVERRIDES_FILE:
                src = linecache.getline(fn, f.f_lineno).strip()
                if src:
                    frames.append(f"File {fn}, line {f.f_lineno}, in {code.co_name}, \n {src}")
            f = f.f_back
        # Rendered once: every step's journal and stack.json hold the same lines again.
        frames = StackFrames(frames)
        self.stack_cache.insert(key, frames, codes)
        return key, frames

    def _record_stack(self, entry, key, frames):
        # A call site seen before in this session is journaled as a reference to its group.
        self.session.stack_site(entry, key, frames)
