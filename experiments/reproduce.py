#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reproduces the experiments of Choi et al. (2019), "Faster Neural Network
Training with Data Echoing", with `echoflow train --json`.

Every run ("cell") is one `echoflow train` invocation with its settings;
settings and results go to one CSV per experiment, so no figure is ever
typed by hand, and a cell already in its CSV is not run again (resume after
an interruption by running the same command).

  reproduce.py run [--quick] [--only EXP[,EXP]] [--build DIR] [--out DIR]
                   [--variants V[,V]] [--lrs LR[,LR]] [--es E[,E]]
                   [--seeds 0-4|S[,S]]    # only the cells these select
  reproduce.py run --smoke --out DIR     # one short MLP cell (the ctest)
  reproduce.py plot [--quick]            # gnuplot PNGs into docs/img/
  reproduce.py report [--quick]          # docs/RESULTS.md from the CSVs

The work is done by the package beside this file (repro/). Python 3
standard library only; the language-model experiment (lm) also needs
torch, numpy and sentencepiece, and the detection experiment (detection)
torch, numpy and PIL, loaded only when they run.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from repro.commands import cmd_plot, cmd_report, cmd_run  # noqa: E402
from repro.experiments import NAMES  # noqa: E402
from repro.results import ROOT  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the cells not yet in the CSVs")
    r.add_argument("--quick", action="store_true",
                   help="a small subset of every experiment (minutes)")
    r.add_argument("--smoke", action="store_true",
                   help="one short MLP cell (for the test)")
    r.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="single-threaded cells run this many at a time "
                   "(default: the number of CPUs)")
    r.add_argument("--only", help="experiments, comma-separated: " +
                   ", ".join(NAMES))
    r.add_argument("--variants", help="only cells of these variants, "
                   "comma-separated (e.g. none,uniform,rank)")
    r.add_argument("--lrs", help="only cells at these learning rates "
                   "(e.g. 0.03)")
    r.add_argument("--es", help="only echo cells at these echo factors "
                   "(e.g. 2,4); cells without echo are kept")
    r.add_argument("--seeds", help="only cells of these seeds (e.g. 0-4 or "
                   "0,2)")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--out", help="results directory (default "
                   "experiments/results or results-quick)")
    for name, h in [("plot", "PNGs into docs/img/"),
                    ("report", "docs/RESULTS.md from the CSVs")]:
        p = sub.add_parser(name, help=h)
        p.add_argument("--quick", action="store_true",
                       help="from experiments/results-quick")
        p.add_argument("--results", help="results directory")
    a = ap.parse_args()
    return {"run": cmd_run, "plot": cmd_plot, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
