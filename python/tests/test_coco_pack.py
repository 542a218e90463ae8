# SPDX-License-Identifier: Apache-2.0
"""COCO packed into WebDataset shards by the real `echoflow pack` (each
image's bytes as KEY.jpg or KEY.png, its detection fields as KEY.json) and
read back with `tar | json_boxes`: every field of every sample equals the
coco source's, name, dtype, shape and bits, from local shards and over
HTTP (tests/http_server.py). The COCO fixture is test_coco.py's."""

import io
import json
import os
import subprocess
import tarfile

import numpy
import pytest

import echoflow
from conftest import start_http_server
from test_coco import coco  # noqa: F401  (the fixture)

CLI = os.environ.get("ECHOFLOW_CLI", "build/echoflow")


def samples(spec):
    """key -> {field: numpy array}, __key__ and __url__ left out."""
    with echoflow.Pipeline(spec) as p:
        out = {}
        for s in p:
            fields = {k: numpy.array(numpy.asarray(v)) for k, v in s.items()
                      if k != "__url__"}
            # the key as text: tar marks it as a str, coco does not
            key = fields.pop("__key__")
            out[key.tobytes().decode() if key.dtype == numpy.uint8
                else str(key)] = fields
        return out


def pack(spec, out_dir):
    """Runs the CLI's pack on spec into out_dir/%06d.tar, 3 per shard."""
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([CLI, "pack", "--per-shard", "3", spec,
                    os.path.join(str(out_dir), "%06d.tar")],
                   check=True, stdout=subprocess.DEVNULL)
    return sorted(f for f in os.listdir(str(out_dir)) if f.endswith(".tar"))


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        g = got[key]
        assert sorted(g) == sorted(w), key
        for name in w:
            assert g[name].dtype == w[name].dtype, (key, name)
            assert g[name].shape == w[name].shape, (key, name)
            assert g[name].tobytes() == w[name].tobytes(), (key, name)


@pytest.mark.parametrize("options", ["", ",crowd=keep,labels=category",
                                     ",empty=drop"])
def test_pack_reads_back_as_the_coco_source(coco, tmp_path,  # noqa: F811
                                            options):
    d, doc = coco
    spec = "coco:annotations=%s,root=%s%s" % (d / "instances.json",
                                             d / "images", options)
    shards = pack(spec, tmp_path / "out")
    assert len(shards) > 1
    want = samples(spec)
    assert any(len(s["boxes"]) == 2 for s in want.values())
    got = samples("tar:urls=\"%s/{%s}\" | json_boxes"
                  % (tmp_path / "out", ",".join(shards)))
    assert_same(got, want)
    # the members: the image unchanged, the fields in one JSON object
    with tarfile.open(str(tmp_path / "out" / shards[0])) as tar:
        names = tar.getnames()
        member = next(n for n in names if n.endswith(".json"))
        text = json.loads(tar.extractfile(member).read())
    key = member[:-len(".json")]
    assert sorted(names[:2]) == sorted(
        [member, member[:-4] + ("jpg" if "jpg" in want[key] else "png")])
    assert text["image_id"] == int(want[key]["image_id"])
    assert numpy.array(text["boxes"], numpy.float32).reshape(-1, 4).tobytes() \
        == want[key]["boxes"].tobytes()


def test_the_box_stages_work_on_both(coco, tmp_path):  # noqa: F811
    d, doc = coco
    spec = "coco:annotations=%s,root=%s" % (d / "instances.json",
                                           d / "images")
    shards = pack(spec, tmp_path / "out")
    # deterministic stages: a random one draws by the sample's identity,
    # which is its place in the shard for tar, in the JSON for coco
    tail = " | decode | resize:size=12,boxes=boxes | pad_boxes:n=4"
    want = samples(spec + tail)
    got = samples("tar:urls=\"%s/{%s}\" | json_boxes%s"
                  % (tmp_path / "out", ",".join(shards), tail))
    assert_same(got, want)


def test_over_http(coco, tmp_path):  # noqa: F811
    d, doc = coco
    spec = "coco:annotations=%s,root=%s,crowd=keep" % (d / "instances.json",
                                                      d / "images")
    shards = pack(spec, tmp_path / "www")
    proc, port = start_http_server(str(tmp_path / "www"))
    try:
        got = samples("tar:urls=\"http://127.0.0.1:%d/{%s}\" | json_boxes"
                      % (port, ",".join(shards)))
    finally:
        proc.kill()
        proc.wait()
    assert_same(got, samples(spec))


def shard_of(path, members):
    with tarfile.open(str(path), "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


@pytest.mark.parametrize("text,problem", [
    (b'[1]', r"expected the document to be an object, got an array"),
    (b'{"labels": [1]}', r"no key 'boxes'"),
    (b'{"boxes": [[1, 2, 3]], "labels": [1]}',
     r"key 'boxes' row 0: expected 4 numbers \[x1, y1, x2, y2\], got 3"),
    (b'{"boxes": [[1, 2, 3, 4]], "labels": [1, 2]}',
     r"key 'labels' has 2 items, expected 1, one per row of key 'boxes'"),
    (b'{"boxes": [[1, 2, 3, 4]], "labels": ["a"]}',
     r"expected key 'labels' item 0 to be an integer, got a string"),
    (b'{"boxes": [[1, 2, 3, 4]], "labels": [1.5]}',
     r"key 'labels' item 0: expected an integer, got a number with a "
     r"fraction"),
    (b'{"boxes": [[1, 2, 1e39, 4]]}',
     r"key 'boxes' row 0 item 2: 1e\+39 is beyond the range of f32"),
    (b'{"boxes": [], "image_id": true}',
     r"key 'image_id': expected an array of numbers \(one per box\) or a "
     r"number, got true or false"),
    (b'{"boxes": []} x', r"expected the end of the data after the document"),
])
def test_malformed_json_is_named(tmp_path, text, problem):
    shard_of(tmp_path / "bad.tar", [("a/img7.json", text)])
    with pytest.raises(echoflow.FormatError,
                       match=r"json_boxes: .*file '.*bad\.tar', key "
                             r"'a/img7': field 'json': (byte \d+: )?" + problem):
        samples("tar:urls=%s | json_boxes" % (tmp_path / "bad.tar"))
