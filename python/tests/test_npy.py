# SPDX-License-Identifier: Apache-2.0
"""The npy source against numpy itself: arrays written with numpy.save,
read back row by row, equal numpy's rows exactly (dtype, shape and bytes),
from local files (mapped) and over HTTP (tests/http_server.py)."""

import numpy
import pytest

import echoflow
from conftest import start_http_server

ARRAYS = {
    "bool": numpy.array([[True, False], [False, True], [True, True]]),
    "u8": numpy.arange(24, dtype=numpy.uint8).reshape(2, 3, 4),
    "i8": numpy.array([-128, 127, -1, 0], numpy.int8),
    "i16": numpy.array([[-32768, 32767], [-2, 5]], numpy.int16),
    "u16": numpy.array([0, 65535, 40000], numpy.uint16),
    "i32": numpy.arange(-6, 6, dtype=numpy.int32).reshape(3, 2, 2),
    "i64": numpy.array([-2**63, 2**63 - 1, 4], numpy.int64),
    "f16": numpy.array([[65504.0, 2**-24], [-1.5, 0.0]], numpy.float16),
    "f32": numpy.linspace(-1, 1, 30, dtype=numpy.float32).reshape(5, 6),
    "f64": numpy.array([1e308, 5e-324, -0.1], numpy.float64),
}


def rows(spec, field="data"):
    with echoflow.Pipeline(spec) as p:
        return [numpy.array(numpy.asarray(s[field])) for s in p]


def expect_rows(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_rows_equal_numpys(tmp_path, name):
    a = ARRAYS[name]
    numpy.save(tmp_path / "a.npy", a)
    expect_rows(rows("npy:files=%s" % (tmp_path / "a.npy")), list(a))


def test_files_concatenate_and_shard(tmp_path):
    a = numpy.arange(10, dtype=numpy.float32).reshape(5, 2)
    b = numpy.arange(10, 16, dtype=numpy.float32).reshape(3, 2)
    numpy.save(tmp_path / "part-1.npy", a)
    numpy.save(tmp_path / "part-2.npy", b)
    both = numpy.concatenate([a, b])
    spec = "npy:files=\"%s/part-{1..2}.npy\",field=x" % tmp_path
    expect_rows(rows(spec, "x"), list(both))
    expect_rows(rows(spec + ",shard=2/3", "x"), list(both[2::3]))
    with echoflow.Pipeline(spec + ",shard=2/3") as p:
        assert len(p) == 2


def test_state_dict_resumes(tmp_path):
    a = numpy.arange(40, dtype=numpy.int64).reshape(20, 2)
    numpy.save(tmp_path / "a.npy", a)
    spec = "npy:files=%s | shuffle:6" % (tmp_path / "a.npy")
    with echoflow.Pipeline(spec, seed=5) as p:
        whole = [numpy.asarray(s["data"]).tolist() for s in p]
    with echoflow.Pipeline(spec, seed=5) as p:
        it = iter(p)
        head = [numpy.asarray(next(it)["data"]).tolist() for _ in range(7)]
        state = p.state_dict()
    with echoflow.Pipeline(spec, seed=5) as q:
        q.load_state_dict(state)
        rest = [numpy.asarray(s["data"]).tolist() for s in q]
    assert head + rest == whole


def test_refusals_name_the_file(tmp_path):
    numpy.save(tmp_path / "big.npy", numpy.arange(4, dtype=">i4"))
    with pytest.raises(echoflow.FormatError, match="big.npy.*big-endian"):
        rows("npy:files=%s" % (tmp_path / "big.npy"))
    numpy.save(tmp_path / "f.npy", numpy.asfortranarray(
        numpy.arange(6, dtype=numpy.int32).reshape(2, 3)))
    with pytest.raises(echoflow.FormatError, match="f.npy.*Fortran"):
        rows("npy:files=%s" % (tmp_path / "f.npy"))
    numpy.save(tmp_path / "u32.npy", numpy.arange(4, dtype=numpy.uint32))
    with pytest.raises(echoflow.FormatError, match="u32.npy.*'<u4'"):
        rows("npy:files=%s" % (tmp_path / "u32.npy"))


def test_over_http(tmp_path):
    """A URL is read whole: the same rows as the local file's; a file cut
    short on the server is refused, naming the URL."""
    a = numpy.arange(3000, dtype=numpy.float64).reshape(300, 10)
    numpy.save(tmp_path / "a.npy", a)
    with open(tmp_path / "a.npy", "rb") as f:
        whole = f.read()
    with open(tmp_path / "cut.npy", "wb") as f:
        f.write(whole[:-8])
    proc, port = start_http_server(str(tmp_path))
    try:
        url = "http://127.0.0.1:%d/" % port
        expect_rows(rows("npy:files=%sa.npy,shard=1/2" % url), list(a[1::2]))
        with pytest.raises(echoflow.FormatError, match="cut.npy.*truncated"):
            rows("npy:files=%scut.npy" % url)
    finally:
        proc.kill()
        proc.wait()
