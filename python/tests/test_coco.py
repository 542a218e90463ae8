# SPDX-License-Identifier: Apache-2.0
"""The coco source against COCO files written with Python's json module and
images written with PIL: each image's boxes equal an independent conversion
of COCO's [x, y, w, h] to xyxy, its labels the categories' places in id
order, from local files and over HTTP (tests/http_server.py)."""

import gzip
import json

import numpy
import pytest
from PIL import Image

import echoflow
from conftest import start_http_server

CATEGORIES = [{"id": 90, "name": "toothbrush"}, {"id": 1, "name": "person"},
              {"id": 18, "name": "dog"}]


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """A folder holding instances.json (and its gzip) and images/."""
    d = tmp_path_factory.mktemp("coco")
    (d / "images" / "val").mkdir(parents=True)
    rng = numpy.random.default_rng(4)
    images, annotations = [], []
    for i in range(7):
        w, h = int(rng.integers(8, 40)), int(rng.integers(8, 40))
        name = "val/%012d.%s" % (100 + i, "jpg" if i % 2 else "png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=numpy.uint8)
                        ).save(d / "images" / name)
        images.append({"id": 100 + i, "file_name": name, "width": w,
                       "height": h, "license": 1})
        for k in range(i % 3):  # 0, 1 or 2 boxes; one crowd box in 105
            x, y = rng.uniform(0, w / 2), rng.uniform(0, h / 2)
            annotations.append({
                "id": len(annotations) + 1, "image_id": 100 + i,
                "category_id": CATEGORIES[len(annotations) % 3]["id"],
                "bbox": [x, y, rng.uniform(1, w - x), rng.uniform(1, h - y)],
                "iscrowd": int(i == 5 and k == 0),
                "area": 1.0, "segmentation": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]})
    doc = {"info": {}, "licenses": [], "images": images,
           "annotations": annotations, "categories": CATEGORIES}
    (d / "instances.json").write_text(json.dumps(doc, indent=1))
    with gzip.open(d / "instances.json.gz", "wt") as f:
        json.dump(doc, f)
    return d, doc


def expected(doc, crowd=False):
    """image id -> (boxes xyxy f32 [n, 4], contiguous labels), by hand."""
    order = sorted(c["id"] for c in doc["categories"])
    out = {im["id"]: ([], []) for im in doc["images"]}
    for a in doc["annotations"]:
        if a["iscrowd"] and not crowd:
            continue
        x, y, w, h = a["bbox"]
        out[a["image_id"]][0].append([x, y, x + w, y + h])
        out[a["image_id"]][1].append(order.index(a["category_id"]))
    return {k: (numpy.array(b, numpy.float32).reshape(-1, 4),
                numpy.array(lab, numpy.int64)) for k, (b, lab) in out.items()}


def read(spec):
    with echoflow.Pipeline(spec) as p:
        got = [{k: numpy.array(numpy.asarray(v)) for k, v in s.items()
                if not k.startswith("__")} for s in p]
        return got, p.stats()


def test_boxes_and_labels(coco):
    d, doc = coco
    got, stats = read("coco:annotations=%s,root=%s"
                      % (d / "instances.json", d / "images"))
    want = expected(doc)
    assert [int(s["image_id"]) for s in got] == [im["id"] for im in
                                                  doc["images"]]
    for s in got:
        boxes, labels = want[int(s["image_id"])]
        assert s["boxes"].dtype == numpy.float32
        assert s["boxes"].shape == boxes.shape  # [0, 4] for none
        numpy.testing.assert_array_equal(s["boxes"], boxes)
        numpy.testing.assert_array_equal(s["labels"], labels)
        ext = "jpg" if int(s["image_id"]) % 2 else "png"
        name = d / "images" / ("val/%012d.%s" % (int(s["image_id"]), ext))
        assert s[ext].tobytes() == name.read_bytes()
    coco_stats = stats["stages"][0]
    assert coco_stats["categories"] == 3
    assert coco_stats["crowd_skipped"] == 1


def test_options_and_decode(coco):
    d, doc = coco
    got, _ = read("coco:annotations=%s,root=%s,crowd=keep,labels=category,"
                  "empty=drop | decode"
                  % (d / "instances.json.gz", d / "images"))
    want = expected(doc, crowd=True)
    ids = [im["id"] for im in doc["images"] if len(want[im["id"]][1])]
    assert [int(s["image_id"]) for s in got] == ids
    order = sorted(c["id"] for c in doc["categories"])
    for s, im in zip(got, [im for im in doc["images"] if im["id"] in ids]):
        boxes, labels = want[im["id"]]
        numpy.testing.assert_array_equal(s["boxes"], boxes)
        numpy.testing.assert_array_equal(s["labels"],
                                         [order[k] for k in labels])
        assert s["iscrowd"].shape == labels.shape
        assert s["image"].shape == (im["height"], im["width"], 3)


def test_bad_box_named(coco, tmp_path):
    d, doc = coco
    bad = json.loads(json.dumps(doc))
    a = bad["annotations"][0]
    im = next(i for i in bad["images"] if i["id"] == a["image_id"])
    a["bbox"] = [1, 1, im["width"], 2]  # past the right edge
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    spec = "coco:annotations=%s,root=%s" % (tmp_path / "bad.json",
                                            d / "images")
    with pytest.raises(echoflow.FormatError,
                       match=r"bad\.json: annotation %d of image %d .*"
                             r"field 'bbox'.*reaches out of its image"
                             % (a["id"], a["image_id"])):
        read(spec)
    got, stats = read(spec + ",boxes=clip")
    s = next(s for s in got if int(s["image_id"]) == a["image_id"])
    assert s["boxes"][0].tolist() == [1, 1, im["width"], 3]
    assert stats["stages"][0]["boxes_clipped"] == 1


def test_over_http(coco):
    d, doc = coco
    proc, port = start_http_server(str(d))
    try:
        url = "http://127.0.0.1:%d/" % port
        got, _ = read("coco:annotations=%sinstances.json,root=%simages,"
                      "shard=1/2" % (url, url))
        want = expected(doc)
        assert [int(s["image_id"]) for s in got] == [
            im["id"] for im in doc["images"][1::2]]
        for s in got:
            numpy.testing.assert_array_equal(s["boxes"],
                                             want[int(s["image_id"])][0])
    finally:
        proc.kill()
        proc.wait()


def test_batch_is_ragged(coco):
    d, doc = coco
    with echoflow.Pipeline("coco:annotations=%s,root=%s "
                           "| select:fields=\"boxes,labels,image_id\" "
                           "| batch:size=3" % (d / "instances.json",
                                               d / "images")) as p:
        batch = next(iter(p))
    want = expected(doc)
    ids = [im["id"] for im in doc["images"][:3]]
    assert numpy.asarray(batch["image_id"]).tolist() == ids
    boxes = batch["boxes"]
    assert [numpy.asarray(b).shape[0] for b in boxes] == [
        len(want[i][1]) for i in ids]
