# SPDX-License-Identifier: Apache-2.0
"""Fields that are not tensors of one shape, as a PyTorch user meets them:
WebDataset keys and captions of different lengths, select and drop, and
maps that hand such fields on."""
import io
import tarfile

import pytest
import torch

import echoflow
import echoflow.torch


def write_shard(path, keys):
    """A WebDataset shard: per key a caption as long as the key and a
    one-byte class."""
    with tarfile.open(path, "w") as t:
        for i, key in enumerate(keys):
            for ext, data in (("txt", ("caption " + key).encode()),
                              ("cls", str(i % 10).encode())):
                info = tarfile.TarInfo("%s.%s" % (key, ext))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


@pytest.fixture
def shard(tmp_path):
    keys = ["a", "bb", "ccc", "dddd", "e", "n\u00e9e"]
    path = str(tmp_path / "keys.tar")
    write_shard(path, keys)
    return path, keys


def test_keys_of_different_lengths_batch_as_lists_of_str(shard):
    path, keys = shard
    loader = echoflow.torch.Loader("tar:urls=%s | batch:4" % path)
    batches = list(loader)
    assert [b["__key__"] for b in batches] == [keys[:4], keys[4:]]
    assert batches[0]["__url__"] == [path] * 4
    assert batches[0]["txt"] == [("caption " + k).encode() for k in keys[:4]]
    # one byte each, and a list all the same: as with any other batch
    assert batches[0]["cls"] == [b"0", b"1", b"2", b"3"]


def test_an_example_key_is_str(shard):
    path, keys = shard
    got = [s["__key__"] for s in echoflow.Pipeline("tar:urls=%s" % path)]
    assert got == keys


def test_keys_of_one_length_are_a_list_too(fmnist_shards):
    folder, names = fmnist_shards
    spec = 'tar:urls=%s/%s | select:fields="__key__,cls" | take:2 | batch:2'
    b = next(iter(echoflow.Pipeline(spec % (folder, names))))
    assert sorted(b) == ["__key__", "cls"]
    assert isinstance(b["__key__"], list) and len(b["__key__"]) == 2
    assert all(isinstance(k, str) for k in b["__key__"])


def test_select_and_drop(shard):
    path, keys = shard
    b = next(iter(echoflow.Pipeline(
        'tar:urls=%s | drop:fields="__url__,txt" | batch:6' % path)))
    assert sorted(b) == ["__key__", "cls"]
    b = next(iter(echoflow.Pipeline(
        "tar:urls=%s | select:txt | batch:6" % path)))
    assert list(b) == ["txt"]
    with pytest.raises(echoflow.Error,
                       match=r"select: item 0 \(epoch 0\), file '.*keys.tar'"
                             r", key 'a' has no field 'jpg' \(it has: "
                             r"__key__, __url__, txt, cls\)"):
        next(iter(echoflow.Pipeline("tar:urls=%s | select:jpg" % path)))


def test_ragged_error_names_the_option(shard):
    path, _ = shard
    with pytest.raises(echoflow.Error, match=r"ragged=list would batch it"):
        next(iter(echoflow.Pipeline(
            "tar:urls=%s | batch:2,ragged=error" % path)))


def test_a_map_hands_lists_and_text_on(shard):
    path, keys = shard

    def upper(batch):
        return dict(batch, shout=[k.upper() for k in batch["__key__"]])

    spec = "tar:urls=%s | select:__key__ | batch:3 | map:fn=upper | echo:2"
    got = list(echoflow.Pipeline(spec % path, maps={"upper": upper}))
    assert [b["__key__"] for b in got] == [keys[:3]] * 2 + [keys[3:]] * 2
    assert got[0]["shout"] == [k.upper() for k in keys[:3]]  # str again

    def rename(sample):  # an example's key, handed on as a new str
        return {"name": sample["__key__"] + "!", "cls": sample["cls"]}

    spec = "tar:urls=%s | map:fn=rename | batch:6"
    b = next(iter(echoflow.Pipeline(spec % path, maps={"rename": rename})))
    assert b["name"] == [k + "!" for k in keys]


def test_a_map_returning_a_list_of_numbers_is_refused(shard):
    path, _ = shard

    def bad(batch):
        return dict(batch, bad=[1, [2, 3]])

    spec = "tar:urls=%s | batch:2 | map:fn=bad"
    with pytest.raises(echoflow.CallbackError, match="field 'bad'"):
        next(iter(echoflow.Pipeline(spec % path, maps={"bad": bad})))


def test_a_list_of_texts_per_example_is_not_batched(shard):
    path, _ = shard

    def tags(sample):  # a list of str per example: a ragged field
        return {"tags": ["a", "bbb"], "cls": sample["cls"]}

    spec = "tar:urls=%s | map:fn=tags | batch:4"
    with pytest.raises(echoflow.ShapeError,
                       match=r"field 'tags' of sample 0 of the batch \(index "
                             r"0\) is already ragged.*batch once"):
        next(iter(echoflow.Pipeline(spec % path, maps={"tags": tags})))


def test_a_batch_of_batches_is_refused(tmp_path):
    for name in ("c/1.png", "c/22.png", "d/333.png", "d/4444.png"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    spec = "files:root=%s | batch:2 | batch:2" % tmp_path
    with pytest.raises(echoflow.ShapeError, match=r"already ragged"):
        next(iter(echoflow.Pipeline(spec)))


def test_texts_are_a_list_in_every_batch_whatever_their_lengths():
    # names of one length in the first batch and of two in the second: a
    # list of str in both (a source's str is text)
    items = [{"name": n, "x": i} for i, n in
             enumerate(["ab", "cd", "efg", "h"])]
    got = [b["name"] for b in echoflow.Pipeline("batch:2", source=items)]
    assert got == [["ab", "cd"], ["efg", "h"]]
    got = [b["blob"] for b in echoflow.Pipeline(
        "batch:2", source=[{"blob": b"xy"}, {"blob": b"zw"}])]
    assert got == [[b"xy", b"zw"]]
    # a uint8 tensor or a bytearray is an array, not a text: it stacks
    for a in (torch.zeros(3, dtype=torch.uint8), bytearray(3)):
        b = next(iter(echoflow.Pipeline("batch:2", source=[a, a])))
        assert b["0"].shape == (2, 3)


def test_an_error_names_the_item_in_its_own_file(tmp_path):
    # the third item of the second shard: "item 2", not its identity
    # (1 << 32) + 2, which holds the shard's number too
    a, b = str(tmp_path / "a.tar"), str(tmp_path / "b.tar")
    write_shard(a, ["k0", "k1"])
    with tarfile.open(b, "w") as t:
        for key in ("m0", "m1", "m2"):
            data = b"no caption" if key != "m2" else b""
            info = tarfile.TarInfo(key + (".txt" if data else ".cls"))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    spec = 'tar:urls="%s %s" | select:txt' % (a, b)
    with pytest.raises(echoflow.Error,
                       match=r"select: item 2 \(epoch 0\), file '.*b\.tar', "
                             r"key 'm2' has no field 'txt'"):
        list(echoflow.Pipeline(spec))
