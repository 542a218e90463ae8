# SPDX-License-Identifier: Apache-2.0
"""Checkpoints from Python: Pipeline.state_dict() / load_state_dict() and
the torch Loader's. A state taken after k items and loaded into a new
pipeline (or Loader) gives exactly what the uninterrupted run gives after
item k, identities and bytes; it survives pickle and torch.save; a bad
state raises with the library's message and changes nothing."""
import io
import pickle
import struct
import threading
import time

import numpy
import pytest
import torch
from torch.utils.data import DataLoader

import echoflow
from echoflow.torch import Loader


def fingerprint(sample):
    """A sample as comparable values: its identity and, per field, dtype,
    shape and bytes (echoflow.Tensor or torch.Tensor alike)."""
    fields = []
    for name, value in sorted(sample.items()):
        a = value.numpy() if isinstance(value, torch.Tensor) \
            else numpy.asarray(value)
        fields.append((name, str(a.dtype), a.shape, a.tobytes()))
    return tuple(sample.identity), tuple(fields)


def run(spec, seed=0, maps=None):
    with echoflow.Pipeline(spec, seed=seed, maps=maps) as p:
        return [fingerprint(s) for s in p]


def via_pickle(state):
    return pickle.loads(pickle.dumps(state))


def via_torch_save(state):
    f = io.BytesIO()
    torch.save(state, f)
    f.seek(0)
    return torch.load(f)


def resumed(spec, cut, through=via_pickle, seed=0, maps=None,
            restore_spec=None):
    """The run of `spec` taken apart after `cut` items: the first `cut`,
    then what a new pipeline (of `restore_spec`) gives from the state."""
    p = echoflow.Pipeline(spec, seed=seed, maps=maps)
    head = [fingerprint(s) for _, s in zip(range(cut), p)]
    state = through(p.state_dict())
    p.close()
    q = echoflow.Pipeline(restore_spec or spec, seed=seed, maps=maps)
    q.load_state_dict(state)
    with q:
        return head + [fingerprint(s) for s in q]


def check_cuts(spec, cuts, **kw):
    whole = run(spec, seed=kw.get("seed", 0), maps=kw.get("maps"))
    assert len(whole) > max(c for c in cuts if c is not None)
    for cut in cuts:
        got = resumed(spec, len(whole) if cut is None else cut, **kw)
        assert len(got) == len(whole), "resumed at %s" % cut
        first = next((i for i, (a, b) in enumerate(zip(whole, got))
                      if a != b), None)
        assert first is None, "resumed at %s: item %d differs" % (cut, first)


# ---- resuming exactly --------------------------------------------------

FMNIST_TAIL = (" | shuffle:buffer=2000 | echo:factor=2,shuffle=100"
               " | batch:size=32 | prefetch:depth=3 | take:count=300")


def test_fashion_mnist_resumes_exactly_at_every_cut(fmnist_spec):
    check_cuts(fmnist_spec + FMNIST_TAIL, [0, 1, 33, 150, 299, None],
               seed=11)


def test_fashion_mnist_through_a_map_and_repeat(fmnist_spec):
    # batch echoing, after a map on threads, over two passes
    spec = (fmnist_spec + " | take:count=1500 | map:fn=to_f32,threads=2"
            " | repeat:count=2 | shuffle:buffer=300 | batch:size=50"
            " | echo:factor=1.5 | prefetch:depth=2")
    check_cuts(spec, [0, 1, 44, 45, 46, None], seed=3,
               through=via_torch_save)


@pytest.mark.parametrize("through", [via_pickle, via_torch_save])
def test_range_resumes_exactly_at_every_cut(through):
    spec = ("range:n=1000,bytes=8 | shuffle:buffer=100"
            " | echo:factor=1.5,shuffle=10 | batch:size=7 | prefetch:depth=2"
            " | repeat:count=2")
    check_cuts(spec, [0, 1, 5, 99, 100, 101, 250, 399, None],
               seed=2**64 - 1, through=through)


def test_speed_settings_may_differ_on_restore():
    spec = "range:n=300 | map:fn=noop,threads=3 | prefetch:depth=2"
    whole = run(spec)
    got = resumed(spec, 77, restore_spec="range:n=300 | map:fn=noop,"
                  "threads=1 | prefetch:depth=9")
    assert got == whole


def test_a_python_map_restores_and_saves_while_its_threads_run():
    # saving pauses the map's threads, which need the GIL to finish their
    # calls; restoring calls the map again for the items the state names
    calls = []

    def square(sample):
        calls.append(1)
        x = numpy.asarray(sample["data"]).astype(numpy.int32)
        return {"data": x * x}

    spec = "range:n=200,bytes=4 | map:fn=square,threads=3 | shuffle:buffer=20"
    maps = {"square": square}
    whole = run(spec, maps=maps)
    for cut in (0, 7, 150):
        assert resumed(spec, cut, maps=maps) == whole
    assert len(calls) > 4 * 200  # the resumes called it too


def test_a_state_at_the_end_resumes_at_the_end():
    p = echoflow.Pipeline("range:n=5")
    assert len(list(p)) == 5
    q = echoflow.Pipeline("range:n=5")
    q.load_state_dict(p.state_dict())
    assert list(q) == []
    assert q.stats()["status"] == "ok" and q.stats()["items"] == 5


def test_the_state_is_small_and_plain():
    with echoflow.Pipeline("range:n=100000,bytes=1024 | shuffle:buffer=64"
                           " | batch:size=16") as p:
        next(p)
        state = p.state_dict()
        # a save with no next() in between is the same position
        assert p.state_dict() == state
    assert set(state) == {"version", "pipeline"}
    assert state["version"] == 1 and isinstance(state["pipeline"], bytes)
    # identities of 64 + 16 items, not their 80 KiB
    assert len(state["pipeline"]) < 2000


# ---- bad states --------------------------------------------------------

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def sealed(payload):
    """A state of `payload` with a header made right (src/pipeline/state.h)."""
    return (b"EFST" + struct.pack("<IQI", 1, len(payload), crc32c(payload))
            + payload)


SPEC = "range:n=50,bytes=4 | shuffle:buffer=8 | batch:size=3"


@pytest.fixture
def state():
    with echoflow.Pipeline(SPEC, seed=1) as p:
        for _ in range(4):
            next(p)
        return p.state_dict()


def refused(state, spec=SPEC, seed=1, error=echoflow.Error):
    """Loads `state`, which must raise `error`; the pipeline must then
    still run from its start. Returns the exception."""
    p = echoflow.Pipeline(spec, seed=seed)
    with pytest.raises(error) as e:
        p.load_state_dict(state)
    with p:
        assert [s.identity for s in p] == [s.identity for s in
                                           echoflow.Pipeline(spec, seed=seed)]
    return e.value


def test_our_seal_is_the_librarys(state):
    blob = state["pipeline"]
    assert sealed(blob[20:]) == blob


def test_a_corrupt_state_raises_format_error(state):
    blob = bytearray(state["pipeline"])
    blob[-3] ^= 0x40
    e = refused({"version": 1, "pipeline": bytes(blob)},
                error=echoflow.FormatError)
    assert e.status == echoflow.FormatError.status
    assert "state: checksum mismatch" in str(e)


def test_a_sealed_state_with_bytes_not_utf8_raises_an_echoflow_error(state):
    # a valid checksum over a stage name that is not UTF-8: the library's
    # message quotes it, and the exception must still be echoflow's
    payload = state["pipeline"][20:]
    assert payload.count(b"shuffle") == 1
    bad = sealed(payload.replace(b"shuffle", b"shu\xfffle"))
    e = refused({"version": 1, "pipeline": bad})
    assert "'shu\ufffdfle'" in str(e)


def test_a_truncated_state_raises_format_error(state):
    blob = state["pipeline"]
    for cut in (len(blob) - 1, 21, 20, 3, 0):
        e = refused({"version": 1, "pipeline": blob[:cut]},
                    error=echoflow.FormatError)
        assert str(e).startswith("state: ")
    e = refused({"version": 1, "pipeline": blob[:-1]})
    assert "truncated" in str(e)
    e = refused({"version": 1, "pipeline": b"PK\x03\x04" + blob[4:]})
    assert "not an echoflow pipeline state" in str(e)


def test_a_damaged_payload_names_the_stage_and_byte(state):
    # the checksum made right: the parser, not the checksum, must find it
    blob = state["pipeline"]
    e = refused({"version": 1, "pipeline": sealed(blob[20:-1])},
                error=echoflow.FormatError)
    assert str(e).startswith("state: stage 2 'batch': ") and "byte" in str(e)
    e = refused({"version": 1, "pipeline": sealed(blob[20:] + b"\0")},
                error=echoflow.FormatError)
    assert "1 bytes left over" in str(e)
    # the shuffle's options cut short: its name is still there
    at = blob.index(b"buffer=8") - 1
    e = refused({"version": 1, "pipeline": sealed(blob[20:at])},
                error=echoflow.FormatError)
    assert str(e).startswith("state: stage 1 'shuffle': ")


def test_a_state_of_another_pipeline_raises_spec_error(state):
    e = refused(state, spec=SPEC.replace("buffer=8", "buffer=9"),
                error=echoflow.SpecError)
    assert "stage 1 'shuffle' differs" in str(e) and "buffer=9" in str(e)
    e = refused(state, spec=SPEC + " | take:10", error=echoflow.SpecError)
    assert "3 stages" in str(e)
    e = refused(state, seed=2, error=echoflow.SpecError)
    assert "seed 1" in str(e) and "seed 2" in str(e)
    assert isinstance(e, ValueError)


def test_a_dict_that_is_no_state_raises(state):
    with pytest.raises(TypeError, match="takes the dict"):
        echoflow.Pipeline(SPEC).load_state_dict(state["pipeline"])
    for bad, words in [({"pipeline": state["pipeline"]}, "no 'version'"),
                       ({"version": 1}, "no 'version' or no 'pipeline'"),
                       ({"version": 2, "pipeline": state["pipeline"]},
                        "version 2 of the dict"),
                       ({"version": 1, "pipeline": "EFST"},
                        "'pipeline' is a str"),
                       ({"version": 1, "pipeline": None},
                        "'pipeline' is a NoneType")]:
        e = refused(bad, error=echoflow.FormatError)
        assert words in str(e), str(e)
    # any bytes-like object will do
    p = echoflow.Pipeline(SPEC, seed=1)
    p.load_state_dict({"version": 1,
                       "pipeline": bytearray(state["pipeline"])})
    assert len(list(p)) == 17 - 4


def test_loading_after_iteration_started_raises(state):
    p = echoflow.Pipeline(SPEC, seed=1)
    next(p)
    with pytest.raises(echoflow.StateError, match="before its first next"):
        p.load_state_dict(state)
    assert len(list(p)) == 16  # it goes on undisturbed
    with pytest.raises(echoflow.StateError, match="restored already"):
        q = echoflow.Pipeline(SPEC, seed=1)
        q.load_state_dict(state)
        q.load_state_dict(state)
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.load_state_dict(state)
    with pytest.raises(ValueError, match="closed"):
        p.state_dict()


def test_pipelines_that_cannot_be_saved_say_why():
    p = echoflow.Pipeline("range:n=10 | map:fn=noop,threads=2,ordered=false")
    with pytest.raises(echoflow.UnsupportedError, match="ordered=false"):
        p.state_dict()
    p.close()


def test_a_failed_pipeline_gives_its_error():
    def fails(sample):
        if sample.identity.index == 3:
            raise KeyError("no luck")
        return dict(sample)

    p = echoflow.Pipeline("range:n=10 | map:fn=fails", maps={"fails": fails})
    with pytest.raises(echoflow.CallbackError):
        list(p)
    with pytest.raises(echoflow.CallbackError, match="fails") as e:
        p.state_dict()
    assert e.value.status == echoflow.CallbackError.status


# ---- the torch Loader --------------------------------------------------

def loader_items(loader):
    return [fingerprint(b) for b in loader]


def test_loader_resumes_exactly_inside_an_epoch(fmnist_spec):
    spec = fmnist_spec + FMNIST_TAIL
    loader = Loader(spec, seed=9)
    loader.set_epoch(2)
    whole = loader_items(loader)
    assert len(whole) == 300
    for cut in (0, 1, 120, 299, 300):
        loader = Loader(spec, seed=9)
        loader.set_epoch(2)
        head, it = [], iter(loader)
        for _ in range(cut):
            head.append(fingerprint(next(it)))
        state = via_torch_save(loader.state_dict())
        assert state["epoch"] == 2 and state["version"] == 1
        assert (state["rank"], state["world_size"]) == (0, 1)
        del it
        again = Loader(spec, seed=9)
        again.load_state_dict(state)
        assert again.epoch == 2
        assert again.state_dict() == state  # loaded, not iterated yet
        assert head + loader_items(again) == whole, "cut %d" % cut
        # and the next iteration reads the epoch whole
        assert loader_items(again) == whole


def test_loader_resumes_under_a_single_process_dataloader():
    # num_workers=0: the DataLoader asks the Loader for one batch at a time
    # (passed as they are: its default conversion drops the identity)
    def data(loader):
        return DataLoader(loader, batch_size=None, collate_fn=lambda b: b)

    spec = "range:n=500,bytes=2 | shuffle:buffer=50 | echo:factor=2"
    whole = loader_items(data(Loader(spec, seed=8)))
    loader = Loader(spec, seed=8)
    it = iter(data(loader))
    head = [fingerprint(next(it)) for _ in range(333)]
    state = via_pickle(loader.state_dict())
    again = Loader(spec, seed=8)
    again.load_state_dict(state)
    rest = loader_items(data(again))
    assert head + rest == whole and len(whole) == 1000


def test_loader_state_between_epochs_is_the_epoch_to_read():
    spec = "range:n=60 | shuffle:buffer=60 | batch:size=8"
    loader = Loader(spec, seed=4)
    assert loader.state_dict() == {"version": 1, "epoch": 0, "rank": 0,
                                   "world_size": 1, "seed": 4,
                                   "pipeline": None}
    first = loader_items(loader)
    loader.set_epoch(1)
    second = loader_items(loader)
    assert first != second
    state = via_pickle(loader.state_dict())
    assert state == {"version": 1, "epoch": 1, "rank": 0, "world_size": 1,
                     "seed": 4, "pipeline": None}
    again = Loader(spec, seed=4)
    again.load_state_dict(state)
    assert loader_items(again) == second
    # a state loaded for epoch 1 is dropped by set_epoch(2)
    it = iter(loader)
    next(it)
    mid = loader.state_dict()
    it.close()  # broken off: the next iteration reads epoch 1 whole
    assert loader.state_dict()["pipeline"] is None
    again.load_state_dict(mid)
    again.set_epoch(2)
    loader.set_epoch(2)
    assert loader_items(again) == loader_items(loader)


def test_loader_refuses_bad_states_and_stays_as_it_was():
    spec = "range:n=40 | shuffle:buffer=10 | batch:size=4"
    loader = Loader(spec, seed=1, rank=0, world_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    with pytest.raises(echoflow.StateError, match="in progress"):
        loader.load_state_dict(state)
    it.close()

    fresh = Loader(spec, seed=1, rank=0, world_size=2)
    whole = loader_items(fresh)
    # the seeds the user gave, not those derived for the epoch and part
    for other, words in [(Loader(spec, seed=2, rank=0, world_size=2),
                          r"saved by a Loader of seed=1, this Loader has "
                          r"seed=2"),
                         (Loader(spec, seed=1, rank=1, world_size=2),
                          "saved by rank 0 of world_size 2, this Loader is "
                          "rank 1 of 2"),
                         (Loader(spec.replace("size=4", "size=5"), seed=1,
                                 rank=0, world_size=2), "stage 2 'batch'")]:
        with pytest.raises(echoflow.SpecError, match=words):
            other.load_state_dict(state)
        assert other.state_dict()["pipeline"] is None
    blob = bytearray(state["pipeline"]["pipeline"])
    blob[-1] ^= 1
    broken = dict(state, pipeline={"version": 1, "pipeline": bytes(blob)})
    with pytest.raises(echoflow.FormatError, match="checksum"):
        fresh.load_state_dict(broken)
    for bad, words in [({"version": 1, "epoch": 0}, "no 'rank', "
                        "'world_size', 'pipeline'"),
                       (dict(state, version=7), "version 7"),
                       (dict(state, epoch=-1), "epoch -1")]:
        with pytest.raises(echoflow.FormatError, match=words) as e:
            fresh.load_state_dict(bad)
        assert e.value.status == echoflow.FormatError.status
    with pytest.raises(TypeError):
        fresh.load_state_dict([state])
    assert loader_items(fresh) == whole  # untouched by all of it


def test_loader_state_is_refused_by_dataloader_workers():
    loader = Loader("range:n=20 | batch:size=2", seed=0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    it.close()
    loader.load_state_dict(state)
    worker_copy = pickle.loads(pickle.dumps(loader))  # as spawn sends it
    assert worker_copy._resumed[:2] == (0, None)
    info = torch.utils.data._utils.worker.WorkerInfo(
        id=0, num_workers=2, seed=0, dataset=worker_copy)
    torch.utils.data._utils.worker._worker_info = info
    try:
        with pytest.raises(echoflow.StateError, match="num_workers"):
            next(iter(worker_copy))
    finally:
        torch.utils.data._utils.worker._worker_info = None
    loader.close()


def test_state_dict_from_another_thread_waits_between_samples():
    # the lock that serialises next() keeps a save between two samples
    spec = "range:n=1500 | map:fn=noop,threads=2 | batch:size=3"
    p = echoflow.Pipeline(spec)
    states, seen = [], []

    def consume():
        for s in p:
            seen.append(s.identity.index)
            time.sleep(0.001)

    t = threading.Thread(target=consume)
    t.start()
    while t.is_alive():
        states.append(p.state_dict())
        time.sleep(0.005)
    t.join()
    assert len(seen) == 500 and len(states) > 5
    for st in states[::max(1, len(states) // 5)]:
        q = echoflow.Pipeline(spec)
        q.load_state_dict(st)
        rest = [s.identity.index for s in q]
        assert rest == seen[len(seen) - len(rest):]
