# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training with PyTorch DistributedDataParallel, each rank
reading its own part of Fashion-MNIST through an echoflow pipeline with data
echoing.

    /usr/bin/python3 examples/pytorch_ddp.py                 # 2 ranks, 1 epoch
    /usr/bin/python3 examples/pytorch_ddp.py --world-size 3 --epochs 2
    torchrun --nproc_per_node 2 examples/pytorch_ddp.py     # ranks by torchrun

(Debian 12's torchrun, torch 1.13 under Python 3.11, fails before starting
anything unless given `--redirects 1 --tee 1`: its parser of those options
cannot return 0 there. Any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT does.)

The training split is packed once into WebDataset tar shards (by the
`echoflow pack` command, see shards.py) under --data. Without torchrun the
script forks --world-size processes itself (torch.multiprocessing), which
meet under torch.distributed (gloo, on 127.0.0.1 and a free port). Each rank
builds

    tar:urls=DATA/train-{000000..000005}.tar | decode | shuffle:5000
        | echo:factor=2,shuffle=1000 | batch:64

as an echoflow.torch.Loader, whose tar source reads part rank of
world_size: rank r reads the shards s with s % world_size == r, so the ranks
read disjoint parts and together the whole split. The echo stage emits each
example twice (its copies spread apart by a shuffle buffer), so the ranks
train on twice the examples their input reads. An MLP wrapped in
DistributedDataParallel trains on the batches; after each epoch every rank
prints the batches of its part, the batches of padding, its fresh examples
(the sum of each batch's identity.fresh), its mean loss and its effective
echo factor, and rank 0 the test accuracy.

DDP needs every rank to take the same number of steps, and the ranks'
parts can differ in batches (shards split unevenly, a fractional or
automatic echo factor). The Loader's even_steps (--even-steps) makes
every rank yield as many: "pad" (the default here) wraps round the parts
that run out, as DistributedSampler does, "drop" stops every rank at the
shortest part.

--record DIR: each rank writes DIR/rank<R>.json, the keys of every example
of its part it trained on (repeats included, in order; not those of the
padding) and its fresh count per epoch, and a SHA-256 of its final
parameters; python/tests/test_example_ddp.py checks them.
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import echoflow
import echoflow.torch

import shards  # examples/shards.py, beside this file


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--world-size", type=int, default=2,
                    help="processes to start (ignored under torchrun)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--data", default=None,
                    help="folder of the shards, packed there when missing "
                    "(default: echoflow-fashion-mnist-PER_SHARD in the "
                    "temporary folder)")
    ap.add_argument("--per-shard", type=int, default=10000,
                    help="examples per shard when packing")
    ap.add_argument("--shards", type=int, default=None,
                    help="read only the first N shards (default: all)")
    ap.add_argument("--shuffle", type=int, default=5000,
                    help="shuffle buffer before echoing (0: none)")
    ap.add_argument("--echo", default="factor=2,shuffle=1000",
                    help="options of the echo stage ('off': no echo stage)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--even-steps", choices=("pad", "drop"), default="pad",
                    help="how the ranks take as many steps: wrap round "
                    "the parts that run out, or stop at the shortest")
    ap.add_argument("--hidden", type=int, default=128,
                    help="units of the MLP's hidden layer")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record", default=None, metavar="DIR",
                    help="write each rank's keys, fresh count and "
                    "parameter checksum to DIR/rank<R>.json")
    args = ap.parse_args(argv)
    if args.world_size < 1 or args.epochs < 1 or args.per_shard < 1:
        ap.error("--world-size, --epochs and --per-shard must be >= 1")
    if args.shards is not None and args.shards < 1:
        ap.error("--shards must be >= 1")
    if args.data is None:
        args.data = os.path.join(tempfile.gettempdir(),
                                 "echoflow-fashion-mnist-%d" % args.per_shard)
    return args


def shard_count(args):
    """The shards the run reads: all of the packed split, or --shards."""
    packed = (60000 + args.per_shard - 1) // args.per_shard
    if args.shards is not None and args.shards > packed:
        sys.exit("--shards %d: only %d shards of %d examples"
                 % (args.shards, packed, args.per_shard))
    return args.shards or packed


def pipeline_spec(args):
    last = shard_count(args) - 1
    spec = "tar:urls=%s/train-{000000..%06d}.tar | decode" % (args.data,
                                                               last)
    if args.shuffle:
        spec += " | shuffle:buffer=%d" % args.shuffle
    if args.echo != "off":
        spec += " | echo:%s" % args.echo
    return spec + " | batch:%d" % args.batch_size


def mlp(hidden):
    return torch.nn.Sequential(torch.nn.Flatten(),
                               torch.nn.Linear(28 * 28, hidden),
                               torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def as_input(images):
    # a new float tensor: the u8 one is shared with the echoed copies and
    # must not be written
    return images.float().div(255.0)


def params_sha256(model):
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def train_epoch(model, opt, loader, epoch, record):
    """One pass over this rank's part of the data, in as many steps as
    every other rank takes (the Loader's even_steps). Returns the epoch's
    figures; with `record`, also the keys of every example of the part."""
    rank = dist.get_rank()
    loader.set_epoch(epoch)
    keys, fresh, examples, read, trained, loss_sum = [], 0, 0, 0, 0, 0.0
    for batch in loader:
        # loader.padded counts the batches of padding: once this rank's
        # part has run out, every batch is one (with even_steps="pad")
        if not loader.padded:
            read += 1
            fresh += batch.identity.fresh
            examples += len(batch["label"])
            if record:
                keys += batch["__key__"]
        opt.zero_grad()
        loss = F.cross_entropy(model(as_input(batch["image"])),
                               batch["label"])
        loss.backward()
        opt.step()
        trained += 1
        loss_sum += loss.item()
    # of this rank's part: the examples it emitted over the fresh ones
    factor = examples / max(fresh, 1)
    print("epoch %d rank %d: %d batches of its part, %d of padding, %d "
          "trained on, %d fresh examples, loss %.4f, echo effective factor "
          "%.2f" % (epoch, rank, read, loader.padded, trained, fresh,
                    loss_sum / max(trained, 1), factor), flush=True)
    return {"epoch": epoch, "batches": read, "padded": loader.padded,
            "trained": trained, "fresh": fresh, "effective_factor": factor,
            "keys": keys}


def test_accuracy(model):
    """Accuracy on Fashion-MNIST's test split, read by an idx pipeline."""
    right = total = 0
    model.eval()
    with torch.no_grad(), echoflow.Pipeline(
            shards.fashion_mnist("t10k") + " | batch:1000") as p:
        for sample in p:
            b = echoflow.torch.to_torch(sample)
            right += int((model(as_input(b["image"])).argmax(1)
                          == b["label"]).sum())
            total += len(b["label"])
    model.train()
    return right / total


def run(args):
    """One rank's work, once torch.distributed is initialised."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)  # the ranks share the machine's cores
    torch.manual_seed(args.seed)  # DDP broadcasts rank 0's weights anyway
    model = DistributedDataParallel(mlp(args.hidden))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # rank and world_size come from torch.distributed; every rank takes
    # as many steps
    loader = echoflow.torch.Loader(pipeline_spec(args), seed=args.seed,
                                   even_steps=args.even_steps)
    if rank == 0:
        print("%d ranks, each reading its part (shard=RANK/%d) of: %s"
              % (world, world, loader.spec), flush=True)
    epochs = []
    for epoch in range(args.epochs):
        start = time.monotonic()
        epochs.append(train_epoch(model, opt, loader, epoch,
                                  args.record is not None))
        if rank == 0:
            print("epoch %d: %.1f s, test accuracy %.4f"
                  % (epoch, time.monotonic() - start,
                     test_accuracy(model.module)), flush=True)
    loader.close()
    if args.record:
        os.makedirs(args.record, exist_ok=True)
        path = os.path.join(args.record, "rank%d.json" % rank)
        with open(path + ".tmp", "w") as f:
            json.dump({"rank": rank, "world_size": world,
                       "spec": loader.stats()["spec"], "epochs": epochs,
                       "params_sha256": params_sha256(model.module)}, f)
        os.replace(path + ".tmp", path)


def spawned(rank, args, port):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=args.world_size)
    try:
        run(args)
    finally:
        dist.destroy_process_group()


def free_port():
    # another process may take it before rank 0 binds it; unlikely enough
    # for an example
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    shard_count(args)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        dist.init_process_group("gloo")
        try:
            if dist.get_rank() == 0:
                shards.pack_fashion_mnist(args.data, per_shard=args.per_shard)
            dist.barrier()  # the others wait for the shards
            run(args)
        finally:
            dist.destroy_process_group()
        return
    shards.pack_fashion_mnist(args.data, per_shard=args.per_shard)
    # fork: the ranks start at once instead of each importing torch again
    # (seconds on a busy machine). Safe here: this process has started no
    # thread, run no torch operation and built no pipeline. A failed rank
    # makes this raise, and the others are stopped.
    torch.multiprocessing.start_processes(
        spawned, args=(args, free_port()), nprocs=args.world_size,
        start_method="fork")


if __name__ == "__main__":
    main()
