#!/usr/bin/env python3
"""Writes the hand-made seeds of corpus/idx and corpus/spec (run from any
directory; existing seeds are overwritten, inputs the fuzzer added are
kept). Seeds are named seed-*; fuzzer finds keep libFuzzer's hash names,
crash reproducers are named crash-*."""
import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def idx(code, dims, payload=None, esize=1):
    head = bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    if payload is None:
        n = 1
        for d in dims:
            n *= d
        payload = bytes((i * 7) & 0xFF for i in range(n * esize))
    return head + payload


def idx_seeds():
    s = {}
    s["images-u8-2x3x3"] = idx(0x08, [2, 3, 3])
    s["labels-u8-4"] = idx(0x08, [4], bytes([0, 9, 3, 7]))
    s["i32-2x2"] = idx(0x0C, [2, 2], esize=4)
    s["f32-3"] = idx(0x0D, [3], struct.pack(">3f", 0.5, -1.0, 3.25))
    s["f32-1x1x1x1x1x1x2"] = idx(0x0D, [1, 1, 1, 1, 1, 1, 2], esize=4)
    s["zero-records"] = idx(0x08, [0, 28, 28])
    s["zero-inner-dim"] = idx(0x08, [5, 0, 3])
    s["empty"] = b""
    s["short-header"] = b"\x00\x00\x08"
    s["short-dims"] = bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0])
    s["short-data"] = idx(0x08, [2, 3, 3])[:-1]
    s["trailing-byte"] = idx(0x08, [2, 3, 3]) + b"\x00"
    s["bad-magic"] = b"\x01\x00" + idx(0x08, [2, 2])[2:]
    s["bad-type-i8"] = idx(0x09, [2, 2])
    s["bad-type-f64"] = idx(0x0E, [1], b"\x00" * 8)
    s["ndim-0"] = bytes([0, 0, 8, 0])
    s["ndim-8"] = idx(0x08, [1] * 8)
    s["dims-overflow"] = idx(0x08, [0xFFFFFFFF] * 7, b"")
    s["dims-huge-first"] = idx(0x0D, [0x40000000, 1], b"\x00" * 16)
    s["gzip-magic"] = gzip.compress(idx(0x08, [1, 2]))
    if os.path.exists(FASHION):  # two real 28x28 images
        with gzip.open(FASHION) as f:
            head = f.read(16)
            pixels = f.read(2 * 784)
        s["fashion-2-images"] = head[:4] + struct.pack(">I", 2) + head[8:16] + pixels
    return s


SPECS = [
    "range:n=10",
    "range:n=10,bytes=4 | batch:size=3",
    "range:7|batch:size=3,drop_remainder=true",
    "range:n=10,bytes=3 | echo:2 | batch:3",
    "range:n=10,bytes=8 | batch:4 | echo:2",
    "range:n=20 | echo:1.5,shuffle=4",
    "range:n=20 | echo:3,shuffle=5 | take:count=7",
    "range:n=30 | echo:factor=auto,max=3,pool=4",
    "range:n=30 | prefetch:depth=3 | echo:factor=auto,max=2,pool=2",
    "range:n=20 | shuffle:buffer=8 | repeat:count=2",
    "range:n=3 | repeat | take:10",
    "range:n=0 | repeat",
    "range:n=1 | take:count=0 | repeat",
    "range:n=12,bytes=2 | map:fn=to_f32,threads=2 | batch:4",
    "range:n=12 | map:fn=noop,threads=3,ordered=false | prefetch:2",
    "range:n=5 | map:fn=noop | repeat:count=3",
    "range:n=6 | batch:4 | batch:2",
    "range:n=4 | batch:1|batch:1|batch:1|batch:1|batch:1|batch:1",
    "  range : n = 3 ,bytes= 1 |  echo : factor = 2  ",
    'range:n=3 | map:fn="noop",ordered="true"',
    'range:n=3 | map:fn="no,op"',
    'range:n=3 | map:fn="no|op"',
    'range:n=3 | map:fn="noop',
    "idx:images=/nonexistent/images,labels=/nonexistent/labels | batch:2",
    "range:n=10 | throttle:rate=1000",
    "",
    "|",
    "range:n=1|",
    "range:",
    "range:n=",
    "range:n=-1",
    "range:n=abc",
    "range:n=99999999999999999999",
    "range:n=9200000000000000001",
    "range:n=1,n=2",
    "range:m=1",
    "range:1,2",
    "range:n=1,,bytes=2",
    "range:n=1,",
    "range:=1",
    "ran ge:n=1",
    "nosuch:1",
    "batch:2",
    "echo:2 | range:n=3",
    "range:n=1 | range:n=1",
    "range:n=1 | echo:factor=auto,max=0",
    "range:n=1 | echo:factor=automatic",
    "range:n=1 | echo:factor=0.5",
    "range:n=1 | echo:factor=nan",
    "range:n=1 | echo:factor=1e400",
    "range:n=1 | batch:size=0",
    "range:n=1 | batch:size=2,drop_remainder=maybe",
    "range:n=1 | map:threads=2",
    "range:n=1 | map:fn=sqrt",
    "range:n=1 | shuffle",
    "range:n=1 | prefetch:depth=0",
    "range:n=1 | repeat:count=0",
    "range:n=1 | " + " | ".join(["take:5"] * 64),
    "a" * 80 + ":n=1",
    "range:n=8,bytes=6 | batch:3 | random_crop:pad=1,field=data",
    "range:n=8,bytes=6 | batch:3 | flip:p=1,field=data,threads=2",
    "range:n=4,bytes=4 | batch:2 | map:fn=to_f32 | flip:field=data | random_crop:field=data,pad=0",
    "range:n=4 | random_crop",
    "range:n=2 | flip:field=",
    "range:n=2 | flip:p=1.5",
    "range:n=2 | random_crop:pad=-1",
    "range:n=2 | flip:field=" + "f" * 30,
    "range:n=4\0echo:2 | batch:2",
    "range:n=4\0range:n=2",
    "range:n=4\0batch:2 | nosuch",
    "\0range:n=3 | echo:2",
    # image stages (batched range data stands in for images)
    "range:n=6,bytes=12 | batch:2 | resize:size=3,field=data | normalize:field=data",
    "range:n=6,bytes=12 | batch:2 | random_resized_crop:size=2,field=data,threads=2",
    "range:n=4,bytes=6 | batch:2 | batch:2 | to_chw:field=data | cast:f32,field=data",
    "range:n=4,bytes=6 | batch:2 | normalize:mean=\"1,2\",std=\"0.5\",field=data",
    "range:n=4,bytes=6 | batch:2 | cast:dtype=i64,field=data | cast:u8,field=data",
    "range:n=4,bytes=8 | decode:fields=data",
    "range:n=4,bytes=8 | decode:fields=\"data,index\",channels=2",
    "range:n=1 | resize:height=4",
    "range:n=1 | random_resized_crop:scale_min=0.9,scale_max=0.1",
]


def main():
    for name, data in idx_seeds().items():
        with open(os.path.join(HERE, "corpus", "idx", "seed-" + name), "wb") as f:
            f.write(data)
    for i, spec in enumerate(SPECS):
        with open(os.path.join(HERE, "corpus", "spec", "seed-%02d" % i), "wb") as f:
            f.write(spec.encode())


if __name__ == "__main__":
    main()
