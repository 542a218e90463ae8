# SPDX-License-Identifier: Apache-2.0
"""The detection experiment's data: Fashion-MNIST items (Debian's
dataset-fashion-mnist, /usr/share/datasets/fashion-mnist) placed at random
scales and positions on black 64x64 canvases, one to four per image,
written as greyscale JPEGs and a COCO instances JSON per split, what the
`coco` source reads.

- training canvases are made of the 60,000 training items, validation
  canvases of the 10,000 test items, so no item is on both sides;
- an item is scaled (PIL's bilinear) to a side drawn from SIDES, placed
  where it lies wholly inside the canvas, and drawn with max() over what is
  there (the items' backgrounds are black); a place where its box would
  cover more than MAX_COVER of another box's area, or the other box that
  much of its own, is drawn again, up to PLACE_TRIES times, then the item
  is left out;
- its box is the tight box of the scaled item's non-zero pixels, in COCO's
  x, y, w, h (pixel edges: a box of one pixel at column 3 is x 3, w 1);
- its category is its Fashion-MNIST label + 1 (COCO ids start at 1), so
  `coco`'s contiguous labels are the Fashion-MNIST labels.

Every draw comes from numpy's generator seeded per split (SEED), so every
run writes the same files. Needs numpy and PIL (python3-numpy,
python3-pil)."""
import gzip
import json
import os

FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = ["t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal",
           "shirt", "sneaker", "bag", "ankle boot"]
CANVAS = 64
SIDES = (14, 36)  # an item's scaled side, uniform in [lo, hi] pixels
MAX_ITEMS = 4  # items per canvas, uniform in 1..MAX_ITEMS
MAX_COVER = 0.25
PLACE_TRIES = 20
QUALITY = 90  # JPEG
SEED = {"train": 1, "val": 2}


def read_idx(path):
    """The array of an IDX file (gzip): uint8 images [n, 28, 28] or
    labels [n]."""
    import numpy as np
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
             for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def items(split, root=FMNIST):
    """(images, labels) of Fashion-MNIST's training ("train") or test
    ("val") part."""
    stem = "train" if split == "train" else "t10k"
    return (read_idx(os.path.join(root, stem + "-images-idx3-ubyte.gz")),
            read_idx(os.path.join(root, stem + "-labels-idx1-ubyte.gz")))


def tight_box(a):
    """x1, y1, x2, y2 (pixel edges) of the non-zero pixels of 2-d array a,
    or None when it has none."""
    import numpy as np
    rows = np.flatnonzero(a.any(axis=1))
    cols = np.flatnonzero(a.any(axis=0))
    if not len(rows):
        return None
    return (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1)


def covers(a, b):
    """Whether boxes a and b (x1, y1, x2, y2) overlap by more than MAX_COVER
    of either's area."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return False
    inter = w * h
    area = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return inter > MAX_COVER * area


def canvas(rng, images, labels):
    """One canvas: (uint8 [CANVAS, CANVAS] pixels, [(box, label)])."""
    import numpy as np
    from PIL import Image
    out = np.zeros((CANVAS, CANVAS), np.uint8)
    objs = []
    for _ in range(int(rng.integers(1, MAX_ITEMS + 1))):
        k = int(rng.integers(len(images)))
        side = int(rng.integers(SIDES[0], SIDES[1] + 1))
        item = np.asarray(Image.fromarray(images[k]).resize(
            (side, side), Image.BILINEAR))
        b = tight_box(item)
        if b is None:
            continue
        for _ in range(PLACE_TRIES):
            x = int(rng.integers(CANVAS - side + 1))
            y = int(rng.integers(CANVAS - side + 1))
            box = (b[0] + x, b[1] + y, b[2] + x, b[3] + y)
            if not any(covers(box, o[0]) for o in objs):
                break
        else:
            continue
        np.maximum(out[y:y + side, x:x + side], item,
                   out=out[y:y + side, x:x + side])
        objs.append((box, int(labels[k])))
    return out, objs


def write_split(work, split, n, root=FMNIST):
    """n canvases of split ("train" or "val") as work/SPLIT/NNNNNN.jpg and
    work/SPLIT.json; returns (json path, image folder, objects)."""
    from PIL import Image
    import numpy as np
    images, labels = items(split, root)
    rng = np.random.default_rng(SEED[split])
    folder = os.path.join(work, split)
    os.makedirs(folder, exist_ok=True)
    coco = {"images": [], "annotations": [],
            "categories": [{"id": i + 1, "name": c}
                           for i, c in enumerate(CLASSES)]}
    for i in range(n):
        pixels, objs = canvas(rng, images, labels)
        name = "%06d.jpg" % i
        Image.fromarray(pixels).save(os.path.join(folder, name),
                                     quality=QUALITY)
        coco["images"].append({"id": i + 1, "file_name": name,
                               "width": CANVAS, "height": CANVAS})
        for (x1, y1, x2, y2), label in objs:
            coco["annotations"].append({
                "id": len(coco["annotations"]) + 1, "image_id": i + 1,
                "category_id": label + 1, "bbox": [x1, y1, x2 - x1, y2 - y1],
                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
    path = os.path.join(work, split + ".json")
    with open(path, "w") as f:
        json.dump(coco, f)
    return path, folder, len(coco["annotations"])


def prepare(work, n_train, n_val, root=FMNIST):
    """Both splits in `work`; a dict of their paths and counts."""
    os.makedirs(work, exist_ok=True)
    p = {}
    for split, n in [("train", n_train), ("val", n_val)]:
        path, folder, objs = write_split(work, split, n, root)
        p.update({split + "_json": path, split + "_root": folder,
                  "images_" + split: n, "objects_" + split: objs})
    return p


if __name__ == "__main__":
    import sys
    import time
    t = time.monotonic()
    info = prepare(sys.argv[1] if len(sys.argv) > 1 else "det-data",
                   20000, 1000)
    print(json.dumps(info, indent=1))
    print("%.1f s" % (time.monotonic() - t))
