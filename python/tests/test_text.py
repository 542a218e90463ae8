# SPDX-License-Identifier: Apache-2.0
"""The text sources, `jsonl` and `text`: documents equal to what Python's
json module and str.splitlines read, plain, gzip and zstd, local and over
HTTP (connections cut too); shards; blank lines counted; bad lines named
by file, line and byte, dropped alone under on_error=skip; checkpoints
resumed exactly."""
import gzip
import json
import os
import shutil
import subprocess

import numpy
import pytest

import echoflow
from conftest import start_http_server

WORDNET = "/usr/share/wordnet"


def texts(spec, **kw):
    with echoflow.Pipeline(spec, **kw) as p:
        return [numpy.asarray(s["text"]).tobytes().decode("utf-8")
                for s in p]


def wordnet_docs(limit=None):
    """WordNet's synsets as documents: "lemma, lemma: gloss"."""
    docs = []
    for part in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET, "data." + part), "rb") as f:
            for raw in f:
                if raw.startswith(b"  "):
                    continue
                line = raw.decode("utf-8", "replace")
                head, _, gloss = line.partition(" | ")
                fields = head.split()
                n = int(fields[3], 16)
                lemmas = [w.replace("_", " ") for w in fields[4:4 + 2 * n:2]]
                docs.append(", ".join(lemmas) + ": " + gloss.strip())
                if limit and len(docs) == limit:
                    return docs
    return docs


def write_jsonl(path, docs, key="text"):
    with open(path, "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, key: d, "meta": {"n": [i, None]}})
                    + "\n")


def zstd(path):
    subprocess.run(["zstd", "-q", "-f", path, "-o", path + ".zst"],
                   check=True)
    return path + ".zst"


def gz(path):
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    return path + ".gz"


@pytest.fixture(scope="module")
def wordnet(tmp_path_factory):
    if not os.path.exists(os.path.join(WORDNET, "data.noun")):
        pytest.skip("wordnet-base is not installed (scripts/install-deps.sh)")
    d = tmp_path_factory.mktemp("wordnet")
    docs = wordnet_docs(20000)
    path = str(d / "wordnet.jsonl")
    write_jsonl(path, docs)
    return docs, path


@pytest.mark.parametrize("compress", [None, gz, zstd])
def test_jsonl_equals_python_json(wordnet, compress):
    docs, path = wordnet
    if compress:
        path = compress(path)
    assert texts("jsonl:files=%s" % path) == docs


def test_escapes_and_unicode_as_json_loads(tmp_path):
    docs = ["caf\u00e9 \u6f22\u5b57 \U0001f600", "tab\there \"quoted\" \\",
            "line\nbreak", "", "\u0000 nul", "/slash/"]
    path = tmp_path / "u.jsonl"
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")        # \u escapes
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        f.write('{"text": "\\ud83d\\ude00", "text2": 1}\n')  # a pair
        f.write('{"text": "first", "text": "last"}\n')       # the last wins
    want = [d for d in docs for _ in range(2)] + ["\U0001f600", "last"]
    assert texts("jsonl:files=%s" % path) == want


def test_text_lines(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"one\r\ntwo\n\n\r\n  \nlast")
    with echoflow.Pipeline("text:files=%s" % path) as p:
        got = [numpy.asarray(s["text"]).tobytes().decode() for s in p]
        stats = p.stats()
    assert got == ["one", "two", "  ", "last"]
    blank = [s for s in stats["stages"] if s["name"] == "text"][0]
    assert blank["blank"] == 2
    # the identity is the line's number in its file, blank lines counted
    with echoflow.Pipeline("text:files=%s" % path) as p:
        assert [s.identity[0] for s in p] == [0, 1, 4, 5]


def test_key_and_field(tmp_path):
    path = str(tmp_path / "k.jsonl")
    write_jsonl(path, ["a", "b"], key="content")
    with echoflow.Pipeline("jsonl:files=%s,key=content,field=doc"
                           % path) as p:
        got = [numpy.asarray(s["doc"]).tobytes().decode() for s in p]
    assert got == ["a", "b"]


def test_shards_split_the_files(tmp_path):
    docs = ["doc %d" % i for i in range(40)]
    for f in range(4):
        write_jsonl(str(tmp_path / ("s%d.jsonl" % f)), docs[f * 10:f * 10 + 10])
    files = "%s/s{0..3}.jsonl" % tmp_path
    parts = [texts("jsonl:files=%s,shard=%d/2" % (files, i)) for i in (0, 1)]
    assert parts[0] == docs[0:10] + docs[20:30]
    assert parts[1] == docs[10:20] + docs[30:40]


def test_bad_lines_are_named_and_skipped_alone(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok 0"}\n'
                    '{"text": "cut\n'
                    '{"text": 5}\n'
                    '{"other": "x"}\n'
                    '["text"]\n'
                    '{"text": "a"} junk\n'
                    '{"text": "\\ud800"}\n'
                    '{"text": "ok 7"}\n')
    with pytest.raises(echoflow.FormatError) as e:
        texts("jsonl:files=%s" % path)
    msg = str(e.value)
    assert "jsonl: file 0 (%s), line 1: byte 13" % path in msg
    assert "expected the closing '\"' of a string" in msg
    with echoflow.Pipeline("jsonl:files=%s" % path, on_error="skip") as p:
        got = [numpy.asarray(s["text"]).tobytes().decode() for s in p]
        stats = p.stats()
    assert got == ["ok 0", "ok 7"]
    assert stats["skipped"] == 6


@pytest.mark.parametrize("line,expected", [
    ('{"text": 5}', 'key "text" holds a number, expected a string'),
    ('{"other": "x"}', 'no key "text" in the object'),
    ('["text"]', "expected '{': each line must be one JSON object"),
    ('{"text": "a"} junk', "byte 14: expected the end of the line"),
    ('{"text": "\\ud800"}', "half of a surrogate pair"),
    ('{"text": "a\\qb"}', "expected an escape"),
    ('{"text": "a", }', "byte 14: expected a key"),
    ('{"a": [1, 2,], "text": "x"}', "byte 12: expected a value"),
    ('{"a": ' + "[" * 70 + "]" * 70 + ', "text": "x"}', "nested more than"),
    ('{"text": "tab\there"}', "control character 0x09"),
])
def test_each_json_error_says_what(tmp_path, line, expected):
    path = tmp_path / "e.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(echoflow.FormatError, match="line 0") as e:
        texts("jsonl:files=%s" % path)
    assert expected in str(e.value)


def test_files_that_cannot_be_read(tmp_path):
    with pytest.raises(echoflow.ReadError, match="nothere.jsonl"):
        texts("jsonl:files=%s/nothere.jsonl" % tmp_path)
    path = str(tmp_path / "d.jsonl")
    write_jsonl(path, ["doc %d %s" % (i, "x" * 200) for i in range(2000)])
    cut = tmp_path / "cut.jsonl.zst"
    data = open(zstd(path), "rb").read()
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(echoflow.FormatError, match="zstd stream truncated"):
        texts("jsonl:files=%s" % cut)
    # skipped: the file is abandoned where it stopped making sense, the
    # documents before come out
    got = texts("jsonl:files=%s" % cut, on_error="skip")
    assert 0 < len(got) < 2000
    assert got == ["doc %d %s" % (i, "x" * 200) for i in range(len(got))]


def test_options_are_checked(tmp_path):
    with pytest.raises(echoflow.SpecError, match="compression"):
        texts("jsonl:files=x,compression=lz4")
    with pytest.raises(echoflow.SpecError, match="shard"):
        texts("text:files=x,shard=1/2")


def test_a_line_longer_than_the_budget(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"short\n" + b"y" * 3000000 + b"\nafter\n")
    with pytest.raises(echoflow.FormatError, match="line 1: offset 6: no end "
                       "of line"):
        texts("text:files=%s" % path, memory_budget=1 << 20)
    assert texts("text:files=%s" % path, memory_budget=1 << 20,
                 on_error="skip") == ["short", "after"]


def fingerprint(s):
    return tuple(s.identity), numpy.asarray(s["text"]).tobytes()


@pytest.mark.parametrize("compress", [None, zstd])
def test_checkpoints_resume_exactly(wordnet, tmp_path, compress):
    docs, _ = wordnet
    for f in range(3):
        path = str(tmp_path / ("w%d.jsonl" % f))
        write_jsonl(path, docs[f * 700:f * 700 + 700])
        if compress:
            compress(path)
    suffix = ".zst" if compress else ""
    spec = ("jsonl:files=%s/w{0..2}.jsonl%s | shuffle:buffer=50 | "
            "echo:factor=2,shuffle=20" % (tmp_path, suffix))
    with echoflow.Pipeline(spec, seed=3) as p:
        whole = [fingerprint(s) for s in p]
    assert len(whole) == 4200
    for cut in (0, 1, 699, 1500, 4199):
        p = echoflow.Pipeline(spec, seed=3)
        head = [fingerprint(s) for _, s in zip(range(cut), p)]
        state = p.state_dict()
        p.close()
        with echoflow.Pipeline(spec, seed=3) as q:
            q.load_state_dict(state)
            assert head + [fingerprint(s) for s in q] == whole, cut


@pytest.mark.parametrize("extra", [(), ("--cut-every", "200000")])
def test_over_http(wordnet, tmp_path, extra):
    docs, path = wordnet
    shutil.copy(path, tmp_path / "w.jsonl")
    zstd(str(tmp_path / "w.jsonl"))
    proc, port = start_http_server(str(tmp_path), *extra)
    try:
        url = "http://127.0.0.1:%d/w.jsonl" % port
        assert texts("jsonl:files=%s" % url) == docs
        assert texts("jsonl:files=%s.zst" % url) == docs
        with pytest.raises(echoflow.ReadError, match="nothere.jsonl"):
            texts("jsonl:files=http://127.0.0.1:%d/nothere.jsonl" % port)
    finally:
        proc.kill()
        proc.wait()
