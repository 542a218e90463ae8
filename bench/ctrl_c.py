# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C in a training loop over a torch DataLoader, as it is and wrapped
in echoflow.torch.echo(): how long from the signal to KeyboardInterrupt in
the loop, and to the end of the process.

    PYTHONPATH=build/python /usr/bin/python3 bench/ctrl_c.py [--reps 5]
        [--json]

Each run starts a child process in a session of its own: a DataLoader of
2 workers over a dataset whose items take 50 ms (a slow file system), 16
to a batch, and a loop that takes 2 ms a step. Once the loop has had 3
batches, SIGINT goes to the child's whole process group, as Ctrl-C in a
terminal sends it (the workers get it too). Times are the medians over
--reps runs of each kind, measured in one invocation; they move with the
machine's load, so compare the two kinds side by side.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

CHILD = r'''
import sys, time, warnings
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.zeros(3, 32, 32), i % 10

warnings.simplefilter("ignore")  # the shuffle fill's, here on purpose
loader = DataLoader(Slow(), batch_size=16, num_workers=2)
if sys.argv[1] == "echo":
    from echoflow.torch import echo
    loader = echo(loader, max=4)
try:
    for step, (x, y) in enumerate(loader):
        if step == 2:
            print("ready", flush=True)
        time.sleep(0.002)
except KeyboardInterrupt:
    print("interrupted %.6f" % time.time(), flush=True)
    sys.exit(1)
'''


def one_run(kind):
    """(seconds to KeyboardInterrupt, seconds to exit) after the signal."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, kind],
                             stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        for line in child.stdout:
            if line.startswith("ready"):
                break
        else:
            raise RuntimeError("%s: the child ended before its third batch"
                               % kind)
        time.sleep(0.2)
        sent = time.time()
        os.killpg(child.pid, signal.SIGINT)
        interrupted = None
        for line in child.stdout:
            if line.startswith("interrupted"):
                interrupted = float(line.split()[1]) - sent
        child.wait(timeout=120)
        ended = time.time() - sent
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    if interrupted is None:
        raise RuntimeError("%s: no KeyboardInterrupt reached the loop" % kind)
    return interrupted, ended


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {}
    for kind in ("dataloader", "echo"):
        runs = [one_run(kind) for _ in range(args.reps)]
        out[kind] = {
            "to_interrupt_s": statistics.median(r[0] for r in runs),
            "to_exit_s": statistics.median(r[1] for r in runs),
            "runs": runs}
    if args.json:
        print(json.dumps(out))
        return
    print("%-12s %18s %12s" % ("loop over", "to interrupt (ms)",
                               "to exit (s)"))
    for kind, r in out.items():
        print("%-12s %18.1f %12.2f" % (kind, r["to_interrupt_s"] * 1e3,
                                       r["to_exit_s"]))


if __name__ == "__main__":
    main()
