# SPDX-License-Identifier: Apache-2.0
"""Echo shuffle buffer at e = 4 (the paper's Figure 7): the MLP with the
echoed copies shuffled over 0, 1000 or 10000 items."""
from .batch import by_setting
from .cells import cell, example_echo, quick_mlp, seeds

NAME = "shuffle"
TITLE = "Echo shuffle buffer at e = 4 (MLP)"
PAPER = "the paper's Figure 7"


def cells(quick):
    bufs = [0, 10000] if quick else [0, 1000, 10000]
    t = quick_mlp(quick)
    return [cell(NAME, "example", e=4, shuffle=s, seed=seed,
                 echo=example_echo(4, s), echo_at="before-augment", **t)
            for seed in seeds(quick) for s in bufs]


def report(rows, run_cmd):
    return by_setting(rows, "shuffle", ["variant", "shuffle buffer"],
                      run_cmd)

