# SPDX-License-Identifier: Apache-2.0
"""Text to batches of token blocks, end to end: WordNet's glosses as JSON
Lines (zstd) served over HTTP (connections cut too), `jsonl | tokenize |
pack_tokens | batch` against the same blocks made in Python (json,
python3-sentencepiece, numpy); the same text written as a token file by
`echoflow tokens` and read back by the `tokens` source; and the chain
checkpointed with example echoing and resumed exactly."""
import os
import subprocess

import numpy
import pytest

import echoflow
from test_text import wordnet_docs, write_jsonl, zstd
from conftest import start_http_server

spm = pytest.importorskip("sentencepiece")

BLOCK, BATCH, EOS = 64, 8, 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not os.path.exists("/usr/share/wordnet/data.noun"):
        pytest.skip("wordnet-base is not installed (scripts/install-deps.sh)")
    d = tmp_path_factory.mktemp("blocks")
    docs = wordnet_docs(6000)
    write_jsonl(str(d / "docs.jsonl"), docs)
    zstd(str(d / "docs.jsonl"))
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(docs[:3000]), model_prefix=str(d / "sp"),
        vocab_size=800, model_type="unigram", eos_id=EOS, minloglevel=2)
    return d, docs, str(d / "sp.model")


def reference_stream(docs, model):
    sp = spm.SentencePieceProcessor(model_file=model)
    ids = []
    for d in docs:
        ids.extend(sp.encode(d))
        ids.append(EOS)
    return numpy.array(ids, numpy.int32)


def reference_batches(docs, model):
    stream = reference_stream(docs, model)
    blocks = (len(stream) - 1) // BLOCK
    x = stream[:blocks * BLOCK].reshape(blocks, BLOCK)
    y = stream[1:blocks * BLOCK + 1].reshape(blocks, BLOCK)
    return x, y  # the last batch may be short


def chain(url, model, tail=""):
    return ("jsonl:files=%s | tokenize:model=%s,threads=2 | "
            "pack_tokens:block=%d,eos=%d%s | batch:%d"
            % (url, model, BLOCK, EOS, tail, BATCH))


@pytest.mark.parametrize("extra", [(), ("--cut-every", "100000")])
def test_jsonl_over_http_to_batches_of_blocks(corpus, extra):
    d, docs, model = corpus
    want_x, want_y = reference_batches(docs, model)
    proc, port = start_http_server(str(d), *extra)
    try:
        url = "http://127.0.0.1:%d/docs.jsonl.zst" % port
        with echoflow.Pipeline(chain(url, model)) as p:
            got = [(numpy.asarray(b["inputs"]), numpy.asarray(b["targets"]))
                   for b in p]
    finally:
        proc.kill()
        proc.wait()
    x = numpy.concatenate([a for a, _ in got])
    y = numpy.concatenate([b for _, b in got])
    assert x.shape == want_x.shape and len(x) >= 100 * BATCH
    assert numpy.array_equal(x, want_x) and numpy.array_equal(y, want_y)


def test_a_token_file_from_jsonl(corpus, tmp_path):
    d, docs, model = corpus
    out = tmp_path / "train.bin"
    subprocess.run([os.environ.get("ECHOFLOW_CLI", "echoflow"), "tokens",
                    "jsonl:files=%s/docs.jsonl.zst | tokenize:model=%s"
                    % (d, model), str(out), "--eos", str(EOS)], check=True,
                   capture_output=True)
    want = reference_stream(docs, model)
    assert numpy.array_equal(numpy.fromfile(out, numpy.uint16), want)
    with echoflow.Pipeline("tokens:files=%s,block=%d" % (out, BLOCK)) as p:
        first = next(iter(p))
        assert numpy.array_equal(numpy.asarray(first["inputs"]),
                                 want[:BLOCK])


def test_the_chain_resumes_exactly(corpus):
    d, docs, model = corpus
    spec = chain("%s/docs.jsonl.zst" % d, model,
                 tail=" | shuffle:buffer=40 | echo:factor=2,shuffle=16")

    def fp(b):
        return (numpy.asarray(b["inputs"]).tobytes(),
                numpy.asarray(b["targets"]).tobytes())

    with echoflow.Pipeline(spec, seed=5) as p:
        whole = [fp(b) for b in p]
    assert len(whole) > 200
    for cut in (1, 97, len(whole) - 1):
        p = echoflow.Pipeline(spec, seed=5)
        head = [fp(b) for _, b in zip(range(cut), p)]
        state = p.state_dict()
        p.close()
        with echoflow.Pipeline(spec, seed=5) as q:
            q.load_state_dict(state)
            assert head + [fp(b) for b in q] == whole, cut
