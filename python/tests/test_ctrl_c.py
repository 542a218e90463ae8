# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C in a loop over echoflow.torch.echo(DataLoader): the loop gets
KeyboardInterrupt at once and the process ends about when the DataLoader's
alone would. bench/ctrl_c.py measures both kinds side by side (and exactly,
with --reps); here one run of each, with bounds loose enough for a loaded
machine: they catch an exit that waits out the DataLoader's 5 s poll."""
import json
import os
import subprocess
import sys

from conftest import ROOT


def test_ctrl_c_reaches_the_loop_at_once_and_exit_keeps_the_dataloaders_pace():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ctrl_c.py"),
                        "--reps", "1", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    plain, echoed = got["dataloader"], got["echo"]
    assert echoed["to_interrupt_s"] < 1.0, got
    assert echoed["to_exit_s"] < plain["to_exit_s"] + 2.0, got
