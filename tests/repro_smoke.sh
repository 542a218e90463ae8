#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Test of experiments/reproduce.py and its package, experiments/repro/:
# runs its one-cell smoke experiment (a real `echoflow train` run of the
# MLP to a low target) into a temporary directory, checks the CSV row,
# checks that a second invocation resumes (runs nothing, adds no row), and
# that a failing trainer is reported with its stderr and leaves no row.
#
# usage: repro_smoke.sh ECHOFLOW_BUILD_DIR REPRODUCE_PY
set -u
BUILD=${1:?usage: repro_smoke.sh ECHOFLOW_BUILD_DIR REPRODUCE_PY}
REPRO=${2:?usage: repro_smoke.sh ECHOFLOW_BUILD_DIR REPRODUCE_PY}
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ef_repro.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

if "$PY" "$REPRO" run --smoke --build "$BUILD" --out "$TMP/out" \
        >"$TMP/first.out" 2>"$TMP/first.err"; then
    pass "first run exits 0"
else
    fail "first run: $(cat "$TMP/first.out" "$TMP/first.err")"
fi
if "$PY" - "$TMP/out/smoke.csv" <<'PY'; then
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1, "expected 1 row, got %d" % len(rows)
r = rows[0]
# the settings as the smoke cell asks for them
want = {"experiment": "smoke", "model": "mlp", "echo": "factor=2,shuffle=100",
        "echo_at": "before-augment", "e": "2", "target_acc": "0.7",
        "lr": "0.03", "seed": "0", "batch": "128", "threads": "1"}
for k, v in want.items():
    assert r[k] == v, "%s: %r, expected %r" % (k, r[k], v)
# and the results from the trainer's JSON
assert r["reached"] == "1", "the smoke cell did not reach 70%"
assert r["diverged"] == "0", r["diverged"]
assert 0 < int(r["fresh_to_target"]) <= 50000, r["fresh_to_target"]
assert 0 < int(r["steps_to_target"]), r["steps_to_target"]
assert float(r["final_accuracy"]) >= 0.7, r["final_accuracy"]
assert 1.5 < float(r["echo_effective_factor"]) < 2.5, r["echo_effective_factor"]
assert float(r["time_to_target_s"]) > 0 and float(r["eval_time_s"]) > 0
assert r["commit"] and r["date"].endswith("Z"), (r["commit"], r["date"])
PY
    pass "CSV row: settings and results"
else
    fail "CSV row check; CSV was: $(cat "$TMP/out/smoke.csv" 2>&1)"
fi

"$PY" "$REPRO" run --smoke --build "$BUILD" --out "$TMP/out" \
    >"$TMP/second.out" 2>"$TMP/second.err"
rc=$?
rows=$(($(wc -l <"$TMP/out/smoke.csv") - 1))
if [ "$rc" -eq 0 ] && grep -q "^ran 0 cells, 1 already done" "$TMP/second.out" &&
        [ "$rows" -eq 1 ]; then
    pass "second run resumes: nothing run, still one row"
else
    fail "resume: rc $rc, $rows rows, output: $(cat "$TMP/second.out" "$TMP/second.err")"
fi

# a trainer that fails: its stderr is shown, the exit status is 1, no row
mkdir -p "$TMP/bad"
printf '#!/bin/sh\necho "disk on fire at /dev/sdz" >&2\nexit 1\n' >"$TMP/bad/echoflow"
chmod +x "$TMP/bad/echoflow"
"$PY" "$REPRO" run --smoke --build "$TMP/bad" --out "$TMP/badout" \
    >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "disk on fire at /dev/sdz" "$TMP/bad.err" &&
        grep -q "FAILED (exit 1)" "$TMP/bad.err" && [ ! -e "$TMP/badout/smoke.csv" ]; then
    pass "a failed run is reported with its stderr and not recorded"
else
    fail "failed run: rc $rc, $(cat "$TMP/bad.out" "$TMP/bad.err"); csv: $(ls "$TMP/badout")"
fi

# a CSV written by an older reproduce.py (fewer columns) is rewritten with
# today's columns, its rows kept, before a new row is appended
mkdir -p "$TMP/old"
head -1 "$TMP/out/smoke.csv" | tr ',' '\n' | grep -v -x -e threads -e warmup |
    paste -sd, >"$TMP/old/smoke.csv"
cols=$(head -1 "$TMP/old/smoke.csv" | tr ',' '\n' | wc -l)
printf 'old-row%*s\n' "$((cols - 1))" "" | tr ' ' ',' >>"$TMP/old/smoke.csv"
"$PY" "$REPRO" run --smoke --build "$BUILD" --out "$TMP/old" \
    >"$TMP/old.out" 2>"$TMP/old.err"
rc=$?
if [ "$rc" -eq 0 ] && "$PY" - "$TMP/old/smoke.csv" "$TMP/out/smoke.csv" <<'PY'; then
import csv, sys
new, ref = (list(csv.reader(open(p))) for p in sys.argv[1:3])
assert new[0] == ref[0], "header %r, expected %r" % (new[0], ref[0])
assert len(new) == 3, "expected the old row and a new one, got %r" % new
assert new[1][0] == "old-row" and all(len(r) == len(ref[0]) for r in new)
PY
    pass "an older CSV is migrated to the new columns and appended to"
else
    fail "older CSV: rc $rc, $(cat "$TMP/old.err"); CSV: $(cat "$TMP/old/smoke.csv")"
fi

# a wrong option is refused before anything runs
"$PY" "$REPRO" run --smoke --jobs 0 --build "$BUILD" --out "$TMP/jobs0" \
    >"$TMP/jobs0.out" 2>"$TMP/jobs0.err"
rc=$?
if [ "$rc" -ne 0 ] && grep -q -- "--jobs expects" "$TMP/jobs0.err" &&
        [ ! -e "$TMP/jobs0" ]; then
    pass "--jobs 0 refused: $(cat "$TMP/jobs0.err")"
else
    fail "--jobs 0: rc $rc, $(cat "$TMP/jobs0.out" "$TMP/jobs0.err")"
fi

# the network cells' pipeline is the trainer's preset (--print-spec) with
# the source swapped for HTTP shards, the throttle for nginx, and the one
# named override, UPSTREAM_SHUFFLE; a preset of another shape is refused
if "$PY" - "$BUILD/echoflow" "$(dirname "$REPRO")" <<'PY' >"$TMP/net.out" 2>&1; then
import subprocess, sys
sys.path.insert(0, sys.argv[2])
from repro import network
c = [c for c in network.cells(False) if c["e"] == 4][0]
train, test = network.preset_specs(sys.argv[1], c, 1000)
got = network.over_http(train, "http://h/x.tar").split(" | ")
want = ["tar:urls=http://h/x.tar", "decode:channels=1",
        "normalize:mean=0.2860,std=0.3530",
        "shuffle:%d" % network.UPSTREAM_SHUFFLE, "repeat", "prefetch:256",
        "echo:" + c["echo"], "batch:128", "prefetch:4"]
assert got == want, (got, want)
assert test.startswith("idx:") and test.endswith("| batch:1000"), test
p = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, "
                    "%r); from repro import network; network.over_http("
                    "'idx:x | shuffle:9 | repeat | batch:1', 'u')"
                    % sys.argv[2]], capture_output=True, text=True)
assert p.returncode != 0 and "changed shape" in p.stderr, p.stderr
PY
    pass "network spec derived from the preset, one override"
else
    fail "network spec: $(cat "$TMP/net.out")"
fi

# a COMMENTARY.md with one experiment's heading twice is refused by report,
# naming the heading and the file, rather than showing one of the two
printf '## fresh\nold text\n\n## fresh\nnew text\n' >"$TMP/out/COMMENTARY.md"
"$PY" "$REPRO" report --results "$TMP/out" >"$TMP/dup.out" 2>"$TMP/dup.err"
rc=$?
if [ "$rc" -ne 0 ] && grep -q "'## fresh' appears twice" "$TMP/dup.err" &&
        grep -q "$TMP/out/COMMENTARY.md:4" "$TMP/dup.err" &&
        [ ! -e "$TMP/out/RESULTS.md" ]; then
    pass "a heading twice in COMMENTARY.md is refused: $(cat "$TMP/dup.err")"
else
    fail "duplicate heading: rc $rc, $(cat "$TMP/dup.out" "$TMP/dup.err")"
fi
printf '## fresh\nnew text\n' >"$TMP/out/COMMENTARY.md"
if "$PY" "$REPRO" report --results "$TMP/out" >"$TMP/rep.out" 2>&1 &&
        [ -s "$TMP/out/RESULTS.md" ]; then
    pass "with the heading once, report writes RESULTS.md"
else
    fail "report: $(cat "$TMP/rep.out")"
fi

# the language model's pieces (experiments/repro/lm*.py), where torch,
# sentencepiece and WordNet are installed: a synset line becomes its
# document, the token files read back through the tokens source hold the
# tokenizer's ids with eos after each document, and a few training steps
# count fresh tokens as steps x batch x block / e
if [ -n "${EF_SANITIZED:-}" ]; then
    echo "skip: lm (under $EF_SANITIZED the Python package needs its runtimes preloaded; the developer build runs it)"
elif "$PY" -c "import torch, sentencepiece, numpy" 2>/dev/null &&
        [ -r /usr/share/wordnet/data.adj ] && [ -d "$BUILD/python/echoflow" ]; then
    if PYTHONPATH="$BUILD/python" "$PY" - "$(dirname "$REPRO")" "$TMP/lm" \
            >"$TMP/lm.out" 2>&1 <<'PY'; then
import json, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from repro import lm_data
import echoflow, sentencepiece
work = sys.argv[2]
os.makedirs(work)
assert lm_data.parse_synset("  1 This software and database") is None
got = lm_data.parse_synset("00002098 00 a 02 able(a) 0 unable_to 0 000 "
                           "| (usually followed by `to') having means  \n")
assert got == ("00002098", "able, unable to: (usually followed by `to') "
               "having means"), got
train, val = lm_data.split(lm_data.documents())
assert len(train) > 100000 and 4000 < len(val) < 8000, (len(train), len(val))
assert not set(train[:2000]) & set(val), "a document on both sides"
docs = os.path.join(work, "docs.jsonl")
lm_data.write_jsonl(docs, train[:3000])
with open(os.path.join(work, "t.txt"), "w") as f:
    f.write("\n".join(train[:3000]) + "\n")
model = lm_data.train_tokenizer(os.path.join(work, "t.txt"),
                                os.path.join(work, "spm"), 300)
tok = os.path.join(work, "t.bin")
n, = lm_data.make_token_files(model, [(docs, tok)])
sp = sentencepiece.SentencePieceProcessor(model_file=model)
want = sp.encode(train[0]) + [lm_data.EOS] + sp.encode(train[1])
first = next(iter(echoflow.Pipeline("tokens:files=%s,block=%d,"
                                    "order=sequential" % (tok, len(want)))))
import numpy
assert list(numpy.asarray(first["inputs"])) == want, "token file differs"
assert os.path.getsize(tok) == 2 * n
trainer = os.path.join(sys.argv[1], "repro", "lm_train.py")
p = subprocess.run([sys.executable, trainer, "--json", "--train", tok,
                    "--val", tok, "--vocab", "300", "--block", "16",
                    "--batch", "8", "--d-model", "16", "--layers", "1",
                    "--heads", "2", "--lr", "0.01", "--target-loss", "0",
                    "--max-fresh", "640", "--eval-every", "5",
                    "--val-blocks", "8", "--echo", "factor=2",
                    "--echo-at", "batch"], capture_output=True, text=True)
assert p.returncode == 0, p.stderr
r = json.loads(p.stdout)
assert r["steps"] == 10 and r["fresh"] == 640 and not r["reached"], r
assert r["fresh_counted"] == 640 and r["echo_effective_factor"] == 2, r
assert [c[0] for c in r["curve"]] == [0, 5, 10], r["curve"]
assert r["train_spec"].endswith("| batch:8 | echo:factor=2"), r["train_spec"]
PY
        pass "lm: corpus, token files and a short training cell"
    else
        fail "lm: $(cat "$TMP/lm.out")"
    fi
else
    echo "skip: lm (needs python3-torch, python3-sentencepiece, wordnet-base and build/python)"
fi

# the detection experiment's metric (experiments/repro/det_map.py, plain
# Python) on a case worked by hand. Class 0 has three boxes: g1 (0,0,10,10)
# and g2 (20,20,30,30) in image 1, g3 (0,0,10,10) in image 2; its
# detections, best first:
#   0.9 image 1 (0,0,10,10): IoU 1 with g1           TP  P 1/1  R 1/3
#   0.8 image 2 (5,0,15,10): IoU 50/150 = 1/3 with g3 FP  P 1/2  R 1/3
#   0.7 image 1 (20,20,30,32): IoU 100/120 with g2    TP  P 2/3  R 2/3
#   0.6 image 1 (1,0,10,10): IoU 0.9 with g1, taken   FP  P 2/4  R 2/3
# The monotone precision is 1 up to recall 1/3 and 2/3 up to 2/3, so
# AP = 1/3 * 1 + 1/3 * 2/3 = 5/9. Class 1 has three boxes: (0,0,20,10) and
# (30,30,40,40) in image 2, (50,50,60,60) in image 1; its detections:
#   0.5  image 2 (0,0,10,10): IoU 100/200 = 0.5 exactly (a hit)
#                                                    TP  P 1/1  R 1/3
#   0.45 image 1 (0,0,10,10): no box near it          FP  P 1/2  R 1/3
#   0.42 image 2 (30,30,40,40): IoU 1                 TP  P 2/3  R 2/3
#   0.41 image 1 (50,50,60,61): IoU 100/110           TP  P 3/4  R 1
# The monotone precision is 1 up to recall 1/3, then 3/4 (the 2/3 at
# recall 2/3 is raised by the 3/4 after it), so AP = 1/3 + 2/3 * 3/4 = 5/6.
# Class 2 has a box and no detection: AP 0. Class 3 has a detection and no
# box: left out. mAP = (5/9 + 5/6 + 0) / 3 = 25/54.
if "$PY" - "$(dirname "$REPRO")" >"$TMP/map.out" 2>&1 <<'PY'; then
import sys
sys.path.insert(0, sys.argv[1] + "/repro")
import det_map
gts = [(1, 0, (0, 0, 10, 10)), (1, 0, (20, 20, 30, 30)), (2, 0, (0, 0, 10, 10)),
       (2, 1, (0, 0, 20, 10)), (2, 1, (30, 30, 40, 40)),
       (1, 1, (50, 50, 60, 60)), (1, 2, (40, 40, 50, 50))]
# (image, class, score, box), in no particular order
dets = [(1, 0, 0.7, (20, 20, 30, 32)), (1, 0, 0.6, (1, 0, 10, 10)),
        (2, 0, 0.8, (5, 0, 15, 10)), (1, 0, 0.9, (0, 0, 10, 10)),
        (1, 1, 0.45, (0, 0, 10, 10)), (2, 1, 0.5, (0, 0, 10, 10)),
        (1, 1, 0.41, (50, 50, 60, 61)), (2, 1, 0.42, (30, 30, 40, 40)),
        (1, 3, 0.9, (0, 0, 10, 10))]
m, aps = det_map.mean_ap(dets, gts)
assert abs(aps[0] - 5 / 9) < 1e-12, aps
assert abs(aps[1] - 5 / 6) < 1e-12, aps
assert aps[2] == 0.0 and 3 not in aps, aps
assert abs(m - 25 / 54) < 1e-12, m
assert det_map.average_precision([], {1: [(0, 0, 1, 1)]}) == 0.0
assert det_map.average_precision([(1, 0.5, (0, 0, 1, 1))], {}) is None
assert abs(det_map.iou((0, 0, 10, 10), (5, 0, 15, 10)) - 1 / 3) < 1e-12
PY
    pass "detection: mAP@0.5 of a hand-worked case is 25/54"
else
    fail "detection mAP: $(cat "$TMP/map.out")"
fi

# the detection experiment end to end in quick mode (one seed, a small
# data set, a low target): its data set read back through the coco
# source, the four conditions' rows, the echo placements, the fresh
# images each counted, and its section of the report
if [ -n "${EF_SANITIZED:-}" ]; then
    echo "skip: detection (under $EF_SANITIZED the Python package needs its runtimes preloaded; the developer build runs it)"
elif "$PY" -c "import torch, numpy, PIL" 2>/dev/null &&
        [ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] &&
        [ -d "$BUILD/python/echoflow" ]; then
    if PYTHONPATH="$BUILD/python" "$PY" - "$(dirname "$REPRO")" "$TMP/det" \
            >"$TMP/detdata.out" 2>&1 <<'PY'; then
import filecmp, json, os, sys
sys.path.insert(0, sys.argv[1])
from repro import det_data
import echoflow, numpy
a, b = (det_data.prepare(os.path.join(sys.argv[2], x), 12, 3)
        for x in ("a", "b"))
assert filecmp.cmp(a["train_json"], b["train_json"], shallow=False)
for i in range(12):
    name = "%06d.jpg" % i
    assert filecmp.cmp(os.path.join(a["train_root"], name),
                       os.path.join(b["train_root"], name), shallow=False)
coco = json.load(open(a["train_json"]))
assert [c["id"] for c in coco["categories"]] == list(range(1, 11))
per_image = {}
for ann in coco["annotations"]:
    per_image[ann["image_id"]] = per_image.get(ann["image_id"], 0) + 1
assert len(per_image) == 12 and max(per_image.values()) <= 4, per_image
n = 0
for s in echoflow.Pipeline("coco:annotations=%s,root=%s | decode"
                           % (a["train_json"], a["train_root"])):
    img = numpy.asarray(s["image"])[:, :, 0]
    assert img.shape == (64, 64), img.shape
    for x1, y1, x2, y2 in numpy.asarray(s["boxes"]).astype(int):
        # the item is inside its box: its edge rows and columns are lit
        # (JPEG keeps them above a few grey levels), the canvas is dark
        # well away from every box
        assert 0 <= x1 < x2 <= 64 and 0 <= y1 < y2 <= 64
        assert img[y1:y2, x1:x2].max() > 64
    n += 1
assert n == 12, n
assert det_data.tight_box(numpy.array([[0, 0, 0], [0, 5, 0]])) == (1, 1, 2, 2)
assert det_data.tight_box(numpy.zeros((3, 3))) is None
PY
        pass "detection: the data set is the same on every build and reads back"
    else
        fail "detection data: $(cat "$TMP/detdata.out")"
    fi
    if "$PY" "$REPRO" run --quick --only detection --jobs 2 --build "$BUILD" \
            --out "$TMP/detq" >"$TMP/detq.out" 2>"$TMP/detq.err" &&
            "$PY" - "$TMP/detq/detection.csv" <<'PY' >"$TMP/detcsv.out" 2>&1 &&
import csv, sys
rows = {r["variant"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert sorted(rows) == ["after-augment", "batch", "before-augment", "none"], rows
for v, r in rows.items():
    e = 1 if v == "none" else 2
    assert r["e"] == str(e) and r["seed"] == "0" and r["threads"] == "1"
    steps, fresh = int(r["steps"]), int(r["fresh"])
    # the images trained on / e: a pass over the 1,000 canvases ends in a
    # batch of 8, so a little less than steps x batch / e
    assert steps * 32 // e - 3 * 24 // e <= fresh < steps * 32 // e, \
        (v, steps, fresh)
    assert r["diverged"] == "0" and 0 <= float(r["best_map"]) <= 1, r
    # the batches' identities count the fresh images the source read:
    # exactly without echo; with batch echo up to half a batch more (a
    # batch taken without its copy counts whole); with example echo about
    # as many (its shuffle buffer hands out copies and originals mixed, so
    # the batches taken hold about 1/e fresh ones)
    counted = int(r["fresh_counted"])
    if v == "none":
        assert counted == fresh, (v, counted, fresh)
    elif v == "batch":
        assert 0 <= counted - fresh <= 16, (v, counted, fresh)
    else:
        assert abs(counted - fresh) <= 0.1 * fresh, (v, counted, fresh)
    assert len(r["curve"].split(";")) >= 2, r["curve"]
spec = {v: r["train_spec"].split(" | ") for v, r in rows.items()}
stages = [s.split(":")[0] for s in spec["none"]]
assert stages == ["coco", "shuffle", "decode", "ssd_crop", "resize", "flip",
                  "pad_boxes", "batch"], stages
echo = "echo:factor=2,shuffle=10000"
assert spec["before-augment"].index(echo) == stages.index("ssd_crop")
assert spec["after-augment"].index(echo) == stages.index("pad_boxes")
assert spec["batch"][-1] == "echo:factor=2", spec["batch"]
PY
            "$PY" "$REPRO" report --results "$TMP/detq" >"$TMP/detrep.out" 2>&1 &&
            grep -q "^## Object detection" "$TMP/detq/RESULTS.md" &&
            grep -q "^| example echo before augmentation, e=2 |" "$TMP/detq/RESULTS.md"; then
        pass "detection: quick run, four conditions, report section"
    else
        fail "detection quick run: $(cat "$TMP/detq.out" "$TMP/detq.err" "$TMP/detcsv.out" "$TMP/detrep.out" 2>/dev/null | grep -v PipelineWarning)"
    fi
else
    echo "skip: detection (needs python3-torch, python3-numpy, python3-pil, dataset-fashion-mnist and build/python)"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "all reproduce.py checks passed"
