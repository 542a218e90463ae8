# SPDX-License-Identifier: Apache-2.0
"""Elastic resume of a data-parallel PyTorch job: examples/pytorch_resume.py
over 2,048 Fashion-MNIST examples in its default 6 partitions (11 batches
each per epoch, shuffle and echo:factor=2), a checkpoint every 5 steps, 2
epochs. Started on 2 gloo processes, its last rank kills itself after
step 12 (checkpoint: step 10); resumed on 3 processes, killed after step
17 (checkpoint: step 15); resumed on 1 process to the end. Every rank logs
the (index, echo copy) of each batch it trains on (--log-keys). Counting
each run's batches up to the checkpoint the next run resumed from, each
copy of every example of the cut epoch reaches training exactly once, and
so does each of the next epoch's; each rank's batches come from the
partitions it hosts (idx splits records by number: index % 6 is the
partition)."""
import collections
import json
import os
import subprocess
import sys

import pytest
import torch.distributed

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch without torch.distributed")

EXAMPLES = 2048
ARGS = ["--examples", str(EXAMPLES), "--shuffle", "512",
        "--echo", "factor=2,shuffle=128", "--epochs", "2", "--every", "5",
        "--hidden", "32", "--no-eval"]
# (processes, kill after step, the step the next run resumes from)
RUNS = [(2, 12, 10), (3, 17, 15), (1, None, None)]


@pytest.fixture(scope="module")
def runs(examples_dir, tmp_path_factory):
    """[(processes, output, logged lines)] of the three runs."""
    d = tmp_path_factory.mktemp("elastic")
    out = []
    for world, kill_at, _ in RUNS:
        log = d / ("keys-%d.jsonl" % world)
        args = ["--checkpoint", str(d / "job.ckpt"), "--world-size",
                str(world), "--log-keys", str(log)]
        if kill_at is not None:
            args += ["--kill-at", str(kill_at)]
        proc = subprocess.run(
            [sys.executable, os.path.join(examples_dir, "pytorch_resume.py"),
             *ARGS, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        with open(log) as f:
            lines = [json.loads(line) for line in f]
        out.append((world, proc, lines))
    return out


def test_each_run_resumes_where_the_last_checkpoint_stood(runs):
    (_, first, _), (_, second, _), (_, last, _) = runs
    assert "rank 1: killed after step 12" in first.stdout, first.stdout
    assert first.returncode != 0
    assert "resumed at step 10 (epoch 0) from" in second.stdout, \
        second.stdout
    assert "on 3 ranks" in second.stdout
    assert "rank 2: killed after step 17" in second.stdout, second.stdout
    assert "resumed at step 15 (epoch 0) from" in last.stdout, last.stdout
    assert last.returncode == 0, last.stdout
    # 66 batches an epoch: 10 steps of 2 and 5 of 3 leave 31 on 1 rank
    assert "epoch 0: step 46" in last.stdout, last.stdout
    assert "epoch 1: step 112" in last.stdout, last.stdout


def trained(runs):
    """The lines of the batches that count: each run's up to the step
    the next run resumed from (a killed run trains on past its last
    checkpoint, and the next run trains on those batches again)."""
    for (world, _, lines), (_, _, resumed_at) in zip(runs, RUNS):
        for line in lines:
            assert line["world_size"] == world
            if resumed_at is None or line["step"] <= resumed_at:
                yield line


@pytest.mark.parametrize("epoch", [0, 1])
def test_every_example_of_the_epoch_is_trained_on_once(runs, epoch):
    counts = collections.Counter(
        tuple(k) for line in trained(runs) if line["epoch"] == epoch
        for k in line["keys"])
    assert not [k for k, n in counts.items() if n != 1]
    assert set(counts) == {(i, copy) for i in range(EXAMPLES)
                           for copy in (0, 1)}


def test_the_killed_runs_trained_on_past_their_checkpoints(runs):
    # what the filter above drops is there: the test counts by the
    # checkpoint, not by what the log happens to hold
    for (world, _, lines), (_, kill_at, resumed_at) in zip(runs[:2], RUNS):
        steps = {line["step"] for line in lines}
        assert max(steps) == kill_at > resumed_at, world


def test_each_rank_trains_on_the_partitions_it_hosts(runs):
    for world, _, lines in runs:
        ranks = collections.defaultdict(set)
        for line in lines:
            assert line["padded"] == 0  # 11 batches in every partition
            ranks[line["rank"]].update(i % 6 for i, _ in line["keys"])
        assert {r: sorted(ps) for r, ps in ranks.items()} == {
            r: list(range(r, 6, world)) for r in range(world)}
