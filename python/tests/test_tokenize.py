# SPDX-License-Identifier: Apache-2.0
"""The tokenize stage against the reference tokenizers, document by
document, on a real corpus: WordNet's glosses (Debian's wordnet-base)
and a few texts that test the edges (accents, CJK, emoji, contractions,
runs of spaces and newlines, special-token text).

SentencePiece: models trained here with python3-sentencepiece (unigram
and BPE), compared with its encode(). tiktoken: GPT-2's ranks as
js-tiktoken has them, written as a rank file by tiktoken_ref.cjs and
compared with js-tiktoken's encode of the same texts (node; the package
is where scripts/install-deps.sh puts it, EF_NODE_MODULES, or installed
with npm into a scratch folder)."""
import base64
import json
import os
import shutil
import subprocess

import numpy
import pytest

import echoflow

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
WORDNET = "/usr/share/wordnet"
DOCS = 20000  # documents compared per tokenizer

EDGES = [
    "",
    " ",
    "   ",
    "\n\n\n",
    "a  b   c    d",
    "trailing spaces   ",
    "  leading spaces",
    "tabs\tand\t\ttabs\n\tindented",
    "it's, I'm, we'll, they've, you're, she'd, don't; IT'S, O'Neil",
    "Café, naïve, façade, Ångström, Øresund, straße, İstanbul",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "emoji 🎉🎉 and 👩‍👩‍👧 family, flags 🇫🇷🇯🇵, skin 👍🏽",
    "mixed 123abc 4,567.89 ½ ² Ⅻ ٣٤ and numbers12345678901234567890",
    "symbols !!! ??? ... --- *** @#$%^&() [] {} <|endoftext|> <|fim|>",
    "line one\nline two\r\nline three\r\n\r\n\tend",
    "Ελληνικά κείμενα, кириллица, עברית, العربية, हिन्दी",
    "   \n  \n mixed whitespace \u00a0 nbsp \u3000 ideographic",
    "zero\u200bwidth and combining e\u0301 and a\u0308",
    "x" * 3000,
    "word " * 500,
    # pieces long enough for the heap's merge (over 128 bytes)
    "ab" * 700,
    "1234567890" * 50,
    "Supercalifragilisticexpialidocious" * 8,
    "aGVsbG8gd29ybGQgdGhpcyBpcyBhIGxvbmcgYmFzZTY0IGJsb2I" * 6,
    "!?" * 200 + "..." * 100,
    "\u00e9" * 300 + "日本" * 100,
]


def wordnet_glosses(limit):
    """Glosses of WordNet's data files (each line not starting with two
    spaces is an entry; the gloss follows '| '), up to `limit`."""
    out = []
    for part in ("noun", "verb", "adj", "adv"):
        path = os.path.join(WORDNET, "data." + part)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                line = line.rstrip("\n")
                i = line.find("| ")
                out.append(line[i + 2:] if i >= 0 else line)
                if len(out) == limit:
                    return out
    return out


@pytest.fixture(scope="module")
def corpus():
    glosses = wordnet_glosses(DOCS)
    if len(glosses) < DOCS:
        pytest.skip("WordNet's glosses not found under %s: apt-get install "
                    "wordnet-base" % WORDNET)
    return glosses + EDGES


def tokenize(model, texts, opts=""):
    """Each text's ids through the stage (threads=2), in order."""
    spec = "tokenize:model=%s,threads=2%s" % (model, opts)
    out = []
    with echoflow.Pipeline(spec, source=[{"text": t} for t in texts]) as p:
        for s in p:
            assert s.identity.index == len(out)
            out.append(numpy.asarray(s["tokens"]).tolist())
    return out


def compare(got, want, texts):
    """The count of documents whose ids agree; the first that does not
    fails the test, with its text."""
    assert len(got) == len(want) == len(texts)
    same = sum(g == w for g, w in zip(got, want))
    for g, w, t in zip(got, want, texts):
        assert g == w, "ids differ for %r" % t[:200]
    return same


# ---- SentencePiece ------------------------------------------------------

@pytest.fixture(scope="module", params=["unigram", "bpe"])
def spm_model(request, corpus, tmp_path_factory):
    spm = pytest.importorskip(
        "sentencepiece", reason="python3-sentencepiece is not installed")
    d = tmp_path_factory.mktemp("spm")
    prefix = str(d / request.param)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus[:5000]), model_prefix=prefix,
        vocab_size=1000, model_type=request.param, num_threads=2,
        minloglevel=2)
    return prefix + ".model", spm.SentencePieceProcessor(
        model_file=prefix + ".model")


def test_sentencepiece_equals_the_reference(spm_model, corpus):
    path, sp = spm_model
    want = [sp.encode(t) for t in corpus]
    got = tokenize(path, corpus)
    assert compare(got, want, corpus) == len(corpus)
    # kind named, the text kept: the same ids
    some = corpus[:100] + EDGES
    assert tokenize(path, some, ",kind=sentencepiece,text=keep") == \
        [sp.encode(t) for t in some]


def test_sentencepiece_takes_any_bytes(spm_model):
    path, sp = spm_model
    texts = [b"\xff\xfe\xfd", b"ok \xc3 cut", b"\x00nul\x00", b"\xed\xa0\x80"]
    got = tokenize(path, [bytearray(t) for t in texts])
    # as SentencePiece's own encode of the same bytes
    assert got == [sp.encode(t) for t in texts]


# ---- tiktoken (js-tiktoken) ----------------------------------------------

def node_modules(tmp_path_factory):
    """A node_modules folder with js-tiktoken: EF_NODE_MODULES, the one
    scripts/install-deps.sh fills, the build tree's, or npm install into
    a scratch folder. Skips when node or the package cannot be had."""
    if not shutil.which("node"):
        pytest.skip("node is not installed (apt-get install nodejs npm)")
    places = [os.environ.get("EF_NODE_MODULES", ""),
              "/var/cache/echoflow-npm/node_modules",
              os.path.join(ROOT, "build-node", "node_modules")]
    for p in places:
        if p and os.path.exists(os.path.join(p, "js-tiktoken",
                                             "package.json")):
            return p
    if not shutil.which("npm"):
        pytest.skip("js-tiktoken not found in %s and npm is not installed"
                    % places[1:])
    d = tmp_path_factory.mktemp("npm")
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                        "--prefix", str(d), "js-tiktoken@1"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip("npm could not install js-tiktoken: %s"
                    % r.stderr.strip()[-300:])
    return str(d / "node_modules")


def node(*args):
    """Runs the reference script under node. Not with the sanitizer
    runtimes a sanitizer build preloads into this interpreter: node is no
    part of echoflow, and TSan stops it."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["node", os.path.join(HERE, "tiktoken_ref.cjs"), *args],
                   check=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(rank file, node_modules) of GPT-2's ranks from js-tiktoken."""
    mods = node_modules(tmp_path_factory)
    d = tmp_path_factory.mktemp("tiktoken")
    ranks = str(d / "gpt2.tiktoken")
    node(mods, "ranks", ranks)
    return ranks, mods


def js_encode(gpt2, texts, tmp_path):
    ranks, mods = gpt2
    src, dst = str(tmp_path / "in.json"), str(tmp_path / "out.json")
    with open(src, "w", encoding="utf-8") as f:
        json.dump(texts, f)
    node(mods, "encode", src, dst)
    with open(dst, encoding="utf-8") as f:
        return json.load(f)


def test_the_rank_file_is_gpt2s(gpt2):
    with open(gpt2[0], "rb") as f:
        lines = f.read().splitlines()
    assert len(lines) == 50256
    first, last = lines[0].split(), lines[-1].split()
    assert base64.b64decode(first[0]) == b"!" and first[1] == b"0"
    assert last[1] == b"50255"


def test_tiktoken_equals_js_tiktoken(gpt2, corpus, tmp_path):
    want = js_encode(gpt2, corpus, tmp_path)
    got = tokenize(gpt2[0], corpus)
    assert compare(got, want, corpus) == len(corpus)
    assert tokenize(gpt2[0], EDGES, ",kind=tiktoken") == want[-len(EDGES):]


def test_tiktoken_takes_any_bytes(gpt2):
    """Bytes that are not UTF-8 are ids too, and the ids' bytes put back
    together are the text."""
    with open(gpt2[0], "rb") as f:
        vocab = {int(r): base64.b64decode(t)
                 for t, r in (line.split() for line in f)}
    texts = [b"\xff\xfe\xfd", b"ok \xc3 cut", b"\x00nul\x00",
             b"\xed\xa0\x80 surrogate", b"caf\xc3\xa9 \xe6\x97", b"\x80" * 50,
             bytes(range(256))]
    for t, ids in zip(texts, tokenize(gpt2[0], [bytearray(t) for t in texts])):
        assert b"".join(vocab[i] for i in ids) == t


# ---- end to end: JSON Lines to a token file -------------------------------

def test_jsonl_to_a_token_file_equals_the_reference(gpt2, spm_model, corpus,
                                                    tmp_path):
    """`echoflow tokens "jsonl:... | tokenize:..."`: the file holds each
    document's reference ids and the eos, in order, from the CLI and from
    echoflow.write_tokens alike."""
    cli = os.environ.get("ECHOFLOW_CLI")
    if not cli:
        pytest.skip("ECHOFLOW_CLI is not set (the echoflow command)")
    docs = str(tmp_path / "docs.jsonl")
    with open(docs, "w", encoding="utf-8") as f:
        for t in corpus:
            f.write(json.dumps({"id": len(t), "text": t}) + "\n")
    # (an empty text is still a line of its own: the source keeps it)
    sp_path, sp = spm_model
    refs = [(gpt2[0], js_encode(gpt2, corpus, tmp_path), 50256),
            (sp_path, [sp.encode(t) for t in corpus], 2)]
    for model, want, eos in refs:
        stream = [i for ids in want for i in ids + [eos]]
        spec = "jsonl:files=%s | tokenize:model=%s,threads=auto" % (docs,
                                                                    model)
        out = str(tmp_path / "cli.bin")
        subprocess.run([cli, "tokens", spec, out, "--eos", str(eos)],
                       check=True, timeout=600, capture_output=True)
        assert numpy.fromfile(out, dtype="<u2").tolist() == stream
        out = str(tmp_path / "py.bin")
        assert echoflow.write_tokens(spec, out, eos=eos) == len(stream)
        assert numpy.fromfile(out, dtype="<u2").tolist() == stream
