# SPDX-License-Identifier: Apache-2.0
"""Batch size at e = 4 (the paper's Figure 6): the MLP at batch 32, 128 and
512, without echo, with example echoing and with batch echoing."""
from .cells import ECHO_SHUFFLE, cell, example_echo, quick_mlp, seeds
from .render import cell_summary, section, table
from .results import groups

NAME = "batch"
TITLE = "Batch size at e = 4 (MLP)"
PAPER = "the paper's Figure 6"


def cells(quick):
    sizes = [32, 512] if quick else [32, 128, 512]
    t = quick_mlp(quick)
    out = []
    for seed in seeds(quick):
        for b in sizes:
            out.append(cell(NAME, "none", batch=b, seed=seed, **t))
            out.append(cell(NAME, "example-shuffled", e=4, batch=b,
                            seed=seed, echo=example_echo(4, ECHO_SHUFFLE),
                            echo_at="before-augment", shuffle=ECHO_SHUFFLE,
                            **t))
            out.append(cell(NAME, "batch", e=4, batch=b, seed=seed,
                            echo="factor=4", echo_at="batch", **t))
    return out


def by_setting(rows, key, header, run_cmd):
    """One table of fresh examples to target per variant and one numeric
    setting (key; header names the two columns); shuffle uses it too."""
    out = []
    for k, rs in sorted(groups(rows, ["variant", key]).items(),
                        key=lambda kv: (kv[0][0], int(kv[0][1] or 0))):
        m, rng, n, _ = cell_summary(rs, "fresh_to_target")
        out.append(list(k) + [m, rng, n])
    t = rows[0]
    lines = []
    section(lines, "lr %s, target %s, cap %s" % (
        t["lr"], t["target_acc"], t["max_fresh"]), run_cmd,
        table(header + ["fresh to target (median)", "range", "reached"],
              out))
    return lines


def report(rows, run_cmd):
    return by_setting(rows, "batch", ["variant", "batch"], run_cmd)
