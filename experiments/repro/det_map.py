# SPDX-License-Identifier: Apache-2.0
"""Mean average precision at an IoU threshold (mAP@0.5 by default), the
detection experiment's validation metric, in plain Python so that it can be
checked without torch.

Per class, as PASCAL VOC's development kit (2010 on) computes it: the
class's detections over all images, highest score first (a stable
sort: equal scores keep their given order), each matched to the
ground-truth box of its image and class with which it has the highest IoU;
it is a true positive when that IoU is at least the threshold and that box
was not matched by a higher-scoring detection, else a false positive (a
duplicate: VOC's rule; COCO's evaluation would try the next-best box). The
precision/recall curve is made monotone (precision at recall r is the
highest precision at any recall >= r) and AP is its area, summed over the
recalls where a true positive occurs ("all-point interpolation", not
VOC 2007's 11 points or COCO's 101). mAP averages AP over the classes that
have ground truth; a class with ground truth and no detection has AP 0, a
class with detections and no ground truth is left out.

Boxes are x1, y1, x2, y2 in pixels (edges), area (x2 - x1) * (y2 - y1), as
COCO's JSON and the `coco` source have them (no VOC "+1")."""


def iou(a, b):
    """Intersection over union of boxes a and b (x1, y1, x2, y2)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) \
        - inter
    return inter / union


def average_precision(dets, gts, thresh=0.5):
    """AP of one class. dets: [(image, score, box)]; gts: {image: [box]};
    None when the class has no ground-truth box."""
    n_gt = sum(len(v) for v in gts.values())
    if n_gt == 0:
        return None
    used = {k: [False] * len(v) for k, v in gts.items()}
    tp = []
    for image, _, box in sorted(dets, key=lambda d: -d[1]):
        cand = gts.get(image, [])
        best, j = 0.0, -1
        for k, g in enumerate(cand):
            o = iou(box, g)
            if o > best:
                best, j = o, k
        hit = j >= 0 and best >= thresh and not used[image][j]
        if hit:
            used[image][j] = True
        tp.append(hit)
    # precision and recall after each detection
    prec, rec, hits = [], [], 0
    for i, t in enumerate(tp, 1):
        hits += t
        prec.append(hits / i)
        rec.append(hits / n_gt)
    # the monotone envelope, from the end
    for i in range(len(prec) - 2, -1, -1):
        prec[i] = max(prec[i], prec[i + 1])
    ap, last = 0.0, 0.0
    for p, r in zip(prec, rec):
        if r > last:
            ap += (r - last) * p
            last = r
    return ap


def mean_ap(dets, gts, thresh=0.5):
    """(mAP, {class: AP}) over the classes with ground truth.
    dets: [(image, class, score, box)]; gts: [(image, class, box)]."""
    by_class_gt, by_class_det = {}, {}
    for image, c, box in gts:
        by_class_gt.setdefault(c, {}).setdefault(image, []).append(box)
    for image, c, score, box in dets:
        by_class_det.setdefault(c, []).append((image, score, box))
    aps = {c: average_precision(by_class_det.get(c, []), g, thresh)
           for c, g in by_class_gt.items()}
    if not aps:
        return 0.0, {}
    return sum(aps.values()) / len(aps), aps
