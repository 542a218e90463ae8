# SPDX-License-Identifier: Apache-2.0
"""Sample.members and Pipeline.feedback(): a batch's identities, and
per-example values (losses) given back to the echo stages for echo
policies (echo:policy=...)."""
import os
import threading

import numpy
import pytest
import torch

import echoflow
from echoflow.torch import Loader, to_torch


def items(spec, **kw):
    with echoflow.Pipeline(spec, **kw) as p:
        return list(p)


# ---- members --------------------------------------------------------------

def test_members_are_the_range_indexes_of_the_batch():
    batches = items("range:n=10 | batch:4")
    assert [len(b.members) for b in batches] == [4, 4, 2]
    for b in batches:
        m = b.members
        assert m.dtype == numpy.int64 and m.shape == (len(m), 4)
        assert m[:, 0].tolist() == numpy.asarray(b["index"]).tolist()
        assert (m[:, 1:] == 0).all()  # epoch 0, fresh copies, examples
        assert b.identity.fresh == len(m)


@pytest.mark.parametrize("spec", [
    "range:n=6 | echo:2",
    "range:n=20 | shuffle:8 | echo:factor=2,shuffle=4",
    "range:n=9 | repeat:2",
])
def test_members_equal_the_identities_that_went_into_the_batch(spec):
    # the same spec, seed and order with and without the batch stage: the
    # batch's rows are the examples' identities, in order
    examples = [tuple(s.identity) for s in items(spec, seed=3)]
    rows = [tuple(r) for b in items(spec + " | batch:4", seed=3)
            for r in b.members.tolist()]
    assert rows == examples
    batches = items(spec + " | batch:4", seed=3)
    for b in batches:  # a batch's fresh count is that of its members
        assert b.identity.fresh == int((b.members[:, 2] == 0).sum())


def test_members_are_built_once_and_read_only():
    b = items("range:n=5 | batch:5")[0]
    m = b.members
    assert b.members is m  # cached: no cost per read
    assert not m.flags.writeable
    with pytest.raises(ValueError):
        m[0, 0] = 7


def test_members_of_an_example_are_none():
    s = items("range:n=1")[0]
    assert s.members is None
    assert echoflow.Sample().members is None


def test_members_survive_to_torch_and_the_loader():
    b = items("range:n=8 | batch:4")[0]
    t = to_torch(b)
    assert t.members is b.members
    batches = list(Loader("range:n=8 | batch:4"))
    assert [b.members[:, 0].tolist() for b in batches] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(isinstance(b["index"], torch.Tensor) for b in batches)


# ---- feedback accepted ------------------------------------------------------

def test_feedback_takes_numpy_torch_and_lists():
    with echoflow.Pipeline("range:n=12 | echo:2 | batch:4") as p:
        for k, b in enumerate(p):
            n = len(b.members)
            if k % 4 == 0:
                p.feedback(b.members, numpy.arange(n, dtype=numpy.float32))
            elif k % 4 == 1:  # a loss as a training loop has it
                loss = torch.rand(n, requires_grad=True) * 2
                p.feedback(b.members, loss)
            elif k % 4 == 2:
                p.feedback(b.members.tolist(), [0.5] * n)
            else:  # integers are numbers too; a strided view is copied
                p.feedback(b.members[::-1], numpy.arange(2 * n)[::2])
        p.feedback([], [])  # nothing to say is fine
        assert p.stats()["status"] == "ok"


def test_feedback_takes_identities_of_examples():
    with echoflow.Pipeline("range:n=4 | echo:2") as p:
        for s in p:
            p.feedback([s.identity], torch.tensor([1.5]))
        ids = [echoflow.Identity((i, 0, 0, 0)) for i in range(3)]
        p.feedback(ids, (1, 2, 3))


def test_feedback_without_a_policy_changes_nothing():
    spec = "range:n=40 | shuffle:8 | echo:factor=2,shuffle=6 | batch:5"
    plain = [b.members.tolist() for b in items(spec, seed=7)]
    seen = []
    with echoflow.Pipeline(spec, seed=7) as p:
        for b in p:
            seen.append(b.members.tolist())
            p.feedback(b.members, numpy.full(len(b.members), 1e6))
    assert seen == plain


def test_feedback_from_another_thread_while_next_waits_and_close():
    # the GIL is released inside, and close() waits for a feedback in
    # progress instead of freeing the pipeline under it
    p = echoflow.Pipeline("range:n=100000 | echo:2 | batch:64")
    ids = numpy.zeros((64, 4), numpy.int64)
    values = numpy.ones(64)
    errors, calls, started = [], [0], threading.Event()

    def give():
        try:
            while True:
                p.feedback(ids, values)
                calls[0] += 1
                started.set()
        except ValueError as e:  # closed: the end
            errors.append(str(e))

    t = threading.Thread(target=give)
    t.start()
    assert started.wait(10)  # calls overlap the iteration, whatever timing
    for k, _ in enumerate(p):
        if k == 500:
            break
    p.close()
    t.join(10)
    assert not t.is_alive()
    assert errors == ["the pipeline is closed"], errors


# ---- feedback refused -------------------------------------------------------

@pytest.fixture
def batch_pipeline():
    with echoflow.Pipeline("range:n=8 | batch:4") as p:
        yield p, next(p)


def test_length_mismatch_names_both_lengths(batch_pipeline):
    p, b = batch_pipeline
    with pytest.raises(ValueError, match=r"4 ids and 3 values"):
        p.feedback(b.members, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"4 ids and 5 values"):
        p.feedback(b.members, torch.ones(5))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_value_is_named_with_its_position(batch_pipeline, bad):
    p, b = batch_pipeline
    values = [0.1, 0.2, bad, float("nan")]  # the first one is named
    with pytest.raises(ValueError) as e:
        p.feedback(b.members, values)
    msg = str(e.value)
    assert "values[2]" in msg and repr(bad) in msg and "finite" in msg
    with pytest.raises(ValueError, match=r"values\[0\] is nan"):
        p.feedback(b.members, torch.tensor([float("nan")] * 4))


def test_ids_of_the_wrong_shape_or_kind(batch_pipeline):
    p, b = batch_pipeline
    with pytest.raises(ValueError, match=r"shape \[n, 4\].*\[4, 2\]"):
        p.feedback(b.members[:, :2], numpy.ones(4))
    with pytest.raises(ValueError, match=r"shape \[n, 4\].*\[4\]"):
        p.feedback(b.identity, numpy.ones(4))  # one Identity, not a list
    with pytest.raises(TypeError, match="integers"):
        p.feedback(b.members.astype(numpy.float64), numpy.ones(4))
    with pytest.raises(TypeError, match="integers"):
        p.feedback(["a", "b"], [1.0, 2.0])
    with pytest.raises(TypeError, match="ids"):
        p.feedback([(1, 2, 3, 4), (1, 2)], [1.0, 2.0])  # ragged


def test_values_of_the_wrong_shape_or_kind(batch_pipeline):
    p, b = batch_pipeline
    with pytest.raises(ValueError, match=r"1-D.*\[4, 1\]"):
        p.feedback(b.members, numpy.ones((4, 1)))
    with pytest.raises(ValueError, match=r"1-D.*\[\]"):
        p.feedback(b.members[:1], 1.0)
    with pytest.raises(TypeError, match="real numbers"):
        p.feedback(b.members[:2], ["x", "y"])
    with pytest.raises(TypeError, match="real numbers"):
        p.feedback(b.members[:1], [1 + 2j])


def test_the_c_half_checks_its_buffers(batch_pipeline):
    # _feedback is what Pipeline.feedback calls once it has converted
    p, b = batch_pipeline
    ids = numpy.ascontiguousarray(b.members)
    with pytest.raises(TypeError, match=r"int64 buffer of shape \[n, 4\]"):
        p._feedback(ids.astype(numpy.int32), numpy.ones(4))
    with pytest.raises(TypeError, match="float64 buffer"):
        p._feedback(ids, numpy.ones(4, numpy.float32))
    with pytest.raises(ValueError, match="4 ids and 2 values"):
        p._feedback(ids, numpy.ones(2))
    with pytest.raises(TypeError):
        p._feedback(ids, [1.0, 2.0, 3.0, 4.0])  # no buffer


def test_feedback_on_a_closed_pipeline():
    p = echoflow.Pipeline("range:n=8 | batch:4")
    b = next(p)
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.feedback(b.members, numpy.ones(4))


# ---- the Loader -------------------------------------------------------------

def test_loader_forwards_feedback_during_an_iteration():
    loader = Loader("range:n=16 | echo:2 | batch:4", seed=1)
    with pytest.raises(echoflow.StateError, match="no iteration"):
        loader.feedback(numpy.zeros((1, 4), numpy.int64), [1.0])
    n = 0
    for batch in loader:
        loss = batch["index"].float().requires_grad_()
        loader.feedback(batch.members, loss)
        n += len(batch.members)
    assert n == 32
    with pytest.raises(echoflow.StateError, match="no iteration"):
        loader.feedback(batch.members, numpy.ones(4))
    with pytest.raises(ValueError, match="4 ids and 1 values"):
        for batch in loader:
            loader.feedback(batch.members, [1.0])


# DataLoader workers fork a threaded process, which sanitizer runtimes
# cannot do safely (test_torch.py says more); the developer build runs it.
@pytest.mark.skipif("san.so" in os.environ.get("LD_PRELOAD", ""),
                    reason="a sanitizer runtime cannot fork a threaded "
                           "process safely")
def test_loader_refuses_feedback_with_dataloader_workers():
    loader = Loader("range:n=16 | batch:4")
    dl = torch.utils.data.DataLoader(loader, batch_size=None, num_workers=1,
                                     collate_fn=lambda b: b)
    it = iter(dl)
    try:
        batch = next(it)
        ids = numpy.asarray(batch["index"]).reshape(-1, 1)
        ids = numpy.hstack([ids, numpy.zeros((len(ids), 3), numpy.int64)])
        with pytest.raises(echoflow.StateError, match=r"num_workers > 0"):
            loader.feedback(ids, numpy.ones(len(ids)))
    finally:
        del it


# ---- an echo policy (echo:policy=rank) ------------------------------------

def test_feedback_reaches_an_echo_policy():
    spec = "range:n=64 | echo:factor=2,pool=16,policy=rank | batch:8"
    fresh, copies = [], {}
    with echoflow.Pipeline(spec, seed=5) as p:
        for b in p:
            m = b.members
            assert m[:, 0].tolist() == numpy.asarray(b["index"]).tolist()
            assert b.identity.fresh == int((m[:, 2] == 0).sum())
            for index, epoch, copy, _ in m.tolist():
                assert epoch == 0
                copies.setdefault(index, []).append(copy)
            fresh += m[m[:, 2] == 0, 0].tolist()
            # high loss for odd indexes: those are worth echoing
            p.feedback(m, (m[:, 0] % 2) * 10.0 + 0.1)
        assert p.stats()["status"] == "ok"
    assert sorted(fresh) == list(range(64))  # each item fresh once
    assert sum(len(c) for c in copies.values()) > 64  # some were echoed
    for c in copies.values():  # copies of one item numbered apart
        assert len(set(c)) == len(c)
