# SPDX-License-Identifier: Apache-2.0
"""echoflow.torch.save_checkpoint() / load_checkpoint() in one process (no
torch.distributed: rank 0 of 1): what comes back, and what is refused,
also for a job of 2 ranks whose checkpoint is put together here and
resumed on 1 (Loaders with partitions=6, and without). The 2-process kill
and resume is test_example_resume.py's, on 3 and 1 processes
test_example_elastic.py's; the mpirun job with service workers
test_example_service.py's."""
import collections
import os

import pytest
import torch
import torch.distributed

import echoflow
import echoflow.torch
from echoflow import _echoflow

SPEC = "range:n=200 | shuffle:32 | echo:factor=2,shuffle=8 | batch:8"


def model_and_optimizer(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step(model, opt, batch):
    x = batch["index"].float().unsqueeze(1).expand(-1, 4) / 200
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def same(a, b):
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def saved(tmp_path):
    """A checkpoint taken after 3 steps of epoch 1, and what a run that
    goes on yields and ends with: (path, next batches, final model)."""
    model, opt = model_and_optimizer()
    loader = echoflow.torch.Loader(SPEC, seed=5)
    loader.set_epoch(1)
    it = iter(loader)
    for _ in range(3):
        step(model, opt, next(it))
    path = str(tmp_path / "job.ckpt")
    echoflow.torch.save_checkpoint(path, model, opt, loader,
                                   extra={"step": 3})
    rest = [b["index"].clone() for b in it]
    for b in rest:
        step(model, opt, {"index": b})
    loader.close()
    return path, rest, model.state_dict()


def test_resumes_the_loader_model_and_optimizer(saved):
    path, rest, final = saved
    model, opt = model_and_optimizer(seed=1)  # other weights, overwritten
    loader = echoflow.torch.Loader(SPEC, seed=5)
    assert echoflow.torch.load_checkpoint(path, model, opt,
                                          loader) == {"step": 3}
    assert loader.epoch == 1
    loader.set_epoch(1)  # keeps the state loaded for epoch 1
    got = [b["index"].clone() for b in loader]
    assert len(got) == len(rest)
    assert all(torch.equal(a, b) for a, b in zip(got, rest))
    for b in got:
        step(model, opt, {"index": b})
    assert same(model.state_dict(), final)  # momentum restored too


def test_another_seed_refused_with_the_loaders_message(saved):
    model, opt = model_and_optimizer()
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.torch.load_checkpoint(saved[0], model, opt,
                                       echoflow.torch.Loader(SPEC, seed=6))
    assert "rank 0 of 1, loader 0: state: saved by a Loader of seed=5, " \
        "this Loader has seed=6" in str(e.value)


def test_another_spec_refused_with_the_stage_that_differs(saved):
    model, opt = model_and_optimizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    other = SPEC.replace("echo:factor=2", "echo:factor=3")
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.torch.load_checkpoint(saved[0], model, opt,
                                       echoflow.torch.Loader(other, seed=5))
    assert "loader 0: state: stage 2 'echo' differs" in str(e.value)
    assert same(model.state_dict(), before)  # the model left as it was


def test_another_spec_refused_at_an_epochs_start(tmp_path):
    # a state between epochs holds no pipeline for the library to compare
    model, opt = model_and_optimizer()
    path = str(tmp_path / "start.ckpt")
    echoflow.torch.save_checkpoint(path, model, opt,
                                   echoflow.torch.Loader(SPEC, seed=5))
    other = SPEC.replace("batch:8", "batch:16")
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.torch.load_checkpoint(path, model, opt,
                                       echoflow.torch.Loader(other, seed=5))
    assert "saved by a Loader of spec %r, this Loader has spec %r" \
        % (SPEC, other) in str(e.value)


def test_another_count_of_loaders_refused(saved):
    model, opt = model_and_optimizer()
    loaders = [echoflow.torch.Loader(SPEC, seed=5)] * 2
    with pytest.raises(echoflow.SpecError, match="holds the states of 1 "
                       "loaders per rank, and 2 were given"):
        echoflow.torch.load_checkpoint(saved[0], model, opt, loaders)


def test_a_truncated_checkpoint_is_refused(saved, tmp_path):
    with open(saved[0], "rb") as f:
        data = f.read()
    cut = str(tmp_path / "cut.ckpt")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    model, opt = model_and_optimizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(echoflow.FormatError) as e:
        echoflow.torch.load_checkpoint(cut, model, opt,
                                       echoflow.torch.Loader(SPEC, seed=5))
    assert "load_checkpoint(%r), rank 0 of 1: not a whole checkpoint" % cut \
        in str(e.value)
    assert same(model.state_dict(), before)


def test_a_file_of_something_else_is_refused(tmp_path):
    path = str(tmp_path / "model.pt")
    torch.save({"model": {}}, path)
    with pytest.raises(echoflow.FormatError,
                       match="not a checkpoint of echoflow.torch"):
        echoflow.torch.load_checkpoint(path, torch.nn.Linear(1, 1))


def test_a_missing_file_names_it(tmp_path):
    path = str(tmp_path / "none.ckpt")
    with pytest.raises(FileNotFoundError, match="load_checkpoint"):
        echoflow.torch.load_checkpoint(path, torch.nn.Linear(1, 1))


def test_a_write_cut_short_keeps_the_previous_checkpoint(saved, monkeypatch):
    path = saved[0]
    with open(path, "rb") as f:
        before = f.read()

    def dies_half_way(obj, f):  # as a kill while writing would leave it
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_half_way)
    model, opt = model_and_optimizer()
    with pytest.raises(KeyboardInterrupt):
        echoflow.torch.save_checkpoint(path, model, opt)
    monkeypatch.undo()
    with open(path, "rb") as f:
        assert f.read() == before
    assert os.listdir(os.path.dirname(path)) == ["job.ckpt"]


def test_a_write_that_fails_names_the_path(tmp_path):
    path = str(tmp_path / "no" / "such" / "folder.ckpt")
    with pytest.raises(FileNotFoundError) as e:
        echoflow.torch.save_checkpoint(path, torch.nn.Linear(1, 1))
    assert "save_checkpoint(%r), rank 0 of 1" % path in str(e.value)


def test_a_loader_that_cannot_save_names_it(tmp_path):
    loader = echoflow.torch.Loader("range:n=100 | map:fn=noop,threads=2,"
                                   "ordered=false | batch:4")
    path = str(tmp_path / "x.ckpt")
    it = iter(loader)
    next(it)  # mid-iteration: the pipeline's position is asked for
    with pytest.raises(echoflow.UnsupportedError) as e:
        echoflow.torch.save_checkpoint(path, torch.nn.Linear(1, 1),
                                       loaders=[loader])
    it.close()
    assert "save_checkpoint(%r), rank 0 of 1, loader 0: state: stage 1 " \
        "'map'" % path in str(e.value)
    assert not os.path.exists(path)


def test_init_distributed_alone_is_a_group_of_one(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert not torch.distributed.is_initialized()
    try:
        assert echoflow.torch.init_distributed() == (0, 1)
        assert echoflow.torch.init_distributed() == (0, 1)  # once
        assert torch.distributed.get_backend() == "gloo"
    finally:
        torch.distributed.destroy_process_group()


def test_trainers_bcast_needs_the_job():
    # outside an mpirun job the process is no trainer of one (a build
    # without MPI says what to install)
    with pytest.raises((echoflow.StateError, echoflow.UnsupportedError),
                       match="has not joined the job as a trainer|built "
                       "without MPI"):
        _echoflow._service_trainers_bcast(b"x")


# ---- partitions: one job's checkpoint on another number of ranks ----------

def partition_of(batch):
    """range splits its records by number: an example's partition of 6 is
    its index % 6, and a batch is one partition's."""
    parts = set((batch["index"] % 6).tolist())
    assert len(parts) == 1
    return parts.pop()


def job_of_2_ranks(tmp_path, loaders, steps):
    """The checkpoint of a job of 2 ranks, as rank 0 writes it, after each
    rank's Loader (built for its rank of 2) took `steps` batches: each
    rank's entry is what save_checkpoint saves of it in this process (no
    torch.distributed here), put together. (path, batches taken)."""
    model, opt = model_and_optimizer()
    entries, taken = [], []
    for rank, loader in enumerate(loaders):
        loader.set_epoch(1)
        it = iter(loader)
        taken += [next(it)["index"].clone() for _ in range(steps)]
        alone = str(tmp_path / ("rank%d.ckpt" % rank))
        echoflow.torch.save_checkpoint(alone, model, opt, loader,
                                       extra={"step": steps})
        it.close()
        entries.append(torch.load(alone)["ranks"][0])
    job = torch.load(alone)
    job.update(world_size=2, ranks=entries)
    path = str(tmp_path / "job.ckpt")
    torch.save(job, path)
    return path, taken


def partitioned(rank, world_size, partitions=6, **kw):
    return echoflow.torch.Loader(SPEC, seed=5, rank=rank,
                                 world_size=world_size,
                                 partitions=partitions, **kw)


def test_a_job_of_partitions_resumes_on_1_rank_each_batch_once(tmp_path):
    path, taken = job_of_2_ranks(
        tmp_path, [partitioned(r, 2) for r in range(2)], steps=5)
    whole = partitioned(0, 1)
    whole.set_epoch(1)
    expected = collections.defaultdict(list)
    for b in whole:
        expected[partition_of(b)].append(b["index"].tolist())
    model, opt = model_and_optimizer(seed=1)
    loader = partitioned(0, 1)
    assert echoflow.torch.load_checkpoint(path, model, opt,
                                          loader) == {"step": 5}
    assert loader.epoch == 1
    got = collections.defaultdict(list)
    for b in taken + [b["index"].clone() for b in loader]:
        got[partition_of({"index": b})].append(b.tolist())
    assert got == expected  # each partition's order, each batch once


def test_another_number_of_partitions_is_refused_naming_both(tmp_path):
    path, _ = job_of_2_ranks(tmp_path, [partitioned(r, 2) for r in range(2)],
                             steps=2)
    model, opt = model_and_optimizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.torch.load_checkpoint(path, model, opt,
                                       partitioned(0, 1, partitions=4))
    assert "rank 0 of 1, loader 0: state: saved by a Loader of " \
        "partitions=6, this Loader has partitions=4: build it with " \
        "partitions=6" in str(e.value)
    assert same(model.state_dict(), before)


def test_a_loader_without_partitions_is_told_to_give_them(tmp_path):
    path, _ = job_of_2_ranks(tmp_path, [partitioned(r, 2) for r in range(2)],
                             steps=2)
    model, opt = model_and_optimizer()
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.torch.load_checkpoint(path, model, opt,
                                       echoflow.torch.Loader(SPEC, seed=5))
    assert "rank 0 of 1, loader 0: state: saved by a Loader of " \
        "partitions=6, this Loader has partitions=None (one part per " \
        "rank: 1): build it with partitions=6" in str(e.value)


def test_a_job_without_partitions_resumes_on_its_own_count_only(tmp_path):
    path, _ = job_of_2_ranks(
        tmp_path, [echoflow.torch.Loader(SPEC, seed=5, rank=r, world_size=2)
                   for r in range(2)], steps=2)
    model, opt = model_and_optimizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for loader in (echoflow.torch.Loader(SPEC, seed=5), partitioned(0, 1)):
        with pytest.raises(echoflow.SpecError) as e:
            echoflow.torch.load_checkpoint(path, model, opt, loader)
        assert "rank 0 of 1: saved by a job of 2 ranks, and this job has " \
            "1: its loader 0 has no partitions (one part per rank), so it " \
            "resumes on 2 ranks only" in str(e.value)
        assert "builds its Loaders with partitions=P" in str(e.value)
    assert same(model.state_dict(), before)


def test_a_number_of_ranks_that_does_not_divide_the_partitions():
    # refused where the job starts, before any checkpoint is read
    with pytest.raises(ValueError) as e:
        partitioned(3, 4)
    assert "partitions=6 over world_size 4" in str(e.value)
    assert "1, 2, 3 or 6 ranks work (or give partitions a multiple of 4)" \
        in str(e.value)


def test_ranks_at_different_epochs_are_not_one_job(tmp_path):
    path, _ = job_of_2_ranks(tmp_path, [partitioned(r, 2) for r in range(2)],
                             steps=2)
    job = torch.load(path)
    job["ranks"][1]["loaders"][0]["epoch"] = 2
    torch.save(job, path)
    model, opt = model_and_optimizer()
    with pytest.raises(echoflow.FormatError) as e:
        echoflow.torch.load_checkpoint(path, model, opt, partitioned(0, 1))
    assert "rank 0 of 1, loader 0: state: rank 0 saved its position in " \
        "epoch 1 and rank 1 in epoch 2" in str(e.value)
