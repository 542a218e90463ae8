# SPDX-License-Identifier: Apache-2.0
"""Python iterables as the first stage (Pipeline(spec, source=...)) and
echoflow.torch.echo() over a DataLoader."""
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy
import pytest
import torch
import torch.utils.data as tud

import echoflow
from echoflow.torch import echo


def arr(t):
    return numpy.asarray(t)


def test_items_become_fields_without_a_copy():
    a = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
    t = torch.arange(5, dtype=torch.int64)
    raw = bytearray(b"jpeg bytes")
    items = [{"a": a, "t": t, "raw": raw, "s": "héllo", "i": 7, "f": 0.5}]
    with echoflow.Pipeline("", source=items) as p:
        (s,) = list(p)
    assert arr(s["a"]).__array_interface__["data"][0] == a.ctypes.data
    assert arr(s["t"]).__array_interface__["data"][0] == t.data_ptr()
    assert bytes(arr(s["raw"])) == b"jpeg bytes"
    assert arr(s["raw"]).__array_interface__["data"][0] == \
        numpy.frombuffer(raw, numpy.uint8).ctypes.data
    assert s["s"] == "héllo"  # a str comes back a str
    assert arr(s["i"]).dtype == numpy.int64 and int(arr(s["i"])) == 7
    assert arr(s["f"]).dtype == numpy.float32 and float(arr(s["f"])) == 0.5
    assert arr(s["a"]).tolist() == a.tolist()
    assert s.identity == (0, 0, 0, 0)


def test_tuples_are_named_by_fields_and_in_order():
    items = [(torch.full((2,), i), i) for i in range(5)]
    with echoflow.Pipeline("batch:2", source=items,
                           fields=("x", "y")) as p:
        got = [(arr(b["x"]).tolist(), arr(b["y"]).tolist()) for b in p]
    assert got == [([[0, 0], [1, 1]], [0, 1]), ([[2, 2], [3, 3]], [2, 3]),
                   ([[4, 4]], [4])]
    with echoflow.Pipeline("", source=[(1, 2)]) as p:
        assert sorted(next(iter(p))) == ["0", "1"]


def test_a_map_style_dataset_is_read_by_index():
    ds = tud.TensorDataset(torch.arange(10, 16))
    with echoflow.Pipeline("", source=ds) as p:
        got = [(s.identity.index, int(arr(s["0"]))) for s in p]
    assert got == [(i, 10 + i) for i in range(6)]


def test_the_length_of_a_sized_source():
    assert len(echoflow.Pipeline("echo:2 | batch:3", source=[1] * 5)) == 4
    with pytest.raises(TypeError, match="length"):
        len(echoflow.Pipeline("", source=iter([1])))
    with pytest.raises(TypeError, match="length"):
        len(echoflow.Pipeline("", source=[(torch.zeros(2),)], unbatch=True))


def test_each_pass_iterates_the_source_again():
    with echoflow.Pipeline("repeat:3", source=[1, 2]) as p:
        got = [(s.identity.epoch, int(arr(s["0"]))) for s in p]
    assert got == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]


def test_unbatch_splits_batches_into_views():
    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    y = torch.tensor([5, 6, 7])
    with echoflow.Pipeline("", source=[(x, y)], unbatch=True,
                           fields=("x", "y")) as p:
        got = list(p)
    assert [s.identity.index for s in got] == [0, 1, 2]
    assert [arr(s["x"]).tolist() for s in got] == x.tolist()
    assert [int(arr(s["y"])) for s in got] == [5, 6, 7]
    ptr = [arr(s["x"]).__array_interface__["data"][0] for s in got]
    assert ptr == [x.data_ptr() + 16 * i for i in range(3)]


def test_what_the_iterable_raises_fails_the_pipeline():
    def gen():
        yield 1
        raise OSError("disk on fire")
    with echoflow.Pipeline("", source=gen()) as p:
        it = iter(p)
        next(it)
        with pytest.raises(echoflow.CallbackError,
                           match="OSError: disk on fire") as e:
            next(it)
    assert isinstance(e.value.__cause__, OSError)


@pytest.mark.parametrize("item, match", [
    (numpy.zeros(3, numpy.complex64),
     "field '0' .*complex64 is not a dtype echoflow holds"),
    (torch.zeros(2, dtype=torch.complex64),
     "complex64 is not a dtype echoflow holds"),
    (object(), "field '0' is a object; expected a tensor"),
    (2**70, "outside int64"),
])
def test_values_it_cannot_hold_are_named(item, match):
    with echoflow.Pipeline("", source=[item]) as p:
        with pytest.raises(echoflow.CallbackError, match=match):
            list(p)


def test_bad_batches_and_arguments_are_refused():
    with echoflow.Pipeline("", source=[(torch.zeros(3), 1)],
                           unbatch=True) as p:
        with pytest.raises(echoflow.CallbackError, match="'1' of a batch is "
                           "a scalar"):
            list(p)
    with echoflow.Pipeline("", source=[(torch.zeros(3), torch.zeros(2))],
                           unbatch=True) as p:
        with pytest.raises(echoflow.CallbackError, match="has 2 rows"):
            list(p)
    with echoflow.Pipeline("", source=[(1, 2)], fields=("a",)) as p:
        with pytest.raises(echoflow.CallbackError, match="2 values"):
            list(p)
    with pytest.raises(TypeError, match="iterable or a map-style"):
        echoflow.Pipeline("", source=5)
    with pytest.raises(echoflow.SpecError, match="DistributedSampler"):
        echoflow.Pipeline("", source=[1], shard=(0, 2))
    with pytest.raises(ValueError, match="read_ahead"):
        echoflow.Pipeline("", source=[1], read_ahead=0)
    with pytest.raises(TypeError, match="give source="):
        echoflow.Pipeline("range:n=3", unbatch=True)


def test_closing_wakes_a_feeder_waiting_for_room():
    endless = (numpy.zeros(4, numpy.uint8) for _ in iter(int, 1))
    p = echoflow.Pipeline("", source=endless, read_ahead=2)
    next(iter(p))
    p.close()  # returns: the feeder's put() is woken and stops
    assert p.closed


# A source whose closing takes a while, as a DataLoader's shutting its
# workers down does, in a pipeline freed before exit (echo() drops its
# own when the loop breaks). Exit must wait for that thread: one cut off
# by the interpreter's finalisation inside torch's C++ code aborts the
# process. The handler registered before echoflow's runs after it.
EXIT_SCRIPT = """
import atexit, sys, threading, time
def after_echoflow():
    alive = [t.name for t in threading.enumerate() if t.name == "echoflow-source"]
    print("alive", alive, "closed", closed, flush=True)
atexit.register(after_echoflow)
import echoflow
closed = []
def slow_to_close():
    try:
        while True:
            yield b"x"
    finally:
        time.sleep(1.0)
        closed.append(1)
def run():
    p = echoflow.Pipeline("", source=slow_to_close(), read_ahead=2)
    next(iter(p))
    p.close()
run()
"""


def test_exit_waits_for_the_source_thread_of_a_freed_pipeline():
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "alive [] closed [1]", proc.stderr


def test_auto_echo_echoes_while_the_source_waits():
    # The source gives item 0, then waits until the consumer has seen
    # three items: those can only be echoes of item 0.
    seen = threading.Event()

    def gen():
        yield 0
        assert seen.wait(60)
        yield 1
    spec = "echo:factor=auto,max=4"
    with echoflow.Pipeline(spec, source=gen()) as p:
        it = iter(p)
        first = [next(it).identity for _ in range(3)]
        seen.set()
        rest = list(it)
    assert [i.index for i in first] == [0, 0, 0]
    assert [i.echo_copy for i in first] == [0, 1, 2]
    assert 1 in [s.identity.index for s in rest]


def loader_of(n=10, batch_size=4, **kw):
    ds = tud.TensorDataset(torch.arange(2 * n, dtype=torch.float32)
                           .view(n, 2), torch.arange(n))
    return tud.DataLoader(ds, batch_size=batch_size, **kw)


# DataLoader workers fork a threaded process, which sanitizer runtimes
# cannot do safely (test_torch.py says more)
forks = pytest.mark.skipif("san.so" in os.environ.get("LD_PRELOAD", ""),
                           reason="a sanitizer runtime cannot fork a "
                           "threaded process")


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=forks)])
def test_echo_yields_what_the_dataloader_yields(workers):
    dl = loader_of(num_workers=workers)
    e = echo(dl, factor=2)
    batches = list(e)
    assert len(batches) == len(e) == 5
    for x, y in batches:
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.shape[1:] == (2,) and x.shape[0] == y.shape[0]
        assert (x[:, 0] == 2 * y.float()).all()
    labels = torch.cat([y for _, y in batches]).tolist()
    assert sorted(labels) == sorted(list(range(10)) * 2)
    stage = e.stats()["stages"][1]
    assert (stage["fresh"], stage["echoed"]) == (10, 10)
    assert list(e) and len(list(e)) == 5  # re-iterable, a pass each


@forks
def test_echo_passes_over_persistent_workers_after_a_break():
    # A pass that breaks off leaves its thread inside the DataLoader's
    # iterator; persistent workers reuse that iterator for the next pass.
    dl = loader_of(n=1000, batch_size=4, num_workers=2,
                   persistent_workers=True)
    e = echo(dl, factor=2)
    for epoch in range(4):
        n = 0
        for i, (x, y) in enumerate(e):
            n += 1
            if epoch % 2 == 0 and i == 3:
                break
        assert n == (4 if epoch % 2 == 0 else 500)


class SlowDataset(tud.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        time.sleep(0.16)  # the 16 examples of echo's shuffle take 2.5 s
        return torch.tensor([i])


def test_echo_warns_once_not_every_epoch():
    e = echo(tud.DataLoader(SlowDataset(), batch_size=4), factor=1)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for _ in range(2):
            assert sum(1 for _ in e) == 4
    texts = [str(w.message) for w in got
             if issubclass(w.category, echoflow.PipelineWarning)]
    assert len(texts) == 1 and "shuffle=16" in texts[0]


def test_echo_keeps_dicts_lists_and_drop_last():
    class Dicts(tud.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return {"image": torch.full((3,), i, dtype=torch.uint8),
                    "label": i}
    dl = tud.DataLoader(Dicts(), batch_size=4, drop_last=True)
    e = echo(dl, factor=3)
    got = list(e)
    assert len(got) == len(e) == 6  # 8 examples, 24 copies, 6 batches
    assert all(set(b) == {"image", "label"} for b in got)
    assert all(b["image"].dtype == torch.uint8 for b in got)
    assert sorted(torch.cat([b["label"] for b in got]).tolist()) == \
        sorted(list(range(8)) * 3)


def test_batch_echo_repeats_whole_batches():
    dl = loader_of()
    e = echo(dl, factor=2, mode="batch")
    got = [y.tolist() for _, y in e]
    assert len(got) == len(e) == 6
    assert got == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2 + [[8, 9]] * 2


def test_echo_arguments_are_checked():
    with pytest.raises(ValueError, match="mode"):
        echo(loader_of(), mode="sample")
    with pytest.raises(ValueError, match="factor"):
        echo(loader_of(), factor=0.5)
    with pytest.raises(ValueError, match="max"):
        echo(loader_of(), max=0)
    with pytest.raises(ValueError, match="pool"):
        echo(loader_of(), pool=0)
    assert "pool=64," in echo(loader_of())._spec()  # 16 batches of 4
    with pytest.raises(TypeError, match="decides how many copies"):
        len(echo(loader_of()))
    sampler = tud.BatchSampler(tud.SequentialSampler(range(10)), 3, False)
    dl = tud.DataLoader(tud.TensorDataset(torch.arange(10)),
                        batch_sampler=sampler)
    with pytest.raises(ValueError, match="mode='batch'"):
        echo(dl)
    assert [y.tolist() for (y,) in echo(dl, factor=1, mode="batch")] == \
        [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_a_loader_reads_a_python_source():
    from echoflow.torch import Loader
    dl = loader_of(n=12, batch_size=4)
    loader = Loader("echo:2 | batch:6", source=dl, unbatch=True,
                    fields=("x", "y"), as_tuple=("x", "y"))
    with pytest.raises(TypeError, match="not known"):
        len(loader)  # a batch's examples are counted once it is read
    got = list(loader)  # FieldTuples (x, y), with their identity
    assert [len(y) for _, y in got] == [6, 6, 6, 6]
    assert all(x.dtype == torch.float32 for x, _ in got)
    assert sorted(torch.cat([y for _, y in got]).tolist()) == \
        sorted(list(range(12)) * 2)
    assert sum(t.identity.fresh for t in got) == 12
    # the source is not sharded by rank: it reads what it is given
    ranked = Loader("batch:4", source=list(range(8)), rank=1, world_size=2)
    assert [b["0"].tolist() for b in ranked] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@forks
def test_a_loader_with_a_source_refuses_outer_workers():
    from echoflow.torch import Loader
    loader = Loader("batch:2", source=list(range(8)))
    dl = tud.DataLoader(loader, batch_size=None, num_workers=1)
    with pytest.raises(echoflow.SpecError, match="num_workers=0"):
        list(dl)


ECHO_AND_EXIT = r'''
import torch
from torch.utils.data import DataLoader, TensorDataset
from echoflow.torch import echo

ds = TensorDataset(torch.randn(256, 3, 8, 8), torch.randint(0, 10, (256,)))
loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
batches = echo(loader, max=4)  # still open at exit, as a script leaves it
print(sum(len(y) for _, y in batches))
'''


@forks
def test_exit_after_echoing_a_dataloader_with_workers_is_clean():
    # the source's thread dropped the DataLoader's iterator (shutting its
    # workers down) while the interpreter finalised, and torch aborted
    # the process in about two runs of five; exit now waits for it
    for _ in range(5):
        r = subprocess.run([sys.executable, "-c", ECHO_AND_EXIT],
                           capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stdout) == (0, "1024\n"), r.stderr


@pytest.mark.parametrize("make,limit", [
    (lambda: {"x" * 256: 1}, r"a name of 256 bytes, over the limit of 255 "
                              r"\(EF_MAX_NAME - 1\)"),
    (lambda: {"f%d" % i: 1 for i in range(1025)},
     r"'f1024': the sample has 1024 fields already, the most it may "
     r"hold \(EF_MAX_FIELDS\)"),
])
def test_a_field_past_a_limit_names_the_limit(make, limit):
    with pytest.raises(echoflow.CallbackError, match="source: field .*" + limit):
        list(echoflow.Pipeline("", source=[make()]))
    with pytest.raises(echoflow.CallbackError,
                       match="map 'f' raised ValueError: field .*" + limit):
        list(echoflow.Pipeline("range:n=1 | map:f",
                               maps={"f": lambda s: make()}))


# A source's iterable that calls its own pipeline from the source's
# thread. Each call below waited for the pipeline, which waited for that
# thread's next item: a deadlock that stop() could not end. Run apart, so
# that a hang fails the test by its timeout rather than holding pytest.
CALLS_HOME = r'''
import sys
import echoflow

call = sys.argv[1]
home = []


def calls_home():
    p = home[0]
    yield 1
    if call == "next":
        next(iter(p))
    elif call == "len":
        len(p)
    elif call == "state_dict":
        p.state_dict()
    elif call == "load_state_dict":
        p.load_state_dict({"version": 1, "pipeline": b""})
    elif call == "close":
        p.close()
    elif call == "stats":
        assert p.stats()["status"] == "running"
    elif call == "stop":
        p.stop()
        return
    yield 2


p = echoflow.Pipeline(sys.argv[2], source=calls_home())
home.append(p)
try:
    print(len(list(p)))
except echoflow.CallbackError as e:
    print(type(e.__cause__).__name__, e.__cause__)
p.close()
'''


def calls_home(call, spec=""):
    r = subprocess.run([sys.executable, "-c", CALLS_HOME, call, spec],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("spec", ["", "prefetch:2"])
@pytest.mark.parametrize("call", ["next", "len", "state_dict",
                                  "load_state_dict", "close"])
def test_a_source_calling_its_own_pipeline_raises_instead_of_waiting(
        call, spec):
    assert calls_home(call, spec).startswith(
        "StateError a source of this pipeline cannot call next(), "
        "state_dict(), load_state_dict(), len() or close() on it")


def test_a_source_may_ask_its_own_pipeline_for_stats_and_stop_it():
    assert calls_home("stats") == "2\n"
    assert calls_home("stop") == "1\n"


def test_a_source_may_read_another_pipeline():
    inner = echoflow.Pipeline("range:n=3")
    with echoflow.Pipeline("", source=inner) as p:
        assert [int(arr(s["index"])) for s in p] == [0, 1, 2]
    inner.close()


# A source stuck inside its iterable, read by a thread in next():
# stop() and close() from the main thread must end that wait, also where
# a library thread (prefetch) waits for the source. The library cannot
# wake a source callback that waits for items.
STUCK_SOURCE = r'''
import sys, threading
import echoflow

release = threading.Event()


def stuck():
    yield 1
    release.wait()
    yield 2


p = echoflow.Pipeline(sys.argv[2], source=stuck())
got = []
reader = threading.Thread(target=lambda: got.extend(p), daemon=True)
reader.start()
while not got:
    reader.join(0.01)
getattr(p, sys.argv[1])()
reader.join()
p.close()
print(len(got), p.closed)
release.set()
'''


@pytest.mark.parametrize("spec", ["", "prefetch:2"])
@pytest.mark.parametrize("end", ["stop", "close"])
def test_stop_and_close_free_a_pipeline_whose_source_is_stuck(end, spec):
    r = subprocess.run([sys.executable, "-c", STUCK_SOURCE, end, spec],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "1 True\n"), r.stderr


# Ctrl-C while the main thread waits on a stuck source: the library's
# stop, which the SIGINT handler calls, cannot wake a source callback, so
# the wait went on. The signal is sent once the main thread is at its
# second next(), most likely inside it (sent earlier, it is raised there
# anyway, and the test passes either way).
STUCK_CTRL_C = r'''
import os, signal, sys, threading, time
import echoflow

release = threading.Event()


def stuck():
    yield 1
    release.wait()
    yield 2


def waiting(it):
    return next(it)


def interrupt():
    main = threading.main_thread().ident
    while sys._current_frames()[main].f_code.co_name != "waiting":
        time.sleep(0.01)
    time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGINT)


p = echoflow.Pipeline(sys.argv[1], source=stuck())
it = iter(p)
next(it)
threading.Thread(target=interrupt, daemon=True).start()
try:
    waiting(it)
except KeyboardInterrupt:
    print("interrupted", flush=True)
p.close()
release.set()
'''


@pytest.mark.parametrize("spec", ["", "prefetch:2"])
def test_ctrl_c_frees_a_pipeline_whose_source_is_stuck(spec):
    r = subprocess.run([sys.executable, "-c", STUCK_CTRL_C, spec],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "interrupted\n"), r.stderr


def images_loader(**kw):
    x = torch.arange(8 * 6 * 5, dtype=torch.int64).view(8, 6, 5)
    data = tud.TensorDataset(x.to(torch.uint8), torch.arange(8))
    return tud.DataLoader(data, **kw)


@pytest.mark.parametrize("stage", ["flip:p=1", "to_chw",
                                   "crop_mirror_normalize:4"])
@pytest.mark.parametrize("how", ["dataloader", "batched"])
def test_image_stages_refuse_a_batched_source(stage, how):
    # a batch of grey images, [4,6,5], has an image's rank: it was taken
    # for one 4 x 6 image of 5 channels
    if how == "dataloader":  # one that batches says so by itself
        kw = {"source": images_loader(batch_size=4)}
    else:
        batches = [(torch.zeros(4, 6, 5, dtype=torch.uint8), torch.arange(4))]
        kw = {"source": batches, "batched": True}
    with echoflow.Pipeline(stage, fields=("image", "label"), **kw) as p:
        with pytest.raises(echoflow.SpecError, match=(
                r"field 'image' \(u8 \[4,6,5\]\) is a batch of 4 examples; "
                r"this stage transforms one image: .* where the source "
                r"yields batches, have it yield examples \(a Python "
                r"source: unbatch=True\)")):
            next(iter(p))


def test_unbatch_still_gives_images_to_image_stages():
    loader = images_loader(batch_size=4)
    with echoflow.Pipeline("flip:p=1", source=loader, unbatch=True,
                           fields=("image", "label")) as p:
        got = [arr(s["image"]) for s in p]
    images = loader.dataset.tensors[0].numpy()
    assert len(got) == 8
    assert all((g == im[:, ::-1]).all() for g, im in zip(got, images))


def test_a_batched_sources_items_are_batches_of_their_rows():
    with echoflow.Pipeline("repeat:2", source=images_loader(batch_size=3),
                           fields=("image", "label")) as p:
        got = [(tuple(s.identity), s.members[:, :2].tolist(),
                arr(s["image"]).shape) for s in p]
    rows = [[[i, e] for i in range(a, b)] for e in (0, 1)
            for a, b in ((0, 3), (3, 6), (6, 8))]
    assert [g[1] for g in got] == rows
    assert [g[0] for g in got] == [(i, e, 0, n) for e in (0, 1)
                                   for i, n in enumerate((3, 3, 2))]
    assert [g[2] for g in got] == [(3, 6, 5), (3, 6, 5), (2, 6, 5)] * 2


def test_batched_is_checked_and_may_be_turned_off():
    loader = images_loader(batch_size=4)
    with echoflow.Pipeline("", source=loader, batched=False) as p:
        assert [s.members for s in p] == [None, None]
    with echoflow.Pipeline("", source=images_loader(batch_size=None)) as p:
        assert next(iter(p)).members is None  # a DataLoader of examples
    with echoflow.Pipeline("", source=[(torch.zeros(3), 1)],
                           batched=True) as p:
        with pytest.raises(echoflow.CallbackError, match="'1' of a batch is "
                           "a scalar"):
            list(p)
    with pytest.raises(ValueError, match="give one of them"):
        echoflow.Pipeline("", source=loader, unbatch=True, batched=True)
    with pytest.raises(TypeError, match="give source="):
        echoflow.Pipeline("range:n=3", batched=True)
