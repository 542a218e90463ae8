# SPDX-License-Identifier: Apache-2.0
"""Time to accuracy with and without data echoing, for a PyTorch CNN that
reads Fashion-MNIST over HTTP through echoflow.

    /usr/bin/python3 examples/pytorch_train.py              # a few minutes
    /usr/bin/python3 examples/pytorch_train.py --quick      # under a minute
    /usr/bin/python3 examples/pytorch_train.py --seed 2 --target 0.88 --json

(from a build tree: PYTHONPATH=build/python; ECHOFLOW_CLI names the
`echoflow` command when it is not build/echoflow.)

The training split is packed once into WebDataset tar shards under --work
(the folder is reused by later runs) and served by nginx on loopback. A
small CNN (two conv-relu-pool blocks and a dense layer) trains on batches
from

    tar:urls=http://127.0.0.1:PORT/train-{000000..000005}.tar | repeat
        | decode | shuffle:10000 | throttle:rate=RATE | prefetch:256
        | ECHO | batch:128,drop_remainder=true

through echoflow.torch.Loader. The throttle makes the input the
bottleneck: first the script measures how many examples per second the
trainer itself consumes (a short run on batches already in memory), then
RATE is that over --ratio (4), so R = upstream time / step time is about 4,
as in scripts/demo.sh. (On a small or busy machine the pipeline's own
threads, reading HTTP and decoding PNG, take CPU from the trainer, so the
R the echo stage measures may come out below --ratio.) The CNN then
trains to --target test accuracy twice, from the same initial weights and
the same data order:

    no echo    ECHO = echo:factor=1 (each item once: no echoing; the stage
               is there to measure R)
    auto echo  ECHO = echo:factor=auto,max=8,shuffle=10000 (echoes only
               while the step would otherwise wait)

Every --eval-every fresh examples it evaluates on the t10k split (read
once into memory through an echoflow.Pipeline). Fresh examples are counted
exactly: each batch's identity.fresh says how many of its examples were
not echoes. Time to target is training time: from asking for the first
batch to the evaluation that reached the target, evaluations excluded.
--max-fresh caps each run. It prints a table of both runs: time, fresh
examples and steps to the target, the echo stage's effective factor, and
its estimate of R (read after a few more seconds of training, uncounted,
so that no evaluation pause is in its window), and the speedup measured
(time without echoing over time with it); or with --json one JSON
object. Training times move with the machine's load: on a shared machine
compare runs made side by side, as this script does.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import echoflow
from echoflow.torch import Loader, to_torch

import shards  # examples/shards.py, beside this file

# Fashion-MNIST's training-set pixel mean and standard deviation (of x/255)
MEAN, STD = 0.2860, 0.3530

# Defaults of a full run and of --quick: the quick one exercises every part
# (pack, nginx, throttle, both runs, the JSON) on a small budget, for tests.
FULL = {"target": 0.88, "max_fresh": 150000, "eval_every": 5000,
        "test_examples": 10000, "warm_examples": 12800}
QUICK = {"target": 0.70, "max_fresh": 6000, "eval_every": 2000,
         "test_examples": 2000, "warm_examples": 3840}

# Seconds of training after a run, for the echo stage's R estimate (see
# steady_r_estimate)
R_WINDOW_S = 2.5

RUNS = (("no echo", "echo:factor=1"),
        ("auto echo", "echo:factor=auto,max={max},shuffle={shuffle}"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train a CNN on Fashion-MNIST shards served over HTTP "
                    "to a target accuracy, without and with data echoing, "
                    "behind an upstream throttled to 1/RATIO of the "
                    "trainer's rate.")
    p.add_argument("--work", default=os.path.join(
        tempfile.gettempdir(), "echoflow-pytorch-train"),
        help="folder of the packed shards, reused across runs "
             "(default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="a short run for tests: defaults %s" % QUICK)
    p.add_argument("--target", type=float,
                   help="test accuracy to reach (default %.2f)"
                        % FULL["target"])
    p.add_argument("--max-fresh", type=int,
                   help="most fresh examples per run (default %d)"
                        % FULL["max_fresh"])
    p.add_argument("--eval-every", type=int,
                   help="fresh examples between evaluations (default %d)"
                        % FULL["eval_every"])
    p.add_argument("--test-examples", type=int,
                   help="t10k examples evaluated on (default %d)"
                        % FULL["test_examples"])
    p.add_argument("--warm-examples", type=int,
                   help="examples of the run that measures the trainer's "
                        "rate (default %d)" % FULL["warm_examples"])
    p.add_argument("--ratio", type=float, default=4.0,
                   help="R: the upstream is throttled to the trainer's "
                        "rate over this (default %(default)s)")
    p.add_argument("--rate", type=float,
                   help="upstream examples/s: skips measuring the trainer")
    p.add_argument("--max-echo", type=int, default=8,
                   help="echo stage's max (default %(default)s)")
    p.add_argument("--echo-shuffle", type=int, default=10000,
                   help="echo stage's shuffle buffer (default %(default)s)")
    p.add_argument("--batch", type=int, default=128,
                   help="examples per step (default %(default)s)")
    p.add_argument("--lr", type=float, default=0.05,
                   help="SGD learning rate (default %(default)s)")
    p.add_argument("--momentum", type=float, default=0.9,
                   help="Nesterov momentum (default %(default)s)")
    p.add_argument("--seed", type=int, default=1,
                   help="seeds the weights and the data order")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: the pipeline's threads "
                        "need the other core of a small machine)")
    p.add_argument("--json", action="store_true",
                   help="print the results as one JSON object")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    check_args(p, args)
    return args


def check_args(parser, args):
    """Rejects values the run cannot use, naming the option."""
    if not 0 < args.target <= 1:
        parser.error("--target must be in (0, 1], not %g" % args.target)
    for name in ("max_fresh", "eval_every", "test_examples", "warm_examples",
                 "batch", "max_echo", "threads"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % name.replace("_", "-"))
    if args.test_examples > 10000:
        parser.error("--test-examples: t10k has 10000")
    if args.echo_shuffle < 0:
        parser.error("--echo-shuffle must be at least 0")
    if args.ratio <= 0 or (args.rate is not None and args.rate <= 0):
        parser.error("--ratio and --rate must be positive")
    if not 0 <= args.seed < 2**63:
        parser.error("--seed must be in [0, 2**63)")


def log(*parts):
    # progress goes to stderr, so that stdout holds only the result
    print(*parts, file=sys.stderr, flush=True)


# ---- model -----------------------------------------------------------------

def make_model(seed):
    """The CNN, its weights drawn from `seed`: small enough that one core
    takes thousands of examples per second."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 7 * 7, 10))


def make_optimizer(model, args):
    return torch.optim.SGD(model.parameters(), lr=args.lr,
                           momentum=args.momentum, nesterov=True)


def to_input(images):
    """u8 images, [B,28,28,1] (decode) or [B,28,28] (idx), as normalised
    f32 [B,1,28,28]. The result is a new tensor: the pipeline's memory,
    shared with echoed copies, is never written."""
    if images.dim() == 3:
        x = images.unsqueeze(1)
    else:
        x = images.permute(0, 3, 1, 2)
    return (x.float() / 255 - MEAN) / STD


def train_step(model, opt, images, labels):
    loss = F.cross_entropy(model(to_input(images)), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def evaluate(model, test):
    """Accuracy on the test set. Chunks of 250: with this torch's generic
    BLAS, convolutions over much larger batches are several times slower
    per example."""
    x, y = test
    correct = 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(y), 250):
            logits = model(x[i:i + 250])
            correct += (logits.argmax(1) == y[i:i + 250]).sum().item()
    model.train()
    return correct / len(y)


# ---- data ------------------------------------------------------------------

def load_test_set(count):
    """The first `count` t10k examples, read once through echoflow into
    torch tensors of their own (normalised images, labels)."""
    spec = "%s | take:count=%d | batch:size=%d" % (
        shards.fashion_mnist("t10k"), count, count)
    with echoflow.Pipeline(spec) as p:
        batch = to_torch(next(iter(p)))
        return to_input(batch["image"]), batch["label"].clone()


def train_spec(base_url, pattern, args, rate=None, echo=None):
    """The training pipeline. The throttle stands after the shuffle: a
    shuffle fills its buffer before its first item, which behind the
    throttle would take buffer/rate seconds; the prefetch lets the slow
    upstream run ahead of the trainer, as a network reader would."""
    stages = ["tar:urls=%s/%s" % (base_url, pattern), "repeat", "decode",
              "shuffle:10000"]
    if rate is not None:
        stages += ["throttle:rate=%.1f" % rate, "prefetch:256"]
    if echo is not None:
        stages.append(echo)
    stages.append("batch:size=%d,drop_remainder=true" % args.batch)
    return " | ".join(stages)


def echo_stats(loader):
    """The echo stage's figures from the loader's current pipeline."""
    stats = loader.stats()
    if not stats:
        return {}
    return next((s for s in stats["stages"] if s["name"] == "echo"), {})


def steady_r_estimate(batches, model, opt, loader):
    """The echo stage's R estimate over training alone: training goes on,
    uncounted, for R_WINDOW_S first. The stage measures R over about the
    last two seconds of flow (8 readings 0.25 s apart), where a pause of
    the trainer, an evaluation, counts as step time and makes R look
    several times smaller."""
    end = time.perf_counter() + R_WINDOW_S
    for batch in batches:
        train_step(model, opt, batch["image"], batch["label"])
        if time.perf_counter() >= end:
            break
    return echo_stats(loader).get("r_estimate")


# ---- measuring the trainer -------------------------------------------------

def read_batches(spec, count, seed):
    """`count` batches of the unthrottled pipeline, copied into memory."""
    out = []
    batches = iter(Loader(spec, seed=seed))
    for batch in batches:
        out.append((batch["image"].clone(), batch["label"].clone()))
        if len(out) == count:
            break
    batches.close()  # ends the iteration: its pipeline is closed
    return out


def trainer_rate(batches, args):
    """Examples per second the trainer consumes when data costs nothing:
    steps of a throwaway model over batches in memory, after a few to warm
    up (the first calls allocate)."""
    model = make_model(args.seed)
    opt = make_optimizer(model, args)
    for images, labels in batches[:3]:
        train_step(model, opt, images, labels)
    steps = max(len(batches), args.warm_examples // args.batch)
    start = time.perf_counter()
    for i in range(steps):
        images, labels = batches[i % len(batches)]
        train_step(model, opt, images, labels)
    return steps * args.batch / (time.perf_counter() - start)


# ---- one training run ------------------------------------------------------

class Clock:
    """Training time: wall time since start() less the evaluations."""

    def __init__(self):
        self.start_s = None
        self.eval_s = 0.0

    def start(self):
        self.start_s = time.perf_counter()

    def train_s(self):
        return time.perf_counter() - self.start_s - self.eval_s


def count_fresh(identity):
    """Fresh examples in a batch. With example echoing (echo before batch)
    a batch's echo_copy is 0 and identity.fresh counts its examples that
    are not echoes; a batch echoed whole (echo after batch) repeats one
    whose examples were already counted."""
    return identity.fresh if identity.echo_copy == 0 else 0


def train_run(name, spec, test, args):
    """Trains a new model on `spec` until the target or --max-fresh; the
    run's figures as a dict."""
    model = make_model(args.seed)
    opt = make_optimizer(model, args)
    loader = Loader(spec, seed=args.seed)
    batches = iter(loader)
    res = {"name": name, "spec": spec, "reached": False,
           "time_to_target_s": None, "fresh_to_target": None,
           "steps_to_target": None, "fresh": 0, "steps": 0, "examples": 0,
           "accuracy": None, "evaluations": []}
    clock, next_eval, echo = Clock(), args.eval_every, {}
    clock.start()  # the pipeline's start-up counts: Loader builds it lazily
    for batch in batches:
        loss = train_step(model, opt, batch["image"], batch["label"])
        res["steps"] += 1
        res["examples"] += len(batch["label"])
        res["fresh"] += count_fresh(batch.identity)
        if res["fresh"] < next_eval and res["fresh"] < args.max_fresh:
            continue
        # the stage's counts as they are at this step, before the pause
        echo = echo_stats(loader)
        if evaluate_now(model, test, clock, res, loss, args):
            break
        while next_eval <= res["fresh"]:
            next_eval += args.eval_every
        if res["fresh"] >= args.max_fresh:
            break
    res["train_s"], res["eval_s"] = clock.train_s(), clock.eval_s
    res["effective_factor"] = echo.get("effective_factor")
    res["echo_stage"] = echo
    res["r_estimate"] = steady_r_estimate(batches, model, opt, loader)
    batches.close()
    return res


def evaluate_now(model, test, clock, res, loss, args):
    """Evaluates, records the point, and says whether the target is
    reached. The evaluation's time is kept off the training clock."""
    train_s = clock.train_s()
    start = time.perf_counter()
    acc = evaluate(model, test)
    clock.eval_s += time.perf_counter() - start
    res["evaluations"].append({"fresh": res["fresh"], "steps": res["steps"],
                               "train_s": train_s, "accuracy": acc,
                               "loss": loss})
    log("  %-9s fresh %7d  steps %6d  %6.1f s  loss %.3f  test acc %.4f"
        % (res["name"], res["fresh"], res["steps"], train_s, loss, acc))
    res["accuracy"] = acc
    if acc < args.target:
        return False
    res.update(reached=True, time_to_target_s=train_s,
               fresh_to_target=res["fresh"], steps_to_target=res["steps"])
    return True


# ---- the report ------------------------------------------------------------

def speedup(runs):
    base, echo = runs
    if not (base["reached"] and echo["reached"]):
        return None
    return base["time_to_target_s"] / echo["time_to_target_s"]


def print_table(out):
    target = "%.1f%%" % (100 * out["target"])
    rate = out["trainer_examples_per_s"]
    print("\nCNN on Fashion-MNIST to %s test accuracy; upstream throttled "
          "to %.0f examples/s%s" % (
              target, out["throttle_rate"], "" if rate is None else
              ", 1/%g of the trainer's %.0f (R = %g)"
              % (out["ratio"], rate, out["ratio"])))
    print("%-10s %14s %15s %8s %12s %11s" % (
        "", "time to " + target, "fresh examples", "steps", "echo factor",
        "R estimate"))
    for r in out["runs"]:
        if r["reached"]:
            t, fresh, steps = ("%.1f s" % r["time_to_target_s"],
                               r["fresh_to_target"], r["steps_to_target"])
        else:
            t, fresh, steps = "not reached", r["fresh"], r["steps"]
        print("%-10s %14s %15s %8s %12s %11s" % (
            r["name"], t, "{:,}".format(fresh), "{:,}".format(steps),
            fmt(r["effective_factor"]), fmt(r["r_estimate"])))
    if out["speedup"] is None:
        print("\na run did not reach the target within --max-fresh %d: no "
              "speedup to report" % out["max_fresh"])
    else:
        print("\nspeedup from echoing, measured in this run: %.2fx "
              "(time without echoing / time with it)" % out["speedup"])


def fmt(value):
    return "-" if value is None else "%.2f" % value


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    pattern = shards.pack_fashion_mnist(args.work)
    test = load_test_set(args.test_examples)
    with shards.served(args.work) as base_url:
        rate = args.rate
        measured = None
        if rate is None:
            log("measuring the trainer on batches in memory...")
            batches = read_batches(train_spec(base_url, pattern, args),
                                   min(30, args.warm_examples // args.batch
                                       + 1), args.seed)
            measured = trainer_rate(batches, args)
            rate = measured / args.ratio
            log("  %.0f examples/s; the upstream is throttled to %.0f"
                % (measured, rate))
        runs = []
        for name, echo in RUNS:
            echo = echo.format(max=args.max_echo, shuffle=args.echo_shuffle)
            log("training, %s (%s)..." % (name, echo))
            spec = train_spec(base_url, pattern, args, rate, echo)
            runs.append(train_run(name, spec, test, args))
    out = {"target": args.target, "seed": args.seed, "batch": args.batch,
           "lr": args.lr, "ratio": args.ratio, "max_fresh": args.max_fresh,
           "eval_every": args.eval_every, "quick": args.quick,
           "test_examples": args.test_examples,
           "trainer_examples_per_s": measured, "throttle_rate": rate,
           "runs": runs, "speedup": speedup(runs)}
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
