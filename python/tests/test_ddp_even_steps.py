# SPDX-License-Identifier: Apache-2.0
"""even_steps: every rank of a DistributedDataParallel job takes the same
number of steps per epoch, also with echo:factor=auto.

A real 2-process gloo job (ddp_even_worker.py, started twice, meeting
through a file:// rendezvous) reads uneven parts: 129 examples at batch 64
give rank 0 two batches and rank 1 one. A DDP model steps on every batch;
a rank that stepped alone would wait in the gradients' all_reduce for
ever, so the job has a timeout (and its collectives one of their own):
a hang fails the test instead of the test run.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import torch.distributed

import echoflow
import echoflow.torch

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch without torch.distributed")

WORKER = os.path.join(os.path.dirname(__file__), "ddp_even_worker.py")
PLAIN = "range:n=129 | batch:64"
AUTO = "range:n=129 | map:fn=slow | echo:factor=auto,max=4 | batch:64"
# the naive loop, without the option: it only counts (a step would hang)
NAIVE = [
    {"name": "naive_loader", "kind": "loader", "spec": PLAIN,
     "even_steps": None, "train": False},
    {"name": "naive_echo", "kind": "echo", "factor": 1,
     "even_steps": None, "train": False},
]
SCENARIOS = [
    {"name": "loader_pad", "kind": "loader", "spec": PLAIN,
     "even_steps": "pad"},
    {"name": "loader_drop", "kind": "loader", "spec": PLAIN,
     "even_steps": "drop"},
    {"name": "loader_auto_pad", "kind": "loader", "spec": AUTO,
     "even_steps": "pad"},
    {"name": "loader_auto_drop", "kind": "loader", "spec": AUTO,
     "even_steps": "drop"},
    {"name": "echo_auto_pad", "kind": "echo", "factor": "auto",
     "even_steps": "pad"},
    {"name": "echo_auto_drop", "kind": "echo", "factor": "auto",
     "even_steps": "drop"},
    # rank 0 reads 100 of 200 (7 batches of 16), rank 1 32 of 64 (2): rank
    # 1 wraps round its part twice and a half
    {"name": "loader_wraps", "kind": "loader", "even_steps": "pad",
     "spec": "range:n={n} | batch:16", "n": [200, 64]},
    # the same, broken off after 4 steps (rank 1 padding since its third)
    # and resumed from each rank's state_dict()
    {"name": "loader_wraps_resumed", "kind": "loader", "even_steps": "pad",
     "spec": "range:n={n} | batch:16", "n": [200, 64], "resume_at": 4},
    # a DistributedSampler gives every rank as many examples: len() known
    {"name": "echo_sampler", "kind": "echo", "factor": 2, "sampler": True,
     "even_steps": "pad"},
    # rank 1's input fails at its first batch: both ranks stop there
    {"name": "loader_fails", "kind": "loader", "even_steps": "drop",
     "spec": "range:n=129 | {n} | batch:64", "n": ["echo:1", "map:fn=boom"]},
    # rank 1's part of range:n=1 is empty: nothing to wrap round with
    {"name": "loader_empty_part", "kind": "loader", "even_steps": "pad",
     "spec": "range:n={n} | batch:64", "n": [129, 1]},
] + [
    # 6 partitions of 16 examples at batch 4, the odd ones cut to 4
    # examples: rank 0 hosts 0, 2, 4 (12 batches), rank 1 hosts 1, 3, 5
    # (3 batches), and pads by reading them again from their starts
    {"name": "partitions_" + name, "kind": "loader", "even_steps": mode,
     "spec": "range:n=96 | map:fn=odd_short | batch:4", "partitions": 6,
     "on_error": "skip", **more}
    for name, mode, more in (("pad", "pad", {}), ("drop", "drop", {}),
                             # broken off while rank 1 pads, and resumed
                             ("pad_resumed", "pad", {"resume_at": 8}))
]


def run_job(tmp_path, scenarios):
    """Runs the scenarios on 2 gloo ranks; their results by rank."""
    init = tmp_path / "rendezvous"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(
        [sys.executable, WORKER, str(rank), "2", str(init),
         str(tmp_path / ("rank%d.json" % rank)), json.dumps(scenarios)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for rank in range(2)]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=240)[0])
    except subprocess.TimeoutExpired:
        for p in procs:  # a hang: stop both rather than wait for ever
            p.kill()
        outputs = [p.communicate()[0] for p in procs]
        pytest.fail("the job hung:\n%s" % "\n".join(
            "rank %d:\n%s" % (r, o) for r, o in enumerate(outputs)))
    for rank, p in enumerate(procs):
        assert p.returncode == 0, "rank %d:\n%s" % (rank, outputs[rank])
    out = []
    for rank in range(2):
        with open(tmp_path / ("rank%d.json" % rank)) as f:
            out.append(json.load(f))
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("ddp-even"), SCENARIOS)


@pytest.fixture(scope="module")
def naive_job(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("ddp-naive"), NAIVE)


def flat(batches):
    return [i for b in batches for i in b]


def test_without_the_option_the_ranks_yield_different_counts(naive_job):
    # what makes the naive DDP loop hang: rank 1 leaves the loop after one
    # step while rank 0 waits in the second step's all_reduce
    job = naive_job
    assert [job[r]["naive_loader"]["batches"] for r in (0, 1)] == [2, 1]
    assert [job[r]["naive_echo"]["batches"] for r in (0, 1)] == [2, 1]


@pytest.mark.parametrize("name", ["loader_pad", "loader_auto_pad",
                                  "echo_auto_pad"])
def test_pad_gives_every_rank_the_longest_count(job, name):
    runs = [job[r][name] for r in (0, 1)]
    assert runs[0]["batches"] == runs[1]["batches"]
    own = [r["batches"] - r["padding"] for r in runs]
    assert runs[0]["batches"] == max(own)
    assert min(r["padding"] for r in runs) == 0
    # every example is seen at least once, in its own rank's part
    parts = [set(flat(r["examples"][:b]))
             for r, b in zip(runs, own)]
    assert not parts[0] & parts[1]
    assert parts[0] | parts[1] == set(range(129))
    # padding re-reads the rank's own part, nothing of the other's
    for r, part in zip(runs, parts):
        assert set(flat(r["examples"])) == part


def test_pad_without_echo_is_known_in_advance(job):
    runs = [job[r]["loader_pad"] for r in (0, 1)]
    assert [r["batches"] for r in runs] == [2, 2]
    assert [r["len"] for r in runs] == [2, 2]  # len() says what comes
    assert [r["padding"] for r in runs] == [0, 1]
    # rank 1's second step re-yields its first batch: the start of its part
    assert runs[1]["examples"][1] == runs[1]["examples"][0]


@pytest.mark.parametrize("name", ["loader_drop", "loader_auto_drop",
                                  "echo_auto_drop"])
def test_drop_gives_every_rank_the_same_count(job, name):
    runs = [job[r][name] for r in (0, 1)]
    assert runs[0]["batches"] == runs[1]["batches"] > 0
    assert runs[0]["padding"] == runs[1]["padding"] == 0


def test_drop_without_echo_stops_at_the_shortest_count(job):
    runs = [job[r]["loader_drop"] for r in (0, 1)]
    assert [r["batches"] for r in runs] == [1, 1]
    assert [r["len"] for r in runs] == [1, 1]


def test_a_part_wraps_round_as_often_as_needed(job):
    runs = [job[r]["loader_wraps"] for r in (0, 1)]
    assert [r["batches"] for r in runs] == [7, 7]
    assert [r["padding"] for r in runs] == [0, 5]
    b = runs[1]["examples"]
    assert b[2:] == [b[0], b[1], b[0], b[1], b[0]]


def test_a_padded_pass_resumes_from_its_state(job):
    for rank in (0, 1):
        whole = job[rank]["loader_wraps"]
        resumed = job[rank]["loader_wraps_resumed"]
        assert resumed["batches"] == 7
        assert resumed["padding"] == whole["padding"]
        assert resumed["examples"] == whole["examples"]


def test_partitions_pad_by_reading_the_hosted_partitions_again(job):
    runs = [job[r]["partitions_pad"] for r in (0, 1)]
    assert [r["batches"] for r in runs] == [12, 12]
    assert [r["padding"] for r in runs] == [0, 9]
    own = [flat(runs[0]["examples"]), flat(runs[1]["examples"][:3])]
    assert sorted(own[0]) == [i for i in range(96) if i % 6 in (0, 2, 4)]
    assert sorted(own[1]) == [i for i in range(24) if i % 6 in (1, 3, 5)]
    b = runs[1]["examples"]  # its 3 batches (one per partition), again
    assert b[3:] == b[:3] * 3


def test_partitions_drop_at_the_shortest_rank(job):
    runs = [job[r]["partitions_drop"] for r in (0, 1)]
    assert [r["batches"] for r in runs] == [3, 3]
    assert [r["padding"] for r in runs] == [0, 0]
    # the first item of each partition, by the rule
    assert [{i % 6 for i in b} for b in runs[0]["examples"]] == [{0}, {2},
                                                                 {4}]


def test_partitions_resume_in_the_padding(job):
    for rank in (0, 1):
        whole = job[rank]["partitions_pad"]
        resumed = job[rank]["partitions_pad_resumed"]
        assert resumed["padding"] == whole["padding"]
        assert resumed["examples"] == whole["examples"]


def test_len_of_echo_over_a_distributed_sampler(job):
    for rank in (0, 1):
        out = job[rank]["echo_sampler"]
        # 65 examples, each twice, at batch 64
        assert out["len"] == out["batches"] == 3
        assert out["padding"] == 0


def test_a_failed_input_stops_every_rank(job):
    failed, other = job[1]["loader_fails"], job[0]["loader_fails"]
    assert failed["error"] == "CallbackError"
    assert "boom on rank 1" in failed["message"]
    assert other["error"] == "StoppedError"
    assert re.search(r"echoflow\.torch\.Loader \(rank 0 of world_size 2\): "
                     r"even_steps='drop': the input of another rank failed",
                     other["message"]), other["message"]


def test_an_empty_part_cannot_be_padded(job):
    for rank, whose in ((0, "a rank's"), (1, "this rank's")):
        out = job[rank]["loader_empty_part"]
        assert out["error"] == "StateError"
        assert re.search(r"even_steps='pad': %s part of the epoch yields no "
                         r"batch, so it has nothing to wrap round with"
                         % whose, out["message"]), out["message"]


def test_the_ranks_trained_one_model(job):
    assert job[0]["params"] == job[1]["params"]


# Without a job: what is refused, and what even_steps leaves alone.

def test_several_ranks_without_torch_distributed_are_refused():
    assert not torch.distributed.is_initialized()
    for mode in ("pad", "drop"):
        with pytest.raises(echoflow.StateError, match=(
                r"even_steps='%s': rank 1 of world_size 2 agrees the "
                r"number of steps .* not initialised: call torch\."
                r"distributed\.init_process_group\(\) first" % mode)):
            echoflow.torch.Loader(PLAIN, rank=1, world_size=2,
                                  even_steps=mode)


def test_an_unknown_mode_is_refused():
    for bad in ("both", True, 1, ["pad"]):
        with pytest.raises(ValueError, match=r"even_steps must be None, "
                           r"'pad' .* or 'drop' .*, not %s" % (
                               re.escape(repr(bad)),)):
            echoflow.torch.Loader(PLAIN, even_steps=bad)
    dl = torch.utils.data.DataLoader(torch.arange(10), batch_size=4)
    with pytest.raises(ValueError, match="even_steps must be None"):
        echoflow.torch.echo(dl, even_steps="even")


def test_one_rank_has_nothing_to_agree():
    plain = [b["index"].tolist() for b in echoflow.torch.Loader(PLAIN)]
    assert [len(b) for b in plain] == [64, 64, 1]
    for mode in ("pad", "drop"):
        loader = echoflow.torch.Loader(PLAIN, even_steps=mode)
        assert len(loader) == 3
        assert [b["index"].tolist() for b in loader] == plain
        assert loader.padded == 0
        assert ("padded" in loader.state_dict()) == (mode == "pad")
    dl = torch.utils.data.DataLoader(torch.arange(10), batch_size=4)
    e = echoflow.torch.echo(dl, factor=1, mode="batch", even_steps="pad")
    assert len(e) == 3
    assert [b.tolist() for b in e] == [b.tolist() for b in dl]
    assert e.padded == 0


def test_a_source_read_once_cannot_wrap_round():
    with pytest.raises(ValueError, match=r"even_steps='pad' wraps round by "
                       r"reading this rank's part again .* the source is an "
                       r"iterator, which reads once"):
        echoflow.torch.Loader("batch:4", source=iter(range(10)), rank=0,
                              world_size=2, even_steps="pad")
    with pytest.raises(ValueError, match=r"echo: even_steps='pad' wraps "
                       r"round by iterating the DataLoader again"):
        echoflow.torch.echo(iter([torch.arange(4)]), even_steps="pad")


def test_a_distributed_sampler_of_several_replicas_needs_the_group():
    data = torch.utils.data.TensorDataset(torch.arange(10))
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=2, rank=1, shuffle=False)
    dl = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
    e = echoflow.torch.echo(dl, factor=1, even_steps="drop")
    with pytest.raises(echoflow.StateError, match=r"rank 1 of world_size 2 "
                       r"agrees the number of steps .* not initialised"):
        next(iter(e))


def test_dataloader_workers_are_refused(monkeypatch):
    # the group check passes here as it would under torch.distributed
    monkeypatch.setattr(echoflow.torch, "_check_group", lambda *a: None)
    loader = echoflow.torch.Loader(PLAIN, rank=0, world_size=2,
                                   even_steps="pad")
    dl = torch.utils.data.DataLoader(loader, batch_size=None, num_workers=1)
    with pytest.raises(echoflow.SpecError, match=r"even_steps='pad' agrees "
                       r"each step with the other ranks in the process that "
                       r"iterates the Loader.*num_workers=0"):
        next(iter(dl))


def test_len_of_another_ranks_source_is_not_known(monkeypatch):
    # the group check passes here as it would under torch.distributed
    monkeypatch.setattr(echoflow.torch, "_check_group", lambda *a: None)
    loader = echoflow.torch.Loader("batch:4", source=list(range(10)),
                                   rank=0, world_size=2, even_steps="drop")
    with pytest.raises(TypeError, match=r"even_steps='drop' the ranks yield "
                       r"as many batches as the shortest of them, and the "
                       r"other ranks' sources are not known here"):
        len(loader)


def test_a_state_saved_while_padding_needs_pad():
    loader = echoflow.torch.Loader("range:n=10 | batch:4",
                                   even_steps="pad")
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    it.close()
    assert state["padded"] == 0
    state["padded"] = 2
    for mode in (None, "drop"):
        other = echoflow.torch.Loader("range:n=10 | batch:4",
                                      even_steps=mode)
        with pytest.raises(echoflow.SpecError, match=(
                r"state: saved while padding \(2 batches of the wrap-round "
                r"of even_steps='pad'\), and this Loader has even_steps=%s"
                % re.escape(repr(mode)))):
            other.load_state_dict(state)
    for bad in (-1, "2", True):
        state["padded"] = bad
        with pytest.raises(echoflow.FormatError, match=r"state: padded "):
            loader.load_state_dict(state)
    del state["padded"]  # a state saved before there was padding
    loader.load_state_dict(state)
    assert [b["index"].tolist() for b in loader] == [[4, 5, 6, 7], [8, 9]]
