# SPDX-License-Identifier: Apache-2.0
"""echoflow.torch.Loader's hand-out rules: tensors that may be written in
place without reaching an echoed copy, DataLoader's batch_size refused for
batches, more DataLoader workers than the data has parts, as_tuple and
pin_memory."""
import os
import subprocess
import warnings

import numpy
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import echoflow
from echoflow.torch import FieldTuple, Loader

CLI = os.environ.get("ECHOFLOW_CLI", "build/echoflow")

# Sanitizer runtimes cannot fork a threaded process safely (test_torch.py
# says more); the developer build runs the DataLoader worker tests.
forks = pytest.mark.skipif("san.so" in os.environ.get("LD_PRELOAD", ""),
                           reason="a sanitizer runtime cannot fork a "
                                  "threaded process safely")


def reference(spec):
    """(identity, {field: numpy copy}) of each sample, read-only Tensors."""
    with echoflow.Pipeline(spec) as p:
        return [(s.identity, {k: numpy.array(v) for k, v in s.items()})
                for s in p]


def read_writing_in_place(loader):
    """What the loader hands out, as it was before the training loop
    wrote into every tensor of it in place."""
    got = []
    for item in loader:
        got.append((item.identity,
                    {k: v.numpy().copy() for k, v in item.items()}))
        for v in item.values():
            v.sub_(1)  # as an in-place normalisation would
    return got


def same(a, b):
    return len(a) == len(b) and all(
        x[0] == y[0] and x[1].keys() == y[1].keys()
        and all(numpy.array_equal(x[1][k], y[1][k]) for k in x[1])
        for x, y in zip(a, b))


@pytest.mark.parametrize("spec", [
    # batch echoing: each batch is held by the echo stage for its copy 1
    "range:n=40,bytes=16 | batch:10 | echo:2",
    "range:n=40,bytes=16 | batch:10 | echo:factor=3,shuffle=4 | prefetch:3",
    # example echoing without batch: the examples themselves go out
    "range:n=12,bytes=16 | echo:2",
    "range:n=12,bytes=16 | echo:factor=2,shuffle=5",
])
def test_in_place_writes_never_reach_an_echoed_copy(spec):
    want = reference(spec)
    assert any(i.echo_copy > 0 for i, _ in want)
    assert same(read_writing_in_place(Loader(spec)), want)


def test_without_the_copy_the_echoed_copy_is_corrupted():
    # what the copy prevents (and what shows that the test above can
    # fail): copy 1 of a batch is the memory copy 0 was, written into
    spec = "range:n=40,bytes=16 | batch:10 | echo:2"
    loader = Loader(spec)
    loader._copy_shared = False
    got = read_writing_in_place(loader)
    want = reference(spec)
    assert same(got[0::2], want[0::2])
    bad = [(g, w) for g, w in zip(got[1::2], want[1::2])]
    assert all(numpy.array_equal(g[1]["data"], w[1]["data"] - 1)
               for g, w in bad)


def test_images_of_a_batch_echo_survive_subtracting_the_mean(fmnist_spec):
    spec = fmnist_spec + " | take:64 | batch:16 | echo:2"
    want = reference(spec)
    got = []
    for b in Loader(spec):
        got.append(b["image"].clone())
        b["image"].sub_(b["image"].float().mean().to(torch.uint8))
    assert len(got) == 8
    assert all(numpy.array_equal(g.numpy(), w["image"])
               for g, (_, w) in zip(got, want))


def test_views_of_a_source_file_are_copied(fmnist_spec):
    # idx examples view the file the source read once, which it still
    # holds: every one is copied
    spec = fmnist_spec + " | take:6"
    loader = Loader(spec)
    assert same(read_writing_in_place(loader), reference(spec))
    copies, nbytes = loader._pipeline._handout_copies
    assert copies == 6 * 2 and nbytes == 6 * (784 + 8)


def test_example_echoing_before_batch_copies_nothing():
    # each batch is new memory that only it holds: handed out as it is
    loader = Loader("range:n=100,bytes=16 | echo:2 | shuffle:20 | batch:10")
    assert len(list(loader)) == 20
    assert loader._pipeline._handout_copies == (0, 0)
    # batch echoing copies each batch's copy 0 (2 fields) and not its
    # copy 1, which nothing else holds any more
    loader = Loader("range:n=40,bytes=16 | batch:10 | echo:2")
    assert len(list(loader)) == 8
    assert loader._pipeline._handout_copies == (4 * 2, 4 * (160 + 80))


def test_fields_alone_on_their_buffer_are_not_copied():
    # a sample's own fields are no echo copies: with nothing else holding
    # their buffers, the hand-out is the pipeline's memory itself
    with echoflow.Pipeline("range:n=3,bytes=64") as p:
        p.convert_with(echoflow.torch.from_capsule)
        items = list(p)
        assert p._handout_copies == (0, 0)
    assert [int(s["data"][0]) for s in items] == [0, 1, 2]


def test_overlapping_fields_are_copied():
    # a map returning one Tensor under two names: one buffer, one range
    with echoflow.Pipeline("range:n=2,bytes=8 | map:fn=twice",
                           maps={"twice": lambda s: {"a": s["data"],
                                                     "b": s["data"]}}) as p:
        p.convert_with(echoflow.torch.from_capsule)
        s = next(p)
        s["a"].fill_(7)
        assert s["b"].tolist() == list(range(8))
        assert p._handout_copies[0] == 2


# ---- DataLoader's batch_size ------------------------------------------------

def test_dataloader_batch_size_refuses_batches():
    for kw in ({}, {"as_tuple": ("data", "index")}):
        loader = Loader("range:n=40,bytes=4 | batch:10", **kw)
        with pytest.raises(TypeError, match="batch_size=None"):
            next(iter(DataLoader(loader, batch_size=2)))
        assert len(list(DataLoader(loader, batch_size=None))) == 4


def test_dataloader_batch_size_collates_examples():
    b = next(iter(DataLoader(Loader("range:n=40,bytes=4"), batch_size=3)))
    assert isinstance(b, echoflow.Sample)
    assert b["data"].shape == (3, 4) and b["index"].tolist() == [0, 1, 2]
    x, i = next(iter(DataLoader(Loader("range:n=40,bytes=4",
                                       as_tuple=("data", "index")),
                                batch_size=3)))
    assert x.shape == (3, 4) and i.tolist() == [0, 1, 2]


# ---- more DataLoader workers than parts of the data ------------------------

@pytest.fixture(scope="module")
def two_shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("two_shards")
    subprocess.run([CLI, "pack", "--per-shard", "50", "range:n=100,bytes=8",
                    str(d / "s-%06d.tar")], check=True,
                   stdout=subprocess.DEVNULL)
    return "tar:urls=%s/s-{000000..000001}.tar" % d


@forks
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_more_workers_than_shards_fail_at_once_saying_what_to_do(two_shards):
    loader = Loader(two_shards + " | batch:10")
    with pytest.raises(echoflow.SpecError,
                       match=r"worker [23] of num_workers=4 \(rank 0 of "
                             r"world_size 1\) reads part [23] of 4.*lists 2 "
                             r"shards.*at most as many workers"):
        list(DataLoader(loader, batch_size=None, num_workers=4, timeout=120))
    # a shard's member is bytes (the index as text): a list in each batch
    got = [int(i) for b in DataLoader(loader, batch_size=None, num_workers=2,
                                      timeout=120)
           for i in b["index"]]
    assert sorted(got) == list(range(100))


@forks
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_workers_with_no_records_yield_nothing():
    # sources split by record: a worker past the last record reads none
    got = [int(b["index"]) for b in DataLoader(Loader("range:n=3"),
                                               batch_size=None,
                                               num_workers=4, timeout=120)]
    assert sorted(got) == [0, 1, 2]


# ---- as_tuple and pin_memory -----------------------------------------------

def test_as_tuple_yields_fields_in_order_with_the_identity():
    items = list(Loader("range:n=20,bytes=4 | batch:5",
                        as_tuple=("index", "data")))
    assert len(items) == 4
    index, data = items[1]
    assert isinstance(items[1], FieldTuple)
    assert index.tolist() == [5, 6, 7, 8, 9] and data.shape == (5, 4)
    assert items[1].identity.index == 1 and items[1].members.shape == (5, 4)
    with pytest.raises(KeyError, match="'label'.*'data'"):
        next(iter(Loader("range:n=2,bytes=4", as_tuple=("data", "label"))))
    for bad in ("data", True, ()):
        with pytest.raises(TypeError, match="field names"):
            Loader("range:n=2", as_tuple=bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
def test_pin_memory_without_cuda_warns_and_yields():
    with pytest.warns(UserWarning, match="pin_memory=True but CUDA"):
        loader = Loader("range:n=6,bytes=4 | batch:3", pin_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once, at construction
        items = list(loader)
    assert [b["index"].tolist() for b in items] == [[0, 1, 2], [3, 4, 5]]
    assert not items[0]["data"].is_pinned()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_memory_pins_every_tensor():
    spec = "range:n=20,bytes=16 | batch:5 | echo:2"
    loader = Loader(spec, pin_memory=True)
    got = read_writing_in_place(loader)
    assert same(got, reference(spec))  # the pinned copy is the hand-out copy
    assert loader._pipeline._handout_copies == (0, 0)
    for b in Loader(spec, pin_memory=True, as_tuple=("data",)):
        assert b[0].is_pinned()
        assert b[0].to("cuda", non_blocking=True).cpu().shape == (5, 16)


def user_data():
    """A TensorDataset, numpy arrays and bytearrays, as a user holds
    them, and a copy of each to compare with."""
    x = torch.arange(24, dtype=torch.float32).view(8, 3)
    y = torch.arange(8)
    arrays = [{"x": numpy.full(3, i, numpy.float32), "raw": bytearray([i] * 4)}
              for i in range(8)]
    return x, y, arrays


@pytest.mark.parametrize("spec", ["", "shuffle:4", "take:3", "echo:2",
                                  "select:x", "batch:1", "echo:2 | batch:1"])
def test_writes_never_reach_the_users_own_data(spec):
    x, y, arrays = user_data()
    x0, y0 = x.clone(), y.clone()
    a0 = [{k: bytes(numpy.asarray(v).tobytes()) for k, v in a.items()}
          for a in arrays]
    sources = [(TensorDataset(x, y), ("x", "y")), (arrays, None)]
    for source, fields in sources:
        kw = {"fields": fields} if fields else {}
        for _ in range(2):  # each epoch would make the data drift
            for b in Loader(spec, source=source, **kw):
                for v in b.values():
                    v.sub_(1)
    assert torch.equal(x, x0) and torch.equal(y, y0)
    assert [{k: bytes(numpy.asarray(v).tobytes()) for k, v in a.items()}
            for a in arrays] == a0


def test_a_file_the_source_read_is_not_copied(tmp_path):
    # the files source's buffers are memory echoflow allocated, not the
    # user's: nothing else holds them, so they go out as they are
    # (the labels view the source's table of them, and are copied)
    (tmp_path / "c").mkdir()
    for i in range(3):
        (tmp_path / "c" / ("%d.png" % i)).write_bytes(bytes([i]) * 100)
    loader = Loader("files:root=%s" % tmp_path)
    got = [bytes(s["png"].tolist()) for s in loader]
    assert got == [bytes([i]) * 100 for i in range(3)]
    assert loader._pipeline._handout_copies == (3, 3 * 8)
