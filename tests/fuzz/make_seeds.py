#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the hand-made seeds of corpus/idx, corpus/spec, corpus/tar,
corpus/tfrecord, corpus/tfexample, corpus/cifar, corpus/paths, corpus/jsonl,
corpus/tiktoken, corpus/spm_model, corpus/chunk, corpus/npy, corpus/coco
and corpus/json_boxes (run from any directory;
existing seeds are overwritten, inputs the fuzzer added are kept). Seeds
are named seed-*; fuzzer finds keep libFuzzer's hash names, crash
reproducers are named crash-*."""
import base64
import gzip
import io
import json
import os
import struct
import tarfile

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
    s["gzip-magic"] = gzip.compress(idx(0x08, [1, 2]), mtime=0)
    if os.path.exists(FASHION):  # two real 28x28 images
        with gzip.open(FASHION) as f:
            head = f.read(16)
            pixels = f.read(2 * 784)
        s["fashion-2-images"] = head[:4] + struct.pack(">I", 2) + head[8:16] + pixels
    return s


# ---- tar ------------------------------------------------------------

def tar_header(name, size, type_=b"0", magic=b"ustar\x0000", prefix=b"",
               size_field=None, checksum=None, signed=False, linkname=b""):
    """One 512-byte header block, its fields set by hand."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = size_field if size_field is not None else b"%011o\x00" % size
    h[136:148] = b"00000000000\x00"
    h[156:157] = type_
    h[157:157 + len(linkname)] = linkname
    h[257:257 + len(magic)] = magic
    h[345:345 + len(prefix)] = prefix
    h[148:156] = b" " * 8
    if checksum is None:
        checksum = sum((b - 256 if b > 127 else b) if signed else b for b in h)
    h[148:156] = b"%06o\x00 " % checksum
    return bytes(h)


def tar_member(name, data, **kw):
    pad = b"\0" * ((512 - len(data) % 512) % 512)
    return tar_header(name, len(data), **kw) + data + pad


def pax_records(pairs):
    out = b""
    for k, v in pairs:
        body = b" " + k + b"=" + v + b"\n"
        n = len(body) + 1
        while len(str(n).encode()) + len(body) != n:
            n += 1
        out += str(n).encode() + body
    return out


END = b"\0" * 1024


def tarfile_bytes(fmt, members, pax_headers=None):
    buf = io.BytesIO()
    kw = {"format": fmt}
    if pax_headers:
        kw["pax_headers"] = pax_headers
    with tarfile.open(fileobj=buf, mode="w", **kw) as tf:
        for name, data, type_ in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            if type_ == "dir":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif type_ == "sym":
                ti.type = tarfile.SYMTYPE
                ti.linkname = data
                tf.addfile(ti)
            elif type_ == "fifo":
                ti.type = tarfile.FIFOTYPE
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def tar_seeds():
    s = {}
    small = [("s/000.jpg", b"\xff\xd8jpeg0", "f"), ("s/000.cls", b"3", "f"),
             ("s/001.jpg", b"\xff\xd8jpeg1", "f"), ("s/001.cls", b"7", "f")]
    long_dir = "d" * 120 + "/" + "e" * 60
    long_members = [(long_dir + "/k.seg.PNG", b"png", "f"),
                    (long_dir + "/k.txt", b"text", "f")]
    s["ustar-4-members"] = tarfile_bytes(tarfile.USTAR_FORMAT, small)
    s["pax-long-names"] = tarfile_bytes(tarfile.PAX_FORMAT, long_members)
    s["gnu-long-names"] = tarfile_bytes(tarfile.GNU_FORMAT, long_members)
    s["ustar-prefix"] = tarfile_bytes(tarfile.USTAR_FORMAT, long_members)
    s["entries-skipped"] = tarfile_bytes(
        tarfile.GNU_FORMAT,
        [("s", b"", "dir"), ("s/a.txt", b"a", "f"), ("s/l.txt", "a.txt", "sym"),
         ("s/p", b"", "fifo"), ("s/a.bin", b"b" * 600, "f")])
    s["pax-global"] = tarfile_bytes(tarfile.PAX_FORMAT, small[:2],
                                    pax_headers={"comment": "seed"})
    s["empty-archive"] = END
    s["empty"] = b""
    s["no-end-blocks"] = tar_member(b"a.txt", b"abc")
    s["one-end-block"] = tar_member(b"a.txt", b"abc") + b"\0" * 512
    s["lone-zero-block"] = (tar_member(b"a.txt", b"abc") + b"\0" * 512 +
                            tar_member(b"b.txt", b"d") + END)
    s["base256-size"] = tar_member(b"a.txt", b"x" * 5,
                                   size_field=b"\x80" + (5).to_bytes(11, "big")) + END
    s["base256-negative"] = tar_member(b"a.txt", b"",
                                       size_field=b"\xff" * 12) + END
    s["size-spaces"] = tar_member(b"a.txt", b"xyz", size_field=b"  3 \0\0\0\0\0\0\0\0") + END
    s["size-garbage"] = tar_member(b"a.txt", b"", size_field=b"12x4\0" + b"\0" * 7) + END
    s["v7-no-magic"] = tar_member(b"v7.txt", b"old", magic=b"") + END
    s["v7-directory"] = (tar_member(b"d/", b"", magic=b"", type_=b"\0") +
                         tar_member(b"d/v7.txt", b"old", magic=b"", type_=b"\0") + END)
    s["signed-checksum"] = tar_member(b"\xe9t\xe9.txt", b"s", signed=True) + END
    s["bad-checksum"] = tar_member(b"a.txt", b"abc", checksum=1) + END
    s["blank-checksum"] = tar_member(b"a.txt", b"abc")[:148] + b"\0" * 8 + \
        tar_member(b"a.txt", b"abc")[156:] + END
    good = tar_member(b"s/000.jpg", b"J" * 700) + tar_member(b"s/000.cls", b"1") + END
    s["truncated-in-header"] = good[:300]
    s["truncated-in-data"] = good[:512 + 100]
    s["truncated-in-padding"] = good[:512 + 710]
    s["truncated-second-header"] = good[:1536 + 10]
    pax = pax_records([(b"path", b"p/" + b"q" * 150 + b".data.bin"), (b"mtime", b"0")])
    s["pax-handmade"] = (tar_member(b"PaxHeader", pax, type_=b"x") +
                         tar_member(b"short", b"payload") + END)
    pax = pax_records([(b"size", b"5")])
    s["pax-size-override"] = (tar_member(b"PaxHeader", pax, type_=b"x") +
                              tar_header(b"o.txt", 0) + b"12345" + b"\0" * 507 + END)
    s["pax-bad-record"] = tar_member(b"PaxHeader", b"99 path=x\n", type_=b"x") + \
        tar_member(b"a.txt", b"a") + END
    s["pax-no-newline"] = tar_member(b"PaxHeader", b"10 path=ab", type_=b"x") + \
        tar_member(b"a.txt", b"a") + END
    s["pax-sparse"] = tar_member(b"PaxHeader", pax_records([(b"GNU.sparse.major", b"1")]),
                                 type_=b"x") + tar_member(b"a.txt", b"a") + END
    s["pax-then-end"] = tar_member(b"PaxHeader", pax_records([(b"path", b"x.y")]),
                                   type_=b"x") + END
    s["pax-then-eof"] = tar_member(b"PaxHeader", pax_records([(b"path", b"x.y")]),
                                   type_=b"x")
    s["gnu-longlink"] = (tar_member(b"././@LongLink", b"t" * 130 + b"\0", type_=b"K") +
                         tar_header(b"l", 0, type_=b"2", linkname=b"t" * 99) +
                         tar_member(b"a.txt", b"a") + END)
    s["gnu-sparse"] = tar_member(b"s.bin", b"", type_=b"S") + END
    s["unknown-type"] = tar_member(b"z.bin", b"zz" * 300, type_=b"Z") + \
        tar_member(b"a.txt", b"a") + END
    s["meta-too-big"] = tar_header(b"././@LongLink", 2 << 20, type_=b"L") + b"x" * 512
    s["member-too-big"] = tar_header(b"big.bin", 3 << 30) + b"x" * 512
    s["member-larger-than-file"] = tar_header(b"big.bin", 100 << 20) + b"x" * 512
    s["group-duplicate-field"] = (tar_member(b"x.jpg", b"1") + tar_member(b"x.JPG", b"2") +
                                  tar_member(b"y.jpg", b"3") + END)
    s["group-too-many-fields"] = b"".join(
        tar_member(b"x.f%d" % i, b"%d" % i) for i in range(8)) + \
        tar_member(b"y.jpg", b"3") + END
    s["group-long-field"] = (tar_member(b"x." + b"f" * 30, b"1") +
                             tar_member(b"y.jpg", b"3") + END)
    s["group-no-dot"] = (tar_member(b"dir.d/README", b"1") + tar_member(b"y.jpg", b"3") +
                         END)
    s["group-reserved-field"] = (tar_member(b"x.__key__", b"1") +
                                 tar_member(b"y.__URL__", b"3") + END)
    s["group-empty-key"] = tar_member(b".jpg", b"1") + tar_member(b"d/.cls", b"2") + END
    s["group-key-returns"] = (tar_member(b"x.a", b"1") + tar_member(b"y.a", b"2") +
                              tar_member(b"x.b", b"3") + END)
    return s


# ---- tfrecord -------------------------------------------------------

def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data, bad_len_crc=False, bad_data_crc=False, length=None):
    n = struct.pack("<Q", len(data) if length is None else length)
    lc = masked(n) ^ (1 if bad_len_crc else 0)
    dc = masked(data) ^ (1 if bad_data_crc else 0)
    return n + struct.pack("<I", lc) + data + struct.pack("<I", dc)


def tfrecord_seeds():
    s = {}
    three = record(b"first") + record(b"") + record(bytes(range(200)))
    s["three-records"] = three
    s["one-record"] = record(b"hello tfrecord")
    s["empty"] = b""
    s["empty-record"] = record(b"")
    s["bad-length-crc"] = record(b"abc", bad_len_crc=True) + record(b"def")
    s["bad-data-crc-then-good"] = record(b"abc", bad_data_crc=True) + record(b"def")
    s["truncated-header"] = three[:7]
    s["truncated-data"] = record(b"x" * 100)[:50]
    s["truncated-data-crc"] = record(b"x" * 100)[:-2]
    s["huge-length"] = struct.pack("<Q", 1 << 40) + struct.pack(
        "<I", masked(struct.pack("<Q", 1 << 40))) + b"abc"
    n = struct.pack("<Q", 3 << 20)
    s["length-past-end"] = n + struct.pack("<I", masked(n)) + b"abc" * 100
    s["trailing-byte"] = three + b"\0"
    return s


# ---- cifar ----------------------------------------------------------

def cifar_record(label, seed):
    return bytes([label]) + bytes((seed * 31 + i * 7) & 0xFF for i in range(3072))


def cifar_seeds():
    s = {}
    s["one-record"] = cifar_record(3, 1)
    s["two-records"] = cifar_record(0, 2) + cifar_record(9, 3)
    s["empty"] = b""
    s["partial"] = cifar_record(1, 4)[:1000]
    s["one-and-a-bit"] = cifar_record(1, 5) + b"\x02"
    s["bad-label"] = cifar_record(10, 6)
    s["label-255"] = cifar_record(5, 7) + cifar_record(255, 8)
    return s


# ---- path lists -----------------------------------------------------

PATHS = {
    "padded": "shards/train-{000000..000009}.tar",
    "list-and-range": "{train,val}/part-{0..3}.tfrecord extra.tar",
    "nested": "{a,b{1..2}}-{9..7}.tar",
    "url": "http://host:8080/d/s-{00..12}.tar https://h/x.tar",
    "wider-bound": "x{8..010}",
    "empty-alt": "a{b,}c",
    "unclosed": "a-{0..3.tar",
    "stray-close": "a}b",
    "empty-group": "x{}",
    "not-a-range": "{abc}",
    "open-range": "{1..}",
    "too-many": "{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}",
    "deep": "{a," * 20 + "x" + "}" * 20,
    "blank": " \t\n ",
    "plain-words": "a.tar  b.tar\tc.tar\n",
    "big-numbers": "{999999999999999990..999999999999999999}",
}


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
    'tar:urls="shards/a-{000000..000009}.tar b.tar",cycle=2,ordered=false',
    'tar:urls="{a,b{1..2}}-{9..7}.tar"',
    'tar:urls="http://h/x-{0..3}.tar",tries=3,timeout=0.5,shuffle_shards=false',
    "tar:urls=a-{0..3}.tar,shard=5/8",
    'tar:urls="a{b"',
    'tar:urls="a}b"',
    'tar:urls="{}"',
    'tar:urls="{abc}"',
    'tar:urls="{1..}"',
    'tar:urls="{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}"',
    'tar:urls="   "',
    'tar:urls="' + "{a," * 20 + "x" + "}" * 20 + '"',
    "tfrecord:files=/nonexistent/x-{00..03}.tfrecord,compression=gzip",
    "tfrecord:files=x,compression=zip",
    "tfrecord:files=x,field=" + "f" * 30,
    "tfrecord:files=x-{0..1},shard=2/3",
    "cifar:files=/nonexistent/data_batch_{1..5}.bin | batch:2",
    "cifar:files=a,shard=1/2 | echo:2",
    "range:n=4,bytes=8 | decode_crop:fields=data,size=8,dct_scale=0",
    "range:n=1 | decode_crop:scale_min=0.9,scale_max=0.1,channels=2",
]


# ---- tfexample ------------------------------------------------------

def pb_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def pb_len(num, body):
    return pb_varint(num << 3 | 2) + pb_varint(len(body)) + body


def pb_example(entries):
    """An Example of (key, Feature bytes) entries."""
    fs = b"".join(pb_len(1, pb_len(1, k) + pb_len(2, f)) for k, f in entries)
    return pb_len(1, fs)


def int64s(vals, packed=True):
    if packed:
        lst = pb_len(1, b"".join(pb_varint(v) for v in vals))
    else:
        lst = b"".join(pb_varint(1 << 3) + pb_varint(v) for v in vals)
    return pb_len(3, lst)


def floats(vals, packed=True):
    if packed:
        lst = pb_len(1, b"".join(struct.pack("<f", v) for v in vals))
    else:
        lst = b"".join(pb_varint(1 << 3 | 5) + struct.pack("<f", v) for v in vals)
    return pb_len(2, lst)


def strings(vals):
    return pb_len(1, b"".join(pb_len(1, v) for v in vals))


def tfexample_seeds():
    s = {}
    image = pb_example([(b"image/encoded", strings([b"\xff\xd8\xff jpeg"])),
                        (b"label", int64s([7])),
                        (b"floats", floats([0.5, -2.0, 1e-3]))])
    s["image-label"] = image
    s["unpacked"] = pb_example([(b"label", int64s([1, -1, 1 << 62], False)),
                                (b"floats", floats([1.5, 2.5], False))])
    s["duplicate-key"] = pb_example([(b"k", int64s([1])), (b"k", floats([2.0]))])
    s["empty-key-and-lists"] = pb_example([(b"", strings([])), (b"x", int64s([])),
                                           (b"k", b"")])
    s["oneof-twice"] = pb_example([(b"x", int64s([3]) + strings([b"a", b"b"]))])
    s["unknown-fields"] = (pb_varint(9 << 3) + pb_varint(300) +
                           pb_varint(10 << 3 | 1) + b"8 bytes!" +
                           pb_varint(11 << 3 | 5) + b"4byt" + image)
    s["features-twice"] = image + pb_example([(b"label", int64s([8]))])
    s["empty"] = b""
    s["truncated"] = image[:-3]
    s["bad-varint"] = pb_example([(b"label", pb_len(3, pb_varint(8) + b"\xff" * 11))])
    s["group"] = pb_varint(2 << 3 | 3) + image
    return s


# ---- tiktoken rank files and text (fuzz_tiktoken) --------------------

def rank_file(merges=(), skip=None, nl=b"\n"):
    lines = [base64.b64encode(bytes([b])) + b" %d" % b
             for b in range(256) if b != skip]
    lines += [base64.b64encode(m) + b" %d" % (256 + i)
              for i, m in enumerate(merges)]
    return nl.join(lines) + nl


def tiktoken_seeds():
    merges = [b"th", b"he", b"the", b" t", b"in", b"ing", b"\xc3\xa9", b"  "]
    good = rank_file(merges)
    return {
        "ranks-bytes": rank_file(),
        "ranks-merges": good,
        "ranks-crlf-blank": rank_file(merges, nl=b"\r\n") + b"\n\n",
        "ranks-missing-byte": rank_file(merges, skip=65),
        "ranks-bad-line": good + b"not base64! 7\n",
        "ranks-dup-rank": good + base64.b64encode(b"xyz") + b" 300\n" +
                          base64.b64encode(b"xyw") + b" 300\n",
        "ranks-dup-token": good + base64.b64encode(b"th") + b" 301\n",
        "ranks-no-rank": good + b"YWJj\n",
        "text-ascii": b"Tthe thing is, it's  thinning\n\nthe end ",
        "text-unicode": "Tcafé 日本語 🎉 naïve  \u00a0\u3000 x".encode(),
        "text-invalid": b"T\xff\xfe the \xc3 \xe6\x97 \xed\xa0\x80 ok\x80",
        "text-spaces": b"T   \n \t\r\n  a  b\n\n\n",
    }


# ---- SentencePiece models and charsmaps (fuzz_spm_model) -------------

FIXTURES = os.path.join(HERE, "..", "fixtures", "tokenize")


def pb_fields(b):
    """(number, offset, length) of each length-delimited field of b."""
    at, out = 0, []
    while at < len(b):
        key, at = read_varint(b, at)
        kind = key & 7
        if kind == 0:
            _, at = read_varint(b, at)
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        else:
            n, at = read_varint(b, at)
            out.append((key >> 3, at, n))
            at += n
    return out


def read_varint(b, at):
    v = shift = 0
    while True:
        c = b[at]
        at += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, at


def spm_model_seeds():
    with open(os.path.join(FIXTURES, "verbs_rules.model"), "rb") as f:
        model = f.read()
    with open(os.path.join(FIXTURES, "verbs_bpe.model"), "rb") as f:
        identity = f.read()
    _, spec, spec_len = next(x for x in pb_fields(model) if x[0] == 3)
    _, at, n = next(x for x in pb_fields(model[spec:spec + spec_len]) if x[0] == 2)
    at += spec
    cm = model[at:at + n]
    trie = struct.unpack("<I", cm[:4])[0]

    def damaged(offset, patch):
        return cm[:offset] + patch + cm[offset + len(patch):]

    far = struct.pack("<I", 0x7FFFFC00)
    strings = cm[4 + trie:]
    return {
        "model-rules": b"M" + model,
        "model-identity": b"M" + identity,
        "model-rules-root": b"M" + model[:at + 4] + far + model[at + 8:],
        "model-cut": b"M" + model[:at + 100],
        "charsmap-rules": cm,
        "charsmap-size": damaged(0, struct.pack("<I", len(cm) - 2)),
        "charsmap-root": damaged(4, far),
        "charsmap-no-nul": cm[:4 + trie] + strings.replace(b"\0", b"x"),
        "charsmap-short": cm[:3],
    }


# ---- jsonl: one line each --------------------------------------------

JSONL = {
    "plain": '{"text": "a document"}',
    "escapes": r'{"id": 7, "text": "caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t"}',
    "nested": '{"meta": {"a": [1, -2.5e+3, true, false, null, {"b": []}]}, "text": "x"}',
    "utf8": '{"text": "\u6f22\u5b57 raw \u00e9", "text": "last wins"}',
    "empty": '{"text": ""}',
    "spaces": ' \t{ "text" : "padded" } \r',
    "lone-surrogate": '{"text": "\\ud800"}',
    "not-string": '{"text": 12}',
    "missing": '{"other": "x"}',
    "cut": '{"text": "unterminated',
    "junk": '{"text": "a"} junk',
    "deep": '{"a": ' + "[" * 70 + "]" * 70 + '}',
}


# ---- coco: whole COCO instances files -------------------------------

def coco_seeds():
    """COCO annotations (src/codec/coco.c), good and broken."""
    doc = {
        "info": {"year": 2017}, "licenses": [],
        "images": [{"id": 1, "file_name": "a/1.jpg", "width": 20, "height": 10},
                   {"id": 2, "file_name": "2.png", "width": 8, "height": 8}],
        "annotations": [
            {"segmentation": [[1, 2, 3, 4.5, 5, 6]], "area": 6.0, "iscrowd": 0,
             "image_id": 1, "bbox": [1, 2, 3.5, 4], "category_id": 3, "id": 1},
            {"segmentation": {"counts": [1, 2], "size": [10, 20]}, "iscrowd": 1,
             "image_id": 2, "bbox": [0, 0, 8, 8], "category_id": 1, "id": 2}],
        "categories": [{"id": 3, "name": "dog", "supercategory": "animal"},
                       {"id": 1, "name": "caf\u00e9"}],
    }
    good = json.dumps(doc)
    s = {"good": good.encode(),
         "pretty": json.dumps(doc, indent=2).encode(),
         "cut": good[:len(good) // 2].encode(),
         "no-images": b'{"annotations": []}',
         "empty-images": b'{"images": []}',
         "dup-key": good.replace('"bbox": [1, 2, 3.5, 4]',
                                 '"bbox": [1, 2, 3.5, 4], "bbox": [1]').encode(),
         "bad-image-ref": good.replace('"image_id": 2', '"image_id": 9').encode(),
         "bbox-3": good.replace("[1, 2, 3.5, 4]", "[1, 2, 3.5]").encode(),
         "huge": good.replace('"id": 1,', '"id": 1e999,').encode(),
         "deep": ('{"images": [], "x": ' + "[" * 70 + "]" * 70 + "}").encode(),
         "escapes": b'{"images": [{"id": 1, "file_name": "\\ud83d\\ude00.png\\n", '
                    b'"width": 1, "height": 1}]}',
         "bad-escape": b'{"images": [{"id": 1, "file_name": "\\x.png"}]}'}
    return s


# ---- json_boxes: one detection sample's JSON each ---------------------

def json_boxes_seeds():
    """Detection JSON (src/codec/json_boxes.c), as `echoflow pack` writes
    it and broken; keys f and scores are read as f32."""
    good = ('{"boxes": [[1.10000002, 2.29999995, 6.80000019, 5.5999999], '
            '[0, 0, 3, 4]], "labels": [0, 1], "iscrowd": [0, 1], '
            '"image_id": 102}')
    s = {"good": good,
         "empty": '{"boxes": [], "labels": [], "image_id": 7}',
         "floats": '{"boxes": [[-0, 1e-45, 3.40282347e+38, 0.333333343]], '
                   '"scores": [0.5], "f": -1.5e-10, "n": -9223372036854775808}',
         "escaped-keys": '{"boxes": [], "a\\"b": 1, "\\u00e9\\n": [], '
                         '"caf\u00e9": 2}',
         "ragged": good.replace("[0, 0, 3, 4]", "[0, 0, 3]"),
         "lengths": good.replace('"labels": [0, 1]', '"labels": [0]'),
         "fraction": good.replace('"image_id": 102', '"image_id": 102.5'),
         "f32-range": '{"boxes": [[0, 0, 1e39, 1]]}',
         "string": good.replace("[0, 1]", '["0", 1]', 1),
         "dup": good.replace('"image_id"', '"labels"'),
         "trailing": good + " x",
         "not-object": "[" + good + "]",
         "deep": '{"boxes": [], "x": ' + "[" * 70 + "]" * 70 + "}",
         "no-boxes": '{"labels": []}'}
    return {k: v.encode() for k, v in s.items()}


def chunk_field(name, dtype, shape, offset, nbytes, ragged=()):
    """One field of a service chunk header (src/service/chunk.c)."""
    out = struct.pack("<H", len(name)) + name + struct.pack("<BB", dtype, len(shape))
    out += b"".join(struct.pack("<q", d) for d in shape)
    out += struct.pack("<QQq", offset, nbytes, len(ragged))
    return out + b"".join(struct.pack("<q", n) for n in ragged)


def chunk(samples, payload, magic=0x31434645):
    """A chunk header: samples are (index, epoch, echo_copy, fresh,
    [fields])."""
    out = struct.pack("<IIqQ", magic, 0, len(samples), payload)
    for index, epoch, copy, fresh, fields in samples:
        out += struct.pack("<qqiii", index, epoch, copy, fresh, len(fields))
        out += b"".join(fields)
    return out


def chunk_seeds():
    image = chunk_field(b"image", 0, (28, 28), 0, 784)
    label = chunk_field(b"label", 2, (), 784, 8)
    one = (5, 1, 0, 0, [image, label])
    text = chunk_field(b"text", 0, (3,), 0, 3, ragged=(1, 2))
    return {
        "one": chunk([one], 800),
        "two": chunk([one, (6, 1, 1, 0, [chunk_field(b"image", 0, (28, 28), 800, 784),
                                        chunk_field(b"label", 2, (), 1584, 8)])], 1600),
        "ragged": chunk([(0, 0, 0, 3, [text])], 16),
        "empty-sample": chunk([(1, 0, 0, 0, [])], 0),
        "batch": chunk([(2, 0, 0, 64, [chunk_field(b"image", 0, (64, 28, 28), 0, 50176),
                                       chunk_field(b"label", 2, (64,), 50176, 512)])], 50688),
        "overlap": chunk([(0, 0, 0, 0, [image, chunk_field(b"label", 2, (), 0, 8)])], 800),
        "outside": chunk([one], 100),
        "bad-magic": chunk([one], 800, magic=0x31434646),
        "cut": chunk([one], 800)[:40],
        "bad-shape": chunk([(0, 0, 0, 0, [chunk_field(b"image", 0, (28, 28), 0, 700)])], 784),
    }


def npy(descr, shape, payload=None, version=1, fortran=False, dict_text=None,
        esize=None):
    """An NPY file as numpy.save writes it (header padded to 64 bytes)."""
    text = dict_text or "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, fortran, "(%s)" % "".join("%d, " % d for d in shape).rstrip(" ")
        if len(shape) != 1 else "(%d,)" % shape[0])
    pre = 10 if version == 1 else 12
    pad = -(pre + len(text) + 1) % 64
    text = (text + " " * pad + "\n").encode()
    head = b"\x93NUMPY" + bytes([version, 0]) + (
        struct.pack("<H", len(text)) if version == 1 else struct.pack("<I", len(text)))
    if payload is None:
        n = esize or int(descr[2:])
        for d in shape:
            n *= d
        payload = bytes((i * 7) & 0xFF for i in range(n))
    return head + text + payload


def npy_seeds():
    s = {}
    for code in ("b1", "u1", "i1", "i2", "u2", "i4", "i8", "f2", "f4", "f8"):
        order = "|" if code[1] == "1" else "<"
        s[code + "-3x2"] = npy(order + code, (3, 2))
    s["f4-rows-scalars"] = npy("<f4", (5,))
    s["u1-2x2x2x2"] = npy("|u1", (2, 2, 2, 2))
    s["zero-rows"] = npy("<f4", (0, 3))
    s["zero-inner"] = npy("<f4", (4, 0))
    s["v2"] = npy("<i2", (2, 3), version=2)
    s["v3"] = npy("<i2", (2, 3), version=3)
    s["big-endian"] = npy(">f4", (2,))
    s["fortran"] = npy("<i4", (2, 2), fortran=True)
    s["structured"] = npy("", (1,), dict_text="{'descr': [('a', '<i4')], "
                          "'fortran_order': False, 'shape': (1,), }", esize=4)
    s["negative"] = npy("", (1,), dict_text="{'descr': '<i4', 'fortran_order': "
                        "False, 'shape': (-1,), }", payload=b"")
    s["huge"] = npy("", (1,), dict_text="{'descr': '<f8', 'fortran_order': "
                    "False, 'shape': (4611686018427387904, 2), }", payload=b"")
    s["0-d"] = npy("", (), dict_text="{'descr': '<f8', 'fortran_order': "
                   "False, 'shape': (), }", payload=b"\0" * 8)
    s["long-ints"] = npy("", (2,), dict_text="{'descr': '<i2', 'fortran_order': "
                         "False, 'shape': (2L,), }", payload=b"\1\0\2\0")
    s["missing-key"] = npy("", (1,), dict_text="{'descr': '<i4', 'shape': (1,)}",
                           payload=b"\0" * 4)
    s["not-a-dict"] = npy("", (1,), dict_text="['<i4', False, (1,)]",
                          payload=b"\0" * 4)
    s["short-data"] = npy("<f4", (4, 4))[:-3]
    s["long-data"] = npy("<f4", (4, 4)) + b"\0"
    s["bad-magic"] = b"\x93NUMPZ" + npy("|u1", (2,))[6:]
    s["version-9"] = npy("|u1", (2,))[:6] + b"\x09\x00" + npy("|u1", (2,))[8:]
    s["header-past-end"] = npy("|u1", (2,))[:8] + struct.pack("<H", 60000)
    s["truncated"] = b"\x93NUMPY\x01"
    return s


def main():
    for name, data in idx_seeds().items():
        with open(os.path.join(HERE, "corpus", "idx", "seed-" + name), "wb") as f:
            f.write(data)
    for i, spec in enumerate(SPECS):
        with open(os.path.join(HERE, "corpus", "spec", "seed-%02d" % i), "wb") as f:
            f.write(spec.encode())
    paths = {k: v.encode() for k, v in PATHS.items()}
    for target, seeds in (("tar", tar_seeds()), ("tfrecord", tfrecord_seeds()),
                          ("tfexample", tfexample_seeds()),
                          ("cifar", cifar_seeds()), ("paths", paths),
                          ("jsonl", {k: v.encode() for k, v in JSONL.items()}),
                          ("tiktoken", tiktoken_seeds()),
                          ("spm_model", spm_model_seeds()),
                          ("chunk", chunk_seeds()), ("npy", npy_seeds()),
                          ("coco", coco_seeds()),
                          ("json_boxes", json_boxes_seeds())):
        os.makedirs(os.path.join(HERE, "corpus", target), exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(HERE, "corpus", target, "seed-" + name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
