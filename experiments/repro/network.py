# SPDX-License-Identifier: Apache-2.0
"""Time to target over a rate-limited network (the paper's 3.25x
headline): the MLP reading WebDataset shards from nginx at 1/R of the
trainer's rate, without echo, at fixed echo factors and with automatic
echoing.

The training pipeline is the trainer's own preset (`echoflow train --data
fashion-mnist --print-spec` with the cell's options), its source swapped
for the shards over HTTP and its throttle for nginx, and with one named
difference, UPSTREAM_SHUFFLE."""
import math
import os
import statistics
import subprocess

from .cells import ECHO_SHUFFLE, cell, example_echo, seeds
from .nginx import TRAIN_EXAMPLES, Upstream
from .render import cell_summary, gnuplot, section, table, write_points
from .results import die, ekey, fmt, groups, num, reached_value, summary

NAME = "network"
TITLE = "Time to target over a rate-limited network (MLP)"
PAPER = "the paper's 3.25x headline"
PAPER_SPEEDUP = 3.25  # ResNet-50 on ImageNet over a network, the headline

# What replaces the preset's idx source: the shards, decoded, normalised
# with the training set's mean and std. The trainer normalises u8 images
# with these same values itself (train/trainer.c); as a stage, the shuffle
# and echo stages hold the f32 images, as every network cell has run.
HTTP_SOURCE = ("tar:urls=%s | decode:channels=1 | "
               "normalize:mean=0.2860,std=0.3530")

# The one deliberate difference from the preset. The preset shuffles the
# whole training set (shuffle:60000), a buffer that must fill before the
# first batch; here it would fill from the throttled upstream, 60,000
# examples at 1/R of the trainer's rate (2 s at R = 2, 8 s at R = 8 in the
# calibration run, against 12 to 28 s to target without echo), a wait that
# grows with R and so would be measured as if it were echoing's doing.
# Every row of network.csv has run with this buffer (the CSV's train_spec
# says so for the rows that record it; report checks them); change it and
# those rows no longer match.
UPSTREAM_SHUFFLE = 1000


def cells(quick):
    rs = [2, 8] if quick else [2, 4, 8]
    echoes = ["none", "4", "auto"] if quick else ["none", "2", "4", "8",
                                                  "auto"]
    t = dict(target_acc=0.85, max_fresh=300000) if quick else {}
    out = []
    for seed in seeds(quick):
        for r in rs:
            for ech in echoes:
                if ech == "none":
                    echo, e = "", 1
                elif ech == "auto":
                    echo, e = ("factor=auto,max=8,shuffle=%d" %
                               ECHO_SHUFFLE, "auto")
                else:
                    echo, e = example_echo(int(ech), ECHO_SHUFFLE), int(ech)
                out.append(cell(NAME, "none" if ech == "none" else
                                "example-shuffled", source="http", R=r,
                                e=e, echo=echo, seed=seed,
                                echo_at="" if ech == "none" else
                                "before-augment",
                                shuffle="" if ech == "none" else
                                ECHO_SHUFFLE, threads="", **t))
    return out


def preset_specs(binary, c, throttle):
    """The trainer's preset pipelines (training, held-out) for cell c's
    model, batch and echo, emulating an upstream of `throttle` examples/s."""
    args = [binary, "train", "--data", "fashion-mnist", "--model",
            c["model"], "--batch", fmt(c["batch"]), "--throttle",
            "%g" % throttle, "--print-spec"]
    if c["echo"]:
        args += ["--echo", c["echo"], "--echo-at", c["echo_at"]]
    p = subprocess.run(args, capture_output=True, text=True)
    lines = p.stdout.splitlines()
    if p.returncode != 0 or len(lines) != 2:
        die("network: %s exited %d, printing %r (expected the training and "
            "held-out pipelines, one a line): %s" %
            (" ".join(args), p.returncode, p.stdout, p.stderr.strip()))
    return lines


def over_http(preset, urls, source=HTTP_SOURCE):
    """The preset's training pipeline with its source swapped for the shards
    at urls (through source, a format with the urls' %s), its throttle
    stage dropped (nginx is the slow upstream; the prefetch after it stays,
    to let the upstream run ahead), and its shuffle buffer
    UPSTREAM_SHUFFLE."""
    stages = preset.split(" | ")

    def only(prefix):
        at = [i for i, s in enumerate(stages) if s.startswith(prefix)]
        if len(at) != 1 or (prefix == "idx:" and at != [0]):
            die("network: the preset's pipeline has changed shape (expected "
                "an idx source first, one shuffle and one throttle stage): "
                "%s; update %s" % (preset, __file__))
        return at[0]

    only("idx:")
    del stages[only("throttle:")]
    stages[only("shuffle:")] = "shuffle:%d" % UPSTREAM_SHUFFLE
    stages[0] = source % urls
    return " | ".join(stages)


def upstream_shuffle(spec):
    """The buffer of the first shuffle stage in a recorded spec."""
    for s in spec.split(" | "):
        if s.startswith("shuffle:"):
            return s[len("shuffle:"):]
    return None


class Environment:
    """What the network cells run in: the upstream, and their pipelines."""
    source = HTTP_SOURCE  # the shards' source stages (over_http)

    def __init__(self, binary, out_dir, work):
        self.binary = binary
        self.upstream = Upstream(binary, out_dir, work)
        self.upstream.prepare()
        self.recorded = {}

    def data_args(self, c):
        R = int(c["R"])
        self.upstream.serve(R)
        train, test = preset_specs(self.binary, c, self.upstream.rate_at(R))
        self.recorded[id(c)] = over_http(
            train, self.upstream.urls().replace(
                ":%d/" % self.upstream.port, ":PORT/"), self.source)
        return ["--spec", over_http(train, self.upstream.urls(), self.source),
                "--test-spec", test]

    def context(self, c):
        R = int(c["R"])
        up = self.upstream
        return {"upstream_rate": round(up.rate_at(R), 1),
                "limit_rate_bytes": up.limit(R),
                "calibrated_rate": round(up.rate, 1),
                "train_spec": self.recorded.pop(id(c))}

    def stop(self):
        self.upstream.stop()


def setup(binary, out_dir, work):
    return Environment(binary, out_dir, work)


def check_recorded(rows, path):
    """Rows that record their training pipeline must have run this module's
    recipe; returns how many record one."""
    recorded = [r for r in rows if r.get("train_spec")]
    for r in recorded:
        got = upstream_shuffle(r["train_spec"])
        if got != str(UPSTREAM_SHUFFLE):
            die("%s: a row (%s e=%s R=%s seed=%s) ran with shuffle:%s, but "
                "the network recipe now shuffles over %d: rerun those cells "
                "or restore UPSTREAM_SHUFFLE in %s" %
                (path, r["variant"], r["e"], r["R"], r["seed"], got,
                 UPSTREAM_SHUFFLE, __file__))
    return len(recorded)


def recorded_text(n_rec, n):
    checked = "the training pipeline it ran (the CSV's `train_spec`), " \
        "checked against this shuffle buffer"
    if n_rec == n:
        return "Every row records %s." % checked
    return ("%d of the %d rows record %s; the other %d predate that column, "
            "and what they ran is the code of the commit each names." %
            (n_rec, n, checked.replace("it ran", "they ran"), n - n_rec))


def report(rows, run_cmd):
    t = rows[0]
    n_rec = check_recorded(rows, "network.csv")
    lines = ["", "Fashion-MNIST packed into 6 WebDataset shards by "
             "`echoflow pack`, served by nginx on loopback with "
             "`limit_rate` (bytes/s, per connection; the tar source reads "
             "one shard at a time) set so that the upstream delivers 1/R "
             "of the trainer's rate measured when data is free (%s "
             "examples/s in the calibration run, `network-calibration.json`"
             " beside the CSV). Speedup = median time to target without "
             "echo / with echo, at the same R; the ceiling is min(e, R) "
             "(e = max = 8 for auto); the paper's headline is %.2fx. "
             "Effective e and the R the echo stage measured come from the "
             "trainer's JSON." % (num(float(t["calibrated_rate"])),
                                  PAPER_SPEEDUP)]
    lines += ["", "The training pipeline is the `--data fashion-mnist` "
              "preset's (`echoflow train --print-spec` with the cell's "
              "`--echo`, `--echo-at`, `--batch` and `--throttle`), with its "
              "idx source replaced by `%s` and its throttle stage by nginx. "
              "**One deliberate difference:** the preset shuffles the whole "
              "training set (`shuffle:%d`), and the network's cells shuffle "
              "over %s examples (`shuffle:%d`): a buffer of %s would have "
              "to fill from the throttled upstream before the first batch, "
              "a wait that grows with R and would count as training time. "
              "The held-out pipeline is the preset's. %s" %
              (HTTP_SOURCE % "http://127.0.0.1:PORT/train-{000000..000005}"
               ".tar", TRAIN_EXAMPLES, num(UPSTREAM_SHUFFLE),
               UPSTREAM_SHUFFLE, num(TRAIN_EXAMPLES), recorded_text(
                   n_rec, len(rows)))]
    out = []
    for (R,), rr in sorted(groups(rows, ["R"]).items(),
                           key=lambda kv: float(kv[0][0])):
        by_e = groups(rr, ["e"])
        base = by_e.get(("1",))
        bm = cell_summary(base, "time_to_target_s", 1) if base else None
        for (e,), rs in sorted(by_e.items(), key=lambda kv: ekey(kv[0][0])):
            m, rng, n, val = cell_summary(rs, "time_to_target_s", 1)
            eff = statistics.median(float(r["echo_effective_factor"])
                                    for r in rs)
            cap = "-" if e == "1" else "%.2gx" % min(
                8 if e == "auto" else float(e), float(R))
            rest = [float(r["echo_r_estimate"]) for r in rs
                    if r["echo_r_estimate"]]
            sp = "-" if e == "1" or not bm or val == math.inf or \
                bm[3] == math.inf else "%.2fx" % (bm[3] / val)
            out.append([R, rr[0]["limit_rate_bytes"],
                        "none" if e == "1" else e, m, rng, n, "%.2f" % eff,
                        "%.2f" % statistics.median(rest) if rest else "-",
                        sp, cap, "%.2fx" % PAPER_SPEEDUP])
    section(lines, "target %s, lr %s, cap %s fresh examples" % (
        t["target_acc"], t["lr"], t["max_fresh"]), run_cmd,
        table(["R", "limit_rate", "echo e", "time to target, s (median)",
               "range", "reached", "effective e", "R measured by echo",
               "speedup", "ceiling min(e, R)", "paper"], out))
    lines += ["", "![time to target against R](img/network_time_vs_R.png)"]
    return lines


def plot(rows, work, img):
    plots = []
    for (e,), rs in sorted(groups(rows, ["e"]).items(),
                           key=lambda kv: ekey(kv[0][0])):
        path = os.path.join(work, "net-%s.dat" % e)
        write_points(path, [
            (R, summary([reached_value(r, "time_to_target_s") for r in rr]))
            for (R,), rr in sorted(groups(rs, ["R"]).items(),
                                   key=lambda kv: float(kv[0][0]))])
        title = "no echo" if e == "1" else "e = %s" % (
            "auto (max 8)" if e == "auto" else e)
        plots.append("'%s' using 1:2:3:4 with yerrorlines title '%s'" %
                     (path, title))
    out = os.path.join(img, "network_time_vs_R.png")
    gnuplot("""set terminal png size 900,500
set output '%s'
set title 'MLP, shards over rate-limited HTTP: seconds to %s%% (median and range)'
set xlabel 'R set by limit_rate (upstream time / training time per example when data is free)'
set ylabel 'seconds to target'
set yrange [0:*]
set logscale x 2
set key top left
set grid
plot %s
""" % (out, num(100 * float(rows[0]["target_acc"]), 0), ", ".join(plots)))
    return [out]
