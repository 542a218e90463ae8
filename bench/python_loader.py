# SPDX-License-Identifier: Apache-2.0
"""The Python binding benchmark, part 2: one PyTorch training loop fed by
PyTorch's DataLoader and by echoflow.torch.Loader, images/s of training.
Prints a markdown table on stdout, progress on stderr.

The work per image is decode_bench's: JPEG decode, random resized crop to
224x224, horizontal flip, normalisation with ImageNet's mean and std,
channels first, batches of 32.
  DataLoader  bench/torch_decode.py's dataset (PIL and torchvision
              transforms on the JPEG files), num_workers 0, 1 and 2, one
              torch thread in each worker
  echoflow    echoflow.torch.Loader on the WebDataset shard of the same
              JPEGs, threads=2 on every map stage, as decode_bench.sh
The loop: a small CNN (conv 7x7/4 to 16, conv 3x3/2 to 32, global average
pool, linear to 7 classes), cross-entropy, SGD with momentum, one torch
thread, the same on both sides. Startup (the first batch, worker processes)
is not counted. Every feeding runs once per round, in a rotating order;
the table gives each round and the median.

usage: python_loader.py DATA_DIR IMAGES_PER_RUN ROUNDS
DATA_DIR holds jpg/ and photos-000000.tar (bench/photos.py).
"""
import os
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

import echoflow.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_decode import Photos, worker_init  # noqa: E402

BATCH = 32
PHOTOS = 256  # images in the shard
SPEC = ("tar:urls={data}/photos-000000.tar | repeat:{reps} | take:{n} "
        "| decode:threads=2 | random_resized_crop:size=224,threads=2 "
        "| flip:threads=2 "
        '| normalize:mean="0.485,0.456,0.406",std="0.229,0.224,0.225",'
        "threads=2 | to_chw:threads=2 | batch:%d" % BATCH)


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=4, padding=3), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 7))


def train(batches):
    """Trains a fresh model on the (images, labels) of `batches`; images/s
    after the first batch."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    it = iter(batches)
    step(*next(it))
    start = time.perf_counter()
    images = 0
    for x, y in it:
        step(x, y)
        images += x.shape[0]
    return images / (time.perf_counter() - start)


def fixed_batches(n):
    """The loop with no loader: one batch in memory, n images' worth."""
    x = torch.randn(BATCH, 3, 224, 224)
    y = torch.arange(BATCH) % 7
    return ((x, y) for _ in range(n // BATCH))


def torch_batches(data, n, workers):
    loader = DataLoader(Photos(os.path.join(data, "jpg"), n),
                        batch_size=BATCH, shuffle=False, num_workers=workers,
                        worker_init_fn=worker_init, persistent_workers=False)
    return iter(loader)


def echoflow_batches(data, n):
    spec = SPEC.format(data=data, reps=-(-n // PHOTOS), n=n)
    return ((b["image"], b["label"]) for b in echoflow.torch.Loader(spec))


def fmt(x):
    return "{:,.1f}".format(x)


def row(cells):
    print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: python_loader.py DATA_DIR IMAGES_PER_RUN ROUNDS")
    data, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    feeds = [
        ("PyTorch DataLoader, 0 workers", lambda: torch_batches(data, n, 0)),
        ("PyTorch DataLoader, 1 worker", lambda: torch_batches(data, n, 1)),
        ("PyTorch DataLoader, 2 workers", lambda: torch_batches(data, n, 2)),
        ("`echoflow.torch.Loader`, threads=2 per stage",
         lambda: echoflow_batches(data, n)),
    ]
    rates = {name: [] for name, _ in feeds}
    for r in range(rounds):
        order = feeds[r % len(feeds):] + feeds[:r % len(feeds)]
        for name, make in order:
            rates[name].append(train(make()))
            log("  round %d: %s %.1f images/s" % (r + 1, name,
                                                   rates[name][-1]))
    alone = train(fixed_batches(n))
    log("  the step alone: %.1f images/s" % alone)

    row(["feeding the training loop"]
        + ["round %d" % (r + 1) for r in range(rounds)]
        + ["median images/s"])
    row(["---"] + ["---:"] * (rounds + 1))
    for name, _ in feeds:
        row([name] + [fmt(v) for v in rates[name]]
            + [fmt(statistics.median(rates[name]))])
    row(["(the step alone, on one batch in memory)"] + [""] * rounds
        + [fmt(alone)])
    print()
    median = {name: statistics.median(v) for name, v in rates.items()}
    best = max((name for name, _ in feeds[:3]), key=median.get)
    ours = feeds[3][0]
    print("echoflow / best DataLoader (%s): **%.2f**" % (
        best.split(", ")[1], median[ours] / median[best]))
    print()


if __name__ == "__main__":
    main()
