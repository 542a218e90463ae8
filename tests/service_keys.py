# SPDX-License-Identifier: Apache-2.0
"""What the service's kill-and-resume tests count (service_checkpoint_test.sh,
service_elastic_test.sh): the samples packed into their shards, the fresh
examples of `trace` lines, and every sample of an epoch once."""
import tarfile


def packed(folder, shards=4):
    """The indexes of the samples in FOLDER/train-%06d.tar: a sample's
    index is its shard << 32, its place in the shard."""
    want = set()
    for shard in range(shards):
        with tarfile.open("%s/train-%06d.tar" % (folder, shard)) as t:
            keys = []
            for m in t.getmembers():
                k = m.name.split(".", 1)[0]
                if not keys or keys[-1] != k:
                    keys.append(k)
        want |= {shard << 32 | p for p in range(len(keys))}
    return want


def fresh(lines):
    """The (epoch, index) of the fresh examples (echo copy 0) of trace
    lines, each split into its `epoch:index:echo_copy` words."""
    return [tuple(map(int, e.split(":")[:2])) for line in lines
            for e in line if e.endswith(":0")]


def once(kept, epochs, want):
    """Asserts that the (epoch, index) pairs `kept` hold every index of
    `want` exactly once in each of `epochs`."""
    for epoch in sorted(epochs):
        idx = [i for e, i in kept if e == epoch]
        twice = len(idx) - len(set(idx))
        assert not twice, "epoch %d: %d samples twice" % (epoch, twice)
        assert set(idx) == want, "epoch %d: %d missing, %d not of the data" % (
            epoch, len(want - set(idx)), len(set(idx) - want))
