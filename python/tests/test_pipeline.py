# SPDX-License-Identifier: Apache-2.0
"""echoflow.Pipeline and echoflow.Tensor: zero copy, lifetime, dtypes,
stats, errors, threads and Ctrl-C."""
import gc
import io
import json
import operator
import os
import signal
import subprocess
import sys
import threading
import time

import numpy
import pytest
import torch

import echoflow

CLI = os.environ.get("ECHOFLOW_CLI", "build/echoflow")


def items(spec, **kw):
    with echoflow.Pipeline(spec, **kw) as p:
        return list(p)


# ---- tensors: zero copy and lifetime ---------------------------------------

def test_numpy_and_torch_share_the_pipeline_memory(fmnist_spec):
    with echoflow.Pipeline(fmnist_spec + " | batch:128") as p:
        s = next(iter(p))
    t = s["image"]
    assert t.shape == (128, 28, 28) and t.dtype == "u8"
    a = numpy.asarray(t)
    assert a.__array_interface__["data"][0] == t.address
    assert not a.flags.writeable
    assert numpy.from_dlpack(t).__array_interface__["data"][0] == t.address
    assert torch.from_dlpack(t).data_ptr() == t.address
    assert memoryview(t).readonly


def test_echoed_copies_share_one_buffer(fmnist_spec):
    # echo re-emits the same buffers: the copies' tensors have one address
    first, second = items(fmnist_spec + " | take:1 | echo:2")
    assert first.identity.echo_copy == 0 and second.identity.echo_copy == 1
    assert first["image"].address == second["image"].address
    assert (torch.from_dlpack(second["image"]).data_ptr()
            == first["image"].address)


def test_idx_examples_are_views_of_the_file(fmnist_spec):
    # the idx source hands out views into the file it read once: example
    # k + 1 starts 784 bytes after example k
    a, b = items(fmnist_spec + " | take:2")
    assert b["image"].address - a["image"].address == 784


def test_tensor_outlives_its_sample_and_pipeline(fmnist_spec):
    p = echoflow.Pipeline(fmnist_spec + " | batch:64")
    s = next(iter(p))
    expected = numpy.array(s["image"])  # a copy, for comparison
    view = torch.from_dlpack(s["image"])
    capsule_view = numpy.from_dlpack(s["label"])
    labels = numpy.array(s["label"])
    del s
    p.close()
    del p
    gc.collect()
    # allocate over the freed memory; the views must be unaffected
    junk = [bytearray(b"\xff" * 1000000) for _ in range(20)]
    assert numpy.array_equal(view.numpy(), expected)
    assert numpy.array_equal(capsule_view, labels)
    del junk


def test_writing_through_the_buffer_protocol_is_refused(fmnist_spec):
    s = items(fmnist_spec + " | take:1")[0]
    with pytest.raises(TypeError, match="read-write"):
        io.BytesIO(b"x").readinto(s["image"])  # asks for a writable buffer
    with pytest.raises(TypeError):
        memoryview(s["image"]).cast("B")[0] = 1
    a = numpy.asarray(s["image"])
    with pytest.raises(ValueError):
        a[0, 0] = 1


def test_unused_dlpack_capsules_are_freed():
    s = items("range:n=1,bytes=1000000")[0]
    for _ in range(200):  # 200 MB if a capsule leaked its buffer
        s["data"].__dlpack__()
    assert s["data"].__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="stream=None"):
        s["data"].__dlpack__(stream=1)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_million_samples_with_flat_memory():
    spec = "range:n=1000000,bytes=256 | echo:2 | shuffle:1000"
    kept = None
    with echoflow.Pipeline(spec) as p:
        for n, s in enumerate(p, 1):
            kept = torch.from_dlpack(s["data"])  # the last one lives on
            if n == 200000:
                warm = rss_bytes()
    assert n == 2000000
    grown = rss_bytes() - warm
    assert grown < 16 << 20, "RSS grew by %d bytes after warm-up" % grown
    assert kept.shape == (256,)


# ---- dtypes and shapes -----------------------------------------------------

@pytest.mark.parametrize("dtype,numpy_dtype,torch_dtype", [
    ("u8", numpy.uint8, torch.uint8),
    ("i32", numpy.int32, torch.int32),
    ("i64", numpy.int64, torch.int64),
    ("f32", numpy.float32, torch.float32),
])
def test_every_dtype_reaches_numpy_and_torch(fmnist_spec, dtype, numpy_dtype,
                                            torch_dtype):
    base = items(fmnist_spec + " | take:4 | batch:4")[0]
    s = items(fmnist_spec + " | take:4 | cast:dtype=%s | batch:4" % dtype)[0]
    t = s["image"]
    assert t.dtype == dtype and t.shape == (4, 28, 28) and t.ndim == 3
    assert t.nbytes == 4 * 28 * 28 * numpy.dtype(numpy_dtype).itemsize
    for a in (numpy.asarray(t), numpy.from_dlpack(t),
              torch.from_dlpack(t).numpy()):
        assert a.dtype == numpy_dtype and a.shape == (4, 28, 28)
        assert numpy.array_equal(a, numpy.asarray(base["image"]))
    assert torch.from_dlpack(t).dtype == torch_dtype


def test_shapes_from_scalars_to_four_dimensions(fmnist_spec):
    example = items(fmnist_spec + " | take:1")[0]
    assert example["label"].shape == () and example["label"].dtype == "i64"
    assert numpy.asarray(example["label"]).shape == ()
    assert torch.from_dlpack(example["label"]).shape == ()
    chw = items(fmnist_spec + " | take:8 | normalize:mean=0.5,std=0.25 "
                "| to_chw | batch:8")[0]
    img = torch.from_dlpack(chw["image"])
    assert img.shape == (8, 1, 28, 28) and img.dtype == torch.float32
    raw = numpy.asarray(items(fmnist_spec + " | take:8 | batch:8")[0]["image"])
    expected = (raw.astype(numpy.float32) / 255 - 0.5) / 0.25
    assert numpy.allclose(img.numpy()[:, 0], expected, atol=1e-6)
    assert chw["label"].shape == (8,)


def test_identity_of_examples_and_batches():
    ex = items("range:n=6 | echo:2")
    assert [(s.identity.index, s.identity.echo_copy) for s in ex] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1),
        (3, 0), (3, 1), (4, 0), (4, 1), (5, 0), (5, 1)][:len(ex)]
    assert [int(numpy.asarray(s["index"])) for s in ex[::2]] == list(range(6))
    batches = items("range:n=10 | echo:2 | batch:4")
    assert [b.identity.fresh for b in batches] == [2, 2, 2, 2, 2]
    assert [b.identity.index for b in batches] == [0, 1, 2, 3, 4]
    assert isinstance(batches[0], dict)
    assert batches[0].identity == echoflow.Identity((0, 0, 0, 2))


# ---- stats -------------------------------------------------------------------

def test_stats_are_what_echoflow_run_json_prints(fmnist_spec):
    spec = fmnist_spec + " | shuffle:1000 | echo:2 | batch:128"
    with echoflow.Pipeline(spec, seed=7) as p:
        assert p.stats()["status"] == "running"
        n = sum(1 for _ in p)
        mine = p.stats()
    run = subprocess.run([CLI, "run", "--json", "--seed", "7", spec],
                         check=True, capture_output=True, text=True)
    theirs = json.loads(run.stdout)
    assert set(mine) == set(theirs) - {"consume_us"}
    assert ([sorted(s) for s in mine["stages"]]
            == [sorted(s) for s in theirs["stages"]])
    assert mine["status"] == theirs["status"] == "ok"
    assert mine["items"] == theirs["items"] == n == 938
    assert mine["spec"] == spec and mine["seed"] == 7
    assert ([s["name"] for s in mine["stages"]]
            == [s["name"] for s in theirs["stages"]])
    for a, b in zip(mine["stages"], theirs["stages"]):
        assert set(a) == set(b)
        assert a["items_in"] == b["items_in"]
        assert a["items_out"] == b["items_out"]
    echo = mine["stages"][2]
    assert echo["fresh"] == 60000 and echo["echoed"] == 60000
    assert echo["effective_factor"] == 2
    assert mine["elapsed_s"] > 0 and 0 <= mine["consumer_wait_fraction"] <= 1


def test_stats_show_what_auto_chose():
    spec = "range:n=2000 | map:fn=noop,threads=auto | prefetch:depth=auto"
    with echoflow.Pipeline(spec) as p:
        assert sum(1 for _ in p) == 2000
        stages = p.stats()["stages"]
    assert 1 <= stages[1]["threads"] <= len(os.sched_getaffinity(0))
    assert 2 <= stages[2]["depth"] <= 1024
    assert stages[0]["threads"] == stages[0]["depth"] == 0


def test_stats_survive_close():
    p = echoflow.Pipeline("range:n=5")
    assert len(list(p)) == 5
    p.close()
    assert p.closed
    assert p.stats()["items"] == 5 and p.stats()["status"] == "ok"
    with pytest.raises(ValueError, match="closed"):
        next(iter(p))


# ---- errors ------------------------------------------------------------------

def test_a_bad_spec_raises_value_error_naming_stage_and_option():
    with pytest.raises(ValueError, match="batch.*size") as e:
        echoflow.Pipeline("range:n=10 | batch:size=0")
    assert isinstance(e.value, echoflow.SpecError)
    assert isinstance(e.value, echoflow.Error)
    assert e.value.status < 0
    with pytest.raises(echoflow.SpecError, match="nosuchstage"):
        echoflow.Pipeline("range:n=10 | nosuchstage")
    with pytest.raises(echoflow.SpecError, match="echo.*colour"):
        echoflow.Pipeline("range:n=10 | echo:colour=red")
    with pytest.raises(echoflow.SpecError, match="unbalanced"):
        echoflow.Pipeline('tar:urls="a.tar')


def test_a_shard_reads_its_part():
    got = [int(numpy.asarray(s["index"])) for s in items(
        "range:n=10 | echo:2", shard=(1, 3))]
    assert got == [1, 1, 4, 4, 7, 7]
    with pytest.raises(echoflow.SpecError, match="part 3 of 3"):
        echoflow.Pipeline("range:n=10", shard=(3, 3))
    with pytest.raises(TypeError, match="shard must be"):
        echoflow.Pipeline("range:n=10", shard=3)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="on_error"):
        echoflow.Pipeline("range:n=1", on_error="ignore")
    with pytest.raises(ValueError, match="seed"):
        echoflow.Pipeline("range:n=1", seed=-1)
    with pytest.raises(ValueError, match="seed"):
        echoflow.Pipeline("range:n=1", seed=2**64)
    with pytest.raises(TypeError, match="seed"):
        echoflow.Pipeline("range:n=1", seed=1.5)
    with pytest.raises(TypeError, match="seed"):
        echoflow.Pipeline("range:n=1", seed=True)
    big = items("range:n=2 | shuffle:2", seed=2**64 - 1)
    assert len(big) == 2
    # numpy's integers are integers
    assert len(items("range:n=2 | shuffle:2", seed=numpy.int64(5))) == 2
    assert len(items("range:n=2 | shuffle:2", seed=numpy.uint64(2**64 - 1))
               ) == 2


def test_a_nul_in_a_spec_is_refused_not_cut_off():
    # read as a C string, "range:n=3\0 | bogus" would run as range:n=3
    with pytest.raises(echoflow.SpecError, match="NUL.*byte 9"):
        echoflow.Pipeline("range:n=3\x00 | bogus")


def test_a_truncated_file_raises_format_error_with_file_and_offset(
        tmp_path, fmnist_shards):
    folder, _ = fmnist_shards
    shard = os.path.join(folder, "train-000000.tar")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(open(shard, "rb").read()[:100000])
    with echoflow.Pipeline("tar:urls=%s | decode" % cut) as p:
        got = []
        with pytest.raises(echoflow.FormatError) as e:
            for s in p:
                got.append(s)
    msg = str(e.value)
    assert str(cut) in msg and "offset" in msg, msg
    assert e.value.status == -4
    assert 0 < len(got) < 10000
    assert p.stats()["status"] == "EFORMAT"
    assert str(cut) in p.stats()["error"]


def test_on_error_skip_drops_and_counts(tmp_path, fmnist_shards):
    folder, _ = fmnist_shards
    missing = tmp_path / "missing.tar"
    spec = "tar:urls=\"%s %s\",shuffle_shards=false | decode" % (
        os.path.join(folder, "train-000005.tar"), missing)
    with pytest.raises(echoflow.ReadError, match="missing.tar"):
        items(spec)
    with echoflow.Pipeline(spec, on_error="skip") as p:
        assert sum(1 for _ in p) == 10000
        st = p.stats()
    assert st["skipped"] == 0 and "first_skip" not in st
    assert st["abandoned"] == 1 and "missing.tar" in st["first_abandon"]
    assert "shard abandoned at byte 0" in st["first_abandon"]


# ---- the memory budget ----------------------------------------------------

def test_memory_budget_holds_the_queues_to_it():
    # 2,000 samples of 1,008 bytes behind a 1,000-deep prefetch: 1 MB
    # unbounded, at most 10 KiB (plus one sample) with the budget
    spec = "range:n=2000,bytes=1000 | prefetch:depth=1000"
    with echoflow.Pipeline(spec, memory_budget=10 * 1024) as p:
        got = [s.identity.index for s in p]
        st = p.stats()
    assert got == list(range(2000))
    assert st["memory_budget"] == 10 * 1024
    assert 0 < st["peak_bytes_held"] <= 10 * 1024 + 1008
    assert st["bytes_held"] == 0
    with echoflow.Pipeline(spec, memory_budget=0) as p:
        assert sum(1 for _ in p) == 2000
        assert p.stats()["memory_budget"] == 0


def test_memory_budget_errors():
    with pytest.raises(echoflow.OutOfMemoryError,
                       match="range: sample 0: 1008 bytes, over the "
                             "memory budget of 1000 bytes") as e:
        items("range:n=10,bytes=1000 | prefetch", memory_budget=1000)
    assert isinstance(e.value, MemoryError)
    # no queue sees a batch, but it is held to the budget all the same
    with pytest.raises(echoflow.OutOfMemoryError,
                       match="batch: sample 0: 100080 bytes, over the "
                             "memory budget of 10240 bytes"):
        items("range:n=10,bytes=10000 | batch:10", memory_budget=10240)
    with pytest.raises(echoflow.OutOfMemoryError,
                       match="shuffle: its buffer at 10 samples"):
        items("range:n=100,bytes=1000 | shuffle:50", memory_budget=10000)
    with pytest.raises(TypeError, match="memory_budget must be an int"):
        echoflow.Pipeline("range:n=1", memory_budget="1G")
    with pytest.raises(ValueError, match="memory_budget must be from 0"):
        echoflow.Pipeline("range:n=1", memory_budget=-1)


# ---- stop, threads, Ctrl-C -------------------------------------------------

def test_stop_from_another_thread_ends_the_iteration():
    with echoflow.Pipeline("range:n=1000 | throttle:rate=20") as p:
        threading.Timer(0.3, p.stop).start()
        t0 = time.monotonic()
        n = sum(1 for _ in p)
        took = time.monotonic() - t0
    assert 0 < n < 1000
    assert took < 30


def test_close_from_another_thread_while_waiting():
    p = echoflow.Pipeline("range:n=10 | throttle:rate=0.01")
    it = iter(p)
    next(it)  # the first item is free; the next one waits 100 s
    closer = threading.Timer(0.3, p.close)
    closer.start()
    assert list(it) == []
    closer.join()
    assert p.closed


def test_stop_racing_close_is_safe():
    # stop() wakes the waiting next() before it returns, so the thread
    # that iterated may close the pipeline while stop() is still inside
    # the library: close must wait it out (ASan saw a use after free)
    for _ in range(100):
        p = echoflow.Pipeline("range:n=1000 | throttle:rate=50 | batch:2")
        it = iter(p)
        stopper = threading.Thread(target=p.stop)
        stopper.start()
        list(it)
        p.close()
        stopper.join()
        assert p.closed


def test_one_pipeline_from_two_threads():
    n = 20000
    seen = [[], []]
    with echoflow.Pipeline("range:n=%d | echo:2 | batch:10" % n) as p:
        def drain(k):
            for s in p:
                seen[k].extend(numpy.asarray(s["index"]).tolist())
        threads = [threading.Thread(target=drain, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    everything = sorted(seen[0] + seen[1])
    assert everything == sorted(list(range(n)) * 2)
    assert p.stats()["items"] == n * 2 // 10


INTERRUPTED = r"""
import signal, sys, time, echoflow
p = echoflow.Pipeline("range:n=10 | throttle:rate=0.001")
it = iter(p)
next(it)
if sys.argv[1] == "custom":
    # a handler set after the first wait replaces echoflow's at the OS level
    def handler(signum, frame):
        raise RuntimeError("custom handler")
    signal.signal(signal.SIGINT, handler)
    time.sleep(0.3)
print("waiting", flush=True)
t0 = time.monotonic()
try:
    next(it)
except (KeyboardInterrupt, RuntimeError) as e:
    print("%s after %.3f s" % (type(e).__name__, time.monotonic() - t0),
          flush=True)
    p.close()
    sys.exit(3)
"""


@pytest.mark.parametrize("handler,raised", [
    ("python", "KeyboardInterrupt"), ("custom", "RuntimeError")])
def test_ctrl_c_interrupts_a_waiting_next(handler, raised):
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, handler],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "waiting"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)  # the source waits 1000 s
    assert proc.returncode == 3, out
    assert out.startswith(raised + " after"), out


# ---- len() ------------------------------------------------------------------

@pytest.mark.parametrize("spec, n", [
    ("range:n=10", 10),
    ("range:n=10,shard=1/3", 3),
    ("range:n=10 | batch:3", 4),
    ("range:n=10 | batch:size=3,drop_remainder=true", 3),
    ("range:n=10 | shuffle:4 | echo:factor=2,shuffle=3 | batch:3", 7),
    ("range:n=4 | repeat:3 | prefetch", 12),
    ("range:n=4 | repeat | take:9", 9),
    ("range:n=0 | batch:3", 0),
])
def test_len_is_what_a_run_yields(spec, n):
    with echoflow.Pipeline(spec, seed=3) as p:
        assert len(p) == n
        got = list(p)
        assert len(got) == n
        assert len(p) == n  # the whole run's, also after it


def test_len_of_an_idx_source_reads_its_header(fmnist_spec):
    with echoflow.Pipeline(fmnist_spec + " | batch:128") as p:
        assert len(p) == 469  # 60,000 images
    with echoflow.Pipeline(fmnist_spec + " | batch:128", shard=(1, 4)) as p:
        assert len(p) == 118  # 15,000


@pytest.mark.parametrize("spec, why", [
    ("range:n=5 | repeat", "repeat: never ends"),
    ("range:n=5 | echo:factor=1.5", "echo: factor=1.5 rounds"),
    ("range:n=5 | prefetch | echo:factor=auto",
     "echo: factor=auto decides the number of copies at run time"),
])
def test_len_unknown_is_a_type_error_with_the_reason(spec, why):
    with echoflow.Pipeline(spec) as p:
        with pytest.raises(TypeError, match=why):
            len(p)
        assert bool(p)  # a pipeline is true all the same
        # list() and the like go on without a length
        if "repeat" not in spec:
            assert len(list(p)) >= 5


def test_len_of_a_tar_source_is_unknown(fmnist_shards):
    folder, names = fmnist_shards
    with echoflow.Pipeline("tar:urls=%s/%s | batch:10" % (folder, names)) as p:
        with pytest.raises(TypeError, match="tar: the number of samples"):
            len(p)


def test_len_of_a_source_that_cannot_be_read_raises_its_error(tmp_path):
    with echoflow.Pipeline("idx:images=%s" % (tmp_path / "none.idx")) as p:
        with pytest.raises(echoflow.Error, match="none.idx") as e:
            len(p)
        assert not isinstance(e.value, TypeError)
        with pytest.raises(type(e.value)):
            next(iter(p))  # the pipeline failed as its first next() would


def test_len_of_a_closed_pipeline():
    p = echoflow.Pipeline("range:n=0")
    assert bool(p) and len(p) == 0
    p.close()
    with pytest.raises(ValueError, match="closed"):
        len(p)


@pytest.mark.parametrize("spec, examples", [
    ("range:n=100 | echo:2 | batch:10", 100),
    ("range:n=100 | batch:10 | echo:2", 100),
    ("range:n=100 | echo:2,shuffle=16 | batch:10 | echo:3", 100),
    ("range:n=100 | batch:10 | echo:1.5,shuffle=4", 100),
    ("range:n=100 | batch:10 | echo:factor=auto,max=3", 100),
])
def test_fresh_sums_to_the_examples_read(spec, examples):
    # echoed batches bring no fresh examples, wherever the echo stands
    with echoflow.Pipeline(spec) as p:
        batches = list(p)
    assert sum(b.identity.fresh for b in batches) == examples
    assert all(b.identity.fresh == 0 for b in batches
               if b.identity.echo_copy > 0)


def test_a_slow_shuffle_fill_warns_once():
    # a throttle gives at most 100 items/s: the fill of 250 takes 2.5 s at
    # least, past the library's 2 s, on any machine
    spec = "range:n=250 | throttle:rate=100 | shuffle:250"
    with pytest.warns(echoflow.PipelineWarning) as got:
        assert len(items(spec)) == 250
    texts = [str(w.message) for w in got
             if issubclass(w.category, echoflow.PipelineWarning)]
    assert len(texts) == 1
    assert texts[0].startswith("stage 2 shuffle:buffer=250 must read 250 "
                               "items before its first; the upstream gives ")
    assert issubclass(echoflow.PipelineWarning, UserWarning)


FORKED = r'''
import os, sys
import echoflow

p = echoflow.Pipeline("range:n=20000 | shuffle:100 | prefetch:4")
it = iter(p)
first = [next(it) for _ in range(10)]
pid = os.fork()
if pid == 0:
    raised = []
    for call in (lambda: next(it), p.stats, p.state_dict, p.stop):
        try:
            call()
        except echoflow.StateError as e:
            raised.append("forked this one" in str(e))
    # a pipeline of the child's own works
    mine = sum(1 for _ in echoflow.Pipeline("range:n=1000 | prefetch:2"))
    print("child", raised, mine, flush=True)
    sys.exit(0)  # closes p at exit: forgotten, not joined
_, status = os.waitpid(pid, 0)
rest = sum(1 for _ in it)
print("parent", os.waitstatus_to_exitcode(status), len(first) + rest)
'''


@pytest.mark.skipif("san.so" in os.environ.get("LD_PRELOAD", ""),
                    reason="a sanitizer runtime cannot fork a threaded "
                    "process")
def test_a_forked_child_cannot_use_its_parents_pipeline():
    # the child has none of the pipeline's threads: next() there used to
    # read a queue nobody fills, and exit joined threads that do not
    # exist, hanging the child and its parent's waitpid
    r = subprocess.run([sys.executable, "-c", FORKED], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["child [True, True, True, True] 1000",
                                     "parent 0 20000"]


def test_stats_from_another_thread_do_not_wait_for_a_stalled_next():
    release = threading.Event()

    def stalls():
        yield 1
        release.wait()  # the source has nothing more for now
        yield 2
    with echoflow.Pipeline("echo:1", source=stalls()) as p:
        it = iter(p)
        next(it)
        got = []
        waiter = threading.Thread(target=lambda: got.append(next(it)))
        waiter.start()
        try:
            asker = threading.Thread(target=lambda: got.append(p.stats()))
            asker.start()
            asker.join(60)  # returned at once, or blocked until released
            assert not asker.is_alive() and got[0]["items"] == 1
        finally:
            release.set()
            waiter.join(60)
        assert len(got) == 2


def test_a_tensor_of_one_element_is_a_number():
    s = next(iter(echoflow.Pipeline("range:n=3,bytes=4 | take:1")))
    index, data = s["index"], s["data"]
    assert int(index) == 0 and float(index) == 0.0 and not bool(index)
    assert operator.index(index) == 0 and [7, 8][index] == 7
    half = next(iter(echoflow.Pipeline("", source=[2.5])))["0"]
    assert int(half) == 2 and float(half) == 2.5 and bool(half)
    with pytest.raises(TypeError, match="f32 tensor is not an index"):
        operator.index(half)
    # a tensor of more than one element names its shape, as numpy does,
    # rather than parse its bytes as a number's text
    for convert in (int, float, bool, operator.index):
        with pytest.raises(TypeError, match=r"only a tensor of one element "
                                            r"converts to .*u8 \(4,\)"):
            convert(data)


def test_a_fixed_echo_reads_a_slow_upstream_ahead_by_itself():
    # nothing threaded before echo:4: the stage starts reading ahead once
    # the upstream proves slow, and its statistics say so (whether a cheap
    # upstream does depends on the machine's speed: not asserted)
    spec = "range:n=100 | throttle:rate=5000 | echo:factor=4 | batch:8"
    with echoflow.Pipeline(spec) as p:
        assert sum(1 for _ in p) == 50
        echo = p.stats()["stages"][2]
    assert (echo["name"], echo["reads_ahead"]) == ("echo", 1)


def _split_in_python(spec):
    """split_spec as the package wrote it before the library gave it."""
    parts, start, quoted = [], 0, False
    for i, c in enumerate(spec):
        if c == '"':
            quoted = not quoted
        elif c == "|" and not quoted:
            parts.append(spec[start:i].strip())
            start = i + 1
    parts.append(spec[start:].strip())
    return parts


def test_split_spec_is_the_library_split():
    for spec in ['idx:a | echo:2 |batch:128', 'a:x="1|2" | b', "", "  one ",
                 "a||b|", 'a:x="1|2 | b', "tokenize:x=\"é|ü\" | batch:2"]:
        assert echoflow.split_spec(spec) == _split_in_python(spec), spec
    with pytest.raises(TypeError):
        echoflow.split_spec(b"a | b")
    with pytest.raises(ValueError, match="NUL"):
        echoflow.split_spec("a\0 | b")


def test_epoch_seed_is_the_library_formula():
    def formula(seed, epoch, part=0):
        return (seed + epoch * 0x9E3779B97F4A7C15
                + part * 0xD1B54A32D192ED03) % 2**64
    for args in [(5, 0), (5, 1), (0, 0, 1), (2**64 - 1, 3, 2), (7, 2, 5),
                 (-1, 1, 1), (2**70 + 3, 2**65, 1)]:
        assert echoflow.epoch_seed(*args) == formula(*args), args
    assert echoflow.epoch_seed(numpy.int64(5), 1) == formula(5, 1)
    with pytest.raises(TypeError):
        echoflow.epoch_seed(1.5, 0)
