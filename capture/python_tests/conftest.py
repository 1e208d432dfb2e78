"""Settings for the whole suite."""
import atexit
import os
import shutil
import tempfile

# The suite runs the same way whatever this machine's numprobe cache holds: its captures look
# for a torch reader in a folder of their own (empty: tensors are read through Python, as
# test_dlpack_walk.py counts) and never start a background build of one (the default, `auto`,
# would compile one beside the tests). The tests of the reader and of that build
# (test_torch_shim.py) set both knobs themselves.
os.environ["NUMPROBE_CACHE_DIR"] = tempfile.mkdtemp(prefix="numprobe-test-cache-")
atexit.register(shutil.rmtree, os.environ["NUMPROBE_CACHE_DIR"], True)
os.environ["NUMPROBE_TORCH_SHIM"] = "1"
