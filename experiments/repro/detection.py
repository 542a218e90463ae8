# SPDX-License-Identifier: Apache-2.0
"""Object detection (the paper's SSD on COCO, small): a single-shot
detector trained on Fashion-MNIST items placed on 64x64 canvases (a COCO
instances JSON and JPEGs built from Debian's dataset-fashion-mnist),
fed by echoflow.torch.Loader through `coco | decode | ssd_crop | resize |
flip | pad_boxes | batch`, without echo, with example echoing before the
augmentation (the echoed copies cropped and flipped independently) and
after it (identical copies), and with batch echoing, all at e = 2 as the
paper's SSD runs, 3 seeds, measured in fresh images to a validation
mAP@0.5.

Its cells are not `echoflow train` runs: each is one `det_train.py`
process (PyTorch, one thread), so the module has its own CSV columns
(SETTINGS, COLUMNS) and run_cell; the data set (det_data.py) is built in
the run's temporary directory, the same files on every run, once per size
the cells ask for.

How the target was picked: in a trial (seed 0, lr 0.002, no echo,
validation every 100 steps) the baseline's mAP@0.5 passed 0.55 at 6,400
fresh images, 0.65 at 16,000, 0.70 at about 25,000 and rose slowly after
(0.74 at 38,000, 0.77 at 58,000, 3 passes over the 20,000 training
images), so TARGET = 0.70 is reached in a little over one pass, on the
slow part of the curve where the conditions differ, and MAX_FRESH =
48,000 leaves the baseline about twice what it needs. A lower target is
reached within a few hundred steps, before echoing can show much; a higher
one makes an e = 2 cell that does not reach it run past the budget of
about 4 minutes a cell (12 cells in about 25 minutes at two jobs on the
project's 2 cores).

Needs Debian's python3-torch, python3-numpy, python3-pil and
dataset-fashion-mnist, and the Python package built (build/python)."""
import math
import os
import threading
import time

from . import det_data
from .cells import ECHO_SHUFFLE, example_echo, run_torch_trainer
from .policy import ratio, worth
from .render import gnuplot, section, table
from .results import die, fmt, groups, num, reached_value, summary

NAME = "detection"
TITLE = "Object detection (single-shot detector on Fashion-MNIST canvases)"
PAPER = "the paper's SSD on COCO"

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(HERE, "det_train.py")
PYTHON = "/usr/bin/python3"  # Debian's, with Debian's torch

# The model and its data: a step (batch 32) is about 55 ms on one core of
# the project's machine, an evaluation of 1,000 validation images about
# 1.7 s (5 s at step 0, when every anchor passes the score threshold).
MODEL = dict(model="ssd-small", size=64, width=32, batch=32, lr=0.002,
             warmup=100, threads=1, train_images=20000, val_images=1000,
             data_shuffle=2000)
TARGET = 0.70
MAX_FRESH = 48000
EVAL_EVERY = 100  # steps
E = 2
# quick: a small data set, a low target, about 75 steps a cell
QUICK = dict(train_images=1000, val_images=100, target_map=0.2,
             max_fresh=2400, eval_every=25)

# condition: (variant, e, echo options, where)
CONDITIONS = [("none", 1, "", ""),
              ("before-augment", E, example_echo(E, ECHO_SHUFFLE),
               "before-augment"),
              ("after-augment", E, example_echo(E, ECHO_SHUFFLE),
               "after-augment"),
              ("batch", E, "factor=%d" % E, "batch")]

SETTINGS = ["experiment", "variant", "model", "echo", "echo_at", "e",
            "shuffle", "batch", "size", "width", "lr", "warmup", "seed",
            "target_map", "max_fresh", "eval_every", "train_images",
            "val_images", "data_shuffle", "threads"]
# fresh_to_target and fresh are images (steps * batch / e);
# fresh_counted is what the batches' identities counted, a check on e;
# curve is "step:fresh:mAP" at every evaluation, ";"-separated.
RESULTS = ["reached", "diverged", "fresh_to_target", "steps_to_target",
           "time_to_target_s", "eval_time_s", "train_time_s", "fresh",
           "steps", "final_map", "best_map", "images_per_s",
           "fresh_counted", "echo_effective_factor", "curve"]
CONTEXT = ["objects_train", "objects_val", "train_spec", "commit", "date",
           "wall_s"]
COLUMNS = SETTINGS + RESULTS + CONTEXT


def cell(variant, e, echo, where, seed, quick):
    c = dict(MODEL, experiment=NAME, variant=variant, e=e, echo=echo,
             echo_at=where, shuffle=ECHO_SHUFFLE if echo and where != "batch"
             else "", seed=seed, target_map=TARGET, max_fresh=MAX_FRESH,
             eval_every=EVAL_EVERY, R="")
    if quick:
        c.update(QUICK)
    return c


def cells(quick):
    # The echo cells take the most steps: first, so two jobs at a time do
    # not end with one long cell alone.
    order = sorted(CONDITIONS, key=lambda k: -k[1])
    return [cell(*k, seed=seed, quick=quick)
            for k in order for seed in ([0] if quick else [0, 1, 2])]


class Environment:
    """The data sets, built in the run's temporary directory on first use,
    one per (training images, validation images) the cells ask for."""

    def __init__(self, binary, work):
        self.pythonpath = os.path.join(os.path.dirname(binary), "python")
        if not os.path.isdir(os.path.join(self.pythonpath, "echoflow")):
            die("detection: %s has no echoflow package: build it (cmake -B "
                "build -S . && cmake --build build; needs python3-dev and "
                "libdlpack-dev)" % self.pythonpath)
        self.work = work
        self.lock = threading.Lock()
        self.sets = {}

    def data(self, c):
        key = (int(c["train_images"]), int(c["val_images"]))
        with self.lock:
            if key not in self.sets:
                t = time.monotonic()
                d = det_data.prepare(os.path.join(
                    self.work, "detection-%d-%d" % key), *key)
                print("detection: %d training images (%d objects), %d "
                      "validation images (%d objects) (%.0f s)" %
                      (d["images_train"], d["objects_train"],
                       d["images_val"], d["objects_val"],
                       time.monotonic() - t), flush=True)
                self.sets[key] = d
            return self.sets[key]

    def env(self):
        e = dict(os.environ)
        e["PYTHONPATH"] = self.pythonpath
        # One thread per cell: two cells run side by side on two cores.
        e.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        return e

    def stop(self):
        pass


def setup(binary, out_dir, work):
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as e:
        die("detection: %s (apt-get install python3-numpy python3-pil "
            "python3-torch dataset-fashion-mnist)" % e)
    if not os.path.isdir(det_data.FMNIST):
        die("detection: %s not found (apt-get install dataset-fashion-mnist)"
            % det_data.FMNIST)
    return Environment(binary, work)


def trainer_args(c, d):
    a = [PYTHON, TRAINER, "--json", "--train-json", d["train_json"],
         "--train-root", d["train_root"], "--val-json", d["val_json"],
         "--val-root", d["val_root"], "--shuffle", fmt(c["data_shuffle"])]
    for k in ["size", "width", "batch", "lr", "warmup", "seed", "target_map",
              "max_fresh", "eval_every", "threads"]:
        a += ["--" + k.replace("_", "-"), fmt(c[k])]
    if c["echo"]:
        a += ["--echo", c["echo"], "--echo-at", c["echo_at"]]
    return a


def run_cell(binary, c, env, commit):
    """Runs one cell; its CSV row, or None (stderr shown) on failure."""
    d = env.data(c)
    row, r = run_torch_trainer(trainer_args(c, d), env.env(), TRAINER, c,
                               RESULTS, commit)
    if row is None:
        return None
    # the data live in the run's temporary directory: record the pipeline
    # with the paths relative to it
    row["train_spec"] = r["train_spec"].replace(
        os.path.dirname(d["train_json"]) + "/", "")
    row["objects_train"] = d["objects_train"]
    row["objects_val"] = d["objects_val"]
    return row


# ---- report -----------------------------------------------------------------

ORDER = ["none", "before-augment", "after-augment", "batch"]
LABEL = {"none": "no echo", "before-augment": "example echo before "
         "augmentation", "after-augment": "example echo after augmentation",
         "batch": "batch echo"}


def label(variant, e):
    text = LABEL.get(variant, variant)
    return text if variant == "none" else "%s, e=%s" % (text, e)


def cond_key(k):
    variant, e = k
    return (ORDER.index(variant) if variant in ORDER else len(ORDER),
            float(e))


def curve(r):
    return [tuple(float(x) for x in p.split(":"))
            for p in r["curve"].split(";") if p]


def crossing(r):
    """Fresh images at which the cell's mAP curve crosses the target,
    interpolated linearly between the evaluation before and the first at
    or above it; inf when not reached."""
    if r["reached"] != "1":
        return math.inf
    target = float(r["target_map"])
    pts = curve(r)
    for (_, f0, m0), (_, f1, m1) in zip(pts, pts[1:]):
        if m1 >= target:
            return f0 + (f1 - f0) * (target - m0) / (m1 - m0) \
                if m0 < target else f0
    return math.inf


def by_seed(rs, col):
    return ", ".join("%s: %s" % (r["seed"], num(reached_value(r, col)))
                     for r in sorted(rs, key=lambda r: int(r["seed"])))


def paper_order(meds):
    """What the table says about the paper's SSD findings: which
    conditions needed fewer fresh images than the baseline, and whether
    echoing before augmentation beat echoing after it and example echoing
    beat batch echoing, from the medians {variant: fresh images}."""
    base = meds.get("none", math.inf)
    fewer = [LABEL[v] for v in ORDER[1:] if meds.get(v, math.inf) < base]
    out = ["Against the paper's SSD on COCO at e = 2 (every echoing "
           "variant needed fewer fresh examples than the baseline; before "
           "augmentation beat after it; example echoing beat batch "
           "echoing), by the interpolated medians above: %s needed fewer "
           "fresh images than no echo" % (", ".join(fewer) if fewer else "no variant")]
    for a, b in [("before-augment", "after-augment"),
                 ("before-augment", "batch"), ("after-augment", "batch")]:
        if a in meds and b in meds:
            x, y = meds[a], meds[b]
            rel = "fewer than" if x < y else "as many as" if x == y \
                else "more than"
            out.append("%s needed %s %s" % (LABEL[a], rel, LABEL[b]))
    return "; ".join(out) + "."


def report(rows, run_cmd):
    t = rows[0]
    conds = sorted(groups(rows, ["variant", "e"]).items(),
                   key=lambda kv: cond_key(kv[0]))
    base = dict(conds).get(("none", "1"), [])
    n1 = summary([reached_value(r, "fresh_to_target") for r in base])[0] \
        if base else math.inf
    x1 = summary([crossing(r) for r in base])[0] if base else math.inf
    out, meds = [], {}
    for k, v in conds:
        f = summary([reached_value(r, "fresh_to_target") for r in v])
        s = summary([reached_value(r, "steps_to_target") for r in v])
        x = summary([crossing(r) for r in v])
        meds[k[0]] = x[0]
        is_base = k == ("none", "1")
        out.append([label(*k), num(f[0]), by_seed(v, "fresh_to_target"),
                    "%d/%d" % (f[3], f[4]),
                    "-" if is_base else ratio(f[0], n1),
                    "-" if is_base else worth(n1, f[0], k[1]),
                    num(x[0]), "-" if is_base else ratio(x[0], x1),
                    num(s[0]),
                    "%.3f" % (sorted(float(r["final_map"]) for r in v)
                              [len(v) // 2])])
    lines = []
    section(lines, "Fresh images to validation mAP@0.5 %s" % t["target_map"],
            run_cmd,
            "Data: %s training canvases (%s objects) and %s validation "
            "canvases (%s objects) of %sx%s pixels, each one to four "
            "Fashion-MNIST items (Debian's dataset-fashion-mnist; training "
            "canvases from its training part, validation canvases from its "
            "test part) at a random side of %d to %d pixels and a random "
            "place, boxed by their non-zero pixels, 10 classes; greyscale "
            "JPEGs and a COCO instances JSON (`repro/det_data.py`), read by "
            "the `coco` source. Model: a single-shot detector of 6 "
            "convolutions with batch norm (width %s) and anchors on an 8x8 "
            "and a 4x4 map, SSD's loss with hard-negative mining, Adam at "
            "lr %s after %s steps of warm-up, batch %s, one thread. "
            "Pipeline: `%s`. Echo: `%s` before `ssd_crop` (before "
            "augmentation) or before `pad_boxes` (after it), `echo:factor="
            "%s` after `batch` (batch echo). Validation mAP@0.5 (all-point "
            "interpolated AP per class, averaged over the 10 classes) every "
            "%s steps on the %s validation canvases; cap %s fresh "
            "images.\n\n"
            % (num(float(t["train_images"])), num(float(t["objects_train"])),
               num(float(t["val_images"])), num(float(t["objects_val"])),
               t["size"], t["size"], det_data.SIDES[0], det_data.SIDES[1],
               t["width"], t["lr"], t["warmup"],
               t["batch"], base[0]["train_spec"] if base else "-",
               example_echo(E, ECHO_SHUFFLE), E, t["eval_every"],
               num(float(t["val_images"])), num(float(t["max_fresh"]))) +
            table(["condition", "fresh images (median)", "per seed",
                   "reached", "echo / no echo", "an echo was worth",
                   "interpolated (median)", "echo / no echo, interpolated",
                   "steps (median)", "final mAP (median)"], out))
    lines += ["", "Fresh images are the images trained on / e (steps x "
              "batch / e when every batch is full), the "
              "images the source read; final mAP is the last evaluation's, "
              "the first at or above the target for a cell that reached "
              "it; echo / no echo is the median's ratio (below 1: "
              "fewer fresh images than without echo); an echo was worth "
              "(N_1 / N_e - 1) / (e - 1) fresh images (1: as much as a "
              "fresh one, 0: nothing). mAP is evaluated every %s steps, "
              "%s fresh images apart without echo, so the first evaluation "
              "at the target overshoots by up to that; interpolated is "
              "where the mAP curve, linear between evaluations, crosses "
              "the target." % (t["eval_every"],
                               num(int(t["eval_every"]) * int(t["batch"]))),
              "", paper_order(meds),
              "", "![validation mAP@0.5 against fresh images, median "
              "seed](img/detection_map_vs_fresh.png)", "",
              "![validation mAP@0.5 against steps, median "
              "seed](img/detection_map_vs_steps.png)"]
    return lines


def plot(rows, work, img):
    made = []
    for x, xlabel, scale, name in [
            ("fresh", "fresh images (thousands)", 1000,
             "detection_map_vs_fresh.png"),
            ("steps", "steps", 1, "detection_map_vs_steps.png")]:
        plots = []
        for i, (k, v) in enumerate(sorted(
                groups(rows, ["variant", "e"]).items(),
                key=lambda kv: cond_key(kv[0]))):
            # the median seed: the middle one by fresh images to target
            med = sorted(v, key=lambda r: (crossing(r), int(r["seed"])))[
                len(v) // 2]
            path = os.path.join(work, "detection-%s-%d.dat" % (x, i))
            with open(path, "w") as f:
                for step, fresh, m in curve(med):
                    f.write("%g %g\n" % ((fresh if x == "fresh" else step)
                                         / scale, m))
            plots.append("'%s' using 1:2 with linespoints title '%s, seed "
                         "%s'" % (path, label(*k), med["seed"]))
        target = float(rows[0]["target_map"])
        plots.append("%g with lines lc 'black' title 'target'" % target)
        out = os.path.join(img, name)
        gnuplot("""set terminal png size 900,500 noenhanced
set output '%s'
set title 'Single-shot detector on Fashion-MNIST canvases: validation mAP@0.5 (median seed)'
set xlabel '%s'
set ylabel 'mAP@0.5'
set yrange [%g:%g]
set key bottom right
set grid
plot %s
""" % (out, xlabel, max(0.0, target - 0.3), min(1.0, target + 0.15),
           ", ".join(plots)))
        made.append(out)
    return made
