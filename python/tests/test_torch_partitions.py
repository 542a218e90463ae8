# SPDX-License-Identifier: Apache-2.0
"""echoflow.torch.Loader(partitions=P) in one process, each rank a Loader
given its rank and world_size (no torch.distributed, even_steps=None):
the partitions' orders, the rule that deals and interleaves them, and
states taken on one number of ranks and loaded on another. The kill and
resume of a job of processes on 2, 3 and 1 ranks is
test_example_elastic.py's; load_checkpoint's refusals are
test_torch_checkpoint.py's."""
import collections
import os

import numpy
import pytest
from torch.utils.data import DataLoader

import echoflow
from echoflow.torch import Loader

P = 6
# 100 examples in 6 parts: 17, 17, 17, 17, 16, 16; twice each, in batches
# of 4: 9 batches (the last of 2) or 8, so partitions end apart
SPEC = "range:n=100 | shuffle:16 | echo:factor=2,shuffle=8 | batch:4"
SEED = 7


def loader(rank, world_size, spec=SPEC, **kw):
    return Loader(spec, seed=SEED, rank=rank, world_size=world_size,
                  partitions=P, **kw)


def key(batch):
    """(partition, the batch's (index, echo copy) pairs): range splits
    its records by number, so an example's partition is index % P."""
    members = numpy.asarray(batch.members)
    parts = set((members[:, 0] % P).tolist())
    assert len(parts) == 1, "a batch of several partitions: %r" % members
    return parts.pop(), tuple(map(tuple, members[:, [0, 2]].tolist()))


def by_partition(items):
    """{partition: [batch keys in order]} of (partition, keys) items."""
    out = collections.defaultdict(list)
    for p, keys in items:
        out[p].append(keys)
    return dict(out)


def epoch_of(world_size, epoch):
    """Each rank's items of `epoch`, as (partition, keys), by rank."""
    ranks = []
    for rank in range(world_size):
        ld = loader(rank, world_size)
        ld.set_epoch(epoch)
        ranks.append([key(b) for b in ld])
    return ranks


def by_rule(counts, lengths):
    """The partitions a rank's items come from, by the rule: the hosted
    partition that has yielded fewest, the lowest among equals, those
    ended passed over. counts: {p: items yielded so far}; lengths: {p:
    items in all}."""
    counts, order = dict(counts), []
    while True:
        live = [p for p in counts if counts[p] < lengths[p]]
        if not live:
            return order
        p = min(live, key=lambda q: (counts[q], q))
        counts[p] += 1
        order.append(p)


@pytest.fixture(scope="module")
def one_rank():
    """Epoch 1 read by one rank: {partition: batch keys}."""
    return by_partition(epoch_of(1, 1)[0])


def test_each_partitions_order_is_the_same_on_1_2_and_3_ranks(one_rank):
    assert sorted(one_rank) == list(range(P))
    assert [len(one_rank[p]) for p in range(P)] == [9, 9, 9, 9, 8, 8]
    for world_size in (2, 3):
        ranks = epoch_of(world_size, 1)
        got = by_partition(i for items in ranks for i in items)
        assert got == one_rank, world_size
        for rank, items in enumerate(ranks):  # p % world_size == rank
            assert {p % world_size for p, _ in items} == {rank}


def test_a_partitions_order_is_that_of_its_own_pipeline(one_rank):
    # partition p: the whole spec over part p of P, seeded
    # epoch_seed(seed, epoch, p): nothing of the rank count in it
    for p in range(P):
        with echoflow.Pipeline(SPEC, seed=echoflow.epoch_seed(SEED, 1, p),
                               epoch=1, shard=(p, P)) as pipeline:
            assert [key(b)[1] for b in pipeline] == one_rank[p], p
    other = by_partition(epoch_of(1, 2)[0])
    assert all(other[p] != one_rank[p] for p in range(P))  # epoch's own


def test_a_rank_takes_from_the_partition_that_has_given_fewest(one_rank):
    lengths = {p: len(one_rank[p]) for p in range(P)}
    for world_size in (1, 2, 3):
        for rank, items in enumerate(epoch_of(world_size, 1)):
            hosted = range(rank, P, world_size)
            expected = by_rule({p: 0 for p in hosted}, lengths)
            assert [p for p, _ in items] == expected, (world_size, rank)


def test_len_counts_the_hosted_partitions(one_rank):
    assert len(loader(0, 1)) == sum(len(v) for v in one_rank.values())
    assert [len(loader(r, 3)) for r in range(3)] == [
        len(one_rank[r]) + len(one_rank[r + 3]) for r in range(3)]


@pytest.mark.parametrize("world_size", [1, 3])
def test_a_state_of_2_ranks_resumes_on_another_count_each_item_once(
        one_rank, world_size):
    lengths = {p: len(one_rank[p]) for p in range(P)}
    before, states = [], []
    for rank, taken in ((0, 7), (1, 4)):  # the ranks need not agree here
        ld = loader(rank, 2)
        ld.set_epoch(1)
        it = iter(ld)
        before += [key(next(it)) for _ in range(taken)]
        states.append(ld.state_dict())
        it.close()
    assert sorted(states[0]["parts"]) == [0, 2, 4]
    assert states[0]["partitions"] == P and states[0]["world_size"] == 2
    # every partition's state in one: a Loader takes those it hosts
    whole = dict(states[0], parts={**states[0]["parts"],
                                   **states[1]["parts"]})
    counts = {p: v["count"] for p, v in whole["parts"].items()}
    assert counts == {0: 3, 2: 2, 4: 2, 1: 2, 3: 1, 5: 1}
    after = []
    for rank in range(world_size):
        ld = loader(rank, world_size)
        ld.load_state_dict(whole)
        assert ld.epoch == 1
        ld.set_epoch(1)  # keeps it
        items = [key(b) for b in ld]
        hosted = range(rank, P, world_size)
        assert [p for p, _ in items] == by_rule(
            {p: counts[p] for p in hosted}, lengths)
        after += items
    # each partition goes on where it stood: its whole order, once
    assert by_partition(before + after) == one_rank


def test_a_state_at_an_epochs_start_reads_the_epoch_whole(one_rank):
    ld = loader(1, 2)
    ld.set_epoch(1)
    state = ld.state_dict()
    assert state["epoch"] == 1
    assert state["parts"] == {p: {"pipeline": None, "count": 0,
                                  "ended": False} for p in (1, 3, 5)}
    ld = loader(1, 2)
    ld.load_state_dict(state)
    assert ld.epoch == 1
    assert by_partition(key(b) for b in ld) == {
        p: one_rank[p] for p in (1, 3, 5)}


def test_a_state_without_the_hosted_partitions_is_refused():
    ld = loader(0, 2)
    it = iter(ld)
    next(it)
    state = ld.state_dict()
    it.close()
    alone = loader(0, 1)
    before = alone.state_dict()
    with pytest.raises(echoflow.SpecError) as e:
        alone.load_state_dict(state)
    assert "state: holds partitions 0, 2, 4 of 6, and this Loader, rank 0 " \
        "of world_size 1, hosts 0, 1, 2, 3, 4, 5" in str(e.value)
    assert "load_checkpoint() gathers every rank's" in str(e.value)
    assert alone.state_dict() == before  # left as it was


def test_a_state_of_other_partitions_is_refused():
    state = loader(0, 1).state_dict()
    other = Loader(SPEC, seed=SEED, partitions=3)
    with pytest.raises(echoflow.SpecError,
                       match="saved by a Loader of partitions=6, this Loader "
                       "has partitions=3: build it with partitions=6"):
        other.load_state_dict(state)
    with pytest.raises(echoflow.SpecError,
                       match=r"saved by a Loader of partitions=6, this Loader "
                       r"has partitions=None \(one part per rank: 1\)"):
        Loader(SPEC, seed=SEED).load_state_dict(state)
    with pytest.raises(echoflow.SpecError,
                       match="saved by a Loader without partitions .rank 0 "
                       "of world_size 1, one part per rank., this Loader has "
                       "partitions=6"):
        loader(0, 1).load_state_dict(Loader(SPEC, seed=SEED).state_dict())


def test_a_state_of_another_spec_is_refused_naming_the_partition():
    ld = loader(0, 1)
    it = iter(ld)
    for _ in range(8):
        next(it)
    state = ld.state_dict()
    it.close()
    other = loader(0, 1, spec=SPEC.replace("shuffle:16", "shuffle:32"))
    with pytest.raises(echoflow.SpecError, match="partition 0: state: "
                       "stage 1 'shuffle' differs"):
        other.load_state_dict(state)


def test_bad_partitions_are_refused_at_construction():
    with pytest.raises(ValueError) as e:
        loader(1, 4)
    assert "partitions=6 over world_size 4: rank r hosts the partitions p " \
        "with p % world_size == r, so world_size must divide partitions; " \
        "with partitions=6, 1, 2, 3 or 6 ranks work" in str(e.value)
    with pytest.raises(ValueError, match="partitions must be an int >= 1"):
        Loader(SPEC, partitions=0)
    with pytest.raises(TypeError, match="partitions must be an int"):
        Loader(SPEC, partitions="6")
    with pytest.raises(ValueError, match="a source= iterable is read as it "
                       "is given"):
        Loader("batch:2", source=[{"x": 1}] * 4, fields=["x"], partitions=2)


# DataLoader workers fork, which a sanitizer runtime cannot do safely in a
# threaded process (test_torch.py says more); the developer build runs it
@pytest.mark.skipif("san.so" in os.environ.get("LD_PRELOAD", ""),
                    reason="a sanitizer runtime cannot fork a threaded "
                           "process safely")
def test_dataloader_workers_are_refused():
    dl = DataLoader(loader(0, 1), batch_size=None, num_workers=1)
    with pytest.raises(echoflow.SpecError, match="partitions=6: a rank "
                       "reads its partitions in turn .* num_workers=0"):
        next(iter(dl))


def test_feedback_and_stats_go_to_the_partition_handed_out_last():
    spec = ("range:n=120 | echo:factor=2,policy=rank,pool=64,shuffle=8 "
            "| batch:4")
    ld = loader(0, 2, spec=spec)
    fed = collections.Counter()
    items = collections.Counter()
    for batch in ld:
        p, _ = key(batch)
        ld.feedback(batch.members, numpy.ones(len(batch.members)))
        fed[p] += len(batch.members)
        items[p] += 1
        stats = ld.stats()  # that partition's pipeline's
        assert stats["items"] == items[p]
        echo = [s for s in stats["stages"] if s["name"] == "echo"][0]
        assert echo["feedback_matched"] + echo["feedback_stale"] == fed[p]
        assert batch.identity == ld.identity
    assert sorted(fed) == [0, 2, 4]
    with pytest.raises(echoflow.StateError, match="no iteration"):
        ld.feedback(batch.members, numpy.ones(len(batch.members)))
