# SPDX-License-Identifier: Apache-2.0
"""Time to target over a rate-limited network with the upstream and the
trainer on separate cores (CNN with random crop and flip): nginx pinned to
CPU 0, the trainer to CPU 1, no echo against automatic echoing, uniform
and with the MLP's best policy (policy.BEST_POLICY).

What can be pinned apart, and what cannot. nginx runs as one process
(`master_process off`, one worker), started under `taskset -c 0`, so all of
the serving (file reads, limit_rate, socket writes) is on CPU 0. The
echoflow pipeline's stages run as threads inside the trainer process: the
HTTP reads (libcurl in the tar source), tar parsing and PNG decoding, the
shuffle, echo and augmentation stages, and the training step all share the
process, and echoflow has no option to set a stage thread's affinity, nor
names its threads so that they could be told apart and pinned from outside
(`taskset -p` per thread id). So the trainer runs under `taskset -c 1`, all
of its threads with it, with `--threads 1`: the upstream that is separated
is nginx; the HTTP client and decoding stay on the trainer's core. What
this removes is the network experiment's sharing of both cores between
nginx and the trainer; what is left is that decoding still takes time from
the training step, so R still moves somewhat with e (less than before: on
the CNN a training step costs far more than decoding a 28x28 PNG).
Separating decoding too needs a pipeline in its own process (or per-stage
affinity in echoflow), which these cells do not have.

The calibration (the trainer's examples/s when data is free, from which
limit_rate is set) is run the same way: the CNN preset's pipeline under
`taskset -c 1`, `--threads 1`, kept beside the CSV as
network-pinned-calibration.json.

The training pipeline is the CNN preset's (`--print-spec`), its source
swapped for the shards over HTTP without a normalize stage (the images stay
u8, as in the preset, so random_crop pads with black, and the trainer
normalises them), its throttle for nginx, and its shuffle buffer the
network experiment's UPSTREAM_SHUFFLE.

The policy cells' echo options are
`factor=auto,max=8,policy=P,pool=10000,shuffle=10000`: with factor=auto,
`max` caps how often one pooled item is emitted, and so the factor."""
import math
import os
import statistics

from . import network
from .network import PAPER_SPEEDUP, UPSTREAM_SHUFFLE, check_recorded
from .nginx import Upstream
from .policy import BEST_POLICY, policy_cell, vkey
from .policy_cnn import settings
from .render import cell_summary, gnuplot, section, table, write_points
from .results import die, fmt, groups, num, reached_value, summary

NAME = "network-pinned"
TITLE = ("Time to target over a rate-limited network, upstream and trainer "
         "on separate cores (CNN)")
PAPER = "the paper's 3.25x headline"
TIMED = True  # one cell at a time: they measure seconds

NGINX_CPU, TRAINER_CPU = 0, 1
PINNED = "nginx:%d,trainer:%d" % (NGINX_CPU, TRAINER_CPU)
HTTP_SOURCE_U8 = "tar:urls=%s | decode:channels=1"
AUTO = "auto,max=8"  # the echo factor option of the echoing cells


def cells(quick):
    t = settings(quick)
    t.update(source="http", threads=1, pinned=PINNED)
    out = []
    for seed in [0] if quick else [0, 1, 2]:
        for R in [4] if quick else [4, 8]:
            out.append(policy_cell(NAME, "none", 1, seed=seed, R=R, **t))
            for v in ["uniform", BEST_POLICY]:
                out.append(policy_cell(NAME, v, "auto", AUTO, seed=seed,
                                       R=R, **t))
    return out


class Environment(network.Environment):
    """The network experiment's, with nginx pinned to NGINX_CPU, the
    trainer (under prefix) to TRAINER_CPU, and the images left u8."""
    source = HTTP_SOURCE_U8

    def __init__(self, binary, out_dir, work):
        cpus = os.sched_getaffinity(0)
        if not {NGINX_CPU, TRAINER_CPU} <= cpus:
            die("%s: needs CPUs %d and %d, this process may use %s" %
                (NAME, NGINX_CPU, TRAINER_CPU, sorted(cpus)))
        self.binary = binary
        t = settings(False)
        self.upstream = Upstream(
            binary, out_dir, work, cal_name="network-pinned-calibration.json",
            cal_args=["--data", "fashion-mnist", "--model", "cnn",
                      "--threads", "1", "--lr", fmt(t["lr"]), "--warmup",
                      fmt(t["warmup"]), "--max-fresh", "20000"],
            cpu=NGINX_CPU)
        self.upstream.cal_prefix = ["taskset", "-c", str(TRAINER_CPU)]
        self.upstream.prepare()
        self.recorded = {}

    def check(self, c):
        if c["pinned"] != PINNED:
            die("%s: cell pinned '%s', this environment pins '%s'" %
                (NAME, c["pinned"], PINNED))

    def prefix(self, c):
        self.check(c)
        return ["taskset", "-c", str(TRAINER_CPU)]

    def data_args(self, c):
        self.check(c)
        return super().data_args(c)


def setup(binary, out_dir, work):
    return Environment(binary, out_dir, work)


def label(v):
    return "none" if v == "none" else "%s, e = auto (max 8)" % v


def delivered_r(r):
    """R as the upstream delivered it: the trainer's calibrated rate over
    the fresh examples a run took per second of training. Both come from
    whole runs, where the echo stage's estimate is its last two seconds."""
    return float(r["calibrated_rate"]) * float(r["train_time_s"]) / \
        float(r["fresh"])


def spread_text(values):
    """Median (min to max) of finite values, or "-" when there are none."""
    s = summary(values)
    return "%.2f (%.2f to %.2f)" % s[:3] if s else "-"


def report(rows, run_cmd):
    t = rows[0]
    check_recorded(rows, NAME + ".csv")
    warm = " after a %s-step warm-up" % t["warmup"] if t.get("warmup") else ""
    lines = ["", "The network experiment's shards and nginx, on the CNN with "
             "random crop and flip, with nginx pinned to CPU %d and the "
             "trainer, its pipeline threads (HTTP reads, decoding, "
             "augmentation) among them, to CPU %d (`taskset -c`, the CSV's "
             "`pinned`; echoflow cannot pin its stage threads apart from "
             "the training step, so decoding stays with the trainer). "
             "limit_rate is set so that the upstream delivers 1/R of the "
             "trainer's rate when data is free, measured pinned the same "
             "way (%s examples/s, `network-pinned-calibration.json` beside "
             "the CSV); R delivered is that rate over the fresh examples "
             "each run took per second of training, a check of limit_rate "
             "over whole runs, where the echo stage's R is its estimate "
             "over the last two seconds of the run. The pipeline is the "
             "CNN preset's, its source the shards (`%s`, u8 images as in "
             "the preset), its shuffle "
             "buffer %d as in the network experiment. Speedup = median time "
             "to target without echo / with echo at the same R; the "
             "ceiling is min(8, R); the paper's headline is %.2fx. The R "
             "the echo stage measured and its effective e come from the "
             "trainer's JSON." % (
                 NGINX_CPU, TRAINER_CPU, num(float(t["calibrated_rate"])),
                 HTTP_SOURCE_U8 % "http://127.0.0.1:PORT/train-{000000.."
                 "000005}.tar", UPSTREAM_SHUFFLE, PAPER_SPEEDUP)]
    out = []
    for (R,), rr in sorted(groups(rows, ["R"]).items(),
                           key=lambda kv: float(kv[0][0])):
        by_v = groups(rr, ["variant"])
        base = by_v.get(("none",))
        bm = cell_summary(base, "time_to_target_s", 1) if base else None
        for (v,), rs in sorted(by_v.items(), key=lambda kv: vkey(kv[0][0])):
            m, rng, n, val = cell_summary(rs, "time_to_target_s", 1)
            eff = statistics.median(float(r["echo_effective_factor"])
                                    for r in rs)
            rest = [float(r["echo_r_estimate"]) for r in rs
                    if r["echo_r_estimate"]]
            sp = "-" if v == "none" or not bm or val == math.inf or \
                bm[3] == math.inf else "%.2fx" % (bm[3] / val)
            rate = statistics.median(float(r["train_examples_per_s"])
                                     for r in rs)
            out.append([R, "%.2f" % statistics.median(map(delivered_r, rs)),
                        spread_text(rest), label(v), m, rng, n,
                        "%.2f" % eff, num(rate), sp,
                        "-" if v == "none" else "%.2gx" % min(8, float(R)),
                        "%.2fx" % PAPER_SPEEDUP])
    section(lines, "target %s, lr %s%s, cap %s fresh examples, pinned %s" % (
        t["target_acc"], t["lr"], warm, t["max_fresh"], t["pinned"]),
        run_cmd, table(["R set", "R delivered (median)",
                        "R measured by echo: median (range)", "echo",
                        "time to target, s (median)", "range", "reached",
                        "effective e", "trainer examples/s", "speedup",
                        "ceiling min(8, R)", "paper"], out))
    lines += ["", "![time to target against R, pinned]"
              "(img/network_pinned_time_vs_R.png)"]
    return lines


def plot(rows, work, img):
    plots = []
    for (v,), rs in sorted(groups(rows, ["variant"]).items(),
                           key=lambda kv: vkey(kv[0][0])):
        path = os.path.join(work, "pinned-%s.dat" % v)
        write_points(path, [
            (R, summary([reached_value(r, "time_to_target_s") for r in rr]))
            for (R,), rr in sorted(groups(rs, ["R"]).items(),
                                   key=lambda kv: float(kv[0][0]))])
        plots.append("'%s' using 1:2:3:4 with yerrorlines title '%s'" %
                     (path, label(v)))
    out = os.path.join(img, "network_pinned_time_vs_R.png")
    gnuplot("""set terminal png size 900,500
set output '%s'
set title 'CNN, shards over rate-limited HTTP, nginx and trainer on separate cores: seconds to %s%%'
set xlabel 'R set by limit\\_rate'
set ylabel 'seconds to target (median and range)'
set yrange [0:*]
set logscale x 2
set xrange [3.5:9]
set key top left
set grid
plot %s
""" % (out, num(100 * float(rows[0]["target_acc"]), 0), ", ".join(plots)))
    return [out]

