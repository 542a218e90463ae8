# SPDX-License-Identifier: Apache-2.0
"""TFRecord files of the TF Object Detection API's tf.Examples (the layout
its create_coco_tf_record.py writes: normalized image/object/bbox/xmin ...
lists, 1-based category ids in image/object/class/label), written with
protobuf from a small COCO fixture, read with docs/python.md's recipe
(tfexample | decode | corner_boxes) and compared with the coco source
reading the same annotations, and with the conversion done by hand."""
import json

import numpy
import pytest
from PIL import Image

import echoflow

pytest.importorskip("google.protobuf", reason="python3-protobuf writes "
                    "the fixtures")
from test_tfexample import Example, write_tfrecord  # noqa: E402

CATEGORIES = [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"},
              {"id": 90, "name": "toothbrush"}]
COORDS = ("xmin", "ymin", "xmax", "ymax")
OBJECTS = ",".join("image/object/bbox/%s:float:var" % c for c in COORDS)
FEATURES = ("image/encoded,image/source_id,%s,"
            "image/object/class/label:int64:var as labels" % OBJECTS)


def coco_fixture(d):
    """Images of several sizes (one without boxes) and their instances
    JSON: the COCO document."""
    rng = numpy.random.default_rng(11)
    (d / "images").mkdir()
    images, annotations = [], []
    for i, (w, h) in enumerate([(64, 48), (40, 30), (33, 17), (50, 50),
                                (21, 37)]):
        name = "%012d.png" % (200 + i)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=numpy.uint8)
                        ).save(d / "images" / name)
        images.append({"id": 200 + i, "file_name": name, "width": w,
                       "height": h})
        for k in range(0 if i == 2 else 1 + i % 3):  # image 202: no boxes
            x, y = rng.uniform(0, w / 2), rng.uniform(0, h / 2)
            bw, bh = rng.uniform(1, w - x), rng.uniform(1, h - y)
            if i == 3 and k == 0:  # a box touching the right and bottom
                x, y, bw, bh = 10.0, 20.0, w - 10.0, h - 20.0
            annotations.append({
                "id": len(annotations) + 1, "image_id": 200 + i,
                "category_id": CATEGORIES[len(annotations) % 3]["id"],
                "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0})
    doc = {"images": images, "annotations": annotations,
           "categories": CATEGORIES}
    (d / "instances.json").write_text(json.dumps(doc))
    return doc


def od_example(d, image, annotations, names):
    """The tf.Example create_coco_tf_record.py makes of a COCO image."""
    w, h = image["width"], image["height"]
    ex = Example()
    f = ex.features.feature
    f["image/encoded"].bytes_list.value.append(
        (d / "images" / image["file_name"]).read_bytes())
    f["image/format"].bytes_list.value.append(b"png")
    f["image/filename"].bytes_list.value.append(image["file_name"].encode())
    f["image/source_id"].bytes_list.value.append(str(image["id"]).encode())
    f["image/height"].int64_list.value.append(h)
    f["image/width"].int64_list.value.append(w)
    lists = {c: [] for c in COORDS}
    for a in annotations:
        x, y, bw, bh = a["bbox"]
        lists["xmin"].append(x / w)
        lists["xmax"].append((x + bw) / w)
        lists["ymin"].append(y / h)
        lists["ymax"].append((y + bh) / h)
    for c in COORDS:
        feature = f["image/object/bbox/" + c]
        feature.float_list.SetInParent()  # an empty list is still a list
        feature.float_list.value.extend(lists[c])
    for key, values in (
            ("image/object/class/label", [a["category_id"] for a in
                                          annotations]),
            ("image/object/is_crowd", [a["iscrowd"] for a in annotations])):
        f[key].int64_list.SetInParent()
        f[key].int64_list.value.extend(values)
    f["image/object/class/text"].bytes_list.SetInParent()
    f["image/object/class/text"].bytes_list.value.extend(
        [names[a["category_id"]].encode() for a in annotations])
    f["image/object/area"].float_list.SetInParent()
    f["image/object/area"].float_list.value.extend(
        [a["area"] for a in annotations])
    return ex


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(folder, COCO document, the TFRecord file of its Examples)."""
    d = tmp_path_factory.mktemp("tfexample_boxes")
    doc = coco_fixture(d)
    names = {c["id"]: c["name"] for c in doc["categories"]}
    exs = [od_example(d, im, [a for a in doc["annotations"]
                              if a["image_id"] == im["id"]], names)
           for im in doc["images"]]
    record = d / "coco_val.record-00000-of-00001"
    write_tfrecord(str(record), exs)
    return d, doc, str(record)


def read(spec):
    with echoflow.Pipeline(spec) as p:
        return [{k: numpy.array(numpy.asarray(v)) for k, v in s.items()
                 if not k.startswith("__")} for s in p]


def by_hand(doc):
    """image id -> the boxes corner_boxes makes: each coordinate rounded
    to f32 as the Example holds it, times the size, rounded to f32."""
    out = {im["id"]: [] for im in doc["images"]}
    size = {im["id"]: (im["width"], im["height"]) for im in doc["images"]}
    for a in doc["annotations"]:
        w, h = size[a["image_id"]]
        x, y, bw, bh = a["bbox"]
        norm = numpy.float32([x / w, y / h, (x + bw) / w, (y + bh) / h])
        out[a["image_id"]].append(norm.astype(numpy.float64) * [w, h, w, h])
    return {k: numpy.array(v, numpy.float32).reshape(-1, 4)
            for k, v in out.items()}


def test_recipe_gives_the_coco_sources_boxes(data):
    d, doc, record = data
    tf = read('tfrecord:files=%s | tfexample:features="%s" '
              '| decode:fields=image/encoded | corner_boxes' % (record,
                                                                FEATURES))
    coco = read("coco:annotations=%s,root=%s,labels=category | decode"
                % (d / "instances.json", d / "images"))
    want = by_hand(doc)
    assert len(tf) == len(coco) == len(doc["images"])
    for t, c in zip(tf, coco):
        image_id = int(c["image_id"])
        assert bytes(t["image/source_id"]) == str(image_id).encode()
        assert sorted(t) == ["boxes", "image", "image/source_id", "labels"]
        assert t["boxes"].dtype == numpy.float32
        assert t["boxes"].shape == c["boxes"].shape
        assert numpy.array_equal(t["boxes"], want[image_id])
        # the normalized f32 costs no more than a rounding at the size
        assert numpy.allclose(t["boxes"], c["boxes"], rtol=0, atol=1e-4)
        assert t["labels"].dtype == numpy.int64
        assert t["labels"].tolist() == c["labels"].tolist()  # category ids
        assert numpy.array_equal(t["image"], c["image"])
    assert tf[2]["boxes"].shape == (0, 4) and tf[2]["labels"].shape == (0,)


def test_size_fields_before_decoding(data):
    # boxes made before the image is decoded (as decode_crop needs) from
    # image/width and image/height agree with those made after
    _, doc, record = data
    features = FEATURES + ",image/width:int64,image/height:int64"
    early = read('tfrecord:files=%s | tfexample:features="%s" '
                 '| corner_boxes:width=image/width,height=image/height'
                 % (record, features))
    want = by_hand(doc)
    for s, im in zip(early, doc["images"]):
        assert numpy.array_equal(s["boxes"], want[im["id"]])


def test_size_fields_feed_decode_crop(data):
    # the docs' way to decode_crop: boxes first, then the crop moves them
    _, doc, record = data
    features = FEATURES + ",image/width:int64,image/height:int64"
    got = read('tfrecord:files=%s | tfexample:features="%s" '
               '| corner_boxes:width=image/width,height=image/height '
               '| decode_crop:fields=image/encoded,size=16,boxes=boxes'
               % (record, features))
    assert len(got) == len(doc["images"])
    for s in got:
        assert s["image"].shape == (16, 16, 3)
        assert len(s["labels"]) == len(s["boxes"])
        assert ((s["boxes"] >= 0) & (s["boxes"] <= 16)).all()


def test_recipe_to_dense_batches(data):
    # through a box-aware stage and pad_boxes to batch, the same tensors
    # as the coco source's through the same stages
    d, _, record = data
    after = "| resize:size=24,boxes=boxes | pad_boxes:n=4 | batch:2"
    tf = read('tfrecord:files=%s | tfexample:features="%s" '
              '| decode:fields=image/encoded | corner_boxes %s'
              % (record, FEATURES, after))
    coco = read("coco:annotations=%s,root=%s,labels=category | decode | "
                "select:fields=\"image,boxes,labels\" %s"
                % (d / "instances.json", d / "images", after))
    assert [b["boxes"].shape for b in tf] == [(2, 4, 4), (2, 4, 4), (1, 4, 4)]
    for t, c in zip(tf, coco):
        assert sorted(t) == ["boxes", "boxes_mask", "image",
                             "image/source_id", "labels"]
        assert numpy.allclose(t["boxes"], c["boxes"], rtol=0, atol=1e-4)
        assert numpy.array_equal(t["labels"], c["labels"])
        assert numpy.array_equal(t["boxes_mask"], c["boxes_mask"])
        assert numpy.array_equal(t["image"], c["image"])
    assert tf[1]["boxes_mask"][0].tolist() == [False] * 4  # image 202


def test_boxes_and_labels_batch_as_lists(data):
    _, doc, record = data
    counts = [sum(a["image_id"] == im["id"] for a in doc["annotations"])
              for im in doc["images"]]
    with echoflow.Pipeline(
            'tfrecord:files=%s | tfexample:features="%s" | corner_boxes:'
            'width=image/width,height=image/height | batch:5'
            % (record, FEATURES + ",image/width:int64,image/height:int64")
            ) as p:
        batch = next(iter(p))
        assert [tuple(b.shape) for b in batch["boxes"]] == [
            (n, 4) for n in counts]
        assert [tuple(lab.shape) for lab in batch["labels"]] == [
            (n,) for n in counts]


def test_a_box_out_of_its_image_names_the_record(tmp_path, data):
    d, doc, _ = data
    names = {c["id"]: c["name"] for c in doc["categories"]}
    image = doc["images"][0]
    ann = dict(doc["annotations"][0], bbox=[50.0, 10.0, 20.0, 5.0])  # x 70
    record = str(tmp_path / "bad.record")
    write_tfrecord(record, [od_example(d, image, [ann], names)])
    spec = ('tfrecord:files=%s | tfexample:features="%s" '
            '| decode:fields=image/encoded | corner_boxes' % (record,
                                                              FEATURES))
    with echoflow.Pipeline(spec) as p:
        with pytest.raises(echoflow.FormatError) as e:
            next(iter(p))
    msg = str(e.value)
    assert msg.startswith("corner_boxes: ")
    assert "item 0 (epoch 0), file '%s'" % record in msg
    assert "box 0 of 1" in msg and "'image/object/bbox/xmax'" in msg
    assert "reaches out of its image" in msg and "xmax <= 1" in msg
    with echoflow.Pipeline(spec.replace("corner_boxes",
                                        "corner_boxes:boxes=clip")) as p:
        s = next(iter(p))
        assert numpy.asarray(s["boxes"]).tolist() == [[50, 10, 64, 15]]
        assert p.stats()["stages"][-1]["boxes_clipped"] == 1


def test_docs_recipe_with_the_loader(data):
    # docs/python.md's recipe, smaller: torch tensors, dense after pad_boxes
    torch = pytest.importorskip("torch")
    from echoflow.torch import Loader
    _, doc, record = data
    corners = ",".join("image/object/bbox/%s:float:var" % c
                       for c in ("xmin", "ymin", "xmax", "ymax"))
    loader = Loader('tfrecord:files="%s" '
                    '| tfexample:features="image/encoded,%s,'
                    'image/object/class/label:int64:var as labels",threads=4 '
                    '| decode:fields=image/encoded | corner_boxes '
                    '| flip:boxes=boxes | resize:size=32,boxes=boxes '
                    '| pad_boxes:n=4 | batch:2' % (record, corners))
    counts = [sum(a["image_id"] == im["id"] for a in doc["annotations"])
              for im in doc["images"]]
    seen = []
    for batch in loader:
        assert batch["image"].shape[1:] == (32, 32, 3)
        assert batch["boxes"].shape[1:] == (4, 4)
        assert batch["labels"].dtype == torch.int64
        assert batch["boxes_mask"].dtype == torch.bool
        seen += batch["boxes_mask"].sum(1).tolist()
        ids = {c["id"] for c in CATEGORIES}
        assert all(int(x) in ids for x in batch["labels"][batch["boxes_mask"]])
    assert seen == counts  # flip and resize keep every box
