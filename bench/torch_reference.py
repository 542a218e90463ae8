#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for echoflow's C trainer (`echoflow train`).

The same models, initialisation, loss and optimiser as echoflow's reference
trainer (train/model.c), trained on Fashion-MNIST held in memory:

  mlp  784-256-256-10, ReLU
  cnn  conv5x5x32 (same) - ReLU - maxpool2 - conv5x5x64 (same) - ReLU -
       maxpool2 - fc 3136->256 - ReLU - fc 256->10
  weights He-normal (kaiming_normal_, fan_in, relu), biases zero;
  mean softmax cross-entropy; SGD(lr, momentum=0.9, nesterov=True).

Subcommands (each prints JSON lines on stdout):

  throughput --model mlp|cnn [--threads T] [--seconds S] [--warmup N]
      examples/s of training steps only (forward, backward, SGD step) on
      batches sliced from a pre-shuffled in-memory tensor; no augmentation.
      Set OPENBLAS_NUM_THREADS in the environment before starting this
      process (OpenBLAS reads it when it is loaded); --threads goes to
      torch.set_num_threads.

  to-target --seed S [--target 0.88] [--lr 0.03] [--eval-every 10000]
      the MLP trained on a stream of reshuffled epochs cut into batches of
      128 (batches run across epoch boundaries, like echoflow's
      `shuffle:60000 | repeat | batch:128`); evaluates on the full 10k test
      set whenever the fresh-example count passes a multiple of
      --eval-every, and stops at the first evaluation >= --target.

Run with Debian's interpreter: /usr/bin/python3 (python3-torch, python3-numpy).
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def load_idx(name, header):
    with gzip.open(os.path.join(FMNIST, name), "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


def load_split(split, torch):
    x = load_idx(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    y = load_idx(f"{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    x = ((x.astype(np.float32) / 255.0 - MEAN) / STD).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def build_model(name, torch):
    nn = torch.nn
    if name == "mlp":
        layers = [nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                  nn.ReLU(), nn.Linear(256, 10)]
    else:
        layers = [nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                  nn.Flatten(), nn.Linear(3136, 256), nn.ReLU(),
                  nn.Linear(256, 10)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def shape_inputs(x, model_name):
    return x.view(-1, 1, 28, 28) if model_name == "cnn" else x


def blas_libraries():
    """The BLAS/LAPACK shared objects mapped into this process."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path).lower()
            if path.startswith("/") and ("blas" in base or "lapack" in base):
                libs.add(path)
    return sorted(libs)


def env_info(torch):
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "blas_libs": blas_libraries(),
    }


def train_step(model, opt, loss_fn, xb, yb):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss


def cmd_throughput(a):
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load_split("train", torch)
    x = shape_inputs(x, a.model)
    model = build_model(a.model, torch)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9,
                          nesterov=True, weight_decay=0)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(a.seed)
    b = a.batch
    nb = x.shape[0] // b

    def shuffled():
        perm = torch.randperm(x.shape[0], generator=gen)
        return x[perm].contiguous(), y[perm].contiguous()

    xs, ys = shuffled()
    i = 0
    for _ in range(a.warmup):
        train_step(model, opt, loss_fn, xs[i * b:(i + 1) * b],
                   ys[i * b:(i + 1) * b])
        i += 1
    elapsed, steps = 0.0, 0
    t0 = time.perf_counter()
    while True:
        if i == nb:  # a new epoch; the reshuffle is not timed
            elapsed += time.perf_counter() - t0
            xs, ys = shuffled()
            i = 0
            t0 = time.perf_counter()
        loss = train_step(model, opt, loss_fn, xs[i * b:(i + 1) * b],
                          ys[i * b:(i + 1) * b])
        i += 1
        steps += 1
        if steps % 5 == 0 and elapsed + time.perf_counter() - t0 >= a.seconds:
            break
    elapsed += time.perf_counter() - t0
    out = {"side": "pytorch", "mode": "throughput", "model": a.model,
           "batch": b, "steps": steps, "examples": steps * b,
           "train_time_s": round(elapsed, 4),
           "train_examples_per_s": round(steps * b / elapsed, 2),
           "final_train_loss": round(float(loss), 4),
           "warmup_steps": a.warmup, "augmentation": False}
    out.update(env_info(torch))
    print(json.dumps(out), flush=True)


def evaluate(model, xt, yt):
    import torch
    model.eval()
    hits, total = 0, 0.0
    with torch.no_grad():
        for at in range(0, xt.shape[0], 1000):
            logits = model(xt[at:at + 1000])
            yb = yt[at:at + 1000]
            total += float(torch.nn.functional.cross_entropy(
                logits, yb, reduction="sum"))
            hits += int((logits.argmax(1) == yb).sum())
    model.train()
    return hits / xt.shape[0], total / xt.shape[0]


def cmd_to_target(a):
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    x, y = load_split("train", torch)
    xt, yt = load_split("t10k", torch)
    x, xt = shape_inputs(x, a.model), shape_inputs(xt, a.model)
    model = build_model(a.model, torch)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9,
                          nesterov=True, weight_decay=0)
    loss_fn = torch.nn.CrossEntropyLoss()
    n, b = x.shape[0], a.batch

    def batches():  # reshuffled epochs, batches across epoch boundaries
        carry = np.empty(0, dtype=np.int64)
        while True:
            idx = np.concatenate([carry, rng.permutation(n)])
            k = len(idx) // b * b
            for s in range(0, k, b):
                yield torch.from_numpy(idx[s:s + b])
            carry = idx[k:]

    fresh = steps = 0
    next_eval = a.eval_every
    train_s = eval_s = 0.0
    acc = loss = None
    reached = False
    evals = []
    t0 = time.perf_counter()
    for bi in batches():
        if fresh >= a.max_fresh:
            break
        train_step(model, opt, loss_fn, x[bi], y[bi])
        steps += 1
        fresh += len(bi)
        if fresh >= next_eval:
            te = time.perf_counter()
            train_s = te - t0 - eval_s  # training time so far
            acc, loss = evaluate(model, xt, yt)
            eval_s += time.perf_counter() - te
            evals.append([fresh, round(acc, 4)])
            while next_eval <= fresh:
                next_eval += a.eval_every
            if acc >= a.target:
                reached = True
                break
    if not reached:
        train_s = time.perf_counter() - t0 - eval_s
    out = {"side": "pytorch", "mode": "to-target", "model": a.model,
           "seed": a.seed, "lr": a.lr, "batch": b, "target_acc": a.target,
           "reached": reached, "fresh_to_target": fresh if reached else 0,
           "steps_to_target": steps if reached else 0,
           "time_to_target_s": round(train_s, 3) if reached else 0,
           "fresh": fresh, "steps": steps,
           "final_accuracy": acc, "final_loss": loss, "evals": evals,
           "torch_threads": torch.get_num_threads()}
    print(json.dumps(out), flush=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput", help="training examples/s")
    t.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    t.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads")
    t.add_argument("--seconds", type=float, default=10.0)
    t.add_argument("--warmup", type=int, default=20)
    t.add_argument("--batch", type=int, default=128)
    t.add_argument("--lr", type=float, default=0.03)
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(func=cmd_throughput)
    g = sub.add_parser("to-target", help="fresh examples to a test accuracy")
    g.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--target", type=float, default=0.88)
    g.add_argument("--lr", type=float, default=0.03)
    g.add_argument("--batch", type=int, default=128)
    g.add_argument("--eval-every", type=int, default=10000)
    g.add_argument("--max-fresh", type=int, default=3000000)
    g.add_argument("--threads", type=int, default=1)
    g.set_defaults(func=cmd_to_target)
    a = p.parse_args(argv)
    a.func(a)


if __name__ == "__main__":
    main(sys.argv[1:])
