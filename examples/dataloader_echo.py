# SPDX-License-Identifier: Apache-2.0
"""Time to accuracy of a stock torchvision pipeline, as it is and wrapped
in one line of echoflow.torch.echo().

    /usr/bin/python3 examples/dataloader_echo.py           # a few minutes
    /usr/bin/python3 examples/dataloader_echo.py --quick   # under a minute
    /usr/bin/python3 examples/dataloader_echo.py --json

(from a build tree: PYTHONPATH=build/python.)

The data is an image folder in torchvision's ImageFolder layout
(ROOT/train/CLASS/*.png, ROOT/test/CLASS/*.png), written once from
Fashion-MNIST (Debian's dataset-fashion-mnist) under --root and reused.
The training pipeline is what a PyTorch user already has, untouched:

    train = ImageFolder(ROOT/train, transform=Compose([Grayscale(),
                RandomCrop(28, padding=2), RandomHorizontalFlip(),
                ToTensor()]), loader=slow_loader)
    loader = DataLoader(train, batch_size=64, shuffle=True, num_workers=2)

slow_loader opens each file after a fixed delay, as a file system behind
a network would: that makes the input the bottleneck. The script first
measures how many examples per second the trainer itself consumes
(batches already in memory), then sets the delay so that the two workers
deliver that over --ratio (R = upstream time / step time, 4 by default).
A small CNN then trains to --target test accuracy twice, from the same
initial weights:

    as it is   for images, labels in loader
    echoed     for images, labels in echoflow.torch.echo(loader, max=4)

echo() splits each batch into its examples, echoes them only while the
training loop would otherwise wait (factor="auto"), shuffles the copies
apart and batches them again at 64. Time to target is wall-clock time
from the first batch to the evaluation that reached the target,
evaluations included (the DataLoader reads on while the trainer
evaluates). It prints both runs (time, epochs, steps, examples
read from the DataLoader, the echo stage's effective factor) and the
speedup measured in that run. Times move with the machine's load: compare
runs made side by side, as this script does.
"""
import argparse
import gzip
import json
import os
import sys
import tempfile
import time

import numpy
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import default_loader

from echoflow.torch import echo

FASHION_MNIST = os.environ.get("EF_FASHION_MNIST_DIR",
                               "/usr/share/datasets/fashion-mnist")
CLASSES = ["0-tshirt", "1-trouser", "2-pullover", "3-dress", "4-coat",
           "5-sandal", "6-shirt", "7-sneaker", "8-bag", "9-boot"]
WORKERS = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=os.path.join(
        tempfile.gettempdir(), "echoflow-imagefolder"),
        help="the image folder, written on first use (default %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="a small run: few images, a low target")
    p.add_argument("--per-class", type=int, default=1000,
                   help="training images per class (default %(default)s)")
    p.add_argument("--test-per-class", type=int, default=100,
                   help="test images per class (default %(default)s)")
    p.add_argument("--target", type=float, default=0.80,
                   help="test accuracy to reach (default %(default)s)")
    p.add_argument("--max-epochs", type=int, default=20,
                   help="each run stops there (default %(default)s)")
    p.add_argument("--eval-every", type=int, default=25,
                   help="steps between evaluations (default %(default)s)")
    p.add_argument("--ratio", type=float, default=4.0,
                   help="R to set: trainer rate over upstream rate")
    p.add_argument("--max-echo", type=int, default=4,
                   help="echo(max=...): uses of an example at most")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    if args.quick:
        args.per_class, args.test_per_class = 150, 50
        args.target, args.max_epochs, args.eval_every = 0.55, 8, 5
    if not 0 < args.target < 1 or args.ratio <= 0 or args.per_class < 1:
        p.error("--target must be in (0, 1), --ratio and --per-class > 0")
    return args


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def read_idx(name):
    with gzip.open(os.path.join(FASHION_MNIST, name)) as f:
        data = f.read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
             for i in range(ndim)]
    return numpy.frombuffer(data, numpy.uint8, offset=4 + 4 * ndim) \
        .reshape(shape)


def write_split(root, split, prefix, per_class):
    """ROOT/split/CLASS/NNNNN.png for the first per_class images of each
    class of Fashion-MNIST's split `prefix`; kept when already there."""
    done = os.path.join(root, split, ".complete-%d" % per_class)
    if os.path.exists(done):
        return
    images = read_idx(prefix + "-images-idx3-ubyte.gz")
    labels = read_idx(prefix + "-labels-idx1-ubyte.gz")
    for c, name in enumerate(CLASSES):
        d = os.path.join(root, split, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        for i in numpy.flatnonzero(labels == c)[:per_class]:
            Image.fromarray(images[i]).save(os.path.join(d, "%05d.png" % i))
    open(done, "w").close()


class SlowLoader:
    """ImageFolder's loader behind a fixed delay per file, as a network
    file system would add (a class, so that workers can pickle it)."""

    def __init__(self, delay):
        self.delay = delay

    def __call__(self, path):
        time.sleep(self.delay)
        return default_loader(path)


TRANSFORM = transforms.Compose([
    transforms.Grayscale(), transforms.RandomCrop(28, padding=2),
    transforms.RandomHorizontalFlip(), transforms.ToTensor()])


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 10))


def step(model, opt, images, labels):
    loss = F.cross_entropy(model(images), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()


def load_test(root):
    test = ImageFolder(os.path.join(root, "test"),
                       transform=transforms.Compose([transforms.Grayscale(),
                                                     transforms.ToTensor()]))
    images, labels = next(iter(DataLoader(test, batch_size=len(test))))
    return images, labels


def accuracy(model, test):
    with torch.no_grad():
        return (model(test[0]).argmax(1) == test[1]).float().mean().item()


def trainer_rate(root, args):
    """Examples per second the trainer consumes on batches in memory."""
    train = ImageFolder(os.path.join(root, "train"), transform=TRANSFORM)
    batches = list(zip(range(12), DataLoader(train, batch_size=args.batch,
                                             shuffle=True)))
    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for _, (x, y) in batches[:2]:  # warm up
        step(model, opt, x, y)
    t = time.perf_counter()
    for _, (x, y) in batches[2:]:
        step(model, opt, x, y)
    return (len(batches) - 2) * args.batch / (time.perf_counter() - t)


def train_run(name, loader, wrap, test, args):
    """Trains to the target; the run's figures as a dict. Its time is
    wall-clock time from the first batch asked for to the evaluation that
    reached the target, evaluations included: the upstream reads on while
    the trainer evaluates, into buffers as deep as each run has, so time
    spent evaluating is no free reading for either."""
    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    res = {"run": name, "reached": False, "steps": 0, "epochs": 0}
    trained, fresh, emitted = 0, 0, 0
    start = time.perf_counter()
    for epoch in range(args.max_epochs):
        torch.manual_seed(args.seed + epoch)  # the same order in both runs
        batches = wrap(loader)
        for images, labels in batches:
            step(model, opt, images, labels)
            res["steps"] += 1
            trained += len(labels)
            if res["steps"] % args.eval_every == 0:
                res["accuracy"] = accuracy(model, test)
                if res["accuracy"] >= args.target:
                    res["reached"] = True
                    break
        res["epochs"] = epoch + 1
        if hasattr(batches, "stats"):  # the echo stage's counts
            stage = batches.stats()["stages"][1]
            fresh += int(stage["fresh"])
            emitted += int(stage["fresh"] + stage["echoed"])
        if res["reached"]:
            break
    res["time_s"] = time.perf_counter() - start
    if not res["reached"]:
        res["accuracy"] = accuracy(model, test)
    # read from the DataLoader: without echo, what was trained on; with
    # it, what the echo stage took in (its buffers' read-ahead included)
    res["examples_read"] = fresh if emitted else trained
    res["effective_factor"] = emitted / fresh if emitted else 1.0
    log("%s: %s after %.1f s, %d steps, %d epochs" % (
        name, "target reached" if res["reached"] else "target not reached",
        res["time_s"], res["steps"], res["epochs"]))
    return res


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)  # the other core is the workers'
    write_split(args.root, "train", "train", args.per_class)
    write_split(args.root, "test", "t10k", args.test_per_class)
    test = load_test(args.root)
    rate = trainer_rate(args.root, args)
    delay = WORKERS * args.ratio / rate
    log("trainer: %.0f examples/s; each file read %.2f ms late, so the "
        "%d workers give about %.0f/s (R = %.1f)" % (
            rate, 1e3 * delay, WORKERS, WORKERS / delay, args.ratio))
    train = ImageFolder(os.path.join(args.root, "train"), transform=TRANSFORM,
                        loader=SlowLoader(delay))
    loader = DataLoader(train, batch_size=args.batch, shuffle=True,
                        num_workers=WORKERS)
    runs = [train_run("as it is", loader, lambda dl: dl, test, args),
            train_run("echoed", loader,
                      lambda dl: echo(dl, max=args.max_echo, seed=args.seed),
                      test, args)]
    both = all(r["reached"] for r in runs)
    speedup = runs[0]["time_s"] / runs[1]["time_s"] if both else None
    out = {"trainer_rate": rate, "delay_s": delay, "ratio": args.ratio,
           "target": args.target, "runs": runs, "speedup": speedup}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print("%-9s %8s %7s %6s %9s %7s" % ("run", "time_s", "epochs", "steps",
                                         "examples", "factor"))
    for r in runs:
        print("%-9s %8.1f %7d %6d %9d %7.2f%s" % (
            r["run"], r["time_s"], r["epochs"], r["steps"],
            r["examples_read"], r["effective_factor"],
            "" if r["reached"] else "  (target not reached)"))
    if speedup:
        print("speedup to %.0f%% test accuracy: %.2fx" % (
            100 * args.target, speedup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
