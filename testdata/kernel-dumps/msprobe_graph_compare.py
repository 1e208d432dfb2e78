"""Runs msprobe 26.2's graph-mode comparator (GraphMSComparator, what `msprobe compare --rank`
runs) where MindSpore is not installed: every `mindspore` import resolves to an inert module.
The comparator itself is pandas and numpy and never calls MindSpore; msprobe's package imports
MindSpore on the way to it.

Usage: python msprobe_graph_compare.py TARGET GOLDEN OUT RANK"""
import concurrent.futures, importlib.abc, importlib.machinery, sys, types  # noqa: F401 (MindSpore imports futures; msprobe relies on it)


class _Meta(type):
    """A class whose every attribute, call and subscript is another such class."""
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(name)
    def __call__(cls, *a, **k):
        return _make("call")
    def __getitem__(cls, k):
        return _make("item")
    def __or__(cls, o):
        return _make("or")
    __ror__ = __or__
    def __iter__(cls):
        return iter(())


def _make(name):
    return _Meta(name, (), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(name)

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "mindspore" or name.startswith("mindspore."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        m.__spec__ = spec
        m.__version__ = "2.7.1"
        return m
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Finder())
from argparse import Namespace
from msprobe.mindspore.compare.distributed_compare import ms_graph_compare
t, g, o, rank = sys.argv[1:5]
ms_graph_compare(Namespace(output_path=o, target_path=t, golden_path=g, xlsx=False, rank=rank, step=None))
