#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One detection cell: a small single-shot detector (SSD-like) trained on
a COCO-format data set through echoflow.torch.Loader, until the
validation mAP@0.5 reaches a target or the fresh images reach a cap;
prints one JSON object, as `echoflow train --json` does for the image
cells.

  det_train.py --train-json train.json --train-root train \\
      --val-json val.json --val-root val --lr 0.002 --seed 0 \\
      --target-map 0.5 --max-fresh 100000 \\
      [--echo factor=2,shuffle=10000 \\
       --echo-at before-augment|after-augment|batch] --json

The training pipeline is
  coco:annotations=TRAIN,root=DIR | shuffle:S | decode
  [| echo:E]                                 (before-augment)
  | ssd_crop | resize:size=N,boxes=boxes | flip:boxes=boxes
  [| echo:E]                                 (after-augment)
  | pad_boxes:n=M | batch:B
  [| echo:E]                                 (batch)
read with the Loader's seed = --seed, so a cell's data order and
augmentation are its seed's; the model's initial weights come from
torch.manual_seed(--seed). On one thread (--threads 1) a cell gives the
same numbers on every run.

The model: five 3x3 convolutions with batch norm (strides 2, 1, 2, 1, 2)
to an 8x8 map, one more (stride 2) to a 4x4 map; on each map a 3x3
convolution predicts, per anchor, 1 + K class logits (0: background) and
four box offsets (SSD's centre/size encoding, variances 0.1 and 0.2).
Anchors: sizes ANCHORS[map] at aspect ratios 1, 2 and 1/2, centred on the
map's cells. An anchor is a positive for the box it overlaps most when
that IoU is at least 0.5, and every box's best anchor is its positive; the
loss is SSD's: cross-entropy over the positives and the hardest negatives
(three per positive, by their loss), plus smooth L1 of the positives'
offsets, over the number of positives.

Fresh images are the images the source read for the steps taken: the
images trained on / e, e the echo factor (1 without echo); that is
steps * batch / e when every batch is full, as when the training set is a
multiple of the batch (20,000 = 625 x 32), and less when a pass ends in a
short batch. Validation is
mAP@0.5 (det_map.py) on --val-images images of the validation set, every
--eval-every steps (and at step 0): per image the detections above score
0.05, at most 200 before and MAX_DETS after non-maximum suppression per
class at IoU 0.45. The target is reached at the first evaluation at or
above --target-map.

Needs torch and the echoflow package (PYTHONPATH=build/python)."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import det_map  # noqa: E402

# anchor sizes (pixels of a SIZE-pixel input) on the 8x8 and 4x4 maps
ANCHORS = [(16, 24), (36, 54)]
RATIOS = (1.0, 2.0, 0.5)  # width / height
VARIANCES = (0.1, 0.2)
MAX_OBJECTS = 4  # rows pad_boxes makes: the most boxes an image has
SCORE_MIN = 0.05
PRE_NMS = 200
NMS_IOU = 0.45
MAX_DETS = 50


def conv(i, o, stride):
    return [nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o),
            nn.ReLU(inplace=True)]


class Detector(nn.Module):
    """The single-shot detector described in the module's docstring."""

    def __init__(self, classes, width=32):
        super().__init__()
        w = width
        self.k = classes + 1
        self.a = len(RATIOS) * len(ANCHORS[0])
        self.body = nn.Sequential(*conv(1, w // 2, 2), *conv(w // 2, w, 1),
                                  *conv(w, w, 2), *conv(w, 2 * w, 1),
                                  *conv(2 * w, 2 * w, 2))
        self.down = nn.Sequential(*conv(2 * w, 2 * w, 2))
        self.heads = nn.ModuleList(nn.Conv2d(2 * w, self.a * (self.k + 4),
                                             3, 1, 1) for _ in ANCHORS)

    def forward(self, x):
        """(class logits [B, A, K+1], offsets [B, A, 4]) for images x
        [B, 1, H, W], anchors in anchors()'s order."""
        f8 = self.body(x)
        maps = [f8, self.down(f8)]
        logits, offsets = [], []
        for f, head in zip(maps, self.heads):
            p = head(f).permute(0, 2, 3, 1)  # B, h, w, a * (k + 4)
            p = p.reshape(p.shape[0], -1, self.k + 4)
            logits.append(p[..., :self.k])
            offsets.append(p[..., self.k:])
        return torch.cat(logits, 1), torch.cat(offsets, 1)


def anchors(size):
    """[A, 4] anchor boxes (cx, cy, w, h) in pixels: per map, row by row,
    per cell its sizes x ratios, the order of Detector's outputs."""
    out = []
    for cells, sizes in zip((size // 8, size // 16), ANCHORS):
        step = size / cells
        for i in range(cells):
            for j in range(cells):
                for s in sizes:
                    for r in RATIOS:
                        out.append(((j + 0.5) * step, (i + 0.5) * step,
                                    s * math.sqrt(r), s / math.sqrt(r)))
    return torch.tensor(out)


def corners(b):
    """(cx, cy, w, h) to (x1, y1, x2, y2), any leading shape."""
    return torch.cat([b[..., :2] - b[..., 2:] / 2,
                      b[..., :2] + b[..., 2:] / 2], -1)


def box_iou(a, b):
    """IoU of every box of a [..., n, 4] with every box of b [..., m, 4]
    (x1, y1, x2, y2): [..., n, m]."""
    lt = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    rb = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).prod(-1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter)


def encode(boxes, anc):
    """Offsets of boxes (x1, y1, x2, y2) [..., A, 4] from anchors
    (cx, cy, w, h) [A, 4]."""
    wh = (boxes[..., 2:] - boxes[..., :2]).clamp(min=1e-3)
    c = (boxes[..., :2] + boxes[..., 2:]) / 2
    return torch.cat([(c - anc[:, :2]) / anc[:, 2:] / VARIANCES[0],
                      torch.log(wh / anc[:, 2:]) / VARIANCES[1]], -1)


def decode(off, anc):
    """Boxes (x1, y1, x2, y2) of offsets [..., A, 4] from anchors."""
    c = anc[:, :2] + off[..., :2] * VARIANCES[0] * anc[:, 2:]
    wh = anc[:, 2:] * torch.exp(off[..., 2:] * VARIANCES[1])
    return corners(torch.cat([c, wh], -1))


def targets(anc_xy, anc, boxes, labels, mask):
    """Per anchor the class to learn (0: background) [B, A] and the
    offsets of its box [B, A, 4], from padded boxes [B, M, 4], labels
    [B, M] (0..K-1) and mask [B, M]."""
    iou = box_iou(anc_xy.expand(boxes.shape[0], -1, -1), boxes)  # B, A, M
    iou = iou.masked_fill(~mask[:, None, :], -1.0)
    # every real box's best anchor is its positive
    best_anchor = iou.argmax(1)  # B, M
    b_idx, m_idx = mask.nonzero(as_tuple=True)
    iou[b_idx, best_anchor[b_idx, m_idx], m_idx] = 2.0
    best, which = iou.max(2)  # B, A
    cls = torch.gather(labels, 1, which) + 1
    cls = torch.where(best >= 0.5, cls, torch.zeros_like(cls))
    matched = torch.gather(boxes, 1, which[..., None].expand(-1, -1, 4))
    return cls, encode(matched, anc)


def ssd_loss(logits, off, cls, loc, neg_ratio=3):
    """SSD's loss: cross-entropy of the positives and the hardest
    negatives, smooth L1 of the positives' offsets, over the positives."""
    pos = cls > 0
    n_pos = pos.sum()
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                         cls.reshape(-1), reduction="none").view(cls.shape)
    # hard negatives: the background anchors with the highest loss,
    # neg_ratio per positive in each image
    neg_ce = ce.detach().masked_fill(pos, -1.0)
    rank = neg_ce.argsort(1, descending=True).argsort(1)
    neg = rank < (neg_ratio * pos.sum(1, keepdim=True))
    cls_loss = ce[pos | neg].sum()
    loc_loss = F.smooth_l1_loss(off[pos], loc[pos], reduction="sum")
    return (cls_loss + loc_loss) / n_pos.clamp(min=1)


def nms(boxes, scores, thresh):
    """Indices of the boxes greedy non-maximum suppression keeps, highest
    score first."""
    order = scores.argsort(descending=True)
    iou = box_iou(boxes[order], boxes[order])
    keep = []
    idx = torch.arange(len(order))
    while len(idx):
        i = idx[0]
        keep.append(int(order[i]))
        rest = idx[1:]
        idx = rest[iou[i, rest] <= thresh]
    return keep


def detect(logits, off, anc, size):
    """Per image, [(class, score, box)]: the detections of one image's
    outputs, suppressed per class."""
    probs = logits.softmax(-1)[:, 1:]  # A, K
    boxes = decode(off, anc).clamp(0, size)
    score, flat = probs.flatten().topk(min(PRE_NMS, probs.numel()))
    keep = score > SCORE_MIN
    score, flat = score[keep], flat[keep]
    a, c = flat // probs.shape[1], flat % probs.shape[1]
    b = boxes[a]
    # suppression per class in one pass: classes moved apart
    kept = nms(b + (c * 2 * size)[:, None].to(b.dtype), score, NMS_IOU)
    kept = kept[:MAX_DETS]
    return [(int(c[i]), float(score[i]), b[i].tolist()) for i in kept]


def to_input(image):
    """u8 [B, H, W, 1] to the model's f32 [B, 1, H, W] in [0, 1]."""
    return image.permute(0, 3, 1, 2).float().div_(255.0)


def load_val(a):
    """The validation images [N, 1, H, W] and their boxes
    [(image, class, box)], read once through echoflow."""
    import echoflow.torch
    count = ",count=%d" % a.val_images if a.val_images else ""
    spec = ("coco:annotations=%s,root=%s%s | decode | pad_boxes:n=%d "
            "| batch:256" % (a.val_json, a.val_root, count, MAX_OBJECTS))
    images, gts = [], []
    for x, boxes, labels, mask in echoflow.torch.Loader(
            spec, as_tuple=("image", "boxes", "labels", "boxes_mask")):
        base = sum(len(i) for i in images)
        for i in range(len(x)):
            for j in range(MAX_OBJECTS):
                if mask[i, j]:
                    gts.append((base + i, int(labels[i, j]),
                                boxes[i, j].tolist()))
        images.append(to_input(x))
    return torch.cat(images), gts


@torch.no_grad()
def evaluate(model, anc, vx, gts, size, batch=250):
    model.eval()
    dets = []
    for s in range(0, len(vx), batch):
        logits, off = model(vx[s:s + batch])
        for i in range(len(logits)):
            for c, score, box in detect(logits[i], off[i], anc, size):
                dets.append((s + i, c, score, box))
    model.train()
    return det_map.mean_ap(dets, gts)[0]


def train_spec(a):
    src = ["coco:annotations=%s,root=%s" % (a.train_json, a.train_root),
           "shuffle:%d" % a.shuffle, "decode"]
    aug = ["ssd_crop", "resize:size=%d,boxes=boxes" % a.size,
           "flip:boxes=boxes"]
    tail = ["pad_boxes:n=%d" % MAX_OBJECTS, "batch:%d" % a.batch]
    echo = ["echo:" + a.echo] if a.echo else []
    at = a.echo_at if a.echo else ""
    return " | ".join(src + (echo if at == "before-augment" else []) + aug +
                      (echo if at == "after-augment" else []) + tail +
                      (echo if at == "batch" else []))


def echo_factor(echo):
    """e of an echo option string (factor=E,...), 1 without echo."""
    for kv in (echo or "").split(","):
        k, _, v = kv.partition("=")
        if k == "factor":
            return float(v)
    return 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--train-json", required=True)
    ap.add_argument("--train-root", required=True)
    ap.add_argument("--val-json", required=True)
    ap.add_argument("--val-root", required=True)
    ap.add_argument("--val-images", type=int, default=0,
                    help="the first N validation images (0: all)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", type=int, default=64,
                    help="the model's input side, a multiple of 16")
    ap.add_argument("--width", type=int, default=32,
                    help="channels of the first full-width convolution")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shuffle", type=int, default=2000,
                    help="the shuffle buffer after the source (images)")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--warmup", type=int, default=100,
                    help="steps of linear lr warm-up, then constant")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--echo", default="",
                    help="the echo stage's options, e.g. factor=2,"
                    "shuffle=10000")
    ap.add_argument("--echo-at", choices=["before-augment", "after-augment",
                                          "batch"], default="before-augment")
    ap.add_argument("--target-map", type=float, required=True)
    ap.add_argument("--max-fresh", type=int, required=True,
                    help="stop after this many fresh images")
    ap.add_argument("--eval-every", type=int, default=100, help="steps")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.size % 16:
        ap.error("--size must be a multiple of 16, got %d" % a.size)

    import echoflow.torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    e = echo_factor(a.echo)
    model = Detector(a.classes, a.width)
    anc = anchors(a.size)
    anc_xy = corners(anc)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / a.warmup))
    vx, gts = load_val(a)
    spec = train_spec(a)
    loader = echoflow.torch.Loader(
        spec, seed=a.seed, as_tuple=("image", "boxes", "labels",
                                     "boxes_mask"))

    step = 0
    curve = []  # (step, fresh images, validation mAP)
    res = {"reached": False, "diverged": False, "fresh_to_target": None,
           "steps_to_target": None, "time_to_target_s": None}
    eval_s = train_s = 0.0
    fresh_counted = 0  # fresh images by the batches' identities, to check e
    seen = 0  # images trained on, echoes included

    def fresh_images():
        return int(round(seen / e))

    def check():
        nonlocal eval_s
        t = time.monotonic()
        m = evaluate(model, anc, vx, gts, a.size)
        eval_s += time.monotonic() - t
        curve.append((step, fresh_images(), round(m, 4)))
        if m >= a.target_map and not res["reached"]:
            res.update(reached=True, fresh_to_target=fresh_images(),
                       steps_to_target=step,
                       time_to_target_s=round(train_s, 3))
            return True
        return False

    done = check()
    epoch = 0
    t = time.monotonic()
    while not done:
        loader.set_epoch(epoch)
        for item in loader:
            fresh_counted += item.identity.fresh
            image, boxes, labels, mask = item
            seen += len(image)
            cls, loc = targets(anc_xy, anc, boxes, labels, mask)
            logits, off = model(to_input(image))
            loss = ssd_loss(logits, off, cls, loc)
            if not math.isfinite(loss.item()):
                res["diverged"] = True
                done = True
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % a.eval_every == 0 or fresh_images() >= a.max_fresh:
                train_s += time.monotonic() - t
                done = check() or fresh_images() >= a.max_fresh
                t = time.monotonic()
                if done:
                    break
        epoch += 1
    train_s += time.monotonic() - t
    out = dict(res)
    out.update(fresh=fresh_images(), steps=step, final_map=curve[-1][2],
               best_map=max(c[2] for c in curve),
               train_time_s=round(train_s, 3), eval_time_s=round(eval_s, 3),
               images_per_s=round(seen / max(train_s, 1e-9), 1),
               fresh_counted=fresh_counted,
               echo_effective_factor=round(seen / max(fresh_counted, 1), 4),
               epochs=epoch, train_spec=spec, curve=curve,
               params=sum(p.numel() for p in model.parameters()))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
