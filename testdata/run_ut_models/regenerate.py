"""Regenerates the msprobe side of the real-model replay test (capture/python_tests/
test_run_ut_models.py): for each model family and each capturing tool, one training step is
dumped with capture/python_tests/hf_model.py and msprobe 26.2's acc_check replays the dump on the
CPU (testdata/fixtures/msprobe-26.2.0-cpu/scripts/acc_check_cpu.py). Kept per case in
`{family}-{tool}/`: the dump.json the CSVs were made from (the test checks that its own capture
gives the same API entries) and msprobe's accuracy_checking_result/details CSVs.

msprobe's replay takes minutes per dump, so the test replays only with numprobe and compares
with these files.

usage: PYTHONPATH=<numprobe package> python testdata/run_ut_models/regenerate.py [CASE ...]
       (needs torch, transformers 5.24.0, msprobe 26.2.0 and numprobe; about 10 minutes)
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(REPO, "capture", "python_tests", "hf_model.py")
ACC_CHECK = os.path.join(REPO, "testdata", "fixtures", "msprobe-26.2.0-cpu", "scripts", "acc_check_cpu.py")
# (family, dump task); each is captured by both tools.
FAMILIES = (("llama", "tensor"), ("bert", "statistics"), ("gpt2", "statistics"))
TOOLS = ("msprobe", "numprobe")


def regenerate(family, task, tool):
    case = f"{family}-{tool}"
    dest = os.path.join(HERE, case)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, MODEL, "--family", family, "--tool", tool, "--task", task,
                        "--dump-path", os.path.join(tmp, "dump")], check=True, cwd=tmp)
        (dump_json,) = glob.glob(os.path.join(tmp, "dump", "step0", "*", "dump.json"))
        out = os.path.join(tmp, "acc_check")
        os.makedirs(out)
        subprocess.run([sys.executable, ACC_CHECK, "-api_info", dump_json, "-o", out], check=True, cwd=tmp)
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        shutil.copy(dump_json, os.path.join(dest, "dump.json"))
        for path in glob.glob(os.path.join(out, "accuracy_checking_*.csv")):
            shutil.copy(path, dest)
    print(f"{case}: written to {dest}", file=sys.stderr)


def main():
    wanted = set(sys.argv[1:])
    for family, task in FAMILIES:
        for tool in TOOLS:
            if not wanted or f"{family}-{tool}" in wanted:
                regenerate(family, task, tool)


if __name__ == "__main__":
    main()
