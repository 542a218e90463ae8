# SPDX-License-Identifier: Apache-2.0
"""Every registered stage, built with its defaults (and only the options it
requires) and run on a small input, so that a stage cannot land without
running here: a stage the registry has and RUNS lacks fails the test."""
import gzip
import io
import json
import os
import struct
import tarfile

import numpy
import pytest
from PIL import Image

import echoflow
from conftest import ROOT
from test_tfexample import example, write_tfrecord

MODEL = os.path.join(ROOT, "tests", "fixtures", "tokenize", "verbs_bpe.model")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Small inputs of every kind the sources read, in one folder."""
    d = tmp_path_factory.mktemp("every_stage")
    rng = numpy.random.default_rng(1)
    images = rng.integers(0, 256, (6, 5, 4, 3), dtype=numpy.uint8)
    for i, im in enumerate(images):  # an image folder of two classes
        os.makedirs(d / "folder" / ("c%d" % (i % 2)), exist_ok=True)
        Image.fromarray(im).save(d / "folder" / ("c%d" % (i % 2))
                                 / ("%d.png" % i))
    with tarfile.open(d / "shard.tar", "w") as tar:  # a WebDataset shard
        for i, im in enumerate(images):
            png = io.BytesIO()
            Image.fromarray(im).save(png, format="PNG")
            for ext, payload in (("png", png.getvalue()),
                                 ("cls", b"%d" % (i % 2))):
                info = tarfile.TarInfo("%06d.%s" % (i, ext))
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    with tarfile.open(d / "boxes.tar", "w") as tar:  # as pack writes COCO
        for i in range(3):
            ann = json.dumps({"boxes": [[1.5, 1, 3, 4]] * i,
                              "labels": [7] * i, "image_id": i}).encode()
            info = tarfile.TarInfo("%06d.json" % i)
            info.size = len(ann)
            tar.addfile(info, io.BytesIO(ann))
    header = struct.pack(">IIII", 0x803, len(images), 5, 4)  # IDX, grey
    with gzip.open(d / "images.idx.gz", "wb") as f:
        f.write(header + images[..., 0].tobytes())
    with open(d / "cifar.bin", "wb") as f:  # 1 label byte, 3x32x32
        for i in range(3):
            f.write(bytes([i]) + bytes(3072))
    write_tfrecord(str(d / "examples.tfrecord"),
                   [example(label=[i], name=[b"n%d" % i]) for i in range(4)])
    (d / "docs.jsonl").write_text("".join(
        json.dumps({"text": "walks %d talked" % i}) + "\n" for i in range(4)))
    (d / "lines.txt").write_text("".join(
        "she walked %d\n" % i for i in range(4)))
    numpy.arange(64, dtype=numpy.uint16).tofile(d / "tokens.bin")
    numpy.save(d / "rows.npy", images[..., 0])  # 6 rows of 5x4
    (d / "coco.json").write_text(json.dumps({  # COCO boxes on the folder's
        "images": [{"id": i, "file_name": "c%d/%d.png" % (i % 2, i),
                    "width": 4, "height": 5} for i in range(6)],
        "annotations": [{"id": 1, "image_id": 2, "bbox": [1, 1, 2, 3],
                         "category_id": 7, "iscrowd": 0}],
        "categories": [{"id": 7, "name": "seven"}]}))
    return d


def images(d):
    return "files:root=%s | decode" % (d / "folder")


# stage -> the spec that runs it on `data` (a function of the folder); a
# stage that needs more than one process names the test that runs it
# (resize needs a size: it has no default)
RUNS = {
    "range": lambda d: "range:n=4",
    "idx": lambda d: "idx:images=%s" % (d / "images.idx.gz"),
    "map": lambda d: "range:n=4 | map:fn=noop",
    "shuffle": lambda d: "range:n=4 | shuffle:buffer=2",
    "echo": lambda d: "range:n=4 | echo",
    "batch": lambda d: "range:n=4 | batch:size=2",
    "prefetch": lambda d: "range:n=4 | prefetch",
    "repeat": lambda d: "range:n=4 | repeat | take:count=10",
    "take": lambda d: "range:n=4 | take:count=2",
    "throttle": lambda d: "range:n=4 | throttle:rate=1000",
    "select": lambda d: "range:n=4,bytes=2 | select:fields=index",
    "drop": lambda d: "range:n=4,bytes=2 | drop:fields=data",
    "trace": lambda d: "range:n=4 | trace:path=%s" % (d / "trace.log"),
    "random_crop": lambda d: images(d) + " | random_crop",
    "flip": lambda d: images(d) + " | flip",
    "decode": images,
    "decode_crop": lambda d: "files:root=%s | decode_crop" % (d / "folder"),
    "resize": lambda d: images(d) + " | resize:size=3",
    "random_resized_crop": lambda d: images(d) + " | random_resized_crop",
    "normalize": lambda d: images(d) + " | normalize",
    "to_chw": lambda d: images(d) + " | to_chw",
    "cast": lambda d: images(d) + " | cast:dtype=f32",
    "crop_mirror_normalize": lambda d: images(d) + " | crop_mirror_normalize",
    "ssd_crop": lambda d: "ssd_crop",  # on DETECTION below
    "pad_boxes": lambda d: "pad_boxes:n=3",  # on DETECTION below
    "tar": lambda d: "tar:urls=%s" % (d / "shard.tar"),
    "tfrecord": lambda d: "tfrecord:files=%s" % (d / "examples.tfrecord"),
    "cifar": lambda d: "cifar:files=%s" % (d / "cifar.bin"),
    "npy": lambda d: "npy:files=%s" % (d / "rows.npy"),
    "files": lambda d: "files:root=%s" % (d / "folder"),
    "tfexample": lambda d: ("tfrecord:files=%s | tfexample:features=label"
                            % (d / "examples.tfrecord")),
    "tokenize": lambda d: ("jsonl:files=%s | tokenize:model=%s"
                           % (d / "docs.jsonl", MODEL)),
    "pack_tokens": lambda d: ("jsonl:files=%s | tokenize:model=%s "
                              "| pack_tokens:block=4"
                              % (d / "docs.jsonl", MODEL)),
    "tokens": lambda d: "tokens:files=%s,block=8" % (d / "tokens.bin"),
    "text": lambda d: "text:files=%s" % (d / "lines.txt"),
    "jsonl": lambda d: "jsonl:files=%s" % (d / "docs.jsonl"),
    "coco": lambda d: "coco:annotations=%s,root=%s" % (d / "coco.json",
                                                       d / "folder"),
    "json_boxes": lambda d: "tar:urls=%s | json_boxes" % (d / "boxes.tar"),
    "service": "tests/service_test.sh",
    "corner_boxes": lambda d: "corner_boxes",  # on DETECTION below
}


# stage -> a Python source for a stage whose input no source here gives:
# images with boxes and labels
DETECTION = {
    "ssd_crop": lambda: DETECTION["pad_boxes"](),
    "pad_boxes": lambda: [
        {"image": numpy.zeros((20, 30, 3), numpy.uint8),
         "boxes": numpy.array([[2, 3, 12, 15], [20, 5, 29, 19]],
                              numpy.float32),
         "labels": numpy.array([1, 2], numpy.int64)}] * 4,
    # the TF Object Detection API's lists, normalized, as tfexample reads
    "corner_boxes": lambda: [
        {"image": numpy.zeros((20, 30, 3), numpy.uint8),
         "image/object/bbox/xmin": numpy.array([0.1, 0.5], numpy.float32),
         "image/object/bbox/ymin": numpy.array([0.2, 0.0], numpy.float32),
         "image/object/bbox/xmax": numpy.array([0.4, 1.0], numpy.float32),
         "image/object/bbox/ymax": numpy.array([0.6, 0.9], numpy.float32),
         "labels": numpy.array([1, 2], numpy.int64)}] * 4,
}


def test_every_registered_stage_has_a_run():
    registered = {s["name"] for s in echoflow.stages()}
    assert registered - set(RUNS) == set(), (
        "stages without a run here: add each to RUNS")
    assert set(RUNS) - registered == set()


@pytest.mark.parametrize("stage", sorted(k for k, v in RUNS.items()
                                         if callable(v)))
def test_stage_runs_with_its_defaults(stage, data):
    spec = RUNS[stage](data)
    source = DETECTION[stage]() if stage in DETECTION else None
    with echoflow.Pipeline(spec, seed=3, source=source) as p:
        got = list(p)
        stats = p.stats()
    assert got, spec
    assert [s["name"] for s in stats["stages"]].count(stage) == 1
    assert stats["status"] == "ok"


def test_the_stages_run_elsewhere_have_their_test():
    for stage, where in RUNS.items():
        if not callable(where):
            assert os.path.exists(os.path.join(ROOT, where)), (stage, where)
