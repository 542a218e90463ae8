#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the hand-made seeds of corpus/png, corpus/jpeg, corpus/image
(WebP, TIFF, GIF, BMP, Netpbm) and corpus/jpeg_window (run from any directory; existing seeds are
overwritten, inputs the fuzzer added are kept; name the kinds to write
only those). PNGs are written here chunk by chunk, so that every colour type, bit
depth, interlacing and chunk the format allows can be seeded, and broken
on purpose; JPEGs come from PIL (python3-pil), cut and damaged here.
Seeds are named seed-*."""
import io
import os
import struct
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- PNG ----------------------------------------------------------------

SIG = b"\x89PNG\r\n\x1a\n"
SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type: samples per pixel
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
         (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]  # x0, y0, dx, dy


def chunk(kind, data, crc=None):
    if crc is None:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def ihdr(w, h, depth, ctype, interlace=0):
    return chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))


def scanline(row, depth):
    """One row of samples (a flat list) packed at `depth` bits."""
    if depth == 16:
        return b"".join(struct.pack(">H", v) for v in row)
    if depth == 8:
        return bytes(row)
    out, acc, bits = bytearray(), 0, 0
    for v in row:
        acc, bits = (acc << depth) | v, bits + depth
        if bits == 8:
            out.append(acc)
            acc, bits = 0, 0
    if bits:
        out.append(acc << (8 - bits))
    return bytes(out)


def raw_image(px, depth, interlace, filt=0):
    """Filter-type bytes plus scanlines, passes in order when interlaced."""
    h, w, _ = px.shape
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    out = bytearray()
    for x0, y0, dx, dy in passes:
        for y in range(y0, h, dy):
            cols = range(x0, w, dx)
            if not cols:
                continue
            row = [int(v) for x in cols for v in px[y, x]]
            out += bytes([filt]) + scanline(row, depth)
    return bytes(out)


def png(px, depth, ctype, interlace=0, before=b"", after=b"", idat_parts=1):
    h, w, _ = px.shape
    data = zlib.compress(raw_image(px, depth, interlace))
    step = max(1, -(-len(data) // idat_parts))
    idats = b"".join(chunk(b"IDAT", data[i:i + step]) for i in range(0, len(data), step))
    return SIG + ihdr(w, h, depth, ctype, interlace) + before + idats + after + chunk(b"IEND", b"")


def pixels(h, w, samples, depth, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << depth, size=(h, w, samples))


def png_seeds():
    s = {}
    for depth in (1, 2, 4, 8, 16):
        s["gray%d-5x3" % depth] = png(pixels(3, 5, 1, depth), depth, 0)
    for depth in (8, 16):
        s["graya%d-4x4" % depth] = png(pixels(4, 4, 2, depth), depth, 4)
        s["rgb%d-3x4" % depth] = png(pixels(3, 4, 3, depth), depth, 2)
        s["rgba%d-2x3" % depth] = png(pixels(2, 3, 4, depth), depth, 6)
    for depth in (1, 2, 4, 8):
        n = 1 << depth
        plte = chunk(b"PLTE", bytes((i * 37 + k * 91) & 0xFF for i in range(n) for k in range(3)))
        trns = chunk(b"tRNS", bytes(range(0, 256, max(1, 256 // n)))[:n])
        s["palette%d-6x2" % depth] = png(pixels(2, 6, 1, depth), depth, 3, before=plte + trns)
    s["rgb8-adam7-9x9"] = png(pixels(9, 9, 3, 8), 8, 2, interlace=1)
    s["gray1-adam7-3x5"] = png(pixels(5, 3, 1, 1), 1, 0, interlace=1)
    s["rgb8-1x1"] = png(pixels(1, 1, 3, 8), 8, 2)
    s["gray8-33x1-3-idats"] = png(pixels(1, 33, 1, 8), 8, 0, idat_parts=3)
    ancillary = (chunk(b"gAMA", struct.pack(">I", 45455)) + chunk(b"sBIT", b"\x05\x06\x05")
                 + chunk(b"tEXt", b"Comment\x00echoflow")
                 + chunk(b"zTXt", b"Title\x00\x00" + zlib.compress(b"seed " * 20))
                 + chunk(b"iCCP", b"icc\x00\x00" + zlib.compress(b"\x00" * 64))
                 + chunk(b"pHYs", struct.pack(">IIB", 2835, 2835, 1)))
    s["rgb8-ancillary"] = png(pixels(2, 2, 3, 8), 8, 2, before=ancillary,
                              after=chunk(b"tIME", struct.pack(">HBBBBB", 2024, 1, 2, 3, 4, 5)))

    # broken on purpose
    good = s["rgb8-3x4"]
    s["truncated-half"] = good[: len(good) // 2]
    s["truncated-header"] = good[:20]
    s["signature-only"] = SIG
    s["no-iend"] = good[:-12]
    flipped = bytearray(good)
    flipped[45] ^= 0x04  # inside IDAT: the CRC no longer matches
    s["idat-bit-flip"] = bytes(flipped)
    body = b"\x00\x00\x00\x00"  # a zlib stream that is not one, CRC right
    s["idat-bad-zlib"] = SIG + ihdr(2, 2, 8, 0) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    short = zlib.compress(raw_image(pixels(4, 4, 1, 8), 8, 0)[:-3])
    s["idat-short"] = SIG + ihdr(4, 4, 8, 0) + chunk(b"IDAT", short) + chunk(b"IEND", b"")
    bad_filter = zlib.compress(b"\x05" + bytes(3) + b"\x00" + bytes(3))
    s["bad-filter"] = SIG + ihdr(3, 2, 8, 0) + chunk(b"IDAT", bad_filter) + chunk(b"IEND", b"")
    s["text-bad-crc"] = png(pixels(2, 2, 1, 8), 8, 0, before=chunk(b"tEXt", b"a\x00b", crc=1))
    s["unknown-critical"] = png(pixels(2, 2, 1, 8), 8, 0, before=chunk(b"ABCD", b"xyz"))
    s["palette-missing"] = png(pixels(2, 2, 1, 8), 8, 3)
    s["palette-index-out"] = png(np.full((2, 2, 1), 200), 8, 3,
                                 before=chunk(b"PLTE", bytes(12)))
    s["rgb-4bit"] = SIG + ihdr(2, 2, 4, 2) + chunk(b"IDAT", zlib.compress(bytes(8))) + chunk(b"IEND", b"")
    for name, (w, h) in {"width-40000": (40000, 16), "20000x20000": (20000, 20000),
                         "width-0": (0, 4), "width-2pow31": (1 << 31, 1)}.items():
        s[name] = SIG + ihdr(w, h, 8, 0) + chunk(b"IDAT", zlib.compress(bytes(64))) + chunk(b"IEND", b"")
    return s

# ---- JPEG ---------------------------------------------------------------


def jpeg(img, **opts):
    f = io.BytesIO()
    img.save(f, "JPEG", **opts)
    return f.getvalue()


def marker(data, code):
    """Offset of the first marker FF `code`, or -1."""
    return data.find(bytes([0xFF, code]))


def set_sof_size(data, h, w):
    sof = marker(data, 0xC0)
    if sof < 0:
        sof = marker(data, 0xC2)
    return data[: sof + 5] + struct.pack(">HH", h, w) + data[sof + 9:]


def jpeg_seeds():
    rng = np.random.default_rng(2)
    y, x = np.mgrid[0:16, 0:24]
    smooth = np.stack([y * 15, x * 10, (x + y) * 6], -1).astype(np.uint8)
    rgb = Image.fromarray(smooth)
    s = {}
    s["gray-8x8"] = jpeg(Image.fromarray(smooth[:8, :8, 0]), quality=90)
    s["rgb-444"] = jpeg(rgb, quality=90, subsampling=0)
    s["rgb-422"] = jpeg(rgb, quality=75, subsampling=1)
    s["rgb-420"] = jpeg(rgb, quality=50, subsampling=2)
    s["rgb-progressive"] = jpeg(rgb, quality=80, progressive=True)
    s["rgb-optimized"] = jpeg(rgb, quality=80, optimize=True)
    s["rgb-1x1"] = jpeg(Image.fromarray(smooth[:1, :1]), quality=90)
    s["rgb-odd-17x9"] = jpeg(Image.fromarray(rng.integers(0, 256, (9, 17, 3), dtype=np.uint8)), quality=60)
    s["cmyk-adobe"] = jpeg(rgb.convert("CMYK"), quality=85)
    s["gray-16x24"] = jpeg(Image.fromarray(smooth[:, :, 1]), quality=70)

    # broken on purpose
    good = s["rgb-420"]
    s["truncated-half"] = good[: len(good) // 2]
    s["truncated-header"] = good[:40]
    s["soi-only"] = good[:3]
    s["no-eoi"] = good[:-2]
    sos = marker(good, 0xDA)
    flipped = bytearray(good)
    for k in range(sos + 20, len(good) - 2, 7):
        flipped[k] ^= 0x5A  # scan data: bad Huffman codes
    s["scan-bit-flips"] = bytes(flipped)
    dht = marker(good, 0xC4)
    flipped = bytearray(good)
    flipped[dht + 6] ^= 0xFF  # code counts of a Huffman table
    s["dht-damaged"] = bytes(flipped)
    s["height-40000"] = set_sof_size(good, 40000, 24)
    s["20000x20000"] = set_sof_size(good, 20000, 20000)
    s["height-0"] = set_sof_size(good, 0, 24)
    s["progressive-truncated"] = s["rgb-progressive"][: len(s["rgb-progressive"]) * 2 // 3]
    return s


# ---- WebP, TIFF, GIF, BMP, Netpbm ---------------------------------------


def saved(img, fmt, **opts):
    f = io.BytesIO()
    img.save(f, fmt, **opts)
    return f.getvalue()


def bmp(w, h, bits, rows, compression=0, extra=b""):
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, bits, compression,
                       len(rows), 0, 0, 0, 0)
    offset = 14 + len(info) + len(extra)
    return b"BM" + struct.pack("<IHHI", offset + len(rows), 0, 0, offset) + info + extra + rows


def image_seeds():
    rng = np.random.default_rng(4)
    rgb = Image.fromarray(rng.integers(0, 256, (7, 9, 3), dtype=np.uint8))
    rgba = Image.fromarray(rng.integers(0, 256, (5, 6, 4), dtype=np.uint8))
    gray = Image.fromarray(rng.integers(0, 256, (6, 5), dtype=np.uint8))
    s = {
        "webp-lossless": saved(rgb, "WEBP", lossless=True),
        "webp-lossy": saved(rgb, "WEBP", quality=60),
        "webp-alpha": saved(rgba, "WEBP", quality=60),
        "tiff-rgb": saved(rgb, "TIFF"),
        "tiff-gray-lzw": saved(gray, "TIFF", compression="tiff_lzw"),
        "tiff-rgb-deflate": saved(rgb, "TIFF", compression="tiff_adobe_deflate"),
        "tiff-rgba": saved(rgba, "TIFF"),
        "tiff-palette": saved(rgb.quantize(16), "TIFF"),
        "tiff-bilevel": saved(gray.convert("1"), "TIFF"),
        "tiff-packbits": saved(rgb, "TIFF", compression="packbits"),
        "gif-palette": saved(rgb.quantize(16), "GIF"),
        "gif-gray": saved(gray, "GIF", optimize=False),
        "gif-interlaced": saved(rgb.quantize(16), "GIF", interlace=True),
        "gif-transparent": saved(rgb.quantize(16), "GIF", transparency=2),
        "bmp-rgb24": saved(rgb, "BMP"),
        "bmp-palette8": saved(rgb.quantize(16), "BMP"),
        "bmp-gray8": saved(gray, "BMP"),
        "bmp-rgba32": saved(rgba, "BMP"),
        "bmp-bilevel": saved(gray.convert("1"), "BMP"),
        "bmp-565": bmp(3, 2, 16, bytes(range(16)), 3,
                       struct.pack("<III", 0xF800, 0x7E0, 0x1F)),
        "bmp-top-down": bmp(2, -2, 24, bytes(range(16))),
        "bmp-rle8": bmp(2, 2, 8, b"\x02\x01\x00\x00\x02\x01\x00\x01", 1),
        "ppm": saved(rgb, "PPM"),
        "pgm": saved(gray, "PPM"),
        "pbm": saved(gray.convert("1"), "PPM"),
        "ppm-16bit": b"P6 2 2 65535\n" + bytes(range(24)),
        "pgm-maxval-100": b"P5\n# comment\n3 2\n100\n" + bytes([0, 50, 100, 101, 7, 99]),
        "ppm-plain": b"P3 2 1 255\n1 2 3\n4 5 6\n",
        "pgm-plain": b"P2\n2 2\n15\n0 15\n7 8\n",
        "pbm-plain": b"P1\n3 2\n010\n1 1 0\n",
    }
    # broken on purpose: every seed cut in half and after its header, and
    # sizes past the limits
    for name in list(s):
        s["truncated-half-" + name] = s[name][: len(s[name]) // 2]
        s["truncated-16-" + name] = s[name][:16]
    s["bmp-width-40000"] = bmp(40000, 1, 24, bytes(16))
    s["bmp-height-min"] = bmp(1, -(1 << 31), 24, bytes(16))
    s["pgm-20000x20000"] = b"P5 20000 20000 255\n" + bytes(64)
    s["pgm-maxval-0"] = b"P5 2 2 0\n" + bytes(4)
    s["ppm-plain-sample-too-big"] = b"P3 1 1 9\n1 2 10\n"
    gif = bytearray(s["gif-palette"])
    gif[6:10] = struct.pack("<HH", 65535, 65535)
    s["gif-screen-65535"] = bytes(gif)
    tif = bytearray(s["tiff-rgb"])
    at = tif.find(struct.pack("<HHI", 256, 3, 1))  # ImageWidth, SHORT
    if at > 0:
        tif[at + 8:at + 10] = struct.pack("<H", 40000)
    s["tiff-width-40000"] = bytes(tif)
    flipped = bytearray(s["webp-lossy"])
    for k in range(30, len(flipped), 5):
        flipped[k] ^= 0x55
    s["webp-bit-flips"] = bytes(flipped)
    return s


def window_head(channels, scale, top, left, height, width, side):
    """The 10 bytes before a fuzz_jpeg_window input's image: channels
    (0, 1, 3), scaling on or off, the window as fractions of the size,
    the output side for scaling."""
    frac = [min(0xFFFF, int(v * 0x10000)) for v in (top, left, height, width)]
    code = {0: 0, 1: 1, 3: 2}[channels] | (0x80 if scale else 0)
    return bytes([code]) + struct.pack(">HHHH", *frac) + bytes([side - 1])


def jpeg_window_seeds():
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:72, 0:100]
    noisy = (np.stack([y * 3, x * 2, (x + y)], -1) + rng.integers(0, 40, (72, 100, 3))).astype(np.uint8)
    images = dict(jpeg_seeds())
    images["rgb-420-72x100"] = jpeg(Image.fromarray(noisy), quality=85)
    images["rgb-422-72x100"] = jpeg(Image.fromarray(noisy), quality=85, subsampling=1)
    images["progressive-72x100"] = jpeg(Image.fromarray(noisy), quality=85, progressive=True)
    images["cmyk-72x100"] = jpeg(Image.fromarray(noisy).convert("CMYK"), quality=85)
    heads = {
        "whole": window_head(0, False, 0, 0, 1, 1, 1),
        "middle-rgb": window_head(3, False, 0.3, 0.4, 0.4, 0.3, 1),
        "corner-gray": window_head(1, False, 1, 1, 0, 0, 1),
        "scaled": window_head(3, True, 0.1, 0.1, 0.8, 0.8, 4),
    }
    return {h + "-" + name: head + data
            for h, head in heads.items() for name, data in images.items()}


def main():
    """usage: make_image_seeds.py [png] [jpeg] [image] [jpeg_window] (all
    by default)"""
    kinds = {"png": png_seeds, "jpeg": jpeg_seeds, "image": image_seeds,
             "jpeg_window": jpeg_window_seeds}
    import sys
    wanted = sys.argv[1:] or list(kinds)
    for kind, seeds in ((k, kinds[k]()) for k in wanted):
        os.makedirs(os.path.join(HERE, "corpus", kind), exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(HERE, "corpus", kind, "seed-" + name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
