"""Regenerates the statistics-mode kernel dumps stat_f32, stat_f32_noisy and stat_f16.

Each is the tensor dump beside it (net_f32, net_f32_noisy, net_f16, MindSpore 2.7.1 on CPU) put
through the second half of numprobe's CPU statistics task: every iteration folder's tensor files
summarized into MindSpore's statistic.csv (max, min, avg, l2norm) by
numprobe._native.kernel_statistics, the tensors removed. That is what
numprobe.mindspore.PrecisionDebugger(task="statistics", level="L2") does after each step on a
CPU, where MindSpore refuses statistic dumps.

Run with a Python that has numprobe's package (built from capture/):
  PYTHONPATH=/tmp/np-site python make_statistic_dumps.py
capture/tests/kernel_stat_dumps.rs checks the recorded trees against a fresh summary.
"""
import os
import shutil

from numprobe._native import kernel_statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    for src, dst in [("net_f32", "stat_f32"), ("net_f32_noisy", "stat_f32_noisy"),
                     ("net_f16", "stat_f16")]:
        out = os.path.join(HERE, dst)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(os.path.join(HERE, src), out)
        for root, dirs, files in os.walk(os.path.join(out, "rank_0")):
            dirs[:] = [d for d in dirs if d != "execution_order" and not d.startswith(".")]
            if any(f.endswith(".npy") for f in files):
                kernel_statistics(root)


if __name__ == "__main__":
    main()
