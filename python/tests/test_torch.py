# SPDX-License-Identifier: Apache-2.0
"""echoflow.torch.Loader: torch tensors without a copy, sharding by rank and
by DataLoader worker, epochs."""
import os
import socket
import warnings

import numpy
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import echoflow
from echoflow.torch import Loader, echo


def indices(batches):
    return [i for b in batches
            for i in numpy.asarray(b["index"]).reshape(-1).tolist()]


def test_batches_are_torch_tensors_sharing_the_pipeline_memory(fmnist_spec):
    loader = Loader(fmnist_spec + " | echo:2 | batch:32")
    it = iter(loader)
    b = next(it)
    assert isinstance(b["image"], torch.Tensor)
    assert b["image"].dtype == torch.uint8 and b["image"].shape == (32, 28, 28)
    assert b["label"].dtype == torch.int64
    assert b.identity.fresh == 16
    # the same memory as the pipeline's own Tensor of that batch
    with echoflow.Pipeline(fmnist_spec + " | echo:2 | batch:32") as p:
        mine = next(iter(p))
    assert torch.equal(b["image"], torch.from_dlpack(mine["image"]))
    assert loader.stats()["status"] == "running"
    it.close()  # ends the iteration early: the pipeline is closed
    assert loader.stats()["status"] == "stopped"
    assert loader.stats()["items"] == 1


def test_zero_copy_into_torch():
    seen = []
    with echoflow.Pipeline("range:n=4,bytes=64 | echo:2") as p:
        for s in p:
            seen.append((s["data"].address,
                         echoflow.torch.to_torch(s)["data"].data_ptr()))
    assert all(a == b for a, b in seen)
    assert seen[0][0] == seen[1][0]  # an echo is the same memory again


def test_fields_converted_in_c_share_memory_and_outlive_the_pipeline():
    from echoflow.torch import from_capsule
    with echoflow.Pipeline("range:n=3,bytes=64 | echo:2") as p:
        p.convert_with(from_capsule, copy_shared=False)
        a, b = next(p), next(p)
    assert isinstance(a["data"], torch.Tensor)
    assert a["data"].data_ptr() == b["data"].data_ptr()  # an echo
    assert b.identity.echo_copy == 1
    # by default copy 0, which the echo stage still held when it went
    # out, is a copy of its own (writable tensors: test_torch_handout.py)
    with echoflow.Pipeline("range:n=3,bytes=64 | echo:2") as p:
        p.convert_with(from_capsule)
        a, b = next(p), next(p)
    assert a["data"].data_ptr() != b["data"].data_ptr()
    assert torch.equal(a["data"], b["data"])
    # bare capsules keep the memory as well, consumed after the close
    with echoflow.Pipeline("range:n=2,bytes=8") as p:
        p.convert_with(lambda capsule: capsule)
        capsules = [s["data"] for s in p]
    assert [from_capsule(c).tolist() for c in capsules] == [
        list(range(8)), list(range(1, 9))]
    with pytest.raises(TypeError, match="not callable"):
        echoflow.Pipeline("range:n=2").convert_with(3)


def test_ranks_read_disjoint_parts_that_cover_the_data():
    parts = [indices(Loader("range:n=1000 | shuffle:100 | batch:7", rank=r,
                            world_size=3)) for r in range(3)]
    assert sum(len(p) for p in parts) == 1000
    assert sorted(parts[0] + parts[1] + parts[2]) == list(range(1000))
    assert all(set(p) & set(q) == set() for p in parts for q in parts
               if p is not q)


def test_every_rank_shuffles_in_its_own_order():
    # rank r reads indices 2k + r; in the same order, k would line up
    halves = [[i // 2 for i in indices(Loader("range:n=1000 | shuffle:1000",
                                              rank=r, world_size=2))]
              for r in (0, 1)]
    assert sorted(halves[0]) == sorted(halves[1]) == list(range(500))
    assert halves[0] != halves[1]


# Sanitizer runtimes cannot fork a threaded process safely: TSan refuses
# to start threads in the child, and ASan's allocator lock, held by
# another thread at the fork, hung a worker once. The developer build runs
# this test.
@pytest.mark.skipif("san.so" in os.environ.get("LD_PRELOAD", ""),
                    reason="a sanitizer runtime cannot fork a threaded "
                           "process safely")
def test_dataloader_workers_shard_as_well():
    # two ranks of two workers each: four disjoint parts, the data once;
    # a worker that hangs fails the test after the timeout
    got = [indices(DataLoader(Loader("range:n=600 | batch:10", rank=r,
                                     world_size=2),
                              batch_size=None, num_workers=2, timeout=120))
           for r in (0, 1)]
    assert len(got[0]) == len(got[1]) == 300
    assert sorted(got[0] + got[1]) == list(range(600))


def test_rank_and_world_size_come_from_torch_distributed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=0, world_size=1)
    try:
        loader = Loader("range:n=10")
        assert (loader.rank, loader.world_size) == (0, 1)
        assert len(list(loader)) == 10
    finally:
        dist.destroy_process_group()
    assert (Loader("range:n=10", rank=1, world_size=4).rank) == 1


def test_each_epoch_has_its_own_order_the_same_on_every_run():
    spec = "range:n=200 | shuffle:200 | batch:200"
    loader = Loader(spec, seed=5)
    first = indices(loader)
    assert first == indices(echoflow.Pipeline(spec, seed=5))
    loader.set_epoch(1)
    second = indices(loader)
    assert sorted(second) == sorted(first) and second != first
    again = Loader(spec, seed=5)
    again.set_epoch(1)
    assert indices(again) == second


def test_bad_arguments_are_refused_at_construction():
    with pytest.raises(echoflow.SpecError, match="batch"):
        Loader("range:n=10 | batch:size=-1")
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        Loader("range:n=10", rank=2, world_size=2)
    with pytest.raises(ValueError, match="together"):
        Loader("range:n=10", rank=0)
    with pytest.raises(echoflow.SpecError, match="part 0 of 2 already"):
        Loader("range:n=10,shard=1/2", rank=0, world_size=2)
    with pytest.raises(ValueError, match="epoch"):
        Loader("range:n=10").set_epoch(-1)
    with pytest.raises(TypeError, match="epoch must be an int, not float"):
        Loader("range:n=10").set_epoch(1.5)
    # the seeds of epochs and parts are taken modulo 2**64: -1 would wrap
    with pytest.raises(ValueError, match="seed must be from 0"):
        Loader("range:n=10", seed=-1)
    with pytest.raises(TypeError, match="seed must be an int, not str"):
        Loader("range:n=10", seed="5")
    loader = Loader("range:n=10", seed=numpy.int64(5))
    assert loader.seed == 5 and type(loader.seed) is int
    loader.set_epoch(numpy.int64(1))
    assert loader.epoch == 1 and type(loader.epoch) is int


def test_split_spec_keeps_quotes():
    assert echoflow.split_spec('a:x="1|2" | b') == ['a:x="1|2"', "b"]
    assert echoflow.epoch_seed(5, 0) == 5
    assert len({echoflow.epoch_seed(5, e, p) for e in range(3)
                for p in range(3)}) == 9
    assert echoflow.epoch_seed(2**64 - 1, 3, 2) < 2**64


def test_len_is_the_length_of_this_ranks_part():
    assert len(Loader("range:n=10 | batch:3")) == 4
    # part 1 of 3: 1, 4, 7
    loader = Loader("range:n=10 | batch:2", rank=1, world_size=3)
    assert len(loader) == 2
    assert len(indices(loader)) == 3
    dl = DataLoader(Loader("range:n=10 | echo:2 | batch:3"), batch_size=None)
    assert len(dl) == 7
    assert len(list(dl)) == 7


def test_len_unknown_raises_type_error_and_dataloader_goes_on():
    loader = Loader("range:n=10 | echo:factor=1.5 | batch:3")
    with pytest.raises(TypeError, match="echo: factor=1.5"):
        len(loader)
    dl = DataLoader(loader, batch_size=None)
    with pytest.raises(TypeError, match="echo: factor=1.5"):
        len(dl)
    assert len(list(dl)) >= 4
    with pytest.raises(TypeError, match="repeat: never ends"):
        len(DataLoader(Loader("range:n=3 | repeat"), batch_size=None))


def test_a_loader_warns_once_not_every_epoch():
    # at most 100 items/s: each epoch's fill of 250 takes 2.5 s, past the
    # library's 2 s, and warns with that epoch's own figures
    loader = Loader("range:n=250 | throttle:rate=100 | shuffle:250")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for epoch in range(2):
            loader.set_epoch(epoch)
            assert sum(1 for _ in loader) == 250
    texts = [str(w.message) for w in got
             if issubclass(w.category, echoflow.PipelineWarning)]
    assert len(texts) == 1 and "shuffle:buffer=250" in texts[0]


def test_unpacked_items_leave_their_identity_on_the_loader():
    loader = Loader("range:n=10 | echo:factor=2 | batch:4",
                    as_tuple=("index",))
    assert loader.identity is None
    fresh = 0
    for (x,) in loader:
        fresh += loader.identity.fresh
        assert loader.members.shape == (len(x), 4)
    assert fresh == 10
    dl = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.arange(12)), batch_size=4)
    echoed = echo(dl, factor=2)
    fresh = 0
    for (x,) in echoed:
        fresh += echoed.identity.fresh
    assert fresh == 12


def test_identity_epoch_follows_set_epoch():
    def feedback_all(loader):
        for batch in loader:
            loader.feedback(batch.members, [1.0] * len(batch.members))
            yield batch
    loader = Loader("range:n=6 | echo:factor=2,policy=rank | batch:3",
                    seed=4)
    for epoch in (0, 3):
        loader.set_epoch(epoch)
        got = list(feedback_all(loader))
        assert {b.identity.epoch for b in got} == {epoch}
        assert {int(e) for b in got for e in b.members[:, 1]} == {epoch}
        # feedback took the epoch's identities back: each one matched
        assert loader.stats()["stages"][1]["feedback_matched"] > 0
        assert loader.stats()["stages"][1]["feedback_stale"] == 0


def test_a_loader_that_skips_says_what_it_dropped():
    def bad(s):
        if int(numpy.asarray(s["index"])) % 5 == 2:
            raise ValueError("no good")
        return s
    loader = Loader("range:n=100 | map:fn=bad | batch:10",
                    maps={"bad": bad}, on_error="skip")
    with pytest.warns(echoflow.PipelineWarning,
                      match=r"on_error='skip' dropped an item: map: item 2 "
                            r"\(epoch 0\): map 'bad' raised ValueError"):
        assert sum(len(b["index"]) for b in loader) == 80
    stats = loader.stats()
    assert stats["skipped"] == 20
    assert [s.split(":")[1] for s in stats["skips"]] == [
        " item %d (epoch 0)" % i for i in range(2, 80, 5)]
