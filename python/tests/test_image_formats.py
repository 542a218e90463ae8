# SPDX-License-Identifier: Apache-2.0
"""decode against PIL for the formats torchvision's ImageFolder opens
beyond JPEG and PNG (BMP, WebP, TIFF, PPM, PGM) and GIF's first frame:
files written by PIL (or by hand, for variants PIL does not write) decode
to exactly PIL's pixels, Image.open(path).convert("RGB") for channels=3
and the stored layout (gray "L" or "RGB") for channels=0; truncated files
are errors naming the format and the field."""
import os
import struct

import numpy
import pytest
from PIL import Image

import echoflow

RNG = numpy.random.default_rng(7)
RGB = Image.fromarray(RNG.integers(0, 256, (13, 17, 3), dtype=numpy.uint8))
RGBA = Image.fromarray(RNG.integers(0, 256, (9, 11, 4), dtype=numpy.uint8))
GRAY = Image.fromarray(RNG.integers(0, 256, (11, 7), dtype=numpy.uint8))
PALETTE = RGB.quantize(50)


def _decode(path, channels):
    field = path.rsplit(".", 1)[1]
    spec = "files:glob=%s | decode:channels=%d,fields=%s" % (
        path, channels, field)
    with echoflow.Pipeline(spec) as p:
        return numpy.asarray(next(iter(p))["image"])


def _pil(path, mode):
    px = numpy.asarray(Image.open(path).convert(mode))
    return px[:, :, None] if px.ndim == 2 else px


def _assert_like_pil(path, gray):
    rgb = _decode(path, 3)
    assert rgb.dtype == numpy.uint8
    assert numpy.array_equal(rgb, _pil(path, "RGB"))
    stored = _decode(path, 0)
    assert stored.shape[2] == (1 if gray else 3)
    assert numpy.array_equal(stored, _pil(path, "L" if gray else "RGB"))
    if gray:
        assert numpy.array_equal(_decode(path, 1), _pil(path, "L"))


# name, image, PIL's format and options, stored as gray
WRITTEN_BY_PIL = [
    ("rgb24.bmp", RGB, "BMP", {}, False),
    ("palette8.bmp", PALETTE, "BMP", {}, False),
    ("gray8.bmp", GRAY, "BMP", {}, True),  # a palette of grays: gray
    ("rgba32.bmp", RGBA, "BMP", {}, False),
    ("bilevel1.bmp", GRAY.convert("1"), "BMP", {}, True),
    ("rgb.tif", RGB, "TIFF", {}, False),
    ("gray.tif", GRAY, "TIFF", {}, True),
    ("rgb-lzw.tif", RGB, "TIFF", {"compression": "tiff_lzw"}, False),
    ("gray-lzw.tif", GRAY, "TIFF", {"compression": "tiff_lzw"}, True),
    ("rgb-deflate.tiff", RGB, "TIFF", {"compression": "tiff_adobe_deflate"},
     False),
    ("gray-deflate.tif", GRAY, "TIFF",
     {"compression": "tiff_adobe_deflate"}, True),
    ("rgba.tif", RGBA, "TIFF", {}, False),
    ("palette.tif", PALETTE, "TIFF", {}, False),
    ("bilevel.tif", GRAY.convert("1"), "TIFF", {}, True),
    ("lossless.webp", RGB, "WEBP", {"lossless": True}, False),
    ("lossy.webp", RGB, "WEBP", {"quality": 80}, False),
    ("gray-lossless.webp", GRAY, "WEBP", {"lossless": True}, False),
    ("rgba-lossless.webp", RGBA, "WEBP", {"lossless": True}, False),
    ("rgba-lossy.webp", RGBA, "WEBP", {"quality": 70}, False),
    ("rgb.ppm", RGB, "PPM", {}, False),
    ("gray.pgm", GRAY, "PPM", {}, True),
    ("palette.gif", PALETTE, "GIF", {}, False),
    ("transparent.gif", PALETTE, "GIF", {"transparency": 3}, False),
    ("gray.gif", GRAY, "GIF", {"optimize": False}, True),
]


@pytest.mark.parametrize("name,img,fmt,opts,gray", WRITTEN_BY_PIL,
                         ids=[w[0] for w in WRITTEN_BY_PIL])
def test_pixels_equal_pil(tmp_path, name, img, fmt, opts, gray):
    path = str(tmp_path / name)
    img.save(path, fmt, **opts)
    _assert_like_pil(path, gray)


def _bmp(w, h, bits, rows, compression=0, masks=b"", palette=b""):
    """A BMP with a 40-byte header, `rows` already padded, bottom-up
    unless h < 0."""
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, bits, compression,
                       len(rows), 2835, 2835, len(palette) // 4, 0)
    offset = 14 + len(info) + len(masks) + len(palette)
    head = b"BM" + struct.pack("<IHHI", offset + len(rows), 0, 0, offset)
    return head + info + masks + palette + rows


def _pnm_plain(magic, w, h, maxval, samples):
    head = "%s\n# a comment\n%d %d\n" % (magic, w, h)
    if maxval:
        head += "%d\n" % maxval
    return (head + " ".join(str(int(v)) for v in samples) + "\n").encode()


def _by_hand():
    """Variants PIL reads but does not write."""
    out = {}
    px = RNG.integers(0, 1 << 16, (5, 3), dtype=numpy.uint16)  # 565 pixels
    rows = b"".join(px[y].astype("<u2").tobytes() + b"\0\0"
                    for y in range(4, -1, -1))
    masks = struct.pack("<III", 0xF800, 0x07E0, 0x001F)
    out["rgb565.bmp"] = (_bmp(3, 5, 16, rows, 3, masks), False)
    rows = b"".join(px[y].astype("<u2").tobytes() + b"\0\0"
                    for y in range(5))
    out["rgb555-top-down.bmp"] = (_bmp(3, -5, 16, rows), False)
    rgb16 = RNG.integers(0, 1 << 16, (4, 5, 3), dtype=numpy.uint16)
    out["rgb16.ppm"] = (b"P6 5 4 65535\n" + rgb16.astype(">u2").tobytes(),
                        False)
    rgb1000 = RNG.integers(0, 1001, (4, 5, 3))
    out["maxval1000.ppm"] = (b"P6\n5 4\n1000\n" +
                             rgb1000.astype(">u2").tobytes(), False)
    gray100 = RNG.integers(0, 101, (6, 3), dtype=numpy.uint8)
    out["maxval100.pgm"] = (b"P5 3 6 100\n" + gray100.tobytes(), True)
    out["plain.pgm"] = (_pnm_plain("P2", 3, 6, 100, gray100.ravel()), True)
    out["plain.ppm"] = (_pnm_plain("P3", 5, 4, 1000, rgb1000.ravel()),
                        False)
    bits = RNG.integers(0, 2, 9 * 2)
    out["plain.pbm"] = (_pnm_plain("P1", 9, 2, 0, bits), True)
    return out


BY_HAND = _by_hand()


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_hand_made_pixels_equal_pil(tmp_path, name):
    data, gray = BY_HAND[name]
    path = tmp_path / name
    path.write_bytes(data)
    _assert_like_pil(str(path), gray)


def test_gif_first_frame_on_its_screen(tmp_path):
    # a frame smaller than the screen: the rest is index 0, as in PIL
    frames = [PALETTE.crop((0, 0, 9, 8)), PALETTE.crop((2, 2, 11, 10))]
    path = str(tmp_path / "anim.gif")
    frames[0].save(path, "GIF", save_all=True, append_images=frames[1:])
    _assert_like_pil(path, False)
    screen = bytearray(open(path, "rb").read())
    screen[6:10] = struct.pack("<HH", 12, 10)  # a larger logical screen
    open(path, "wb").write(bytes(screen))
    assert _decode(path, 3).shape == (10, 12, 3)
    _assert_like_pil(path, False)


def test_folder_of_every_format_decodes_by_default(tmp_path):
    # what files:root lists, decode reads: before, the first .bmp stopped
    # the epoch with "no field to decode as an image"
    for name, img, fmt, opts, _ in WRITTEN_BY_PIL:
        if not name.endswith(".gif"):
            os.makedirs(tmp_path / "c" / fmt, exist_ok=True)
            img.save(str(tmp_path / "c" / fmt / name), fmt, **opts)
    want = sum(not w[0].endswith(".gif") for w in WRITTEN_BY_PIL)
    with echoflow.Pipeline("files:root=%s | decode:channels=3" %
                           tmp_path) as p:
        got = [numpy.asarray(s["image"]).shape[2] for s in p]
    assert got == [3] * want


@pytest.mark.parametrize("name,img,fmt,opts,gray", WRITTEN_BY_PIL,
                         ids=[w[0] for w in WRITTEN_BY_PIL])
def test_truncated_file_is_an_error(tmp_path, name, img, fmt, opts, gray):
    path = tmp_path / name
    img.save(str(path), fmt, **opts)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    field = name.rsplit(".", 1)[1]
    with pytest.raises(echoflow.Error) as e:
        _decode(str(path), 0)
    text = str(e.value)
    assert "field '%s'" % field in text
    assert "truncated" in text or "corrupt" in text
    fmt_name = {"PPM": "P[GP]M", "WEBP": "WebP"}.get(fmt, fmt)
    assert pytest.importorskip("re").search(fmt_name, text), text
