# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training that survives a kill: every K steps the job saves
one checkpoint (model, optimizer and every rank's Loader position), and
started again with the same command it resumes there, ending with the same
model bytes as a run that was never interrupted; started again on another
number of processes, it resumes there too, each remaining example of the
epoch read once.

    # 2 processes started by torchrun (Debian 12's needs --redirects and
    # --tee: its parser of those options fails without them)
    PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run \\
        --redirects 1 --tee 1 --nproc_per_node 2 \\
        examples/pytorch_resume.py --checkpoint /tmp/fmnist.ckpt --every 100
    # kill it (Ctrl-C, kill -9 of a rank, a preempted machine), then run
    # the same command again: "resumed at step 300 (epoch 0)"

    # without torchrun the script starts --world-size processes itself
    /usr/bin/python3 examples/pytorch_resume.py --checkpoint /tmp/c.ckpt \\
        --kill-at 250            # the last rank kills itself (SIGKILL)
    /usr/bin/python3 examples/pytorch_resume.py --checkpoint /tmp/c.ckpt

    # kill and resume with 2 processes, then resume on 1 and on 3
    /usr/bin/python3 examples/pytorch_resume.py --checkpoint /tmp/e.ckpt \\
        --world-size 2 --kill-at 250     # saved at step 200, then killed
    /usr/bin/python3 examples/pytorch_resume.py --checkpoint /tmp/e.ckpt \\
        --world-size 1 --kill-at 450     # resumed at step 200, on 1 rank
    /usr/bin/python3 examples/pytorch_resume.py --checkpoint /tmp/e.ckpt \\
        --world-size 3                   # resumed at step 400, on 3 ranks

Fashion-MNIST's training split (the IDX files of dataset-fashion-mnist) is
read in --partitions parts, each through its own pipeline

    idx:images=...,labels=...[,count=N] | shuffle:5000
        | echo:factor=2,shuffle=1000 | batch:64

of an echoflow.torch.Loader with partitions=6 and even_steps="pad", and an
MLP wrapped in DistributedDataParallel trains on the batches. Rank r of
world_size M hosts the partitions p with p % M == r and takes a batch
from each in turn (the one that has given the fewest, the lowest p among
equals), so each partition's batches come in the same order whatever M
is. The partitions, not the processes, are what the checkpoint holds:
it resumes on any number of processes that divides --partitions. 6 is
the default because 1, 2, 3 and 6 divide it; 4 processes need 4, 8 or
12 partitions (4 is refused with 6, naming the counts that work), and
--partitions 0 is the Loader's partitions=None: one part per process,
which resumes on the same number only.

echoflow.torch's init_distributed() starts torch.distributed (gloo) from
torchrun's variables, or among the trainers of an mpirun job;
save_checkpoint() and load_checkpoint() are collectives that every rank
calls at the same step. The checkpoint is refused with another number of
partitions, spec or seed, or when it is not a whole file; rank 0 writes
it atomically, so a kill while it writes leaves the previous one. On the
saved number of processes the resumed run ends with the model bytes of
one never interrupted; on another, a step averages another number of
batches, so the model differs while the data read does not.

--final PATH: rank 0 saves the final model's state_dict() there
(python/tests/test_example_resume.py compares an interrupted and resumed
run's with an uninterrupted one's). --log-keys PATH: every rank appends
one line per batch it trains on, a JSON object of the step, epoch, rank,
world size, batches of padding so far and the (index, echo copy) of each
example (python/tests/test_example_elastic.py checks with them that each
example of an epoch cut twice and resumed on other counts is trained on
once).
"""
import argparse
import json
import os
import signal
import socket
import sys

import torch
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
    ap.add_argument("--checkpoint", required=True,
                    help="the checkpoint file: resumed from when it exists")
    ap.add_argument("--every", type=int, default=100,
                    help="steps between checkpoints")
    ap.add_argument("--world-size", type=int, default=2,
                    help="processes to start (ignored under torchrun)")
    ap.add_argument("--partitions", type=int, default=6,
                    help="parts of the data, dealt to the processes: the "
                    "checkpoint resumes on any number of processes that "
                    "divides it (0: one part per process)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--examples", type=int, default=None,
                    help="train on the first N examples (default: all)")
    ap.add_argument("--shuffle", type=int, default=5000)
    ap.add_argument("--echo", default="factor=2,shuffle=1000",
                    help="options of the echo stage")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill-at", type=int, default=None, metavar="STEP",
                    help="the last rank kills itself (SIGKILL) after this "
                    "step, as a preempted machine would")
    ap.add_argument("--final", default=None, metavar="PATH",
                    help="rank 0 saves the final model state_dict() here")
    ap.add_argument("--no-eval", action="store_true",
                    help="skip the test accuracy after each epoch")
    ap.add_argument("--log-keys", default=None, metavar="PATH",
                    help="every rank appends a line per batch: step, epoch, "
                    "rank and the (index, echo copy) of its examples")
    args = ap.parse_args(argv)
    if min(args.every, args.world_size, args.epochs, args.batch_size) < 1:
        ap.error("--every, --world-size, --epochs and --batch-size must be "
                 ">= 1")
    if args.partitions < 0:
        ap.error("--partitions must be >= 0 (0: one part per process)")
    return args


def log_keys(path, step, epoch, rank, world, loader):
    """Appends the line of the batch just trained on: one write of a
    file opened for appending, so the ranks' lines do not mix and a
    kill loses none that was written."""
    line = json.dumps({"step": step, "epoch": epoch, "rank": rank,
                       "world_size": world, "padded": loader.padded,
                       "keys": [[int(m[0]), int(m[2])]
                                for m in loader.members]}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def pipeline_spec(args):
    spec = shards.fashion_mnist("train")
    if args.examples is not None:
        spec += ",count=%d" % args.examples
    if args.shuffle:
        spec += " | shuffle:%d" % args.shuffle
    return spec + " | echo:%s | batch:%d" % (args.echo, args.batch_size)


def mlp(hidden):
    return torch.nn.Sequential(torch.nn.Flatten(),
                               torch.nn.Linear(28 * 28, hidden),
                               torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def as_input(images):
    # a new float tensor: the u8 one is shared with the echoed copies
    return images.float().div(255.0)


def test_accuracy(model):
    right = total = 0
    with torch.no_grad(), echoflow.Pipeline(
            shards.fashion_mnist("t10k") + " | batch:1000") as p:
        for sample in p:
            b = echoflow.torch.to_torch(sample)
            right += int((model(as_input(b["image"])).argmax(1)
                          == b["label"]).sum())
            total += len(b["label"])
    return right / total


def train(args):
    """One rank's work: resume when the checkpoint exists, train, and
    save every --every steps."""
    rank, world = echoflow.torch.init_distributed()
    torch.set_num_threads(1)  # the ranks share the machine's cores
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(mlp(args.hidden))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = echoflow.torch.Loader(pipeline_spec(args), seed=args.seed,
                                   even_steps="pad",
                                   as_tuple=("image", "label"),
                                   partitions=args.partitions or None)
    step = 0
    if os.path.exists(args.checkpoint):
        # every rank reads it (one host, or a shared file system)
        extra = echoflow.torch.load_checkpoint(args.checkpoint, model, opt,
                                               loader)
        step = extra["step"]
        if rank == 0:
            print("resumed at step %d (epoch %d) from %s on %d rank%s"
                  % (step, loader.epoch, args.checkpoint, world,
                     "s" if world > 1 else ""), flush=True)
    elif rank == 0:
        print("%d ranks, each reading %s of: %s"
              % (world, "its part" if loader.partitions is None else
                 "%d of %d partitions" % (loader.partitions // world,
                                          loader.partitions),
                 loader.spec), flush=True)
    for epoch in range(loader.epoch, args.epochs):
        loader.set_epoch(epoch)  # keeps the position loaded for it
        losses = []
        for images, labels in loader:
            loss = F.cross_entropy(model(as_input(images)), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            losses.append(loss.item())
            if args.log_keys:
                log_keys(args.log_keys, step, epoch, rank, world, loader)
            if step % args.every == 0:
                echoflow.torch.save_checkpoint(args.checkpoint, model, opt,
                                               loader, extra={"step": step})
            if step == args.kill_at and rank == world - 1:
                print("rank %d: killed after step %d" % (rank, step),
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        if rank == 0:
            line = "epoch %d: step %d, loss %.4f" % (
                epoch, step, sum(losses) / max(len(losses), 1))
            if not args.no_eval:
                line += ", test accuracy %.4f" % test_accuracy(model.module)
            print(line, flush=True)
    loader.close()
    if rank == 0 and args.final:
        torch.save(model.module.state_dict(), args.final)


def spawned(rank, args, port):
    # what torchrun would set: init_distributed() reads it
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(args.world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        train(args)
    finally:
        torch.distributed.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    if "RANK" in os.environ:
        train(args)  # torchrun started the ranks
        return 0
    # fork: the ranks start at once instead of each importing torch again.
    # Safe here: no thread, torch operation or pipeline has started. A
    # rank that dies makes this raise, and the others are stopped.
    try:
        torch.multiprocessing.start_processes(
            spawned, args=(args, free_port()), nprocs=args.world_size,
            start_method="fork")
    except torch.multiprocessing.ProcessExitedException as e:
        print("the job ended: %s; run the same command again to resume "
              "from %s" % (e, args.checkpoint), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
