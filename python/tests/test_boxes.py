# SPDX-License-Identifier: Apache-2.0
"""Boxes that follow the pixels: each geometric image stage run on random
boxes, compared with the same geometry computed here independently
(torchvision.ops for clipping and areas): the window a stage cropped is
read back from its pixels, an image whose values are their own
coordinates, so the test trusts nothing the stage reports about it."""
import io

import numpy
import pytest
import torch
from PIL import Image
from torchvision.ops import box_area, box_iou, clip_boxes_to_image

import echoflow

H, W = 60, 80


def ramp(h=H, w=W):
    """f32 [h,w,2]: each pixel's centre, (x + 0.5, y + 0.5). Bilinear
    resampling of it is exact away from a window's edges."""
    y, x = numpy.mgrid[0:h, 0:w].astype(numpy.float32) + 0.5
    return numpy.stack([x, y], axis=-1)


def random_boxes(rng, n, h=H, w=W):
    """n random boxes inside an h x w image, then the edge cases: the
    whole image, a box on the border, one of no area, one of no width."""
    xy = rng.uniform(0, 1, (n, 4)) * [w, h, w, h]
    boxes = numpy.concatenate([numpy.minimum(xy[:, :2], xy[:, 2:]),
                               numpy.maximum(xy[:, :2], xy[:, 2:])], axis=1)
    edge = [[0, 0, w, h], [0, 0, 3, 5], [w - 2, h - 7, w, h],
            [10, 10, 10, 10], [w / 2, 1, w / 2, 9]]
    return numpy.concatenate([boxes, edge]).astype(numpy.float32)


def samples(n=40, seed=0, image=None, nbox=None):
    rng = numpy.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 8)) if nbox is None else nbox
        boxes = random_boxes(rng, k) if k else numpy.zeros((0, 4),
                                                            numpy.float32)
        out.append({"image": ramp() if image is None else image,
                    "boxes": boxes,
                    "labels": numpy.arange(len(boxes), dtype=numpy.int64)
                    + 1000 * i,
                    "index": i})
    return out


def axis_window(v):
    """(origin, extent per output pixel, mirrored) of one axis from the
    coordinates v[u] read back along it: v[u] = o + (u + 0.5) * k, or
    reversed when mirrored. Uses the middle, away from clamped edges."""
    s = len(v)
    u1, u2 = s // 4, s - 1 - s // 4
    k = (v[u2] - v[u1]) / (u2 - u1)
    mirror = k < 0
    if mirror:
        v, k = v[::-1], -k
    return v[u1] - (u1 + 0.5) * k, k, mirror


def window_of(img):
    """The window {y0, x0, h, w} (whole pixels) and the flip that made
    the [S,S,2] output `img` of the ramp."""
    s_h, s_w = img.shape[:2]
    x0, kx, mirror = axis_window(img[s_h // 2, :, 0].astype(numpy.float64))
    y0, ky, _ = axis_window(img[:, s_w // 2, 1].astype(numpy.float64))
    win = [y0, x0, ky * s_h, kx * s_w]
    rounded = numpy.round(win)
    assert numpy.allclose(win, rounded, atol=1e-2), win
    return [int(v) for v in rounded], bool(mirror)


def expected(boxes, labels, win, out_h, out_w, mirror, min_visible=0.0):
    """The boxes and labels a stage should give for a window, scale and
    flip, computed here in float64."""
    b = boxes.astype(numpy.float64)
    y0, x0, ch, cw = win
    sx, sy = out_w / cw, out_h / ch
    x1, x2 = (b[:, 0] - x0) * sx, (b[:, 2] - x0) * sx
    y1, y2 = (b[:, 1] - y0) * sy, (b[:, 3] - y0) * sy
    if mirror:
        x1, x2 = out_w - x2, out_w - x1
    mapped = torch.tensor(numpy.stack([x1, y1, x2, y2], axis=1))
    clipped = clip_boxes_to_image(mapped, (out_h, out_w))
    full, seen = box_area(mapped), box_area(clipped)
    cx, cy = (mapped[:, 0] + mapped[:, 2]) / 2, (mapped[:, 1] + mapped[:, 3]) / 2
    centre = (cx >= 0) & (cx <= out_w) & (cy >= 0) & (cy <= out_h)
    if min_visible > 0:
        keep = torch.where(full > 0, seen >= min_visible * full, centre)
    else:
        keep = centre
    keep = keep.numpy()
    return clipped.numpy()[keep].astype(numpy.float32), labels[keep]


PER_BOX = ("iscrowd", "kp")


def with_fields(items, seed=9):
    """items given per-box fields: iscrowd (i64 [n], as COCO's) and kp
    (f32 [n,3], a field of rows)."""
    rng = numpy.random.default_rng(seed)
    for s in items:
        n = len(s["boxes"])
        s["iscrowd"] = rng.integers(0, 2, n).astype(numpy.int64)
        s["kp"] = rng.standard_normal((n, 3)).astype(numpy.float32)
    return items


def run(spec, items):
    keys = ("image", "boxes", "labels", "index") + PER_BOX
    with echoflow.Pipeline(spec, source=items, seed=5) as p:
        return [{k: numpy.asarray(s[k]) for k in keys if k in s} for s in p]


def check_fields(got, src, labels, follow):
    """The per-box fields of `got`: those in `follow` keep the rows of the
    boxes that stayed (whose labels, computed here, are `labels`), the
    others are as they came."""
    rows = numpy.isin(src["labels"], labels)
    for k in PER_BOX:
        if k in src:
            want = src[k][rows] if k in follow else src[k]
            assert got[k].dtype == src[k].dtype
            numpy.testing.assert_array_equal(got[k], want)


def check(spec, items, out_size, min_visible=0.0, window=None, follow=()):
    """Runs spec over items and checks each sample's boxes and labels
    (and per-box fields `follow`) against those computed here; out_size
    None: the window's own size."""
    got = run(spec, items)
    assert len(got) == len(items)
    kinds = set()
    for s in got:
        src = items[int(s["index"])]
        if window is None:
            win, mirror = window_of(s["image"])
        else:
            win, mirror = window(s)
        kinds.add((tuple(win), mirror))
        out_h, out_w = out_size or win[2:]
        boxes, labels = expected(src["boxes"], src["labels"], win, out_h,
                                 out_w, mirror, min_visible)
        assert s["boxes"].dtype == numpy.float32
        assert s["boxes"].shape == (len(labels), 4)
        numpy.testing.assert_allclose(s["boxes"], boxes, rtol=1e-5, atol=1e-4)
        numpy.testing.assert_array_equal(s["labels"], labels)
        check_fields(s, src, labels, follow)
    return kinds


def test_random_resized_crop():
    kinds = check("random_resized_crop:size=32,boxes=boxes", samples(),
                  (32, 32))
    assert len(kinds) > 10


def test_random_resized_crop_visible_share():
    kinds = check("random_resized_crop:size=24,boxes=boxes,"
                  "box_min_visible=0.4", samples(), (24, 24), 0.4)
    assert len(kinds) > 10


def test_crop_mirror_normalize_crops_and_mirrors():
    kinds = check("crop_mirror_normalize:size=30,layout=hwc,mean=0,std=1,"
                  "boxes=boxes", samples(), (30, 30))
    assert {m for _, m in kinds} == {False, True}


def test_crop_mirror_normalize_whole_image():
    kinds = check("crop_mirror_normalize:size=40,crop=none,layout=hwc,"
                  "mean=0,std=1,mirror=1,boxes=boxes,box_keep=visible,"
                  "box_min_visible=0.9", samples(), (40, 40), 0.9)
    assert kinds == {((0, 0, H, W), True)}


def test_flip():
    kinds = check("flip:boxes=boxes", samples(), (H, W))
    assert {m for _, m in kinds} == {False, True}


def test_resize():
    kinds = check("resize:height=45,width=100,boxes=boxes", samples(),
                  (45, 100))
    assert kinds == {((0, 0, H, W), False)}


def shift(s):
    """random_crop's window: output pixel (y, x) is input (y + oy,
    x + ox), 0 outside."""
    img = s["image"]
    ys, xs = numpy.nonzero(img[..., 0])
    y, x = ys[0], xs[0]
    oy = int(round(img[y, x, 1] - 0.5 - y))
    ox = int(round(img[y, x, 0] - 0.5 - x))
    return [oy, ox, H, W], False


def test_random_crop():
    kinds = check("random_crop:pad=20,boxes=boxes", samples(), (H, W),
                  window=shift)
    assert len(kinds) > 10


def png(img):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return numpy.frombuffer(buf.getvalue(), numpy.uint8)


def encoded(items):
    """items with a PNG of u8 coordinates (x in red, y in green) in place
    of the image, for decode_crop."""
    y, x = numpy.mgrid[0:H, 0:W]
    img = numpy.stack([x, y, numpy.zeros_like(x)], -1).astype(numpy.uint8)
    for s in items:
        s["png"] = png(img)
        del s["image"]
    return items


def fit(v, n):
    """The integer window (origin, extent) of the n pixels of an axis
    whose bilinear values, o + (u + 0.5) * e / S - 0.5 clamped to the
    window, round to v: the one that misses least."""
    s_len = len(v)
    u = numpy.arange(s_len) + 0.5
    o, e = numpy.mgrid[0:n, 1:n + 1]
    ok = o + e <= n
    o, e = o[ok][:, None], e[ok][:, None]
    at = numpy.clip(o + u * e / s_len - 0.5, o, o + e - 1)
    miss = numpy.abs(at - v).max(axis=1)
    best = numpy.argmin(miss)
    assert miss[best] <= 0.5 + 1e-3, miss[best]
    return int(o[best, 0]), int(e[best, 0])


def decoded_window(s):
    """decode_crop's window, read back by least squares over the middle
    of a row and a column of the coordinates."""
    out = s["image"].astype(numpy.float64)
    row, col = out[out.shape[0] // 2, :, 0], out[:, out.shape[1] // 2, 1]
    mirror = row[-1] < row[0]
    x0, cw = fit(row[::-1] if mirror else row, W)
    y0, ch = fit(col, H)
    return [y0, x0, ch, cw], bool(mirror)


def test_decode_crop():
    kinds = check("decode_crop:size=48,scale_min=0.3,mirror=0.5,"
                  "boxes=boxes", encoded(samples()), (48, 48),
                  window=decoded_window)
    assert {m for _, m in kinds} == {False, True}


def test_no_boxes_and_all_cropped_out():
    items = samples(nbox=0) + samples(n=20, seed=1, nbox=3)
    got = run("random_resized_crop:size=8,scale_min=0.001,scale_max=0.001,"
              "boxes=boxes,box_keep=visible,box_min_visible=1", items)
    assert any(len(s["boxes"]) == 0 for s in got[40:])
    for s in got:
        assert s["boxes"].shape == (len(s["labels"]), 4)
        assert s["boxes"].dtype == numpy.float32


def test_without_boxes_nothing_changes():
    items = samples(n=5)
    got = run("flip:p=1 | resize:size=10", items)
    for s in got:
        src = items[int(s["index"])]
        numpy.testing.assert_array_equal(s["boxes"], src["boxes"])
        numpy.testing.assert_array_equal(s["labels"], src["labels"])


@pytest.mark.parametrize("spec, message", [
    ("flip:boxes=bbox", "stage 'flip': no boxes field 'bbox'"),
    ("resize:size=4,boxes=boxes,labels=index",
     r"labels field 'index' is i64 \[\]; expected one row per box"),
])
def test_errors_name_stage_and_field(spec, message):
    with pytest.raises(echoflow.Error, match=message):
        run(spec, samples(n=2, nbox=2))


def crop_origin(s):
    """ssd_crop copies pixels: the ramp's first value is the window's
    origin, the image's shape its size."""
    img = s["image"]
    y0, x0 = int(img[0, 0, 1] - 0.5), int(img[0, 0, 0] - 0.5)
    return [y0, x0, img.shape[0], img.shape[1]], False


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.7])
def test_ssd_crop_keeps_the_minimum_iou(threshold):
    items = samples(n=60, seed=3)
    spec = ("ssd_crop:thresholds=%g,allow_no_crop=false,scale_min=0.3,"
            "ratio_min=0.5,ratio_max=2" % threshold)
    got = run(spec, items)
    cropped = 0
    for s in got:
        src = items[int(s["index"])]
        win, _ = crop_origin(s)
        boxes, labels = expected(src["boxes"], src["labels"], win, win[2],
                                 win[3], False)
        numpy.testing.assert_allclose(s["boxes"], boxes, rtol=1e-5,
                                      atol=1e-4)
        numpy.testing.assert_array_equal(s["labels"], labels)
        if win == [0, 0, H, W]:
            continue  # every attempt failed, or a sample without boxes
        cropped += 1
        assert 0.5 <= win[3] / win[2] <= 2
        assert win[2] >= round(0.3 * H) and win[3] >= round(0.3 * W)
        # one box that stays has the IoU with the window (torchvision's)
        stays = numpy.isin(src["labels"], labels)
        window = torch.tensor([[win[1], win[0], win[1] + win[3],
                                win[0] + win[2]]], dtype=torch.float64)
        iou = box_iou(torch.tensor(src["boxes"][stays], dtype=torch.float64),
                      window)
        assert len(iou) and float(iou.max()) >= threshold - 1e-9
    assert cropped > 20


def test_ssd_crop_is_keyed_and_can_leave_the_image_whole():
    items = samples(n=30, seed=4)
    a = run("ssd_crop", items)
    b = run("ssd_crop", items)
    wins = [crop_origin(s)[0] for s in a]
    assert wins == [crop_origin(s)[0] for s in b]
    assert [0, 0, H, W] in wins and len(set(map(tuple, wins))) > 10
    got = run("ssd_crop:thresholds=\"\",allow_no_crop=true", items)
    for s in got:
        assert crop_origin(s)[0] == [0, 0, H, W]


def test_empty_images_keep_no_box():
    items = samples(n=6, seed=5, image=numpy.zeros((0, 7, 2), numpy.float32))
    for spec in ("flip:p=1,boxes=boxes", "random_crop:pad=2,boxes=boxes",
                 "ssd_crop"):
        for s in run(spec, items):
            assert s["boxes"].shape == (0, 4) and s["labels"].shape == (0,)


@pytest.mark.parametrize("spec, message", [
    ("ssd_crop:thresholds=\"0.5,2\"", "minimum IoUs between 0 and 1"),
    ("ssd_crop:thresholds=\"\",allow_no_crop=false", "nothing to choose"),
    ("ssd_crop:boxes=", "must name the boxes field"),
    ("ssd_crop:scale_min=0.9,scale_max=0.5", "must not be reversed"),
])
def test_ssd_crop_options_are_checked(spec, message):
    with pytest.raises(echoflow.SpecError, match=message):
        run(spec, samples(n=1))


def test_pad_boxes_gives_dense_batches():
    items = samples(n=12, seed=6)
    spec = ("ssd_crop | resize:size=32,boxes=boxes | pad_boxes:n=12 "
            "| batch:size=4")
    with echoflow.Pipeline(spec, source=items, seed=5) as p:
        batches = [{k: numpy.asarray(b[k]) for k in
                    ("boxes", "labels", "boxes_mask", "index")} for b in p]
    plain = run("ssd_crop | resize:size=32,boxes=boxes", items)
    assert len(batches) == 3
    for b in batches:
        assert b["boxes"].shape == (4, 12, 4)
        assert b["labels"].shape == (4, 12)
        assert b["boxes_mask"].shape == (4, 12)
        assert b["boxes_mask"].dtype == numpy.bool_
        for row, i in enumerate(b["index"]):
            want = plain[int(i)]
            k = len(want["boxes"])
            assert b["boxes_mask"][row].tolist() == [True] * k + [False] * (
                12 - k)
            numpy.testing.assert_array_equal(b["boxes"][row, :k],
                                             want["boxes"])
            assert not b["boxes"][row, k:].any()
            numpy.testing.assert_array_equal(b["labels"][row, :k],
                                             want["labels"])
            assert (b["labels"][row, k:] == -1).all()


def detections(k, labels):
    return [{"image": numpy.zeros((4, 4), numpy.uint8),
             "boxes": numpy.arange(4 * k, dtype=numpy.float32).reshape(k, 4),
             "labels": labels}]


def test_pad_boxes_overflow_is_refused_or_dropped_and_counted():
    items = detections(5, numpy.arange(5, dtype=numpy.int64))
    with pytest.raises(echoflow.ShapeError,
                       match="5 boxes in field 'boxes', more than n=3"):
        run("pad_boxes:n=3", items)
    with echoflow.Pipeline("pad_boxes:n=3,overflow=drop", source=items) as p:
        (s,) = list(p)
        stats = p.stats()["stages"][1]
    assert numpy.asarray(s["boxes"]).tolist() == \
        items[0]["boxes"][:3].tolist()
    assert numpy.asarray(s["labels"]).tolist() == [0, 1, 2]
    assert numpy.asarray(s["boxes_mask"]).all()
    assert stats["boxes_dropped"] == 2


@pytest.mark.parametrize("dtype", [numpy.int32, numpy.float32])
def test_pad_boxes_pads_labels_in_their_dtype(dtype):
    items = detections(0, numpy.zeros(0, dtype))
    with echoflow.Pipeline("pad_boxes:n=2,pad_label=7", source=items) as p:
        (s,) = list(p)
    labels = numpy.asarray(s["labels"])
    assert labels.dtype == dtype and labels.tolist() == [7, 7]
    assert numpy.asarray(s["boxes"]).shape == (2, 4)
    assert not numpy.asarray(s["boxes_mask"]).any()


@pytest.mark.parametrize("spec, items, error, message", [
    ("pad_boxes", detections(1, numpy.zeros(1, numpy.int64)),
     echoflow.SpecError, "give n"),
    ("pad_boxes:n=2", detections(1, numpy.zeros(1, numpy.uint8)),
     echoflow.ShapeError, "labels field 'labels' is u8 \\[1\\]; expected i64"),
    ("pad_boxes:n=2,mask=image", detections(1, numpy.zeros(1, numpy.int64)),
     echoflow.ShapeError, "has a field 'image' already"),
    ("pad_boxes:n=2,boxes=bbox", detections(1, numpy.zeros(1, numpy.int64)),
     echoflow.ShapeError, "stage 'pad_boxes': no boxes field 'bbox'"),
])
def test_pad_boxes_errors(spec, items, error, message):
    with pytest.raises(error, match=message):
        run(spec, items)


BOTH = ',box_fields="iscrowd,kp"'


@pytest.mark.parametrize("nbox", [None, 0])
def test_per_box_fields_follow_every_stage(nbox):
    # random boxes (some samples with none), or none at all
    items = with_fields(samples(nbox=nbox))
    follow = PER_BOX
    check("flip:boxes=boxes" + BOTH, items, (H, W), follow=follow)
    check("resize:height=45,width=100,boxes=boxes" + BOTH, items, (45, 100),
          follow=follow)
    check("random_crop:pad=20,boxes=boxes" + BOTH, items, (H, W),
          window=shift, follow=follow)
    check("random_resized_crop:size=24,scale_min=0.05,scale_max=0.5,"
          "boxes=boxes,box_min_visible=0.4" + BOTH, items, (24, 24), 0.4,
          follow=follow)
    check("crop_mirror_normalize:size=30,layout=hwc,mean=0,std=1,"
          "boxes=boxes" + BOTH, items, (30, 30), follow=follow)
    check("ssd_crop:allow_no_crop=false" + BOTH, items, None,
          window=crop_origin, follow=follow)
    check("decode_crop:size=48,scale_min=0.1,scale_max=0.5,mirror=0.5,"
          "boxes=boxes" + BOTH, encoded(with_fields(samples(nbox=nbox))),
          (48, 48), window=decoded_window, follow=follow)


def test_iscrowd_follows_by_default():
    # what the coco source gives with crowd=keep, with no option written
    items = with_fields(samples())
    got = run("random_resized_crop:size=24,scale_min=0.05,scale_max=0.5,"
              "boxes=boxes", items)
    dropped = 0
    for s in got:
        src = items[int(s["index"])]
        dropped += len(s["labels"]) < len(src["labels"])
        check_fields(s, src, s["labels"], ("iscrowd",))
    assert dropped > 10


def test_per_box_fields_when_every_box_leaves():
    items = with_fields(samples(nbox=0) + samples(n=20, seed=1, nbox=3))
    for i, s in enumerate(items):
        s["index"] = i
    got = run("random_resized_crop:size=8,scale_min=0.001,scale_max=0.001,"
              "boxes=boxes,box_keep=visible,box_min_visible=1" + BOTH, items)
    emptied = 0
    for s in got:
        n = len(s["boxes"])
        assert s["iscrowd"].shape == (n,) and s["kp"].shape == (n, 3)
        check_fields(s, items[int(s["index"])], s["labels"], PER_BOX)
        emptied += n == 0 and int(s["index"]) >= 40
    assert emptied > 0


def test_absent_per_box_fields_are_skipped():
    items = samples(n=10)
    for s in run("random_crop:pad=20,boxes=boxes,"
                 'box_fields="area,track_id"', items):
        assert "area" not in s and "track_id" not in s


@pytest.mark.parametrize("spec, field, rows, message", [
    ("flip:boxes=boxes", "iscrowd", 3,
     r"stage 'flip': per-box field 'iscrowd' is i64 \[3\]; expected one row "
     r"per box, \[2\] or \[2,...\], as boxes field 'boxes' has 2"),
    ("ssd_crop:allow_no_crop=true" + BOTH, "kp", 1,
     r"item 0 .*stage 'ssd_crop': per-box field 'kp' is f32 \[1,3\]"),
    ("pad_boxes:n=4" + BOTH, "kp", 0,
     r"stage 'pad_boxes': per-box field 'kp' is f32 \[0,3\]"),
])
def test_per_box_field_of_other_rows_is_refused(spec, field, rows, message):
    items = with_fields(detections(2, numpy.arange(2, dtype=numpy.int64)))
    items[0][field] = items[0][field][:1].repeat(rows, axis=0)
    with pytest.raises(echoflow.ShapeError, match=message):
        run(spec, items)


@pytest.mark.parametrize("spec, message", [
    ('flip:boxes=boxes,box_fields="a,,b"', "'box_fields' has an empty name"),
    ('resize:size=4,boxes=boxes,box_fields="kp,boxes"',
     "names the boxes field"),
    ('pad_boxes:n=2,box_fields="kp,kp"', "names a field twice"),
])
def test_box_fields_list_is_checked(spec, message):
    with pytest.raises(echoflow.SpecError, match=message):
        run(spec, samples(n=1))


def test_pad_boxes_pads_per_box_fields():
    items = with_fields(samples(n=8, seed=7))
    spec = "pad_boxes:n=12" + BOTH + " | batch:size=4"
    with echoflow.Pipeline(spec, source=items, seed=5) as p:
        batches = [{k: numpy.asarray(b[k]) for k in
                    ("iscrowd", "kp", "boxes_mask", "index")} for b in p]
    assert len(batches) == 2
    for b in batches:
        assert b["iscrowd"].shape == (4, 12) and b["kp"].shape == (4, 12, 3)
        for row, i in enumerate(b["index"]):
            src = items[int(i)]
            k = len(src["boxes"])
            numpy.testing.assert_array_equal(b["iscrowd"][row, :k],
                                             src["iscrowd"])
            numpy.testing.assert_array_equal(b["kp"][row, :k], src["kp"])
            assert not b["iscrowd"][row, k:].any()
            assert not b["kp"][row, k:].any()
    # overflow=drop keeps the rows of the boxes it keeps
    items = with_fields(detections(5, numpy.arange(5, dtype=numpy.int64)))
    (s,) = run("pad_boxes:n=3,overflow=drop" + BOTH, items)
    numpy.testing.assert_array_equal(s["iscrowd"], items[0]["iscrowd"][:3])
    numpy.testing.assert_array_equal(s["kp"], items[0]["kp"][:3])


def overlap(boxes, win):
    """The share of each box's area inside window {y0, x0, h, w}; 0 for a
    box of no area (torchvision's clip and areas)."""
    b = torch.tensor(boxes, dtype=torch.float64)
    y0, x0, h, w = win
    moved = b - torch.tensor([x0, y0, x0, y0], dtype=torch.float64)
    inside = box_area(clip_boxes_to_image(moved, (h, w)))
    full = box_area(b)
    return torch.where(full > 0, inside / full.clamp(min=1e-300),
                       torch.zeros_like(full)).numpy()


@pytest.mark.parametrize("threshold", [0.5, 1.0])
def test_ssd_crop_overlap_threshold(threshold):
    items = samples(n=60, seed=3)
    got = run("ssd_crop:thresholds=%g,threshold_type=overlap,"
              "allow_no_crop=false,attempts=200" % threshold, items)
    cropped = below_iou = 0
    for s in got:
        src = items[int(s["index"])]
        win, _ = crop_origin(s)
        boxes, labels = expected(src["boxes"], src["labels"], win, win[2],
                                 win[3], False)
        numpy.testing.assert_allclose(s["boxes"], boxes, rtol=1e-5,
                                      atol=1e-4)
        numpy.testing.assert_array_equal(s["labels"], labels)
        if win == [0, 0, H, W]:
            continue
        cropped += 1
        # one box that stays has that share of its area in the window
        stays = numpy.isin(src["labels"], labels)
        share = overlap(src["boxes"][stays], win)
        assert len(share) and share.max() >= threshold - 1e-6
        window = torch.tensor([[win[1], win[0], win[1] + win[3],
                                win[0] + win[2]]], dtype=torch.float64)
        iou = box_iou(torch.tensor(src["boxes"][stays], dtype=torch.float64),
                      window)
        below_iou += float(iou.max()) < threshold
    assert cropped > 20
    assert below_iou > 0  # not the IoU rule


def test_ssd_crop_prune_threshold_is_the_visible_rule():
    items = with_fields(samples(n=60, seed=3))
    kinds = check("ssd_crop:bbox_prune_threshold=0.6" + BOTH, items, None,
                  0.6, window=crop_origin, follow=PER_BOX)
    assert len(kinds) > 10
    a = run("ssd_crop:bbox_prune_threshold=0.6", items)
    b = run("ssd_crop:box_keep=visible,box_min_visible=0.6", items)
    for x, y in zip(a, b):
        numpy.testing.assert_array_equal(x["boxes"], y["boxes"])
        numpy.testing.assert_array_equal(x["labels"], y["labels"])


@pytest.mark.parametrize("spec, message", [
    ("ssd_crop:bbox_prune_threshold=0.5,box_min_visible=0.5",
     "give one or the other"),
    ("ssd_crop:bbox_prune_threshold=0.5,box_keep=center",
     "give one or the other"),
    ("ssd_crop:bbox_prune_threshold=0", "must be above 0"),
    ("ssd_crop:threshold_type=area",
     "option 'threshold_type' must be iou or overlap, got 'area'"),
])
def test_ssd_crop_dali_options_are_checked(spec, message):
    with pytest.raises(echoflow.SpecError, match=message):
        run(spec, samples(n=1))
