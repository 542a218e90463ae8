# SPDX-License-Identifier: Apache-2.0
"""A cell is one `echoflow train` run with its settings; running one gives
its CSV row."""
import datetime
import json
import subprocess
import sys
import time

from .results import OPTIONAL_RESULTS, RESULTS, ROOT, fmt

FIXED_LR = 0.03
# The echo shuffle buffer of the "copies shuffled" variants: the baseline
# shuffles the whole training set, and copies must land in different batches
# for example echoing to pay (the shuffle experiment measures 0, 1000, 10000).
ECHO_SHUFFLE = 10000


def run_torch_trainer(args, env, trainer, c, results, commit):
    """Runs a PyTorch trainer process that prints one JSON object (lm's,
    detection's): the cell's CSV row with the object's `results`, reached,
    diverged and curve (step:fresh:value;...), the commit, wall time and
    date; and the object. (None, None) on failure, stderr shown."""
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        print("FAILED (exit %d): %s\n%s" % (p.returncode, " ".join(args),
                                           p.stderr.strip()),
              file=sys.stderr)
        return None, None
    try:
        r = json.loads(p.stdout)
    except ValueError as e:
        print("FAILED: %s printed no JSON object (%s): %r" %
              (trainer, e, p.stdout[:200]), file=sys.stderr)
        return None, None
    row = dict(c)
    for k in results:
        row[k] = r.get(k)
    row["reached"] = int(bool(r["reached"]))
    row["diverged"] = int(bool(r["diverged"]))
    row["curve"] = ";".join("%d:%d:%g" % tuple(x) for x in r["curve"])
    row.update(commit=commit, wall_s=round(wall, 2),
               date=datetime.datetime.now(datetime.timezone.utc)
               .strftime("%Y-%m-%dT%H:%M:%SZ"))
    return row, r


def cell(experiment, variant, **kw):
    c = {"experiment": experiment, "variant": variant, "model": "mlp",
         "source": "preset", "echo": "", "echo_at": "", "e": 1,
         "shuffle": "", "batch": 128, "lr": FIXED_LR, "warmup": "", "seed": 0,
         "target_acc": 0.88, "max_fresh": 600000, "eval_every": 10000,
         "R": "", "threads": 1, "policy": "", "mix": "", "holdout": "",
         "pinned": ""}
    c.update(kw)
    return c


def seeds(quick):
    """The seeds of an experiment's grid: one in a quick run."""
    return [0] if quick else [0, 1, 2]


def quick_mlp(quick):
    """A quick run's lower MLP target and cap, so each cell takes seconds;
    the full run keeps cell()'s."""
    return dict(target_acc=0.85, max_fresh=200000) if quick else {}


def example_echo(e, shuffle):
    return "factor=%s,shuffle=%d" % (fmt(e), shuffle)


def smoke_cells():
    # One MLP cell that reaches a low target in a second or two.
    return [cell("smoke", "example-shuffled", e=2, echo=example_echo(2, 100),
                 echo_at="before-augment", shuffle=100, target_acc=0.7,
                 max_fresh=50000, eval_every=5000)]


def commit_id():
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12",
                            "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain",
                                "--untracked-files=no", "--", "src", "cli",
                                "train", "include"],
                               capture_output=True, text=True).stdout.strip()
        return c + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def train_args(c, env):
    """The trainer's arguments for cell c. A cell whose source is not the
    preset gets its data options from its experiment's environment (env),
    which also says what to record about the run."""
    a = ["train", "--json", "--model", c["model"], "--batch", fmt(c["batch"]),
         "--lr", fmt(c["lr"]), "--seed", fmt(c["seed"]),
         "--target-acc", fmt(c["target_acc"]),
         "--max-fresh", fmt(c["max_fresh"]),
         "--eval-every", fmt(c["eval_every"])]
    # (holdout stays a setting for old rows; the trainer no longer takes
    # --holdout, and no cell sets it)
    for opt in ["threads", "warmup"]:
        if fmt(c[opt]):
            a += ["--" + opt, fmt(c[opt])]
    if c["source"] != "preset":
        return a + env.data_args(c)
    a += ["--data", "fashion-mnist"]
    if c["echo"]:
        a += ["--echo", c["echo"], "--echo-at", c["echo_at"]]
    return a


def run_cell(binary, c, env, commit):
    """Runs one cell; returns its CSV row, or None (stderr shown) on failure.
    An environment with a prefix(c) method runs the trainer under it (the
    pinned network's taskset)."""
    args = [binary] + train_args(c, env)
    if env is not None and hasattr(env, "prefix"):
        args = env.prefix(c) + args
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        print("FAILED (exit %d): %s\n%s" % (p.returncode, " ".join(
            "'%s'" % x if " " in x else x for x in args),
            p.stderr.strip()), file=sys.stderr)
        return None
    try:
        r = json.loads(p.stdout)
    except ValueError as e:
        print("FAILED: %s printed no JSON object (%s): %r" %
              (binary, e, p.stdout[:200]), file=sys.stderr)
        return None
    row = dict(c)
    for k in RESULTS:
        if k in OPTIONAL_RESULTS:
            v = r.get(OPTIONAL_RESULTS[k])
            row[k] = "" if v is None else v
        elif not k.startswith("echo_"):
            row[k] = r[k]
    row["reached"] = int(bool(r["reached"]))
    row["diverged"] = int(bool(r["diverged"]))
    echo = r.get("echo") or {}
    row["echo_effective_factor"] = echo.get("effective_factor", 1.0)
    row["echo_r_estimate"] = echo.get("r_estimate", "")
    if not row["echo_policy"]:
        row["echo_policy"] = echo.get("policy", "")
    if c["source"] != "preset":
        row.update(env.context(c))
    row.update(commit=commit, wall_s=round(wall, 2),
               date=datetime.datetime.now(datetime.timezone.utc)
               .strftime("%Y-%m-%dT%H:%M:%SZ"))
    return row
