# SPDX-License-Identifier: Apache-2.0
"""Python callables as map stages: Pipeline(spec, maps={"name": fn})."""
import subprocess
import sys

import numpy
import pytest
import torch

import echoflow


def run(spec, maps, **kw):
    with echoflow.Pipeline(spec, maps=maps, **kw) as p:
        return list(p), p.stats()


def test_a_map_transforms_and_passes_tensors_through():
    def double(s):
        return {"twice": numpy.asarray(s["index"]) * 2, "data": s["data"]}
    out, st = run("range:n=50,bytes=3 | map:fn=double,threads=2 | batch:10",
                  {"double": double})
    assert [b.identity.index for b in out] == [0, 1, 2, 3, 4]
    twice = numpy.concatenate([numpy.asarray(b["twice"]) for b in out])
    assert twice.tolist() == [2 * i for i in range(50)]  # in order
    assert set(out[0]) == {"twice", "data"}
    assert st["stages"][1]["name"] == "map"
    assert st["stages"][1]["items_out"] == 50


def test_a_returned_tensor_is_not_copied():
    seen = []

    def keep(s):
        seen.append(s["data"].address)
        return {"data": s["data"]}
    out, _ = run("range:n=3,bytes=8 | map:keep", {"keep": keep})
    assert [s["data"].address for s in out] == seen


def test_every_kind_of_returned_value():
    def kinds(s):
        i = int(numpy.asarray(s["index"]))
        return {"t": torch.full((2, 2), i, dtype=torch.float32),
                "i32": numpy.arange(3, dtype=numpy.int32) + i,
                "py": i,                      # an int: i64 scalar
                "float": i + 0.5,             # a float: f32 scalar
                "list": [[i, i], [i, i]],      # nested lists: i64 [2, 2]
                "u8": bytes([i, i + 1])}       # bytes: u8 [2]
    out, _ = run("range:n=2 | map:fn=kinds", {"kinds": kinds})
    s = out[1]
    assert s["t"].dtype == "f32" and s["t"].shape == (2, 2)
    assert numpy.asarray(s["t"]).tolist() == [[1, 1], [1, 1]]
    assert s["i32"].dtype == "i32" and numpy.asarray(s["i32"]).tolist() == [
        1, 2, 3]
    assert s["py"].dtype == "i64" and s["py"].shape == ()
    assert s["float"].dtype == "f32" and s["float"].shape == ()
    assert float(numpy.asarray(s["float"])) == 1.5
    assert s["list"].shape == (2, 2)
    assert s["u8"].dtype == "u8" and numpy.asarray(s["u8"]).tolist() == [1, 2]
    assert s.identity.index == 1


def test_an_exception_inside_a_map_is_the_cause():
    def boom(s):
        i = int(numpy.asarray(s["index"]))
        if i == 3:
            raise KeyError("no such thing in %d" % i)
        return {"index": s["index"]}
    got = []
    with echoflow.Pipeline("range:n=10 | map:boom", maps={"boom": boom}) as p:
        with pytest.raises(echoflow.CallbackError) as e:
            for s in p:
                got.append(s)
    assert len(got) == 3
    assert "map 'boom' raised KeyError" in str(e.value)
    assert "no such thing in 3" in str(e.value)
    assert isinstance(e.value.__cause__, KeyError)
    assert e.value.__cause__.__traceback__ is not None


def test_on_error_skip_drops_the_failed_samples():
    def odd_fails(s):
        if int(numpy.asarray(s["index"])) % 2:
            raise ValueError("odd")
        return {"index": s["index"]}
    out, st = run("range:n=10 | map:fn=odd_fails", {"odd_fails": odd_fails},
                  on_error="skip")
    assert [int(numpy.asarray(s["index"])) for s in out] == [0, 2, 4, 6, 8]
    assert st["skipped"] == 5 and "odd" in st["first_skip"]


@pytest.mark.parametrize("result,message", [
    (lambda s: [1, 2], "must return a dict"),
    (lambda s: {"x": numpy.zeros(2, dtype=numpy.uint64)},
     "field 'x': uint64 is not a dtype"),
    (lambda s: {"x": numpy.zeros((4, 4), numpy.complex64)[:, 1]},
     "field 'x': complex64 is not a dtype"),
    (lambda s: {1: s["index"]}, "field names must be str"),
    (lambda s: {"x\x00y": s["index"]}, "cannot hold a NUL"),
    (lambda s: {"x": object()}, "field 'x': a object is not an array"),
])
def test_a_bad_result_is_an_error_naming_it(result, message):
    with pytest.raises(echoflow.CallbackError, match=message) as e:
        run("range:n=2 | map:bad", {"bad": result})
    assert isinstance(e.value.__cause__, (TypeError, ValueError))


def test_map_names_are_checked():
    with pytest.raises(echoflow.SpecError, match="'unused'"):
        echoflow.Pipeline("range:n=2", maps={"unused": lambda s: s})
    with pytest.raises(echoflow.SpecError, match="nosuch"):
        echoflow.Pipeline("range:n=2 | map:nosuch", maps={"x": lambda s: s})
    with pytest.raises(echoflow.SpecError, match="threads"):
        echoflow.Pipeline("range:n=2 | map:fn=x,threads=0",
                          maps={"x": lambda s: s})
    with pytest.raises(TypeError, match="not callable"):
        echoflow.Pipeline("range:n=2 | map:x", maps={"x": 3})


def test_unused_names_are_all_named_and_a_spec_is_read_whole():
    with pytest.raises(echoflow.SpecError) as e:
        echoflow.Pipeline("range:n=2 | map:b", maps={
            "c": lambda s: s, "a": lambda s: s, "b": lambda s: s})
    assert str(e.value) == ("maps: 'a', 'c' named by no map:fn=NAME stage "
                            "of the spec")
    # nothing to parse: a map has no stage to run at
    with pytest.raises(echoflow.SpecError, match="'f' named by no"):
        echoflow.Pipeline("", source=[1, 2], maps={"f": lambda s: s})
    with pytest.raises(TypeError, match="name must be a str"):
        echoflow.Pipeline("range:n=2 | map:x", maps={1: lambda s: s})
    # quotes, a '|' inside them and odd spacing are the library's to read
    seen = []

    def tag(s):
        seen.append(int(numpy.asarray(s["index"])))
        return {"index": s["index"]}
    with echoflow.Pipeline(' range:n=3 |  map : fn = "tag" , threads=2 ',
                           maps={"tag": tag}) as p:
        assert len(list(p)) == 3
    assert sorted(seen) == [0, 1, 2]


def test_a_name_serves_every_stage_naming_it_and_shadows_a_built_in():
    calls = []

    def noop(s):
        calls.append(1)
        return {"index": s["index"]}
    out, st = run('range:n=4 | map:noop | map:fn="noop",threads=2',
                  {"noop": noop})
    assert len(out) == 4 and len(calls) == 8
    assert [s["name"] for s in st["stages"]] == ["range", "map", "map"]


def test_a_map_calling_its_own_pipeline_raises_instead_of_waiting():
    # each of these waited for the map's own return: a deadlock that
    # ignored Ctrl-C
    seen = []

    def calls_home(s):
        p = home[0]
        for name, call in (("next", lambda: next(iter(p))),
                           ("state_dict", p.state_dict),
                           ("len", lambda: len(p)), ("close", p.close)):
            with pytest.raises(echoflow.StateError, match="a map of this "
                               "pipeline cannot call"):
                call()
            seen.append(name)
        assert p.stats()["status"] == "running"  # waits for nothing
        other[0].stats()  # another pipeline's are fine
        return {"index": s["index"]}
    other = [echoflow.Pipeline("range:n=1")]
    for spec in ("range:n=2 | map:fn=f", "range:n=2 | map:fn=f,threads=2"):
        seen.clear()
        home = [echoflow.Pipeline(spec, maps={"f": calls_home})]
        with home[0] as p:
            assert len(list(p)) == 2
        assert seen == ["next", "state_dict", "len", "close"] * 2


STUCK = r'''
import os, signal, threading
import echoflow

started = threading.Event()


def stuck(s):
    started.set()
    threading.Event().wait()  # for ever
    return {}


def interrupt():
    started.wait()
    os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=interrupt, daemon=True).start()
p = echoflow.Pipeline("range:n=10 | map:fn=stuck", maps={"stuck": stuck})
try:
    next(iter(p))
except KeyboardInterrupt:
    print("interrupted", flush=True)
'''


def test_exit_after_ctrl_c_does_not_wait_for_a_stuck_map():
    # closing at exit joined the map's thread, which never returns
    r = subprocess.run([sys.executable, "-c", STUCK], capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "interrupted\n"), r.stderr


def test_an_output_over_the_memory_budget_is_refused():
    calls = []

    def big(s):
        calls.append(s.identity.index)
        return {"x": numpy.zeros(2 << 20, numpy.uint8)}
    with pytest.raises(echoflow.OutOfMemoryError,
                       match=r"map: item 0 \(epoch 0\): its output: 2097152 "
                             r"bytes, over the memory budget of 1048576 "
                             r"bytes \(raise it: --memory-budget, "
                             r"memory_budget= in Python") as e:
        run("range:n=100 | map:fn=big", {"big": big}, memory_budget=1 << 20)
    assert isinstance(e.value, MemoryError)
    assert calls == [0]  # the worker stopped at the first
    out, _ = run("range:n=2 | map:fn=big", {"big": big}, memory_budget=4 << 20)
    assert len(out) == 2


OVER_BUDGET_UNREAD = """
import mmap, echoflow
unreadable = mmap.mmap(-1, 2 << 20, prot=0)  # reading it is a crash
try:
    with echoflow.Pipeline("range:n=1 | map:fn=big",
                           maps={"big": lambda s: {"x": unreadable}},
                           memory_budget=1 << 20) as p:
        list(p)
except echoflow.OutOfMemoryError as e:
    assert "its output: 2097152 bytes, over the memory budget" in str(e), e
else:
    raise SystemExit("no error")
"""


def test_an_output_over_the_memory_budget_is_not_copied():
    # the 2 MiB map's bytes cannot be read: refused before the copy, or the
    # child crashes copying them
    out = subprocess.run([sys.executable, "-c", OVER_BUDGET_UNREAD],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
