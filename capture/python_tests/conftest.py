"""Settings for the whole suite."""
import os

# The suite's captures use a torch reader that is already built but never start a background
# build of one (the default, `auto`, would compile one beside the tests on a machine without
# it, and later tests would then run another way than earlier ones). The tests of that build
# set the knob themselves.
os.environ.setdefault("NUMPROBE_TORCH_SHIM", "1")
