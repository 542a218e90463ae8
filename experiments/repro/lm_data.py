# SPDX-License-Identifier: Apache-2.0
"""The language model's corpus: WordNet's glosses (Debian's wordnet-base,
/usr/share/wordnet/data.{noun,verb,adj,adv}), one document per synset,
"lemma1, lemma2: gloss", split into training and validation by document,
a SentencePiece model trained on the training documents, and both splits
written as token files the `tokens` source reads.

Why this corpus: a Debian package ships it (nothing to download), its
documents are natural held-out units, and at about 117,000 documents
(some 3 million tokens) it is small enough to train on with 2 CPU cores.

Needs numpy and sentencepiece (python3-numpy, python3-sentencepiece)."""
import json
import os
import re
import zlib

WORDNET = "/usr/share/wordnet"
PARTS = ["noun", "verb", "adj", "adv"]
# Every VAL_EVERY-th document, by a hash of its part of speech and offset,
# is held out: the split does not depend on the order of the files, and a
# synset never has text on both sides.
VAL_EVERY = 20
VOCAB = 1024
EOS = 2  # SentencePiece's default eos id, written after each document
# an adjective's syntactic marker, "(a)", "(p)" or "(ip)", is no part of
# the word
_MARKER = re.compile(r"\([a-z]+\)$")


def parse_synset(line):
    """(offset, "lemma1, lemma2: gloss") of one line of a data.* file, or
    None for the licence lines at its top (they start with two spaces).
    The line is: offset, lexicographer file, type, word count (hex), the
    words each with a lex id, pointers ..., "| gloss"."""
    if line.startswith("  "):
        return None
    head, _, gloss = line.partition("| ")
    f = head.split()
    n = int(f[3], 16)
    lemmas = [_MARKER.sub("", w).replace("_", " ") for w in f[4:4 + 2 * n:2]]
    return f[0], "%s: %s" % (", ".join(lemmas), gloss.strip())


def documents(root=WORDNET):
    """[(part, offset, text)] of every synset, in file order."""
    out = []
    for part in PARTS:
        with open(os.path.join(root, "data." + part),
                  encoding="utf-8", errors="replace") as f:
            for line in f:
                s = parse_synset(line)
                if s:
                    out.append((part, s[0], s[1]))
    return out


def is_validation(part, offset):
    return zlib.crc32(("%s %s" % (part, offset)).encode()) % VAL_EVERY == 0


def split(docs):
    """(training texts, validation texts)."""
    train, val = [], []
    for part, offset, text in docs:
        (val if is_validation(part, offset) else train).append(text)
    return train, val


def write_jsonl(path, texts):
    """One {"text": ...} object a line: the documents as a `jsonl` source
    would read them, for when a pipeline tokenizes them (below)."""
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")


def train_tokenizer(train_txt, prefix, vocab=VOCAB):
    """A SentencePiece BPE model of `vocab` pieces, from a file of
    training documents one a line; returns the model's path. One thread
    and a fixed input order, so the same documents give the same model."""
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        input=train_txt, model_prefix=prefix, vocab_size=vocab,
        model_type="bpe", character_coverage=1.0, num_threads=1,
        eos_id=EOS, unk_id=0, bos_id=1, pad_id=-1, minloglevel=2)
    return prefix + ".model"


def make_token_files(model, splits, dtype="uint16", eos=EOS):
    """Tokenizes each split's documents (a docs.jsonl of {"text"} lines)
    and writes its token file: raw little-endian ids, no header, each
    document followed by `eos`, what the `tokens` source reads. echoflow
    does it, as a user would: `jsonl | tokenize` through
    echoflow.write_tokens, the Python form of
        echoflow tokens 'jsonl:files=DOCS | tokenize:model=MODEL' OUT \\
            --dtype uint16 --eos 2
    splits: [(docs.jsonl, out.bin)]. Returns the tokens written per file.
    Needs the echoflow package on the path."""
    import echoflow
    counts = []
    for docs, out in splits:
        tmp = "%s.tmp.%d" % (out, os.getpid())
        echoflow.write_tokens("jsonl:files=%s | tokenize:model=%s"
                              % (docs, model), tmp, dtype=dtype, eos=eos)
        os.replace(tmp, out)
        counts.append(os.path.getsize(out) // (2 if dtype == "uint16"
                                               else 4))
    return counts


def prepare(work, root=WORDNET, vocab=VOCAB):
    """Builds everything in `work`: docs-{train,val}.jsonl, spm.model,
    train.bin, val.bin. Returns a dict of the paths and counts."""
    os.makedirs(work, exist_ok=True)
    train, val = split(documents(root))
    p = {k: os.path.join(work, v) for k, v in
         [("train_jsonl", "docs-train.jsonl"), ("val_jsonl", "docs-val.jsonl"),
          ("train_txt", "train.txt"), ("train_bin", "train.bin"),
          ("val_bin", "val.bin")]}
    write_jsonl(p["train_jsonl"], train)
    write_jsonl(p["val_jsonl"], val)
    with open(p["train_txt"], "w", encoding="utf-8") as f:
        for t in train:
            f.write(t.replace("\n", " ") + "\n")
    p["model"] = train_tokenizer(p["train_txt"], os.path.join(work, "spm"),
                                 vocab)
    n_train, n_val = make_token_files(
        p["model"], [(p["train_jsonl"], p["train_bin"]),
                     (p["val_jsonl"], p["val_bin"])])
    p.update(docs_train=len(train), docs_val=len(val), tokens_train=n_train,
             tokens_val=n_val, vocab=vocab, eos=EOS)
    return p


if __name__ == "__main__":
    import sys
    import time
    t = time.monotonic()
    info = prepare(sys.argv[1] if len(sys.argv) > 1 else "lm-data")
    print(json.dumps(info, indent=1))
    print("%.1f s" % (time.monotonic() - t))
