# SPDX-License-Identifier: Apache-2.0
"""Choosing what to echo on the CNN with random crop and flip, echoing
before augmentation: uniform echoing against the MLP's best policy
(policy.BEST_POLICY), at the augment experiment's settings."""
from .policy import BEST_POLICY, fresh_table, lead, policy_cell, worth_text
from .render import section, table

NAME = "policy-cnn"
TITLE = "Choosing what to echo (CNN, random crop and flip)"
PAPER = "the paper's Figure 5 (echoing before augmentation)"


def settings(quick):
    # augment.py's: lr 0.05 after a 400-step warm-up, 89% within 300k fresh
    # examples (quick: lr 0.01, 75% within 20k)
    return dict(model="cnn", lr=0.01, target_acc=0.75, max_fresh=20000,
                eval_every=5000) if quick else \
        dict(model="cnn", lr=0.05, warmup=400, target_acc=0.89,
             max_fresh=300000, eval_every=20000)


def cells(quick):
    es = [2] if quick else [2, 4]
    t = settings(quick)
    out = []
    for seed in [0] if quick else [0, 1, 2]:
        out.append(policy_cell(NAME, "none", 1, seed=seed, **t))
        for e in es:
            for v in ["uniform", BEST_POLICY]:
                out.append(policy_cell(NAME, v, e, seed=seed, **t))
    return out


def report(rows, run_cmd):
    t = rows[0]
    warm = " after a %s-step warm-up" % t["warmup"] if t.get("warmup") else ""
    lines = ["", lead(rows, "One learning rate, %s%s (the augment "
                      "experiment's); medians over seeds." % (t["lr"], warm))]
    best, worths = fresh_table(rows)
    section(lines, "Fresh examples to target", run_cmd,
            table(["variant", "e", "lr", "fresh to target (median)", "range",
                   "reached"], [[b[0], b[1], b[2].split(" ")[0]] + b[3:]
                                for b in best]))
    if worths:
        lines += ["", worth_text()]
        section(lines, "What an echo was worth, and uniform / policy",
                run_cmd, table(
                    ["variant", "e", "seeds", "fresh to target (median)",
                     "no echo (median)", "no echo / echo",
                     "worth of an echo", "uniform (median)",
                     "uniform / policy"],
                    [[x.split(" (lr")[0] for x in w] for w in worths]))
    return lines
