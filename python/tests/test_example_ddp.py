# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch_ddp.py: two DistributedDataParallel ranks reading
Fashion-MNIST through echoflow with echoing.

Each run records, per rank, the key of every example of the rank's part
(echoes included) and the sum of its batches' identity.fresh. When the
ranks' parts differ in batches, the shorter is padded (even_steps="pad":
it wraps round, so that DDP's ranks take as many steps), and the padding
is not recorded, so the records stay exact however the steps were
equalised. That matters: identity.fresh counts each example's copy 0, and with
echo:shuffle=N an echo can come out before its copy 0, so a prefix of an
epoch may hold more distinct keys than fresh examples; only a whole part
has them equal. What the keys are checked against comes from the tar files
themselves, read here with Python's tarfile, not through echoflow.
"""
import collections
import functools
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest
import torch.distributed

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch without torch.distributed")


def run_example(examples_dir, shard_dir, record_dir, *options):
    """Runs the example for one epoch; (completed process, records by
    rank)."""
    proc = subprocess.run(
        [sys.executable, os.path.join(examples_dir, "pytorch_ddp.py"),
         "--data", shard_dir, "--record", str(record_dir), "--epochs", "1",
         *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=240)
    records = {}
    if proc.returncode == 0:
        for rank in range(2):
            path = os.path.join(str(record_dir), "rank%d.json" % rank)
            with open(path) as f:
                records[rank] = json.load(f)
    return proc, records


@functools.lru_cache(maxsize=None)
def all_shard_keys(shard_dir):
    """The __key__ of every sample of the 6 shards, one set per shard: a
    member's name up to its first dot, as WebDataset has it."""
    out = []
    for i in range(6):
        with tarfile.open(os.path.join(shard_dir, "train-%06d.tar" % i)) as t:
            out.append({m.name.split(".", 1)[0] for m in t.getmembers()
                        if m.isfile()})
    return out


def shard_keys(shard_dir, count):
    """The key sets of the first `count` shards."""
    return all_shard_keys(shard_dir)[:count]


def check_epoch(records, shards):
    """The invariant of one epoch of both ranks; returns each rank's keys
    as a Counter."""
    seen = {}
    for rank, rec in records.items():
        epoch = rec["epochs"][0]
        counts = collections.Counter(epoch["keys"])
        seen[rank] = counts
        # an echo repeats an example read fresh: a rank's distinct keys are
        # its fresh examples, as many as its batches' identity.fresh say
        assert epoch["fresh"] == len(counts) > 0, \
            "rank %d: %d fresh, %d distinct keys" % (rank, epoch["fresh"],
                                                    len(counts))
        # every example of a read shard arrives, so its shards are whole:
        # tar shards are split between the ranks by shard number
        for i, keys in enumerate(shards):
            part = len(keys & counts.keys())
            assert part in (0, len(keys)), \
                "rank %d read %d of the %d keys of shard %d" % (
                    rank, part, len(keys), i)
    everything = set().union(*shards)
    assert sum(len(s) for s in shards) == len(everything)  # keys are unique
    both = seen[0].keys() & seen[1].keys()
    assert not both, "%d keys read by both ranks" % len(both)
    unread = everything - seen[0].keys() - seen[1].keys()
    assert not unread, "%d keys read by neither rank" % len(unread)
    alien = (seen[0].keys() | seen[1].keys()) - everything
    assert not alien, "%d keys not in the shards" % len(alien)
    return seen


@pytest.fixture(scope="module")
def full_run(examples_dir, fmnist_shards, tmp_path_factory):
    """The example as documented (6 shards, echo factor 2) over the whole
    training split."""
    shard_dir, _ = fmnist_shards
    return run_example(examples_dir, shard_dir,
                       tmp_path_factory.mktemp("ddp-record"))


def test_ranks_read_the_data_set_once_between_them(full_run, fmnist_shards):
    proc, records = full_run
    assert proc.returncode == 0, proc.stderr
    shards = shard_keys(fmnist_shards[0], 6)
    seen = check_epoch(records, shards)
    assert len(seen[0]) + len(seen[1]) == 60000
    for rank in (0, 1):
        # 3 shards each; a fixed factor 2 emits every example exactly twice
        assert len(seen[rank]) == 30000
        assert set(seen[rank].values()) == {2}
        epoch = records[rank]["epochs"][0]
        assert epoch["effective_factor"] == 2.0
        assert epoch["batches"] == (2 * 30000 + 63) // 64
        assert epoch["trained"] == epoch["batches"]
        assert epoch["padded"] == 0  # parts of equal size
        assert re.search(r"epoch 0 rank %d: %d batches of its part, 0 of "
                         r"padding, %d trained on, 30000 fresh examples, "
                         r"loss [0-9.]+, echo effective factor 2\.00"
                         % (rank, epoch["batches"], epoch["trained"]),
                         proc.stdout), proc.stdout


def test_ranks_exit_cleanly_with_identical_parameters(full_run):
    proc, records = full_run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    # it trained: the steps ran and the model learned something
    assert records[0]["epochs"][0]["trained"] > 0
    accuracy = float(re.search(r"test accuracy ([0-9.]+)",
                               proc.stdout).group(1))
    assert accuracy > 0.7, proc.stdout
    # DDP averages the gradients of both ranks into each: one model
    assert len(records[0]["params_sha256"]) == 64
    assert records[0]["params_sha256"] == records[1]["params_sha256"]


def test_uneven_parts_take_as_many_steps_and_still_record_exactly(
        examples_dir, fmnist_shards, tmp_path):
    # 3 shards: rank 0 reads shards 0 and 2, rank 1 shard 1, so rank 0 has
    # twice the batches; factor 1.5 emits an example once or twice, drawn
    # per example. Rank 1 pads by wrapping round its part until rank 0's
    # has run out: both train for the longer part's steps.
    shard_dir, _ = fmnist_shards
    proc, records = run_example(examples_dir, shard_dir, tmp_path,
                                "--shards", "3",
                                "--echo", "factor=1.5,shuffle=1000",
                                "--batch-size", "128", "--hidden", "32")
    assert proc.returncode == 0, proc.stderr
    seen = check_epoch(records, shard_keys(shard_dir, 3))
    assert (len(seen[0]), len(seen[1])) == (20000, 10000)
    epochs = [records[r]["epochs"][0] for r in (0, 1)]
    for rank in (0, 1):
        counts = seen[rank]
        assert set(counts.values()) == {1, 2}
        emitted = sum(counts.values())
        assert epochs[rank]["batches"] == (emitted + 127) // 128
        assert 1.4 < epochs[rank]["effective_factor"] < 1.6
    assert epochs[0]["batches"] > epochs[1]["batches"]
    assert epochs[0]["trained"] == epochs[1]["trained"] == epochs[0]["batches"]
    assert epochs[0]["padded"] == 0
    assert epochs[1]["padded"] == epochs[0]["batches"] - epochs[1]["batches"]
    assert records[0]["params_sha256"] == records[1]["params_sha256"]
