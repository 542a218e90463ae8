"""Time to target over a rate-limited network (the paper's 3.25x
headline): the MLP reading WebDataset shards from nginx at 1/R of the
trainer's rate, without echo, at fixed echo factors and with automatic
echoing."""
import math
import os
import statistics

from .cells import ECHO_SHUFFLE, cell, example_echo
from .nginx import FMNIST, Upstream
from .render import cell_summary, gnuplot, section, table
from .results import ekey, fmt, groups, num, reached_value, summary

NAME = "network"
TITLE = "Time to target over a rate-limited network (MLP)"
PAPER = "the paper's 3.25x headline"
PAPER_SPEEDUP = 3.25  # ResNet-50 on ImageNet over a network, the headline

def cells(quick):
    rs = [2, 8] if quick else [2, 4, 8]
    echoes = ["none", "4", "auto"] if quick else ["none", "2", "4", "8",
                                                  "auto"]
    seeds = [0] if quick else [0, 1, 2]
    t = dict(target_acc=0.85, max_fresh=300000) if quick else {}
    out = []
    for seed in seeds:
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


TEST_SPEC = ("idx:images=%s/t10k-images-idx3-ubyte.gz,"
             "labels=%s/t10k-labels-idx1-ubyte.gz | batch:1000"
             % (FMNIST, FMNIST))


class Environment:
    """What the network cells run in: the upstream, and their pipelines."""

    def __init__(self, binary, out_dir, work):
        self.upstream = Upstream(binary, out_dir, work)
        self.upstream.prepare()

    def data_args(self, c):
        self.upstream.serve(int(c["R"]))
        # As the preset: normalised with the training set's mean and std
        # (the trainer's defaults), shuffled, repeated, and a prefetch so the
        # slow upstream runs ahead of the trainer and the echo stage.
        echo = "echo:%s | " % c["echo"] if c["echo"] else ""
        spec = ("tar:urls=%s | decode:channels=1 | "
                "normalize:mean=0.2860,std=0.3530 | shuffle:1000 | repeat | "
                "prefetch:256 | %sbatch:%s | prefetch:4" %
                (self.upstream.urls(), echo, fmt(c["batch"])))
        return ["--spec", spec, "--test-spec", TEST_SPEC]

    def context(self, c):
        R = int(c["R"])
        up = self.upstream
        return {"upstream_rate": round(up.rate_at(R), 1),
                "limit_rate_bytes": up.limit(R),
                "calibrated_rate": round(up.rate, 1)}

    def stop(self):
        self.upstream.stop()


def setup(binary, out_dir, work):
    return Environment(binary, out_dir, work)


def report(rows, run_cmd):
    t = rows[0]
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
        with open(path, "w") as f:
            for (R,), rr in sorted(groups(rs, ["R"]).items(),
                                   key=lambda kv: float(kv[0][0])):
                s = summary([reached_value(r, "time_to_target_s")
                             for r in rr])
                if s[0] < math.inf:
                    f.write("%s %g %g %g\n" % (R, s[0], s[1],
                                               s[2] if s[2] < math.inf
                                               else s[0]))
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
