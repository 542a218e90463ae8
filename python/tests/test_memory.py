# SPDX-License-Identifier: Apache-2.0
"""The memory budget bounds what a pipeline holds: each source, and
tokenize, on hostile sizes (huge files, records, lines, words; many
readers; endless HTTP bodies) under a small budget, each in a child
process of its own, so that its peak RSS (VmHWM) is its alone.

Each case asserts that the child's RSS grew by no more than the budget
plus SLACK while the pipeline ran, and that it ended as expected: read to
the end, or failed with the library's out-of-memory error naming the
stage and the size. Under sanitizers RSS says nothing (shadow memory,
quarantined frees), so there only the outcomes are checked."""
import http.server
import io
import json
import os
import socketserver
import struct
import subprocess
import sys
import tarfile
import threading

import pytest

SANITIZED = ("san.so" in os.environ.get("LD_PRELOAD", "")
             or bool(os.environ.get("EF_SANITIZED")))
MiB = 1 << 20
BUDGET = 16 * MiB
# The slack: the budget counts the payload bytes of queues and buffers,
# and beyond it a pipeline holds, by design, the item read for the
# consumer's next turn, which may pass the budget so that nothing can
# deadlock (one item: up to the budget itself), or a source's read buffer
# (a text line: up to the budget too); then one item per hand-over that
# no queue counts (the one a stage works on, the one the consumer holds)
# and fixed costs: threads' stacks, stream and HTTP buffers, the
# interpreter's objects per sample, the allocator's unreturned pages. One
# budget plus 16 MiB covers these at the sizes here; the failures this
# test guards against went past it two to twelve times over.
SLACK = BUDGET + 16 * MiB

# The child: a fresh interpreter (so that VmHWM is its own, from its exec
# on), which runs the pipeline to its end as a slow consumer would (so
# that read-ahead fills up wherever it can) and prints its RSS before the
# pipeline, its peak after, and the error if any.
CHILD = r"""
import json, sys, time
import echoflow

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

spec, budget = sys.argv[1], int(sys.argv[2])
before, error = status("VmRSS"), None
try:
    with echoflow.Pipeline(spec, memory_budget=budget) as p:
        for s in p:
            time.sleep(0.002)
except echoflow.Error as e:
    error = str(e)
print(json.dumps({"before": before, "peak": status("VmHWM"),
                  "error": error}))
"""


def run(spec, budget=BUDGET):
    """Runs spec in a child process: (error message or None, the child's
    peak RSS less its RSS before the pipeline, in bytes)."""
    # glibc fills what malloc hands out (MALLOC_PERTURB_), so memory
    # held but never written shows in RSS too
    env = dict(os.environ, MALLOC_PERTURB_="165")
    p = subprocess.run([sys.executable, "-c", CHILD, spec, str(budget)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.splitlines()[-1])
    return r["error"], r["peak"] - r["before"]


def check(spec, budget=BUDGET, fails=None):
    """Runs spec: it must end cleanly (fails=None) or fail over the memory
    budget with every string of `fails` in its message; its peak RSS must
    stay within the budget and SLACK over what it was before."""
    error, grew = run(spec, budget)
    if not SANITIZED:
        bound = budget + SLACK
        assert grew <= bound, ("%s: RSS grew by %.1f MiB, over %.1f MiB "
                               "(budget %.1f + slack %.1f); %s"
                               % (spec, grew / MiB, bound / MiB,
                                  budget / MiB, SLACK / MiB,
                                  error or "no error"))
    if fails is None:
        assert error is None, error
    else:
        assert error is not None, "expected a failure: %s" % spec
        assert "memory budget" in error, error
        for s in fails:
            assert s in error, error
    return error


# ---- files --------------------------------------------------------------

def write_files(d, n, size):
    os.makedirs(d, exist_ok=True)
    chunk = bytes(range(256)) * (size // 256)
    for i in range(n):
        with open(os.path.join(d, "f%03d.bin" % i), "wb") as f:
            f.write(chunk)
    return d


def test_files_many_readers(tmp_path):
    # 32 readers of 6 MiB files: each reader alone fits the budget, all of
    # them together do not
    d = write_files(str(tmp_path / "f"), 64, 6 * MiB)
    check("files:glob=%s/*.bin,readers=32" % d)


def test_files_one_file_over_the_budget(tmp_path):
    d = write_files(str(tmp_path / "f"), 2, 24 * MiB)
    check("files:glob=%s/*.bin" % d,
          fails=["files", str(24 * MiB) + " bytes"])


class Endless(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a body that never ends, without a length."""
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        block = b"x" * (64 << 10)
        try:
            while True:
                self.wfile.write(block)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def endless_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_files_endless_http_bodies(endless_server, tmp_path):
    # 8 readers each on a body that never ends: one alone passes the
    # budget and fails; together they must not hold 8 budgets first
    lst = tmp_path / "urls.txt"
    lst.write_text("".join("%s/b%d.bin\n" % (endless_server, i)
                           for i in range(8)))
    check("files:list=%s,readers=8" % lst,
          fails=["files", "b0.bin"])


# ---- tar ----------------------------------------------------------------

@pytest.mark.parametrize("ordered", ["true", "false"])
def test_tar_many_readers(tmp_path, ordered):
    # 16 shards read at once, each of samples of 6 MiB
    block = bytes(range(256)) * (6 * MiB // 256)
    for s in range(16):
        with tarfile.open(str(tmp_path / ("s%02d.tar" % s)), "w") as t:
            for k in range(3):
                info = tarfile.TarInfo("%02d_%d.bin" % (s, k))
                info.size = len(block)
                t.addfile(info, io.BytesIO(block))
    check("tar:urls=%s/s{00..15}.tar,cycle=16,ordered=%s"
          % (tmp_path, ordered))


# ---- tfrecord, tfexample ------------------------------------------------

def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def masked_crc(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_tfrecord_length_over_the_budget(tmp_path):
    # a header that claims 1 GiB, then little: refused before allocating
    n = struct.pack("<Q", 1 << 30)
    path = tmp_path / "r.tfrecord"
    path.write_bytes(n + struct.pack("<I", masked_crc(n)) + b"\0" * 4096)
    check("tfrecord:files=%s" % path,
          fails=["tfrecord", str(1 << 30) + " bytes"])
    check("tfrecord:files=%s | tfexample:features='a'" % path,
          fails=["tfrecord", str(1 << 30) + " bytes"])


# ---- idx, cifar -----------------------------------------------------------

def test_idx_over_the_budget(tmp_path):
    # a header that claims 10^6 images of 100 x 100, and a short file
    path = tmp_path / "images.idx"
    path.write_bytes(struct.pack(">IIII", 0x803, 10 ** 6, 100, 100)
                     + b"\0" * 4096)
    check("idx:images=%s" % path, fails=["idx"])


def test_cifar(tmp_path):
    # a file is read whole: 5,000 records (15 MiB) fit the budget, 6,000
    # do not
    rec = b"\x03" + bytes(3072)
    path = tmp_path / "data_batch_1.bin"
    path.write_bytes(rec * 5000)
    check("cifar:files=%s | shuffle:100" % path)
    path.write_bytes(rec * 6000)
    check("cifar:files=%s" % path, fails=["cifar", "records"])


# ---- jsonl, text ----------------------------------------------------------

def test_jsonl_long_lines_small_documents(tmp_path):
    # 400 lines of 1 MiB whose document is a few bytes: a shuffle buffer
    # holds them all, and must hold their documents only
    pad = "p" * MiB
    path = tmp_path / "d.jsonl"
    with open(path, "w") as f:
        for i in range(400):
            f.write('{"pad": "%s", "text": "doc %d"}\n' % (pad, i))
    check("jsonl:files=%s | shuffle:1000" % path)


def test_text_long_lines(tmp_path):
    # 64 lines of 1 MiB into a shuffle buffer: the budget bounds it
    path = tmp_path / "d.txt"
    with open(path, "w") as f:
        for i in range(64):
            f.write("t" * MiB + "\n")
    check("text:files=%s | shuffle:1000" % path,
          fails=["shuffle"])


def test_text_line_longer_than_the_budget(tmp_path):
    path = tmp_path / "d.txt"
    with open(path, "w") as f:
        f.write("t" * (3 * BUDGET))
    error, grew = run("text:files=%s" % path)
    assert error is not None and "no end of line" in error, error
    if not SANITIZED:
        assert grew <= BUDGET + SLACK


# ---- tokens -------------------------------------------------------------

def test_tokens_large_blocks(tmp_path):
    # blocks of 1M tokens: 8 MiB a sample (inputs and targets, i32)
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(range(256)) * (32 * MiB // 256))
    check("tokens:files=%s,block=1000000 | shuffle:100" % path,
          fails=["shuffle"])


# ---- tokenize -------------------------------------------------------------

def rank_file(path):
    """A tiktoken rank file: the 256 bytes, and "aa", "aaaa" merged."""
    import base64
    toks = [bytes([b]) for b in range(256)] + [b"aa", b"aaaa"]
    path.write_text("".join("%s %d\n" % (base64.b64encode(t).decode(), i)
                            for i, t in enumerate(toks)))
    return path


def test_tokenize_one_huge_word(tmp_path):
    # one word of 2 MiB: its ids fit the budget, but it is one piece to
    # merge, whose working memory alone passes the budget
    model = rank_file(tmp_path / "ranks.tiktoken")
    path = tmp_path / "w.txt"
    path.write_text("a" * (2 * MiB) + "\n")
    check("text:files=%s | tokenize:model=%s" % (path, model),
          fails=["tokenize", "piece of %d bytes" % (2 * MiB)])


def test_tokenize_many_ids(tmp_path):
    # a document of 10 MiB of short words without a merge: an id per
    # byte, 40 MiB of them
    model = rank_file(tmp_path / "ranks.tiktoken")
    path = tmp_path / "d.txt"
    path.write_text("xy " * (10 * MiB // 3) + "\n")
    check("text:files=%s | tokenize:model=%s" % (path, model),
          fails=["tokenize", "ids of a text of %d bytes" % (10 * MiB // 3 * 3)])


def test_tokenize_sentencepiece_long_document(tmp_path):
    # SentencePiece's lattice over a document of 1 MiB: over 200 MiB
    spm = pytest.importorskip(
        "sentencepiece", reason="python3-sentencepiece is not installed")
    words = ["the", "cat", "house", "memory", "budget", "token", "piece"]
    sents = [" ".join(words[(i * 7 + k) % len(words)] for k in range(9))
             for i in range(2000)]
    prefix = str(tmp_path / "m")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sents), model_prefix=prefix, vocab_size=60,
        model_type="unigram", minloglevel=2, hard_vocab_limit=False)
    path = tmp_path / "d.txt"
    path.write_text("a" * MiB + "\n")
    check("text:files=%s | tokenize:model=%s.model" % (path, prefix),
          fails=["tokenize", "SentencePiece, a text of %d bytes" % MiB])
