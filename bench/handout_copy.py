# SPDX-License-Identifier: Apache-2.0
"""What echoflow.torch.Loader's hand-out copy costs: batches/s of a bare
Loader iteration (no training step) with the copy of shared fields and
without it (Loader._copy_shared = False), for batch echoing (echo after
batch: copy 0 of each batch is still held by the echo stage when it goes
out, so it is copied) and example echoing (echo before batch: each batch
is new memory, nothing is copied).

The source is `range` with a u8 field of the given size per example:
784 bytes (a Fashion-MNIST image), 150,528 (224x224x3 u8) and 602,112
(the bytes of a 3x224x224 f32 image). With nothing else to do per batch,
the copy's share is its share of a loop that only moves memory: the upper
bound of what it costs a training loop, whose step takes far longer.
Each configuration runs once per round, the rounds alternate the order;
the table gives the median and the best round, and the copy's share of
the time per batch from the best rounds (a shared machine slows some
rounds down; the best is the least disturbed). Example echoing copies
nothing, so its two rows differ by the noise alone. Prints a markdown
table on stdout, progress on stderr.

usage: handout_copy.py [ROUNDS]
"""
import statistics
import sys
import time

import torch

import echoflow.torch

BATCH = 32
SIZES = [(784, 128, 40960), (150528, BATCH, 2048), (602112, BATCH, 1024)]
PLACEMENTS = [("batch echoing", "range:n={n},bytes={b} | batch:{k} | echo:2"),
              ("example echoing", "range:n={n},bytes={b} | echo:2 | batch:{k}")]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(spec, copy):
    """batches/s of one pass, and (fields, bytes) copied."""
    loader = echoflow.torch.Loader(spec)
    loader._copy_shared = copy
    it = iter(loader)
    next(it)  # startup not counted
    start = time.perf_counter()
    n = sum(1 for _ in it)
    rate = n / (time.perf_counter() - start)
    return rate, loader._pipeline._handout_copies, n + 1


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.set_num_threads(1)
    print("| placement | bytes/example | batch | copy | batches/s, median "
          "| best | MB copied/batch | copy's share |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for size, k, n in SIZES:
        for name, pattern in PLACEMENTS:
            spec = pattern.format(n=n, b=size, k=k)
            rates = {True: [], False: []}
            copied = {}
            for r in range(rounds):
                for copy in ((True, False) if r % 2 == 0 else (False, True)):
                    rate, c, batches = run(spec, copy)
                    rates[copy].append(rate)
                    copied[copy] = c[1] / batches / 1e6
            on, off = max(rates[True]), max(rates[False])
            log("  %s, %d bytes: %.1f with the copy, %.1f without"
                % (name, size, on, off))
            share = (1 / on - 1 / off) / (1 / on)
            for copy in (True, False):
                print("| %s | %s | %d | %s | %s | %s | %.2f | %s |" % (
                    name, "{:,}".format(size), k, "on" if copy else "off",
                    "{:,.1f}".format(statistics.median(rates[copy])),
                    "{:,.1f}".format(max(rates[copy])), copied[copy],
                    "%.0f%%" % (100 * share) if copy else ""))


if __name__ == "__main__":
    main()
