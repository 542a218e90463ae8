# SPDX-License-Identifier: Apache-2.0
"""Every dtype, text field and batch structure a PyTorch user hands over:
through a Python source, a Loader and echo(DataLoader), with values and
dtypes exact, and each refusal naming the field and the dtype."""
import collections

import numpy
import pytest
import torch
from torch.utils.data import DataLoader

import echoflow
from echoflow.torch import Loader, echo, to_torch

# (echoflow name, numpy dtype or None, torch dtype or None, values)
DTYPES = [
    ("bool", numpy.bool_, torch.bool, [True, False, True]),
    ("u8", numpy.uint8, torch.uint8, [0, 255, 7]),
    ("i8", numpy.int8, torch.int8, [-128, 127, -1]),
    ("i16", numpy.int16, torch.int16, [-32768, 32767, -2]),
    ("u16", numpy.uint16, None, [0, 65535, 40000]),
    ("i32", numpy.int32, torch.int32, [-2**31, 2**31 - 1, 3]),
    ("i64", numpy.int64, torch.int64, [-2**63, 2**63 - 1, 4]),
    ("f16", numpy.float16, torch.float16, [65504.0, 2**-24, -1.5]),
    ("bf16", None, torch.bfloat16, [3.0e38, 2**-126, -1.5]),
    ("f32", numpy.float32, torch.float32, [3.4e38, 1e-45, -0.1]),
    ("f64", numpy.float64, torch.float64, [1e308, 5e-324, -0.1]),
]
NUMPY = [d for d in DTYPES if d[1] is not None]
TORCH = [d for d in DTYPES if d[2] is not None]
ids = [d[0] for d in DTYPES]


def rows(values, n=4):
    """n rows of the values, each row i its values rolled by i."""
    return [values[i % len(values):] + values[:i % len(values)]
            for i in range(n)]


@pytest.mark.parametrize("name,np_dtype,_,values", NUMPY,
                         ids=[d[0] for d in NUMPY])
def test_numpy_fields_round_trip(name, np_dtype, _, values):
    src = [{"x": numpy.array(r, np_dtype)} for r in rows(values)]
    # an example comes back without a copy
    with echoflow.Pipeline("", source=src) as p:
        s = next(iter(p))
        assert s["x"].dtype == name
        assert s["x"].address == src[0]["x"].ctypes.data
        a = numpy.asarray(s["x"])
        assert a.dtype == np_dtype and a.tolist() == src[0]["x"].tolist()
    with echoflow.Pipeline("echo:2 | batch:2", source=src) as p:
        got = [numpy.asarray(b["x"]) for b in p]
    assert [g.dtype for g in got] == [numpy.dtype(np_dtype)] * 4
    want = [numpy.stack([src[i]["x"]] * 2) for i in range(4)]
    assert all(numpy.array_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("name,_,torch_dtype,values", TORCH,
                         ids=[d[0] for d in TORCH])
def test_torch_fields_round_trip(name, _, torch_dtype, values):
    src = [{"x": torch.tensor(r, dtype=torch_dtype)} for r in rows(values)]
    with echoflow.Pipeline("", source=src) as p:
        s = next(iter(p))
        t = s["x"]
        assert t.dtype == name
        # DLPack shares the memory (bool as uint8: DLPack 0.6 has none)
        assert t.address == src[0]["x"].data_ptr()
        back = to_torch(s)["x"]
        assert back.dtype == torch_dtype and back.data_ptr() == t.address
        assert torch.equal(back, src[0]["x"])
    got = list(Loader("batch:2", source=src))
    assert [b["x"].dtype for b in got] == [torch_dtype] * 2
    assert torch.equal(got[1]["x"], torch.stack([src[2]["x"], src[3]["x"]]))


@pytest.mark.parametrize("name,_,torch_dtype,values", TORCH,
                         ids=[d[0] for d in TORCH])
def test_echo_of_a_dataloader_keeps_every_dtype(name, _, torch_dtype, values):
    data = [(torch.tensor(r, dtype=torch_dtype), i)
            for i, r in enumerate(rows(values, 6))]
    dl = DataLoader(data, batch_size=2)
    want = list(dl)
    got = list(echo(dl, factor=2, mode="batch", shuffle=0))
    assert len(got) == 2 * len(want)
    for k, (x, label) in enumerate(got):
        wx, wlabel = want[k // 2]
        assert x.dtype == torch_dtype and torch.equal(x, wx)
        assert torch.equal(label, wlabel)
    # example echoing splits and batches them again: each row still
    # matches its label
    for x, label in echo(dl, factor=2):
        assert x.dtype == torch_dtype
        for row, i in zip(x, label.tolist()):
            assert torch.equal(row, data[i][0])


def test_uint16_reaches_torch_as_an_int32_copy():
    a = numpy.array([[0, 65535, 40000]], numpy.uint16)
    b = next(iter(Loader("batch:1", source=[{"x": a[0]}])))["x"]
    assert b.dtype == torch.int32 and b.tolist() == a.tolist()
    s = next(iter(echoflow.Pipeline("", source=[{"x": a[0]}])))
    assert to_torch(s)["x"].tolist() == a[0].tolist()


def test_bfloat16_has_no_numpy_form_and_says_so():
    t = next(iter(echoflow.Pipeline(
        "", source=[{"x": torch.ones(2, dtype=torch.bfloat16)}])))["x"]
    with pytest.raises(BufferError, match="bf16 has no buffer format"):
        memoryview(t)
    with pytest.raises(TypeError, match="bf16 has no numpy dtype"):
        numpy.asarray(t)
    assert torch.from_dlpack(t).dtype == torch.bfloat16


def test_scalars_of_every_dtype_convert():
    src = [{"b": numpy.bool_(True), "i8": numpy.int8(-3),
            "h": numpy.float16(1.5), "f": numpy.float64(0.1),
            "bf": torch.tensor(2.5, dtype=torch.bfloat16),
            "u": numpy.uint16(65535)}]
    s = next(iter(echoflow.Pipeline("", source=src)))
    assert bool(s["b"]) is True and int(s["i8"]) == -3
    assert float(s["h"]) == 1.5 and float(s["f"]) == 0.1
    assert float(s["bf"]) == 2.5 and int(s["u"]) == 65535
    with pytest.raises(TypeError, match="an f16 tensor is not an index"):
        [0][s["h"]]


def test_cast_rounds_16_bit_floats_as_numpy_and_torch_do():
    rng = numpy.random.default_rng(0)
    x = numpy.concatenate([
        rng.standard_normal(2000).astype(numpy.float32) * 1000,
        rng.standard_normal(2000).astype(numpy.float32) * 1e-6,  # subnormal
        numpy.array([65504, 65519, -65519, 0.0, -0.0, 2**-25, 2**-24 * 1.5],
                    numpy.float32)])[None]
    for dtype, want in (
            ("f16", torch.from_numpy(x.astype(numpy.float16))),
            ("bf16", torch.from_numpy(x).bfloat16())):
        spec = "cast:dtype=%s,field=x" % dtype
        t = next(iter(echoflow.Pipeline(spec, source=[{"x": x}])))["x"]
        got = torch.from_dlpack(t)
        assert got.dtype == want.dtype
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("value,what", [
    (numpy.zeros(3, numpy.complex64), r"numpy.ndarray\): complex64"),
    (numpy.zeros(3, numpy.uint64), r"numpy.ndarray\): uint64"),
    (torch.zeros(2, dtype=torch.complex64), r"Tensor\): complex64"),
    (numpy.zeros(2, ">i4"), r"numpy.ndarray\): big-endian '>i'"),
])
def test_a_dtype_it_cannot_hold_is_named_with_its_field(value, what):
    with echoflow.Pipeline("", source=[{"x": value}]) as p:
        with pytest.raises(echoflow.CallbackError,
                           match=r"field 'x' \(%s is not a dtype echoflow "
                           r"holds \(it holds: bool, uint8, int8, int16, "
                           r"uint16, int32, int64, float16, bfloat16, "
                           r"float32, float64\)" % what):
            list(p)


def test_echo_names_the_field_of_a_dtype_it_cannot_hold():
    dl = DataLoader([(torch.zeros(2), torch.zeros(1, dtype=torch.complex64))],
                    batch_size=1)
    with pytest.raises(echoflow.CallbackError,
                       match=r"field '1' .*complex64 is not a dtype"):
        list(echo(dl, factor=1))


def test_a_map_returning_a_dtype_it_cannot_hold_is_named():
    with pytest.raises(echoflow.CallbackError,
                       match=r"field 'x': complex128 is not a dtype echoflow "
                       r"holds \(it holds: bool"):
        list(echoflow.Pipeline("range:n=2 | map:bad", maps={
            "bad": lambda s: {"x": numpy.zeros(2, numpy.complex128)}}))


# ---- text fields -----------------------------------------------------------

def test_str_and_lists_of_str_round_trip_through_a_source():
    src = [{"path": "dir/%d.jpg" % i, "tags": ["t%d" % k for k in range(i)]
            + ["é"], "n": i} for i in range(5)]
    with echoflow.Pipeline("", source=src) as p:
        got = list(p)
    assert [s["path"] for s in got] == [d["path"] for d in src]
    assert [s["tags"] for s in got] == [d["tags"] for d in src]
    with echoflow.Pipeline("echo:2 | batch:4", source=src) as p:
        batches = list(p)
    assert batches[0]["path"] == ["dir/0.jpg"] * 2 + ["dir/1.jpg"] * 2
    assert batches[1]["tags"] == [["é"]] * 0 + [src[2]["tags"]] * 2 + \
        [src[3]["tags"]] * 2
    assert [len(b["path"]) for b in batches] == [4, 4, 2]


def test_a_batch_of_str_is_split_and_kept_whole():
    src = [(torch.arange(3), ["a", "bb", ""]), (torch.arange(3, 5), ["c", "d"])]
    with echoflow.Pipeline("batch:2", source=src, unbatch=True) as p:
        got = list(p)
    assert [b["1"] for b in got] == [["a", "bb"], ["", "c"], ["d"]]
    with echoflow.Pipeline("", source=src, batched=True) as p:
        assert [b["1"] for b in p] == [["a", "bb", ""], ["c", "d"]]


class Images(torch.utils.data.Dataset):
    """(img, label, path), as ImageFolder with a path does."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return (torch.full((3, 2, 2), i, dtype=torch.uint8), i,
                "images/%d.png" % i)


def test_echo_yields_paths_as_str():
    dl = DataLoader(Images(), batch_size=4)
    kind = type(next(iter(dl))[2])  # default_collate's tuple of str
    for mode in ("example", "batch"):
        n = 0
        for img, label, path in echo(dl, factor=2, mode=mode):
            assert type(path) is kind
            assert list(path) == ["images/%d.png" % i for i in label.tolist()]
            assert img[:, 0, 0, 0].tolist() == label.tolist()
            n += len(path)
        assert n == 20


# ---- nested structures -----------------------------------------------------

Box = collections.namedtuple("Box", "label box")


class Nested(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"img": torch.full((2,), float(i)),
                "target": Box(i, torch.tensor([i, i + 1, i + 2, i + 3])),
                "names": ["a%d" % i, "b%d" % i],
                "meta": (torch.tensor(i * 10), ("p%d" % i,))}


def test_echo_rebuilds_nested_tuples_lists_and_dicts():
    dl = DataLoader(Nested(), batch_size=4)
    want = list(dl)
    got = list(echo(dl, factor=1, mode="batch"))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is dict and list(g) == list(w)
        assert isinstance(g["target"], Box)
        assert torch.equal(g["target"].box, w["target"].box)
        assert torch.equal(g["target"].label, w["target"].label)
        assert type(g["names"]) is list and len(g["names"]) == 2
        assert g["names"] == w["names"]
        assert [type(n) for n in g["names"]] == [type(n) for n in w["names"]]
        assert type(g["meta"]) is type(w["meta"])
        assert g["meta"][1] == w["meta"][1]
        assert torch.equal(g["meta"][0], w["meta"][0])
    # examples echoed and batched again stay together
    for b in echo(dl, factor=2):
        i = b["target"].label.tolist()
        assert b["img"][:, 0].tolist() == [float(k) for k in i]
        assert list(b["names"][1]) == ["b%d" % k for k in i]
        assert b["meta"][0].tolist() == [k * 10 for k in i]


def test_echo_of_a_list_returning_collate_fn():
    def collate(items):
        return [torch.stack([x[0] for x in items]),
                (torch.tensor([x[1] for x in items]), [x[2] for x in items])]
    dl = DataLoader(Images(), batch_size=3, collate_fn=collate)
    got = list(echo(dl, factor=1, mode="batch"))
    assert [type(b) for b in got] == [list] * 4
    for b, w in zip(got, dl):
        img, (label, paths) = b
        assert torch.equal(img, w[0]) and torch.equal(label, w[1][0])
        assert paths == w[1][1]
