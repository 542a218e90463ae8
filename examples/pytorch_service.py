# SPDX-License-Identifier: Apache-2.0
"""A PyTorch trainer whose input is decoded on other processes: `echoflow
serve` workers in the same mpirun job, with automatic echoing on the
trainer filling in while they fall behind.

    D=/usr/share/datasets/fashion-mnist
    build/echoflow pack "idx:images=$D/train-images-idx3-ubyte.gz,labels=$D/train-labels-idx1-ubyte.gz" \\
        /tmp/fmnist/train-%06d.tar --per-shard 10000
    PYTHONPATH=build/python mpirun --oversubscribe -np 1 \\
        /usr/bin/python3 examples/pytorch_service.py --epochs 2 : \\
        -np 2 build/echoflow serve \\
        'tar:urls=/tmp/fmnist/train-{000000..000005}.tar | decode'

(as root, add --allow-run-as-root; on several machines see
docs/distributed.md.) The workers take the shards as they ask for them,
decode them and send the images here; this process reads them through

    service | shuffle:2000 | echo:factor=auto,max=4,shuffle=1000
        | batch:64

as an echoflow.torch.Loader, one epoch per iteration, each example of the
epoch arriving once (its echoes are made here). A small CNN trains on the
batches; after each epoch it prints the batches, the fresh examples (the
sum of each batch's identity.fresh), the echo stage's effective factor and
the test accuracy on the t10k split, read here (examples/pytorch_train.py's
model and evaluation). --target stops at a test accuracy.
--json prints one JSON object at the end instead.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

from echoflow.torch import Loader

# the CNN, its input and its evaluation, as examples/pytorch_train.py has
# them (beside this file)
from pytorch_train import evaluate, load_test_set, make_model, to_input


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--echo", default="factor=auto,max=4,shuffle=1000",
                    help="options of the echo stage ('off': none)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--target", type=float, default=None,
                    help="stop once the test accuracy reaches this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1:
        ap.error("--epochs and --batch-size must be >= 1")
    return args


def echo_factor(loader):
    stats = loader.stats() or {}
    echo = [s for s in stats.get("stages", []) if s["name"] == "echo"]
    return echo[0].get("effective_factor") if echo else None


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    stages = ["service", "shuffle:2000"]
    if args.echo != "off":
        stages.append("echo:" + args.echo)
    stages.append("batch:%d" % args.batch_size)
    spec = " | ".join(stages)
    loader = Loader(spec, seed=args.seed, as_tuple=("image", "label"))
    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    test = load_test_set(10000)
    epochs, reached, t0 = [], None, time.perf_counter()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        batches = fresh = 0
        for batch in loader:
            images, labels = batch
            # a batch's examples that are not echoes (echo before batch)
            fresh += batch.identity.fresh
            loss = F.cross_entropy(model(to_input(images)), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            batches += 1
        accuracy = evaluate(model, test)
        row = {"epoch": epoch, "batches": batches,
               "fresh": fresh, "echo_factor": echo_factor(loader),
               "loss": round(loss.item(), 4), "test_accuracy": accuracy,
               "seconds": round(time.perf_counter() - t0, 2)}
        epochs.append(row)
        if not args.json:
            print("epoch %(epoch)d: %(batches)d batches, %(fresh)d fresh, "
                  "echo factor %(echo_factor).2f, loss %(loss).4f, test "
                  "accuracy %(test_accuracy).4f, %(seconds).1f s" % row,
                  flush=True)
        if args.target is not None and accuracy >= args.target:
            reached = epoch
            break
    if args.json:
        print(json.dumps({"spec": spec, "epochs": epochs,
                          "reached_at_epoch": reached}))
    elif args.target is not None:
        print("reached %.2f at epoch %d" % (args.target, reached)
              if reached is not None else "did not reach %.2f" % args.target)
    return 0 if args.target is None or reached is not None else 1


if __name__ == "__main__":
    sys.exit(main())
