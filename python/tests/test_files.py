# SPDX-License-Identifier: Apache-2.0
"""The `files` source against torchvision: an ImageFolder tree of real
Fashion-MNIST images (PNG and JPEG, nested folders, upper-case
extensions, other files beside them) is listed in exactly the order and
with exactly the labels of torchvision.datasets.ImageFolder, and
echoflow.torch.Loader over `files | decode` yields those labels in that
order; a list of URLs served by tests/http_server.py reads every file,
and a URL that is not there fails naming it."""
import gzip
import os
import socket
import urllib.parse

import numpy
import pytest
from PIL import Image

torchvision = pytest.importorskip("torchvision")

import echoflow  # noqa: E402
import echoflow.torch  # noqa: E402
from conftest import start_http_server  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
           "Shirt", "Sneaker", "Bag", "Ankle boot"]
N = 300  # images written: enough to cross every folder and format
# the formats besides JPEG that ImageFolder lists, written losslessly
EXACT = [("png", "PNG", {}), ("bmp", "BMP", {}), ("tif", "TIFF", {}),
         ("webp", "WEBP", {"lossless": True}), ("pgm", "PPM", {})]


def _idx(name):
    with gzip.open(os.path.join(FMNIST, name), "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
    return numpy.frombuffer(data, numpy.uint8,
                            offset=4 + 4 * ndim).reshape(dims)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """ImageFolder tree: CLASS/jpeg/NNNNN.JPG every third image, the rest
    CLASS/NNNNN.png, .bmp, .tif, .webp or .pgm in turn, a README.txt in
    each class and a notes file at the root."""
    if not os.path.exists(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")):
        pytest.skip("Fashion-MNIST is missing (apt-get install "
                    "dataset-fashion-mnist)")
    images = _idx("t10k-images-idx3-ubyte.gz")[:N]
    labels = _idx("t10k-labels-idx1-ubyte.gz")[:N]
    root = tmp_path_factory.mktemp("folder")
    for name in CLASSES:
        os.makedirs(os.path.join(root, name, "jpeg"))
        with open(os.path.join(root, name, "README.txt"), "w") as f:
            f.write("not an image\n")
    with open(os.path.join(root, "notes.md"), "w") as f:
        f.write("a file beside the classes is no class\n")
    for i, (img, lab) in enumerate(zip(images, labels)):
        d = os.path.join(root, CLASSES[lab])
        if i % 3 == 2:
            Image.fromarray(img).save(
                os.path.join(d, "jpeg", "%05d.JPG" % i), format="JPEG",
                quality=95)
        else:
            ext, fmt, opts = EXACT[i % len(EXACT)]
            Image.fromarray(img).save(
                os.path.join(d, "%05d.%s" % (i, ext)), format=fmt, **opts)
    return str(root)


def _samples(spec, **kw):
    out = []
    with echoflow.Pipeline(spec, **kw) as p:
        for s in p:
            url = s["__url__"]  # a str
            label = int(numpy.asarray(s["label"])) if "label" in s else None
            out.append((url, label))
    return out


def test_order_and_labels_match_torchvision(folder):
    want = torchvision.datasets.ImageFolder(folder).samples
    assert len(want) == N
    assert _samples("files:root=%s" % folder) == want
    # the readers change nothing
    assert _samples("files:root=%s,readers=1" % folder) == want


def test_loader_labels_match_torchvision(folder):
    samples = torchvision.datasets.ImageFolder(folder).samples
    loader = echoflow.torch.Loader(
        "files:root=%s | decode:channels=1 | batch:16" % folder)
    got, urls, shapes = [], [], set()
    for b in loader:
        got.extend(b["label"].tolist())
        urls.extend(b["__url__"])  # paths of different lengths: a list
        shapes.add(tuple(b["image"].shape[1:]))
    assert got == [lab for _, lab in samples]
    assert urls == [path for path, _ in samples]
    assert shapes == {(28, 28, 1)}


def test_loader_images_match_torchvision(folder):
    ds = torchvision.datasets.ImageFolder(folder)
    with echoflow.Pipeline("files:root=%s | decode" % folder) as p:
        for k, s in enumerate(p):
            if k % 37:
                continue
            img, lab = ds[k]
            mine = numpy.asarray(s["image"])[:, :, 0]
            # PIL converts to RGB; grey images have three equal channels
            theirs = numpy.asarray(img)[:, :, 0]
            assert int(numpy.asarray(s["label"])) == lab
            if not ds.samples[k][0].endswith(".JPG"):
                assert (mine == theirs).all()
            else:  # two JPEG decoders may differ by a level or so
                assert numpy.abs(mine.astype(int) - theirs).max() <= 8


def test_http_list(folder, tmp_path):
    proc, port = start_http_server(folder)
    try:
        samples = torchvision.datasets.ImageFolder(folder).samples
        lines = ["# served by tests/http_server.py"]
        for path, lab in samples:
            rel = os.path.relpath(path, folder)
            # CSV: "Ankle boot" holds a space
            lines.append("http://127.0.0.1:%d/%s,%d"
                         % (port, urllib.parse.quote(rel), lab))
        lst = tmp_path / "urls.txt"
        lst.write_text("\n".join(lines) + "\n")
        got = _samples("files:list=%s,readers=8" % lst)
        assert [lab for _, lab in got] == [lab for _, lab in samples]
        assert [u for u, _ in got] == [l.split(",")[0] for l in lines[1:]]
        # the bytes are the files'
        with echoflow.Pipeline("files:list=%s | take:5" % lst) as p:
            for s, (path, _) in zip(p, samples):
                field = os.path.splitext(path)[1][1:].lower()
                with open(path, "rb") as f:
                    assert bytes(numpy.asarray(s[field])) == f.read()
        # one URL that is not there: an error naming it
        missing = "http://127.0.0.1:%d/Coat/nothing.png" % port
        lst.write_text("\n".join(lines[:4] + [missing + ",4"]) + "\n")
        with pytest.raises(echoflow.Error) as e:
            _samples("files:list=%s" % lst)
        assert missing in str(e.value) and "404" in str(e.value)
        # skipped and counted under on_error=skip
        with echoflow.Pipeline("files:list=%s" % lst,
                               on_error="skip") as p:
            assert sum(1 for _ in p) == 3
            assert p.stats()["skipped"] == 1
    finally:
        proc.kill()
        proc.wait()


def _fingerprints(p, n=None):
    out = []
    for s in p:
        out.append((tuple(s.identity),
                    tuple((k, numpy.asarray(v).tobytes())
                          for k, v in sorted(s.items()))))
        if n is not None and len(out) == n:
            break
    return out


def test_state_resumes_mid_epoch(folder):
    # reshuffled per epoch, decoded, shuffled again downstream (whose
    # buffer is fetched back by identity), other readers on restore
    spec = ("files:root=%s,shuffle=true,readers=%d | decode"
            " | shuffle:buffer=50 | repeat:count=2")
    with echoflow.Pipeline(spec % (folder, 4), seed=5) as p:
        whole = _fingerprints(p)
    assert len(whole) == 2 * N
    assert whole[:N] != whole[N:]
    for cut in (0, 1, 77, N, N + 150, 2 * N):
        p = echoflow.Pipeline(spec % (folder, 4), seed=5)
        head = _fingerprints(p, cut) if cut else []
        state = p.state_dict()
        p.close()
        with echoflow.Pipeline(spec % (folder, 2), seed=5) as q:
            q.load_state_dict(state)
            assert head + _fingerprints(q) == whole, "resumed at %d" % cut
