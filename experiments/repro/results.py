# SPDX-License-Identifier: Apache-2.0
"""The CSVs: one per experiment, one row per finished cell (its settings,
the trainer's results and the context of the run), and the summaries the
reports and plots make of them."""
import csv
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# The settings that identify a cell; a row whose settings equal a cell's is
# that cell's result, which is how a rerun resumes. policy, mix, holdout
# (the echo stage's choice of what to echo, its share of uniform picks, and
# the trainer's --holdout) and pinned (the network's CPU pinning) came
# later: empty in every older row and cell, so old rows still match.
SETTINGS = ["experiment", "variant", "model", "source", "echo", "echo_at",
            "e", "shuffle", "batch", "lr", "warmup", "seed", "target_acc",
            "max_fresh", "eval_every", "R", "threads", "policy", "mix",
            "holdout", "pinned"]
# echo_policy .. holdout_accuracy: from trainers that feed losses back to
# the echo stage (empty when the JSON has no such key); holdout_records is
# the JSON's "holdout", the records it held out. The holdout columns come
# from RHO-LOSS runs (policy=reducible), retired since: kept so old rows
# read back, empty in new ones.
RESULTS = ["reached", "diverged", "fresh_to_target", "steps_to_target",
           "time_to_target_s", "eval_time_s", "train_time_s", "fresh",
           "steps", "final_accuracy", "train_examples_per_s",
           "consumer_wait_fraction", "echo_effective_factor",
           "echo_r_estimate", "echo_policy", "feedback_values",
           "holdout_records", "holdout_time_s", "holdout_accuracy"]
# results that older trainers do not report
OPTIONAL_RESULTS = {"echo_policy": "echo_policy",
                    "feedback_values": "feedback_values",
                    "holdout_records": "holdout",
                    "holdout_time_s": "holdout_time_s",
                    "holdout_accuracy": "holdout_accuracy"}
# train_spec: the training pipeline of a cell that passes its own --spec
# (the network's; its port written as PORT), so a row says what it ran.
CONTEXT = ["upstream_rate", "limit_rate_bytes", "calibrated_rate",
           "train_spec", "commit", "date", "wall_s"]
COLUMNS = SETTINGS + RESULTS + CONTEXT


def die(msg):
    sys.exit("reproduce.py: " + msg)


def fmt(x):
    """Settings as text, the same way whether fresh or read back from CSV."""
    if isinstance(x, float):
        if not math.isfinite(x) or x != int(x):
            return repr(x)
        return str(int(x))
    return "" if x is None else str(x)


def key_of(row, settings=SETTINGS):
    """The settings that identify a cell, as text; an experiment with
    columns of its own (SETTINGS in its module: the language model's)
    passes them."""
    return tuple(fmt(row.get(k)) for k in settings)


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def append_row(path, row, columns=COLUMNS):
    new = not os.path.exists(path)
    if not new:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != columns:
            # written by an older reproduce.py: rewrite it with today's
            # columns (new ones empty) before appending
            old = read_csv(path)
            with open(path + ".tmp", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=columns,
                                   extrasaction="ignore")
                w.writeheader()
                w.writerows(old)
            os.replace(path + ".tmp", path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({k: fmt(row.get(k)) for k in columns})
        f.flush()
        os.fsync(f.fileno())  # a killed run loses at most the current cell


# ---- where results are read and written -------------------------------------

def results_dir(a):
    return a.results or os.path.join(ROOT, "experiments", "results-quick" if
                                      a.quick else "results")


def report_dir(a):
    """Where report and plot write: docs/ for the full run's default
    results, beside the CSVs for any other (quick) results, so quick figures
    never overwrite the reproduction's."""
    if a.quick or a.results:
        return results_dir(a)
    return os.path.join(ROOT, "docs")


def load(a, name):
    return read_csv(os.path.join(results_dir(a), name + ".csv"))


# ---- summaries -------------------------------------------------------------

def reached_value(r, col):
    return float(r[col]) if r["reached"] == "1" else math.inf


def summary(values):
    """Median and range of per-seed values, a run that never reached the
    target counting as infinitely slow (so a median is 'not reached' when
    half or more did not reach it)."""
    v = sorted(values)
    if not v:
        return None
    n = len(v)
    med = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return med, v[0], v[-1], sum(1 for x in v if x < math.inf), n


def groups(rows, keys):
    g = {}
    for r in rows:
        g.setdefault(tuple(r[k] for k in keys), []).append(r)
    return g


def num(x, digits=0):
    if x == math.inf:
        return "not reached"
    return "{:,.{}f}".format(x, digits)


def ekey(e):
    return (0, float(e)) if e != "auto" else (1, 0.0)


def best_lr(rs):
    """The rows of one cell at its best learning rate: the lowest median
    fresh examples to target, the smaller lr on a tie; and that lr."""
    cand = [(summary([reached_value(r, "fresh_to_target") for r in v])[0],
             float(lr), v) for (lr,), v in groups(rs, ["lr"]).items()]
    med, lr, v = min(cand, key=lambda c: (c[0], c[1]))
    return v, fmt(lr)
