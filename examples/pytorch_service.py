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

--checkpoint PATH saves the model, the optimizer and the Loader's position
every --every steps (echoflow.torch.save_checkpoint), and a job started
again with the same command goes on from it: the samples of the cut
epoch that this trainer had not trained on come again from the workers,
each once (docs/distributed.md, Checkpoints).

    mpirun ... examples/pytorch_service.py --checkpoint /tmp/s.ckpt \
        --kill-at 300 : ...      # saved at step 200, then killed
    mpirun ... examples/pytorch_service.py --checkpoint /tmp/s.ckpt : ...
                                 # "resumed at step 200 (epoch 0)"

--log-keys PATH appends a JSON line per batch trained on, the step and
the (epoch, index) of its fresh examples (python/tests/
test_example_service.py checks with them that each example of the cut
epoch is trained on once over the two jobs).
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import echoflow.torch
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
    ap.add_argument("--checkpoint", default=None, metavar="PATH",
                    help="save here every --every steps; resume from it "
                    "when it exists")
    ap.add_argument("--every", type=int, default=200)
    ap.add_argument("--kill-at", type=int, default=None, metavar="STEP",
                    help="kill this process (SIGKILL) after this step")
    ap.add_argument("--log-keys", default=None, metavar="PATH",
                    help="append each batch's step and fresh (epoch, "
                    "index) pairs here, a JSON line per batch")
    args = ap.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.every < 1:
        ap.error("--epochs, --batch-size and --every must be >= 1")
    return args


def echo_factor(loader):
    stats = loader.stats() or {}
    echo = [s for s in stats.get("stages", []) if s["name"] == "echo"]
    return echo[0].get("effective_factor") if echo else None


def log_keys(path, step, batch):
    """Appends the line of the batch just trained on, in one write, so a
    kill loses none that was written."""
    keys = [[int(m[1]), int(m[0])] for m in batch.members if m[2] == 0]
    line = json.dumps({"step": step, "keys": keys}) + "\n"
    with open(path, "a") as f:
        f.write(line)


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
    step = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        step = echoflow.torch.load_checkpoint(args.checkpoint, model, opt,
                                              loader)["step"]
        print("resumed at step %d (epoch %d) from %s"
              % (step, loader.epoch, args.checkpoint), file=sys.stderr,
              flush=True)
    epochs, reached, t0 = [], None, time.perf_counter()
    for epoch in range(loader.epoch, args.epochs):
        loader.set_epoch(epoch)  # keeps the position loaded for it
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
            step += 1
            if args.log_keys:
                log_keys(args.log_keys, step, batch)
            if args.checkpoint and step % args.every == 0:
                echoflow.torch.save_checkpoint(args.checkpoint, model, opt,
                                               loader, extra={"step": step})
            if step == args.kill_at:
                print("killed after step %d" % step, file=sys.stderr,
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
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
