# SPDX-License-Identifier: Apache-2.0
"""Choosing what to echo (MLP): instead of echoing every fresh item
exactly e times (uniform, the paper's echoing), the echo stage spends the
same budget (e - 1 echoes per fresh item on average) on a pool of the most
recent fresh items, picked by a priority fed back from the trainer's
per-example losses (loss, rank, improvement, reducible), optionally
tempered toward uniform picks (mix). Only rank earned a place: the others
are RETIRED, reported from their rows but no longer run. Measured as in the fresh experiment:
fresh examples to 88%, per echo factor, at the best lr of a grid.

The grid is large (9 variants, 3 factors, 3 learning rates, 5 seeds); run
it in parts with `run --only policy --variants .. --lrs .. --es ..
--seeds ..`: a cell already in the CSV is never rerun, and the report uses
whatever part of the grid is there."""
import math
import os

from .cells import ECHO_SHUFFLE, cell, quick_mlp
from .network import PAPER_SPEEDUP
from .render import cell_summary, gnuplot, section, table, write_points
from .results import best_lr, ekey, fmt, groups, num, reached_value, summary

NAME = "policy"
TITLE = "Choosing what to echo (MLP)"
PAPER = "the paper's uniform echoing and its 3.25x headline"
AIM = 1.25  # the aim: uniform echoing needs >= 1.25x the policy's fresh

# The policy the CNN and pinned-network experiments run beside uniform
# echoing: a variant name of VARIANTS. Set it from the MLP's results (the
# variant with the highest uniform / policy ratio at the best lr). rank,
# from the screen at lr 0.03: 100k against uniform's 120k fresh examples at
# e = 4, 70k against 170k at e = 8 (medians of 5 seeds).
BEST_POLICY = "rank"

# The recent fresh items a policy picks its echoes from.
POOL = 10000
# The policy's pool with every pick made as uniform echoing makes them (mix=1:
# the least-echoed first): the control that separates the pool mechanism
# (echoes drawn from recent items, each at most max times) from the
# priorities. It must need what uniform echoing needs.
CONTROL = "pool-uniform"

# variant: (policy, mix); "none" and "uniform" are the baselines
VARIANTS = {"uniform": ("", ""),
            CONTROL: ("loss", 1),
            "loss": ("loss", ""),
            "rank": ("rank", ""),
            "reducible": ("reducible", ""),
            "improvement": ("improvement", ""),
            "rank-mix0.5": ("rank", 0.5),
            "reducible-mix0.5": ("reducible", 0.5)}
ORDER = ["none"] + list(VARIANTS)
# Retired from the product after this experiment (commit b2a929c, "echo:
# only rank earns a place among the policies"): rows kept, cells no longer
# run. The echo stage now refuses policy=loss, improvement and reducible
# (the control ran as policy=loss,mix=1), and the trainer --holdout; the
# report still shows their rows, the policies that lost.
RETIRED = {"loss", "improvement", "reducible", "reducible-mix0.5", CONTROL}
assert RETIRED <= set(VARIANTS), RETIRED
assert BEST_POLICY in VARIANTS and BEST_POLICY != "uniform", BEST_POLICY
assert BEST_POLICY not in RETIRED, BEST_POLICY
# --holdout of the (retired) reducible policy's rows: training records held
# out to train the small irreducible-loss model, so those cells trained on
# 50,000 records, not 60,000; for the report's text only
HOLDOUT = 10000


def max_per_item(e):
    """Each pooled item is emitted at most this many times."""
    return max(8, 2 * math.ceil(float(e)))


def policy_echo(e, variant, factor=None):
    """The --echo options of variant at echo factor e (factor: the factor
    option's text when it is not e, e.g. "auto,max=8")."""
    policy, mix = VARIANTS[variant]
    f = factor or fmt(e)
    if not policy:
        return "factor=%s,shuffle=%d" % (f, ECHO_SHUFFLE)
    opts = "factor=%s,policy=%s,pool=%d" % (f, policy, POOL)
    if factor is None:
        opts += ",max=%d" % max_per_item(e)
    if mix != "":
        opts += ",mix=%s" % fmt(mix)
    return opts + ",shuffle=%d" % ECHO_SHUFFLE


def policy_cell(experiment, variant, e, factor=None, **kw):
    """A cell of variant at echo factor e, echoing before augmentation
    (factor: as policy_echo's)."""
    if variant == "none":
        return cell(experiment, "none", **kw)
    if variant in RETIRED:
        raise ValueError("variant %s is retired: its rows are kept, its "
                         "cells no longer run" % variant)
    policy, mix = VARIANTS[variant]
    return cell(experiment, variant, e=e,
                echo=policy_echo(e, variant, factor),
                echo_at="before-augment", shuffle=ECHO_SHUFFLE,
                policy=policy or "uniform", mix=mix, **kw)


def cells(quick):
    es = [2, 4] if quick else [2, 4, 8]
    lrs = [0.03] if quick else [0.01, 0.02, 0.03]
    seeds = [0] if quick else [0, 1, 2, 3, 4]
    t = quick_mlp(quick)
    out = []
    for seed in seeds:
        for lr in lrs:
            out.append(policy_cell(NAME, "none", 1, seed=seed, lr=lr, **t))
            for e in es:
                for v in VARIANTS:
                    if v not in RETIRED:
                        out.append(policy_cell(NAME, v, e, seed=seed, lr=lr,
                                               **t))
    return out


# ---- report -----------------------------------------------------------------

def vkey(v):
    return (ORDER.index(v), v) if v in ORDER else (len(ORDER), v)


def at_best_lr(rows, seeds=None):
    """A cell's rows at its best lr (of the lrs it has), restricted to
    seeds; and that lr, and how many lrs it had."""
    if seeds is not None:
        rows = [r for r in rows if r["seed"] in seeds]
    if not rows:
        return None, None, 0
    v, lr = best_lr(rows)
    return v, lr, len({r["lr"] for r in rows})


def median_fresh(rows):
    return summary([reached_value(r, "fresh_to_target") for r in rows])[0]


def ratio(a, b):
    """a / b as text, for medians that may be 'not reached'."""
    if a == math.inf and b == math.inf:
        return "-"
    if b == math.inf:
        return "< 1 (not reached)"
    if a == math.inf:
        return "> 1 (baseline not reached)"
    return "%.2fx" % (a / b)


def worth(n1, ne, e):
    """What an echo was worth in fresh examples: (N1 / Ne - 1) / (e - 1)."""
    if n1 == math.inf or ne == math.inf:
        return "-"
    return "%.2f" % ((n1 / ne - 1) / (float(e) - 1))


def fresh_table(rows):
    """Per (variant, e): fresh to target at the best lr, the echo's worth
    against no echo, and uniform / policy; the rows for the tables."""
    by = groups(rows, ["variant", "e"])
    base_rows = [r for r in rows if r["variant"] == "none"]
    uni = {e: rs for (v, e), rs in by.items() if v == "uniform"}
    best, worths = [], []
    for (v, e), rs in sorted(by.items(),
                             key=lambda kv: (vkey(kv[0][0]), ekey(kv[0][1]))):
        vr, lr, nlr = at_best_lr(rs)
        m, rng, n, val = cell_summary(vr, "fresh_to_target")
        best.append([v, "-" if v == "none" else e, "%s (of %d)" % (lr, nlr),
                     m, rng, n])
        if v == "none":
            continue
        seeds = {r["seed"] for r in vr}
        b, blr, _ = at_best_lr(base_rows, seeds)
        n1 = median_fresh(b) if b else None
        u, ulr, _ = at_best_lr(uni.get(e, []), seeds)
        nu = median_fresh(u) if u else None
        worths.append([
            v, e, "%d" % len(seeds), m,
            "-" if n1 is None else "%s (lr %s)" % (num(n1), blr),
            "-" if n1 is None else ratio(n1, val),
            "-" if n1 is None else worth(n1, val, e),
            "-" if nu is None or v == "uniform" else
            "%s (lr %s)" % (num(nu), ulr),
            "-" if nu is None or v == "uniform" else ratio(nu, val)])
    return best, worths


def lead(rows, what):
    t = rows[0]
    vs = {r["variant"] for r in rows}
    text = ("%s Target %s, cap %s fresh examples, echoing before "
            "augmentation; the policies pick their echoes from the %s most "
            "recent fresh items, each emitted at most max(8, 2 ceil(e)) "
            "times, the copies shuffled over %s items as uniform echoing's "
            "are." % (what, t["target_acc"], t["max_fresh"], num(POOL),
                      num(ECHO_SHUFFLE)))
    if CONTROL in vs:
        text += (" `%s` is `policy=loss,mix=1`: the same pool with every "
                 "pick made the uniform way (the least-echoed first), a "
                 "control that must match uniform echoing." % CONTROL)
    if any(r.get("holdout") for r in rows):
        text += (" The reducible policy's cells held out %s training "
                 "records (`--holdout`) for their irreducible-loss model, so "
                 "they trained on fewer distinct records than the others." %
                 num(HOLDOUT))
    retired = [v for v in ORDER if v in RETIRED and v in vs]
    if retired:
        text += (" %s: retired from the product after this experiment, "
                 "their rows kept here, their cells no longer run." %
                 ", ".join("`%s`" % v for v in retired))
    return text


def worth_text():
    return ("What an echo was worth = (N_1 / N_e - 1) / (e - 1), with N_1 "
            "the fresh examples to target without echo (median of the same "
            "seeds, at the baseline's own best lr) and N_e with echo: 1 "
            "means an echo was worth a fresh example, 0 nothing. uniform / "
            "policy = the fresh examples uniform echoing needed at the same "
            "e (its best lr, the same seeds) over the policy's; above 1 the "
            "policy needed fewer (the aim is %.2fx or more). For context, "
            "the paper's headline is %.2fx less wall time from uniform "
            "echoing (ResNet-50 on ImageNet over a network), a ratio of "
            "times against no echo, not of fresh examples between two kinds "
            "of echoing." % (AIM, PAPER_SPEEDUP))


def report(rows, run_cmd, picture="img/policy_fresh_vs_e.png"):
    lines = ["", lead(rows, "Medians over seeds at each cell's best "
                      "learning rate among those run (the grid is %s)." %
                      ", ".join(sorted({r["lr"] for r in rows}, key=float)))]
    best, worths = fresh_table(rows)
    section(lines, "Fresh examples to target, best lr per cell", run_cmd,
            table(["variant", "e", "best lr (of lrs run)",
                   "fresh to target (median)", "range", "reached"], best))
    if worths:
        lines += ["", worth_text()]
        section(lines, "What an echo was worth, and uniform / policy",
                run_cmd, table(
                    ["variant", "e", "seeds", "fresh to target (median)",
                     "no echo (median, best lr)", "no echo / echo",
                     "worth of an echo", "uniform (median, best lr)",
                     "uniform / policy", "paper's headline"],
                    [w + ["%.2fx" % PAPER_SPEEDUP] for w in worths]))
    if picture:
        lines += ["", "![fresh examples against e per variant, best lr per "
                  "point](%s)" % picture]
    return lines


def plot_lines(rows, work, img, name, title):
    points = {}
    for (variant, e), rs in groups(rows, ["variant", "e"]).items():
        rs, _ = best_lr(rs)
        points[variant, e] = summary([reached_value(r, "fresh_to_target")
                                      for r in rs])
    base = points.get(("none", "1"))
    plots = []
    for variant in sorted({v for v, _ in points if v != "none"}, key=vkey):
        path = os.path.join(work, "%s-%s.dat" % (name, variant))
        line = sorted((float(e), s) for (v, e), s in points.items()
                      if v == variant)
        if base:
            line.insert(0, (1.0, base))  # no echo is e = 1 of each
        write_points(path, [("%g" % e, s) for e, s in line])
        plots.append("'%s' using 1:2:3:4 with yerrorlines title '%s'" %
                     (path, variant))
    if not plots:
        return []
    if base and base[0] < math.inf:
        plots.append("%g with lines dashtype 2 lc 'black' title "
                     "'no echo (median)'" % base[0])
    out = os.path.join(img, name)
    xmax = max(float(e) for _, e in points) + 0.2
    gnuplot("""set terminal png size 900,500
set output '%s'
set title '%s to %s%%, best lr per point (median, range over seeds)'
set xlabel 'echo factor e'
set ylabel 'fresh examples to target'
set xrange [0.8:%g]
set yrange [0:*]
set key outside right
set grid
plot %s
""" % (out, title, num(100 * float(rows[0]["target_acc"]), 0), xmax,
            ", ".join(plots)))
    return [out]


def plot(rows, work, img):
    return plot_lines(rows, work, img, "policy_fresh_vs_e.png",
                      "MLP on Fashion-MNIST, what to echo:")
