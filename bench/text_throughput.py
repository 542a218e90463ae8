#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tokens per second from JSON lines to batches of token blocks: echoflow's
`jsonl | tokenize | pack_tokens | batch` against the same work in Python
(json, python3-sentencepiece, numpy packing), both on the same cores and
consumed from Python. Python runs two ways: document by document, as a
torch Dataset's __iter__ usually does, and in lists of 1024 documents that
SentencePiece encodes on T threads of its own (its fastest use). A third
row times SentencePiece's encode alone on all documents, already parsed,
on T threads: the tokenizer's own cost, which every pipeline built on it
pays. Prints the markdown table of
docs/BENCHMARKS.md's "Text to token blocks" section on stdout, progress on
stderr.

usage: bench/text_throughput.py [--build DIR] [--docs N] [--vocab V]
                                [--threads T] [--reps R] [--futex]

--futex also runs the same pipeline under `strace -f -c` (echoflow run,
the build's command) and prints the futex calls per document: how often
its threads handed items over with a wake-up.

The corpus is WordNet 3.0's glosses (Debian's wordnet-base), one document
per synset, repeated until it holds N documents; the SentencePiece model
(unigram, V pieces) is trained on it once with python3-sentencepiece.
Both sides tokenize the same documents with the same model into the same
blocks (checked: the first batches are compared), T threads each.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
WORDNET = "/usr/share/wordnet"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def wordnet_glosses():
    """(lemmas: gloss) of every synset, in file order."""
    for part in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET, "data." + part),
                  encoding="utf-8") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue
                head, gloss = line.split(" | ", 1)
                words = head.split()
                n = int(words[3], 16)
                lemmas = [w.replace("_", " ") for w in words[4:4 + 2 * n:2]]
                yield ", ".join(lemmas) + ": " + gloss.strip()


def write_corpus(path, docs):
    texts = list(wordnet_glosses())
    with open(path, "w", encoding="utf-8") as f:
        for text in itertools.islice(itertools.cycle(texts), docs):
            f.write(json.dumps({"text": text}) + "\n")
    return texts


def python_batches(path, model, block, batch, eos, threads, per_doc=False):
    """The Python pipeline: json, SentencePiece (per document, or lists of
    documents on its own threads), numpy concatenation and blocks."""
    sp = spm.SentencePieceProcessor(model_file=model)
    pending = np.empty(0, np.int32)
    rows = block * batch
    with open(path, encoding="utf-8") as f:
        while True:
            lines = list(itertools.islice(f, 1024))
            if not lines:
                return
            docs = [json.loads(x)["text"] for x in lines]
            if per_doc:
                ids = [sp.encode(d) for d in docs]
            else:
                ids = sp.encode(docs, num_threads=threads)
            flat = np.fromiter(
                itertools.chain.from_iterable(d + [eos] for d in ids),
                np.int32)
            pending = np.concatenate([pending, flat])
            # every batch of `batch` blocks whose targets are all here
            while len(pending) > rows:
                x = pending[:rows].reshape(batch, block)
                y = pending[1:rows + 1].reshape(batch, block)
                yield x, y
                pending = pending[rows:]


def echoflow_spec(path, model, block, batch, eos, threads):
    return ("jsonl:files=%s | tokenize:model=%s,threads=%d "
            "| pack_tokens:block=%d,eos=%d | batch:%d"
            % (path, model, threads, block, eos, batch))


def echoflow_batches(echoflow, path, model, block, batch, eos, threads):
    spec = echoflow_spec(path, model, block, batch, eos, threads)
    for b in echoflow.Pipeline(spec):
        yield b["inputs"], b["targets"]


def tokenizer_alone(path, model, threads):
    """SentencePiece on every document at once, on its threads."""
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(path, encoding="utf-8") as f:
        docs = [json.loads(x)["text"] for x in f]
    t0 = time.perf_counter()
    ids = sp.encode(docs, num_threads=threads)
    return sum(len(d) + 1 for d in ids), time.perf_counter() - t0


def futex_calls(build, args):
    """The futex calls of the whole pipeline run by the build's command,
    counted by strace -f -c."""
    out = subprocess.run(
        ["strace", "-f", "-c", "-e", "trace=futex", "-o", "/dev/stderr",
         os.path.join(build, "echoflow"), "run", echoflow_spec(*args)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        check=True).stderr
    for line in out.splitlines():
        words = line.split()
        if words and words[-1] == "futex":
            return int(words[3])
    return 0


def rate(batches):
    t0 = time.perf_counter()
    tokens = 0
    for x, _ in batches:
        tokens += np.asarray(x).size
    return tokens, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--docs", type=int, default=400000)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--futex", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python"))
    import echoflow

    tmp = tempfile.mkdtemp(prefix="ef_text_bench.")
    corpus = os.path.join(tmp, "corpus.jsonl")
    log("text_throughput: writing %d documents" % a.docs)
    texts = write_corpus(corpus, a.docs)
    log("text_throughput: training a %d-piece SentencePiece model"
        % a.vocab)
    prefix = os.path.join(tmp, "sp")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=prefix,
        vocab_size=a.vocab, model_type="unigram", eos_id=2,
        minloglevel=2, num_threads=a.threads)
    model = prefix + ".model"
    eos = 2
    args = (corpus, model, a.block, a.batch, eos, a.threads)

    # the same blocks on both sides
    for (x1, y1), (x2, y2) in zip(
            itertools.islice(python_batches(*args), 20),
            echoflow_batches(echoflow, *args)):
        if not (np.array_equal(x1, np.asarray(x2)) and
                np.array_equal(y1, np.asarray(y2))):
            sys.exit("text_throughput: echoflow's blocks differ from "
                     "Python's")

    runs = {"python-doc": [], "python": [], "echoflow": [], "alone": []}
    for rep in range(a.reps):
        for name in runs:
            if name == "alone":
                tokens, secs = tokenizer_alone(corpus, model, a.threads)
                runs[name].append((tokens, secs))
                continue
            if name == "echoflow":
                batches = echoflow_batches(echoflow, *args)
            else:
                batches = python_batches(*args, per_doc=name == "python-doc")
            tokens, secs = rate(batches)
            runs[name].append((tokens, secs))
            log("text_throughput: rep %d %s: %d tokens in %.2f s"
                % (rep + 1, name, tokens, secs))

    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short",
                             "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    best = {n: max(t / s for t, s in r) for n, r in runs.items()}
    print("Run on commit %s: %d documents (%.1f M tokens), a %d-piece "
          "unigram model, blocks of %d, batches of %d, %d threads each; "
          "best of %d." % (commit, a.docs, runs["python"][0][0] / 1e6,
                           a.vocab, a.block, a.batch, a.threads, a.reps))
    print()
    print("| pipeline | tokens/s (each run) | best |")
    print("| --- | ---: | ---: |")
    for name, label in [("python-doc", "Python, document by document: "
                         "json, sentencepiece, numpy"),
                        ("python", "Python, lists of 1024 documents on %d "
                         "sentencepiece threads" % a.threads),
                        ("echoflow", "echoflow: jsonl, tokenize:threads=%d, "
                         "pack_tokens, batch" % a.threads),
                        ("alone", "SentencePiece's encode alone (parsed "
                         "documents, %d threads, ids counted with eos)"
                         % a.threads)]:
        each = ", ".join("%.2f M" % (t / s / 1e6) for t, s in runs[name])
        print("| %s | %s | %.2f M |" % (label, each, best[name] / 1e6))
    print()
    print("echoflow / Python document by document: %.2fx; / Python in "
          "lists on its threads: %.2fx"
          % (best["echoflow"] / best["python-doc"],
             best["echoflow"] / best["python"]))
    print()
    print("echoflow / SentencePiece alone: %.2fx"
          % (best["echoflow"] / best["alone"]))
    if a.futex:
        calls = futex_calls(os.path.abspath(a.build), args)
        print()
        print("futex calls per document (strace -f -c, echoflow run): %.3f "
              "(%d for %d documents)" % (calls / a.docs, calls, a.docs))


if __name__ == "__main__":
    main()
