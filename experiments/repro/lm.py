# SPDX-License-Identifier: Apache-2.0
"""Language modelling (the paper's Transformer on LM1B and Common Crawl,
small): a 2-layer causal Transformer trained on WordNet's glosses, fed by
echoflow.torch.Loader from a token file, without echo, with example
echoing (e = 2, 4: echo before batch, copies shuffled over ECHO_SHUFFLE
blocks) and with batch echoing (e = 2: echo after batch), 3 seeds, a
grid of learning rates (best per condition by median), measured in fresh
tokens to a validation loss.

Its cells are not `echoflow train` runs: each is one `lm_train.py`
process (PyTorch, one thread), so the module has its own CSV columns
(SETTINGS, COLUMNS) and run_cell; setup() builds the corpus, the
SentencePiece model and the token files (lm_data.py) in the run's
temporary directory, the same files on every run.

Needs Debian's python3-torch, python3-numpy, python3-sentencepiece and
wordnet-base, and the Python package built (build/python)."""
import math
import os
import sys
import time

from .cells import ECHO_SHUFFLE, run_torch_trainer
from .policy import ratio, worth
from .render import gnuplot, section, table
from .results import (die, ekey, fmt, groups, num, reached_value,
                      summary)

NAME = "lm"
TITLE = "Language modelling (Transformer on WordNet glosses)"
PAPER = "the paper's Transformer on LM1B and Common Crawl"

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(HERE, "lm_train.py")
PYTHON = "/usr/bin/python3"  # Debian's, with Debian's torch

# The model and its data: small enough for a cell to take a minute or two
# on one core. A step is about 40 ms on one unloaded core of the project's
# machine (80 to 100 ms with two cells and a build sharing its 2 cores),
# most of it in the 1024-way output layer.
MODEL = dict(model="transformer", block=64, batch=32, vocab=1024,
             d_model=64, layers=2, heads=2, warmup=100, val_blocks=128,
             threads=1)
# The target: a validation loss (nats per token) that the baseline reached
# in trials after about 500 steps (1M fresh tokens, a quarter of the
# training tokens) at lr 0.003 to 0.008, with room under the cap; a lower
# one makes the full run longer than its 25-minute budget on 2 cores.
TARGET = 4.4
MAX_FRESH = 1600000
EVAL_EVERY = 50  # steps
LRS = [0.003, 0.006, 0.012]  # AdamW, after 100 steps of linear warm-up
QUICK = dict(target_loss=5.0, max_fresh=600000, eval_every=25)
QUICK_LR = 0.006

# condition: (variant, e, echo options, where)
CONDITIONS = [("none", 1, "", ""),
              ("example", 2, "factor=2,shuffle=%d" % ECHO_SHUFFLE, "example"),
              ("example", 4, "factor=4,shuffle=%d" % ECHO_SHUFFLE, "example"),
              ("batch", 2, "factor=2", "batch")]

SETTINGS = ["experiment", "variant", "model", "echo", "echo_at", "e",
            "shuffle", "batch", "block", "vocab", "d_model", "layers",
            "heads", "lr", "warmup", "seed", "target_loss", "max_fresh",
            "eval_every", "val_blocks", "threads"]
# fresh_to_target and fresh are tokens (steps * batch * block / e);
# fresh_counted is what the batches' identities counted, a check on e;
# curve is "step:fresh:loss" at every evaluation, ";"-separated.
RESULTS = ["reached", "diverged", "fresh_to_target", "steps_to_target",
           "time_to_target_s", "eval_time_s", "train_time_s", "fresh",
           "steps", "final_loss", "best_loss", "tokens_per_s",
           "fresh_counted", "echo_effective_factor", "curve"]
CONTEXT = ["docs_train", "docs_val", "tokens_train", "tokens_val",
           "train_spec", "commit", "date", "wall_s"]
COLUMNS = SETTINGS + RESULTS + CONTEXT


def cell(variant, e, echo, where, lr, seed, quick):
    c = dict(MODEL, experiment=NAME, variant=variant, e=e, echo=echo,
             echo_at=where, shuffle=ECHO_SHUFFLE if where == "example"
             else "", lr=lr, seed=seed, target_loss=TARGET,
             max_fresh=MAX_FRESH, eval_every=EVAL_EVERY, R="")
    if quick:
        c.update(QUICK)
    return c


def cells(quick):
    # The cells that take the most steps first (e = 4, then e = 2), so
    # two jobs at a time do not end with one long cell alone.
    order = sorted(CONDITIONS, key=lambda k: -k[1])
    if quick:
        return [cell(*k, lr=QUICK_LR, seed=0, quick=True) for k in order]
    return [cell(*k, lr=lr, seed=seed, quick=False)
            for k in order for seed in [0, 1, 2] for lr in LRS]


class Environment:
    """The corpus, tokenizer and token files, built once per run."""

    def __init__(self, binary, work):
        from . import lm_data
        self.pythonpath = os.path.join(os.path.dirname(binary), "python")
        if not os.path.isdir(os.path.join(self.pythonpath, "echoflow")):
            die("lm: %s has no echoflow package: build it (cmake -B build "
                "-S . && cmake --build build; needs python3-dev and "
                "libdlpack-dev)" % self.pythonpath)
        t = time.monotonic()
        # the token files are written by echoflow (jsonl | tokenize)
        if self.pythonpath not in sys.path:
            sys.path.insert(0, self.pythonpath)
        self.data = lm_data.prepare(os.path.join(work, "lm"))
        print("lm: %d training and %d validation documents, %d and %d "
              "tokens, vocab %d (%.0f s)" %
              (self.data["docs_train"], self.data["docs_val"],
               self.data["tokens_train"], self.data["tokens_val"],
               self.data["vocab"], time.monotonic() - t), flush=True)
        assert self.data["vocab"] == MODEL["vocab"]

    def env(self):
        e = dict(os.environ)
        e["PYTHONPATH"] = self.pythonpath
        # One thread per cell: OpenBLAS starts its own threads whatever
        # torch's count, and two cells run side by side on two cores.
        # Large tensors are allocated and freed every step; glibc would
        # give each back to the kernel and fault it in again (twice the
        # step time), so it keeps them instead.
        e.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                 MALLOC_MMAP_THRESHOLD_="33554432",
                 MALLOC_TRIM_THRESHOLD_="4294967296",
                 MALLOC_TOP_PAD_="268435456")
        return e

    def stop(self):
        pass


def setup(binary, out_dir, work):
    try:
        import numpy  # noqa: F401
        import sentencepiece  # noqa: F401
    except ImportError as e:
        die("lm: %s (apt-get install python3-numpy python3-sentencepiece "
            "python3-torch wordnet-base)" % e)
    return Environment(binary, work)


def trainer_args(c, env):
    d = env.data
    a = [PYTHON, TRAINER, "--json", "--train", d["train_bin"],
         "--val", d["val_bin"]]
    for k in ["vocab", "block", "batch", "d_model", "layers", "heads", "lr",
              "warmup", "seed", "target_loss", "max_fresh", "eval_every",
              "val_blocks", "threads"]:
        a += ["--" + k.replace("_", "-"), fmt(c[k])]
    if c["echo"]:
        a += ["--echo", c["echo"], "--echo-at", c["echo_at"]]
    return a


def run_cell(binary, c, env, commit):
    """Runs one cell; its CSV row, or None (stderr shown) on failure."""
    row, r = run_torch_trainer(trainer_args(c, env), env.env(), TRAINER, c,
                               RESULTS, commit)
    if row is None:
        return None
    # the data files live in the run's temporary directory: record the
    # pipeline with the file's name only
    row["train_spec"] = r["train_spec"].replace(
        os.path.dirname(env.data["train_bin"]) + "/", "")
    for k in ["docs_train", "docs_val", "tokens_train", "tokens_val"]:
        row[k] = env.data[k]
    return row


# ---- report -----------------------------------------------------------------

def label(variant, e):
    return "no echo" if variant == "none" else "%s echo e=%s" % (variant, e)


def cond_key(k):
    variant, e = k
    return ({"none": 0, "example": 1, "batch": 2}.get(variant, 3), ekey(e))


def best_lr(rs):
    """A condition's rows at its best lr (lowest median fresh tokens to
    target, the smaller lr on a tie), and that lr."""
    cand = [(summary([reached_value(r, "fresh_to_target") for r in v])[0],
             float(lr), v) for (lr,), v in groups(rs, ["lr"]).items()]
    med, lr, v = min(cand, key=lambda c: (c[0], c[1]))
    return v, fmt(lr)


def crossing(r):
    """Fresh tokens at which the cell's loss curve crosses the target,
    interpolated linearly between the evaluation before and the first at
    or below it (the evaluations are eval_every steps apart, a coarse
    grid); inf when not reached."""
    if r["reached"] != "1":
        return math.inf
    target = float(r["target_loss"])
    pts = curve(r)
    for (_, f0, l0), (_, f1, l1) in zip(pts, pts[1:]):
        if l1 <= target:
            return f0 + (f1 - f0) * (l0 - target) / (l0 - l1) \
                if l0 > target else f0
    return math.inf


def by_seed(rs, col):
    return ", ".join("%s: %s" % (r["seed"], num(reached_value(r, col)))
                     for r in sorted(rs, key=lambda r: int(r["seed"])))


def report(rows, run_cmd):
    t = rows[0]
    conds = sorted(groups(rows, ["variant", "e"]).items(),
                   key=lambda kv: cond_key(kv[0]))
    best = {k: best_lr(rs) for k, rs in conds}
    base = best.get(("none", "1"))
    n1 = summary([reached_value(r, "fresh_to_target")
                  for r in base[0]])[0] if base else math.inf
    x1 = summary([crossing(r) for r in base[0]])[0] if base else math.inf
    out = []
    for k, rs in conds:
        v, lr = best[k]
        f = summary([reached_value(r, "fresh_to_target") for r in v])
        s = summary([reached_value(r, "steps_to_target") for r in v])
        x = summary([crossing(r) for r in v])
        out.append([label(*k), lr, num(f[0]), by_seed(v, "fresh_to_target"), "%d/%d" % (f[3], f[4]),
                    "-" if k == ("none", "1") else ratio(f[0], n1),
                    "-" if k == ("none", "1") else worth(n1, f[0], k[1]),
                    num(x[0]), "-" if k == ("none", "1") else
                    ratio(x[0], x1), num(s[0])])
    lines = []
    section(lines, "Fresh tokens to validation loss %s, best lr per "
            "condition" % t["target_loss"], run_cmd,
            "Model: %s layers, d_model %s, %s heads, context %s, batch %s, "
            "SentencePiece vocabulary %s; AdamW at the best of lr %s, %s "
            "steps of warm-up; validation loss every %s steps on %s "
            "held-out blocks (%s tokens); cap %s fresh tokens. Corpus: %s "
            "training documents (%s tokens), %s validation documents: "
            "WordNet's glosses (Debian's wordnet-base), one document per "
            "synset, one in 20 held out by a hash. Chosen because a Debian package "
            "ships it as plain text, its documents are short, "
            "self-contained English, so a split by document is natural, "
            "and 4.3M tokens train within the run's budget on 2 cores "
            "(dict-gcide and bible-kjv-text ship in their programs' own "
            "formats, and a Bible's verses are not documents).\n\n"
            % (t["layers"], t["d_model"], t["heads"], t["block"], t["batch"],
               t["vocab"], ", ".join(sorted({r["lr"] for r in rows},
                                            key=float)), t["warmup"],
               t["eval_every"], t["val_blocks"],
               num(int(t["val_blocks"]) * int(t["block"])),
               num(float(t["max_fresh"])), num(float(t["docs_train"])),
               num(float(t["tokens_train"])), num(float(t["docs_val"]))) +
            table(["condition", "best lr", "fresh tokens (median)",
                   "per seed", "reached", "echo / no echo",
                   "an echo was worth", "interpolated (median)",
                   "echo / no echo, interpolated", "steps (median)"], out))
    lines += ["", "Fresh tokens are steps x batch x block / e, the tokens "
              "the source read; echo / no echo is the median's ratio (below "
              "1: fewer fresh tokens than without echo); an echo was worth "
              "(N_1 / N_e - 1) / (e - 1) fresh blocks (1: as much as a "
              "fresh one, 0: nothing). The loss is evaluated every %s "
              "steps, %s fresh tokens apart without echo, so the first "
              "evaluation at the target overshoots by up to that; "
              "interpolated is where the loss curve, linear between "
              "evaluations, crosses the target." % (
                  t["eval_every"], num(int(t["eval_every"]) *
                                       int(t["batch"]) * int(t["block"])))]
    every = []
    for (variant, e, lr), rs in sorted(
            groups(rows, ["variant", "e", "lr"]).items(),
            key=lambda kv: (cond_key(kv[0][:2]), float(kv[0][2]))):
        f = summary([reached_value(r, "fresh_to_target") for r in rs])
        every.append([label(variant, e), lr, num(f[0]),
                      by_seed(rs, "fresh_to_target"), "%d/%d" % (f[3], f[4]),
                      "%.3f" % min(float(r["best_loss"]) for r in rs)])
    section(lines, "Every learning rate", run_cmd,
            table(["condition", "lr", "fresh tokens (median)", "per seed",
                   "reached", "lowest loss"], every))
    lines += ["", "![validation loss against fresh tokens, median seed at "
              "the best lr](img/lm_loss_vs_fresh.png)", "",
              "![validation loss against steps, median seed at the best "
              "lr](img/lm_loss_vs_steps.png)"]
    return lines


def curve(r):
    return [tuple(float(x) for x in p.split(":"))
            for p in r["curve"].split(";") if p]


def plot(rows, work, img):
    made = []
    for x, xlabel, scale, name in [
            ("fresh", "fresh tokens (millions)", 1e6, "lm_loss_vs_fresh.png"),
            ("steps", "steps", 1, "lm_loss_vs_steps.png")]:
        plots = []
        for i, (k, rs) in enumerate(sorted(
                groups(rows, ["variant", "e"]).items(),
                key=lambda kv: cond_key(kv[0]))):
            v, lr = best_lr(rs)
            # the median seed: the middle one by fresh tokens to target
            med = sorted(v, key=lambda r: (reached_value(
                r, "fresh_to_target"), int(r["seed"])))[len(v) // 2]
            path = os.path.join(work, "lm-%s-%d.dat" % (x, i))
            with open(path, "w") as f:
                for step, fresh, loss in curve(med):
                    f.write("%g %g\n" % ((fresh if x == "fresh" else step) /
                                         scale, loss))
            plots.append("'%s' using 1:2 with linespoints title '%s, lr %s, "
                         "seed %s'" % (path, label(*k), lr, med["seed"]))
        target = float(rows[0]["target_loss"])
        plots.append("%g with lines lc 'black' title 'target'" % target)
        out = os.path.join(img, name)
        gnuplot("""set terminal png size 900,500
set output '%s'
set title 'Transformer LM on WordNet glosses: validation loss (median seed, best lr)'
set xlabel '%s'
set ylabel 'validation loss (nats/token)'
set yrange [%g:%g]
set key top right
set grid
plot %s
""" % (out, xlabel, target - 0.3, target + 1.6, ", ".join(plots)))
        made.append(out)
    return made
