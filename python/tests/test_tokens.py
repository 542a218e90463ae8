# SPDX-License-Identifier: Apache-2.0
"""Token files for language models: echoflow.write_tokens writes what
nanoGPT's prepare.py writes with numpy (raw uint16/uint32 ids), and the
tokens source reads such files back as blocks of inputs and next-token
targets, as nanoGPT's get_batch slices them."""
import os
import pathlib

import numpy
import pytest

import echoflow
from conftest import start_http_server


def blocks(spec, seed=0):
    with echoflow.Pipeline(spec, seed=seed) as p:
        return [(numpy.asarray(s["inputs"]).copy(),
                 numpy.asarray(s["targets"]).copy()) for s in p]


def test_write_and_read_back(tmp_path):
    path = tmp_path / "tok.bin"
    n = echoflow.write_tokens("range:n=10,bytes=5", path, field="data",
                              eos=300)
    assert n == 60
    ids = numpy.fromfile(path, dtype="<u2")
    want = [t for i in range(10) for t in [(i + j) % 256 for j in range(5)]
            + [300]]
    assert ids.tolist() == want
    got = blocks("tokens:files=%s,block=4" % path)
    assert len(got) == (60 - 1) // 4
    for k, (x, y) in enumerate(got):
        assert x.dtype == numpy.int32 and x.shape == (4,)
        assert x.tolist() == want[4 * k:4 * k + 4]
        assert y.tolist() == want[4 * k + 1:4 * k + 5]
    # no temporary left behind
    assert sorted(os.listdir(tmp_path)) == ["tok.bin"]


def test_uint32_and_str_path(tmp_path):
    path = str(tmp_path / "tok32.bin")
    n = echoflow.write_tokens("range:n=4,bytes=3", path, field="data",
                              dtype="uint32", eos=70000)
    assert n == 16
    want = [t for i in range(4) for t in [i, i + 1, i + 2, 70000]]
    assert numpy.fromfile(path, dtype="<u4").tolist() == want
    got = blocks("tokens:files=%s,block=5,dtype=uint32" % path)
    assert [x.tolist() for x, _ in got] == [want[0:5], want[5:10], want[10:15]]


def test_nanogpt_file(tmp_path):
    # a file as nanoGPT's prepare.py writes it
    data = (numpy.arange(5000) * 7919 % 50257).astype(numpy.uint16)
    path = tmp_path / "train.bin"
    data.tofile(path)
    got = blocks("tokens:files=%s,block=64" % path)
    assert len(got) == (5000 - 1) // 64
    for k, (x, y) in enumerate(got):
        i = 64 * k
        numpy.testing.assert_array_equal(x, data[i:i + 64].astype(numpy.int64))
        numpy.testing.assert_array_equal(y, data[i + 1:i + 65])
    # random offsets: get_batch's windows, the same for the same seed
    data = numpy.arange(3000, dtype=numpy.uint16)
    data.tofile(path)
    spec = "tokens:files=%s,block=32,order=random" % path
    a, b, c = blocks(spec, seed=1), blocks(spec, seed=1), blocks(spec, seed=2)
    assert len(a) == 3000 // 32
    assert [x.tolist() for x, _ in a] == [x.tolist() for x, _ in b]
    assert [x.tolist() for x, _ in a] != [x.tolist() for x, _ in c]
    for x, y in a:
        o = int(x[0])
        assert 0 <= o <= 3000 - 33
        assert x.tolist() == list(range(o, o + 32))
        assert y.tolist() == list(range(o + 1, o + 33))


def test_errors(tmp_path):
    path = tmp_path / "bad.bin"
    with pytest.raises(echoflow.SpecError, match="eos 70000 does not fit "
                       "uint16"):
        echoflow.write_tokens("range:n=3,bytes=2", path, field="data",
                              eos=70000)
    with pytest.raises(echoflow.ShapeError, match="no field 'tokens'"):
        echoflow.write_tokens("range:n=3", path)
    with pytest.raises(echoflow.SpecError, match="uint16 or uint32"):
        echoflow.write_tokens("range:n=3", path, dtype="int8")
    with pytest.raises(echoflow.SpecError, match="nosuchstage"):
        echoflow.write_tokens("nosuchstage", path)
    with pytest.raises(ValueError, match="eos"):
        echoflow.write_tokens("range:n=3", path, eos=-2)
    with pytest.raises(ValueError, match="on_error"):
        echoflow.write_tokens("range:n=3", path, on_error="maybe")
    assert os.listdir(tmp_path) == []
    # a file that is not whole tokens
    path.write_bytes(b"\0" * 21)
    with pytest.raises(echoflow.FormatError, match="21 bytes"):
        blocks("tokens:files=%s,block=4" % path)


def test_stubs_name_it():
    stub = pathlib.Path(echoflow.__file__).with_suffix(".pyi").read_text()
    assert "def write_tokens(" in stub
    assert "write_tokens" in echoflow.__all__


@pytest.mark.parametrize("extra", [(), ("--cut-every", "256")])
def test_over_http(tmp_path, extra):
    """Blocks read with Range requests equal the local file's, through
    connections cut part way too (retried and resumed)."""
    # each cut costs a retry's backoff: fewer blocks then
    n = 3500 if extra else 20000
    data = (numpy.arange(n) * 31 % 60000).astype(numpy.uint16)
    data.tofile(tmp_path / "t.bin")
    proc, port = start_http_server(str(tmp_path), *extra)
    try:
        url = "http://127.0.0.1:%d/t.bin" % port
        for order in ("sequential", "random"):
            local = blocks("tokens:files=%s,block=300,order=%s"
                           % (tmp_path / "t.bin", order), seed=4)
            remote = blocks("tokens:files=%s,block=300,order=%s"
                            % (url, order), seed=4)
            assert len(remote) == len(local) >= 10
            for (a, b), (c, d) in zip(local, remote):
                assert a.tolist() == c.tolist() and b.tolist() == d.tolist()
        with pytest.raises(echoflow.ReadError, match="nothere.bin"):
            blocks("tokens:files=http://127.0.0.1:%d/nothere.bin,block=4"
                   % port)
    finally:
        proc.kill()
        proc.wait()
