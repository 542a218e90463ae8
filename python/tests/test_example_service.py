# SPDX-License-Identifier: Apache-2.0
"""The preprocessing service from Python: examples/pytorch_service.py, a
PyTorch trainer reading Fashion-MNIST that `echoflow serve` workers decode
on other ranks of one mpirun job (one epoch must hold the 60,000 examples
once: each batch's identity.fresh counts its examples that are not
echoes; and the CNN must learn from them), DataLoader workers refused,
a worker's failure raised in the trainer, and checkpoints of the Python
trainers, killed and resumed on other numbers of trainers and workers."""
import json
import pickle
import os
import shutil
import subprocess
import sys

import pytest

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None,
                                reason="mpirun missing (openmpi-bin)")


def mpmd(trainer, shards, workers=1, decode=False, splits=6):
    """Runs `trainer` (a command) and `workers` echoflow serve ranks on the
    shards (folder, pattern) in one mpirun job; the completed process."""
    folder, pattern = shards
    spec = "tar:urls=%s/%s" % (folder, pattern)
    cli = os.environ.get("ECHOFLOW_CLI", "echoflow")
    return subprocess.run(
        [MPIRUN, "--allow-run-as-root", "--bind-to", "none",
         "--oversubscribe", "-np", "1", *trainer, ":",
         "-np", str(workers), cli, "serve",
         spec + (" | decode" if decode else ""), "--splits", str(splits)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=300)


def test_pytorch_service(examples_dir, fmnist_shards):
    proc = mpmd([sys.executable,
                 os.path.join(examples_dir, "pytorch_service.py"),
                 "--epochs", "1", "--json"],
                fmnist_shards, workers=2, decode=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (epoch,) = out["epochs"]
    assert epoch["fresh"] == 60000, epoch
    assert epoch["batches"] >= 60000 // 64, epoch
    assert 1 <= epoch["echo_factor"] <= 4, epoch
    assert epoch["test_accuracy"] > 0.7, epoch


DATALOADER_WORKER = r"""
import torch, echoflow, echoflow.torch
loader = echoflow.torch.Loader("service | batch:64")
dl = torch.utils.data.DataLoader(loader, batch_size=None, num_workers=1)
try:
    next(iter(dl))
    raise SystemExit("a DataLoader worker read the service")
except echoflow.StateError as e:
    assert "num_workers=0" in str(e), e
# the process mpirun started reads it
assert sum(len(b.members) for b in loader) == 60000
"""


def test_dataloader_workers_refused(fmnist_shards):
    """A DataLoader worker is a fork of the process mpirun started, and
    cannot use its MPI: refused, saying to read in the main process,
    which then reads the epoch whole."""
    proc = mpmd([sys.executable, "-c", DATALOADER_WORKER], fmnist_shards)
    assert proc.returncode == 0, proc.stderr


TOO_MANY_SPLITS = r"""
import echoflow
try:
    for _ in echoflow.Pipeline("service"):
        pass
    raise SystemExit("no error")
except echoflow.SpecError as e:  # the worker's own status, and its words
    assert "rank 1 (a worker)" in str(e) and "--splits" in str(e), e
"""


def test_worker_error_reaches_python(fmnist_shards):
    """A worker's failure is raised in the trainer as the exception of the
    worker's status, with its rank and what to do: 12 splits of 6
    shards."""
    proc = mpmd([sys.executable, "-c", TOO_MANY_SPLITS], fmnist_shards,
                splits=12)
    # the worker reports its failure and exits 1 once the trainer left
    assert "rank 1 (a worker)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


TWO_TRAINERS = r"""
import torch, torch.distributed as dist
import echoflow, echoflow.torch
rank, world = echoflow.torch.init_distributed()
assert world == 2 and dist.get_world_size() == 2, world  # the trainers only
t = torch.tensor([rank + 1])
dist.all_reduce(t)
assert t.item() == 3, t
loader = echoflow.torch.Loader("service | batch:50")
assert (loader.rank, loader.world_size) == (rank, 2)
batches = iter(loader)
first = next(batches)
# a collective of the two trainers, mid-epoch; the epoch goes on
echoflow.torch.save_checkpoint("job.ckpt", torch.nn.Linear(1, 1),
                               loaders=loader)
# the epoch shared between the two trainers, each sample once
n = torch.tensor([len(first["index"]) + sum(len(b["index"]) for b in batches)])
dist.all_reduce(n)
assert n.item() == 1000, n
print("trainer %d of 2: ok" % rank, flush=True)
"""


def test_torch_distributed_among_the_trainers(tmp_path):
    """echoflow.torch.init_distributed() in the job with a worker: the
    two Python trainers form torch.distributed's group (meeting where
    trainer 0 said through MPI), the worker takes no part; a checkpoint
    of their Loaders of the service mid-epoch is saved, and the epoch
    goes on, each sample once."""
    cli = os.environ.get("ECHOFLOW_CLI", "echoflow")
    proc = subprocess.run(
        [MPIRUN, "--allow-run-as-root", "--bind-to", "none",
         "--oversubscribe", "-np", "2", sys.executable, "-c", TWO_TRAINERS,
         ":", "-np", "1", cli, "serve", "range:n=1000", "--splits", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        assert "trainer %d of 2: ok" % rank in proc.stdout, proc.stdout
    assert os.path.exists(tmp_path / "job.ckpt")


TRAINERS = r"""
import os, pickle, signal, sys, torch, echoflow, echoflow.torch
first, path = sys.argv[1] == "first", sys.argv[2]
rank, world = echoflow.torch.init_distributed()
model = torch.nn.Linear(1, 1)
loader = echoflow.torch.Loader(
    "service | shuffle:2000 | echo:factor=2,shuffle=50 | batch:10", seed=3)
def fresh(batch):  # members: index, epoch, echo copy, ...
    return [m[0] for m in batch.members.tolist() if m[2] == 0]
def keep(keys):  # what this trainer trained on, up to the checkpoint
    pickle.dump(keys, open("%s.%d.%s" % (path, rank, sys.argv[1]), "wb"))
if first:
    batches, keys = iter(loader), []
    for _ in range(40):
        keys += fresh(next(batches))
    echoflow.torch.save_checkpoint(path, model, loaders=loader)
    keep(keys)
    torch.distributed.barrier()
    if rank == world - 1:  # killed mid-epoch, after the checkpoint
        os.kill(os.getpid(), signal.SIGKILL)
    for _ in batches:  # the others train on until mpirun ends the job
        pass
else:
    echoflow.torch.load_checkpoint(path, model, loaders=loader)
    keep([k for b in loader for k in fresh(b)])
"""


@pytest.mark.parametrize("first, second", [
    ((1, 2), (1, 2)), ((2, 2), (2, 2)), ((2, 2), (1, 3)), ((2, 2), (3, 1))])
def test_trainers_save_and_resume_the_service(tmp_path, first, second):
    """Python trainers save their Loaders of the service mid-epoch with
    save_checkpoint (shuffle and echo after the source; with two, a
    collective that joins their records), then one is killed with
    SIGKILL and the job ends; a new job of (trainers, workers) `second`
    resumes from it with load_checkpoint:
    every sample of the epoch reaches the trainers once over the two
    jobs, also on another number of trainers and workers
    (docs/distributed.md, Checkpoints). The shuffle buffer holds more
    than the epoch, so each trainer's source had its epoch's end before
    the first batch: what was not delivered comes again all the same."""
    cli = os.environ.get("ECHOFLOW_CLI", "echoflow")
    path = str(tmp_path / "job.ckpt")
    for step, (trainers, workers) in (("first", first), ("second", second)):
        proc = subprocess.run(
            [MPIRUN, "--allow-run-as-root", "--bind-to", "none",
             "--oversubscribe", "-np", str(trainers), sys.executable, "-c",
             TRAINERS, step, path, ":", "-np", str(workers), cli, "serve",
             "range:n=1000", "--splits", "4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=300, cwd=str(tmp_path))
        # the first job ends as its last trainer is killed
        killed = "exited on signal 9" in proc.stderr
        assert (proc.returncode != 0, killed) == (step == "first",) * 2, \
            proc.stdout + proc.stderr
    keys = {step: {r: pickle.load(open("%s.%d.%s" % (path, r, step), "rb"))
                   for r in range(counts[0])}
            for step, counts in (("first", first), ("second", second))}
    before = [k for r in keys["first"].values() for k in r]
    after = [k for r in keys["second"].values() for k in r]
    got = {step: {r: len(v) for r, v in by_rank.items()}
           for step, by_rank in keys.items()}
    assert 0 < len(before) < 1000 and after, got
    assert sorted(before + after) == list(range(1000)), got


EPOCHS = r"""
import pickle, sys, torch, echoflow, echoflow.torch
step, path = sys.argv[1], sys.argv[2]
echoflow.torch.init_distributed()
model = torch.nn.Linear(1, 1)
loader = echoflow.torch.Loader("service | batch:50", seed=5)
def examples(batches):  # (epoch, index) of each example, in order
    return [(m[1], m[0]) for b in batches for m in b.members.tolist()]
def read(epoch):
    loader.set_epoch(epoch)
    return examples(loader)
seen = []
if step == "whole":
    for epoch in range(3):
        seen += read(epoch)
elif step == "between":  # epoch 0 read, saved at epoch 1's start
    seen = read(0)
    loader.set_epoch(1)
    echoflow.torch.save_checkpoint(path, model, loaders=loader)
elif step == "last":  # saved in epoch 0's iteration, after its last batch
    batches = iter(loader)
    seen = examples(next(batches) for _ in range(6))
    echoflow.torch.save_checkpoint(path, model, loaders=loader)
else:  # resumed: the rest of the saved epoch, then the others to 3
    echoflow.torch.load_checkpoint(path, model, loaders=loader)
    seen = examples(loader)
    for epoch in range(loader.epoch + 1, 3):
        seen += read(epoch)
pickle.dump(seen, open("%s.%s" % (path, step), "wb"))
"""


def test_epochs_of_a_resumed_job(tmp_path):
    """A Loader of the service reads the service's epoch of its own
    number, which its samples carry (0, 1, 2); a job saved at an epoch's
    start, or after its last batch, resumes with the next epoch in the
    order an uninterrupted run reads it (one worker: its order is the
    splits' order, keyed by the seed and the epoch), not with the
    service's epoch 0 again."""
    cli = os.environ.get("ECHOFLOW_CLI", "echoflow")

    def job(step, path):
        proc = subprocess.run(
            [MPIRUN, "--allow-run-as-root", "--bind-to", "none",
             "--oversubscribe", "-np", "1", sys.executable, "-c", EPOCHS,
             step, path, ":", "-np", "1", cli, "serve", "range:n=300",
             "--splits", "6"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=300, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return pickle.load(open("%s.%s" % (path, step), "rb"))

    whole = job("whole", str(tmp_path / "whole.ckpt"))
    assert [e for e, _ in whole] == [0] * 300 + [1] * 300 + [2] * 300
    for e in range(3):
        assert sorted(i for f, i in whole if f == e) == list(range(300))
    for saved_at in ("between", "last"):
        path = str(tmp_path / ("%s.ckpt" % saved_at))
        before, after = job(saved_at, path), job("resume", path)
        assert len(before) == 300, (saved_at, len(before))
        assert before + after == whole, saved_at


def test_pytorch_service_killed_and_resumed(examples_dir, fmnist_shards,
                                            tmp_path):
    """examples/pytorch_service.py --checkpoint, killed with SIGKILL after
    step 30 (saved at step 20), mid-epoch, then started again with the
    same command: it resumes at step 20, and over the two jobs each
    example of the epoch (3,000: 500 of each shard) is trained on once
    fresh, those of the first job's steps up to 20 and all the second's."""
    folder, pattern = fmnist_shards
    cli = os.environ.get("ECHOFLOW_CLI", "echoflow")
    ckpt, keys = str(tmp_path / "s.ckpt"), str(tmp_path / "keys")
    runs = []
    for run in ("killed", "resumed"):
        proc = subprocess.run(
            [MPIRUN, "--allow-run-as-root", "--bind-to", "none",
             "--oversubscribe", "-np", "1", sys.executable,
             os.path.join(examples_dir, "pytorch_service.py"),
             "--epochs", "1", "--json", "--checkpoint", ckpt,
             "--every", "20", "--log-keys", "%s.%s" % (keys, run)]
            + (["--kill-at", "30"] if run == "killed" else [])
            + [":", "-np", "2", cli, "serve",
               "tar:urls=%s/%s | take:500 | decode" % (folder, pattern),
               "--splits", "6"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=300, cwd=str(tmp_path))
        runs.append(proc)
    killed, resumed = runs
    assert killed.returncode != 0 and "killed after step 30" in \
        killed.stderr, killed.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at step 20 (epoch 0)" in resumed.stderr, resumed.stderr
    lines = {run: [json.loads(line) for line in open("%s.%s" % (keys, run))]
             for run in ("killed", "resumed")}
    assert [line["step"] for line in lines["killed"]] == list(range(1, 31))
    assert lines["resumed"][0]["step"] == 21
    trained = [tuple(k) for run, cut in (("killed", 20), ("resumed", None))
               for line in lines[run] if cut is None or line["step"] <= cut
               for k in line["keys"]]
    assert len(trained) == len(set(trained)) == 3000, len(trained)
    assert {e for e, _ in trained} == {0}
    (epoch,) = json.loads(resumed.stdout)["epochs"]
    assert epoch["test_accuracy"] > 0.3, epoch
