# SPDX-License-Identifier: Apache-2.0
"""The experiments, in the order they run and appear in RESULTS.md. Each
module has NAME, TITLE, PAPER (what of the paper it compares with),
cells(quick), report(rows, run_cmd) -> lines, and may have plot(rows,
work, img) -> paths and setup(binary, out_dir, work) -> the environment
its cells run in (see cells.train_args)."""
from . import (augment, batch, detection, fresh, lm, network,
               network_pinned, policy, policy_cnn, shuffle)

ALL = [fresh, policy, augment, policy_cnn, batch, shuffle, network,
       network_pinned, lm, detection]
BY_NAME = {m.NAME: m for m in ALL}
NAMES = [m.NAME for m in ALL]
