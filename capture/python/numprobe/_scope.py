"""msprobe 26.2's collect filter built from a task section's `scope` and `list` (framework-free).

`scope` is a `[start, end]` pair of full entry names; `list` keeps entries whose name contains
any of its strings. What "in range" means depends on the level:

- L1 (API range): the range opens when an entry named `start` is checked and closes right after
  an entry named `end` is checked. An API is checked at its input and again at its output, so
  the `end` API keeps its input only (unless `start == end`).
- L0 (Cell range): the range opens at `start`'s forward (or backward) pre-hook and closes at
  `end`'s forward hook before its output is checked, or after its backward data is checked.
- mix: both of the above; besides, a Cell whose name contains a `list` string keeps everything
  checked until the last such Cell ends.

`check` has side effects, so an adapter must call it exactly where msprobe asks the filter:
once at each forward input, forward output, backward and parameter-gradient collect point, and
`begin_cell`/`end_cell` at the Cell pre-hooks/hooks. The PyTorch recorder could use this too
(its module hooks would need the same begin/end points).
"""
import re

from .config import ConfigError

# Entry-name prefixes msprobe accepts for API names in `scope`.
API_PREFIXES = ("Distributed", "Functional", "Torch", "Tensor", "Mint", "MintFunctional",
                "Primitive", "Aten", "VF", "NPU", "Jit")
CELL_PREFIXES = ("Module", "Cell")
_API_NAME = re.compile(rf"^({'|'.join(API_PREFIXES)})\..*\.\d+\.(forward|backward)$")
_CELL_NAME = re.compile(r"^(Cell|Module)\..*\.(forward|backward)\.\d+$")


def _is_cell_name(name):
    return name.split(".", 1)[0] in CELL_PREFIXES


class DumpScope:
    """The stateful filter; `build` returns None when neither `scope` nor `list` is set."""

    def __init__(self, kind, scope, names):
        self.kind = kind  # "api", "cell" or "mix"
        self.start, self.end = (scope[0], scope[1]) if scope else (None, None)
        self.names = list(names)
        self.in_range = False
        self.in_list = False
        self.list_cells = set()  # open Cells whose name matched `list` (mix)

    @classmethod
    def build(cls, scope, names, level):
        scope = list(scope or [])
        names = list(names or [])
        if not scope and not names:
            return None
        for s in names:
            if not isinstance(s, str):
                raise ConfigError(f"'list' entries must be strings, got {type(s).__name__}")
        if scope and len(scope) != 2:
            raise ConfigError(f"'scope' must name 2 entries [start, end], got {len(scope)}")
        for s in scope:
            if not isinstance(s, str):
                raise ConfigError(f"'scope' entries must be strings, got {type(s).__name__}")
            api, cell = bool(_API_NAME.match(s)), bool(_CELL_NAME.match(s))
            if level == "L1" and not api:
                raise ConfigError(f"scope entry {s!r} is not a full API name (level L1)")
            if level == "L0" and not cell:
                raise ConfigError(f"scope entry {s!r} is not a full Cell name (level L0)")
            if level == "mix" and not (api or cell):
                raise ConfigError(f"scope entry {s!r} is not a full API or Cell name")
        if level == "mix":
            return cls("mix", scope, names)
        if not scope:
            return cls("api", scope, names)
        cells = [_is_cell_name(s) for s in scope]
        if not any(cells):
            return cls("api", scope, names)
        if all(cells):
            return cls("cell", scope, names)
        raise ConfigError(f"scope {scope} mixes API and Cell names (only level mix allows it)")

    def _listed(self, name):
        return not self.names or any(s in name for s in self.names)

    def check(self, name):
        """Whether the entry `name` is collected at this collect point."""
        if self.kind == "cell":
            return (self.start is None or self.in_range) and self._listed(name)
        if self.start is not None and name == self.start:
            self.in_range = True
        keep = False
        if self.start is None or self.in_range:
            keep = (self.kind == "mix" and self.in_list) or self._listed(name)
        if self.start is not None and name == self.end:
            self.in_range = False
        return keep

    def begin_cell(self, name):
        """A Cell's forward or backward starts (its pre-hook)."""
        if self.kind == "api":
            return
        if self.start is not None and name == self.start:
            self.in_range = True
        if self.kind == "mix" and any(s in name for s in self.names):
            self.in_list = True
            self.list_cells.add(name)

    def end_cell(self, name):
        """A Cell's forward or backward ends (its hook)."""
        if self.kind == "api":
            return
        if self.start is not None and name == self.end:
            self.in_range = False
        if self.kind == "mix":
            self.list_cells.discard(name)
            if not self.list_cells:
                self.in_list = False
