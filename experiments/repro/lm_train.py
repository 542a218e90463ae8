#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One language-model cell: a small causal Transformer trained on a token
file through echoflow.torch.Loader, until the validation loss reaches a
target or the fresh tokens reach a cap; prints one JSON object, as
`echoflow train --json` does for the image cells.

  lm_train.py --train train.bin --val val.bin --vocab 1024 \\
      --lr 0.003 --seed 0 --target-loss 4.0 --max-fresh 2000000 \\
      [--echo factor=2,shuffle=10000 --echo-at example|batch] --json

The training pipeline is
  tokens:files=TRAIN,block=N,order=random | [echo:E |] batch:B [| echo:E]
(echo before batch: example echoing; after it: batch echoing), read with
the Loader's seed = --seed, so a cell's data order is its seed's; the
model's initial weights come from torch.manual_seed(--seed). On one
thread (--threads 1) a cell gives the same numbers on every run.

Fresh tokens are the tokens the source read for the steps taken:
steps * batch * block / e, e the echo factor (1 without echo). Validation
loss is the mean token cross-entropy (nats) on a fixed subset of the
validation file: --val-blocks blocks of --block tokens at evenly spaced
offsets, evaluated every --eval-every steps (and at step 0). The target is
reached at the first evaluation at or below --target-loss.

Needs torch, numpy and the echoflow package (PYTHONPATH=build/python)."""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm Transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class LM(nn.Module):
    """A small GPT: token and position embeddings, `layers` blocks, a final
    LayerNorm and an output layer tied to the token embedding."""

    def __init__(self, vocab, block, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(
            torch.ones(block, block, dtype=torch.bool), diagonal=1))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask)
        return self.ln(x) @ self.tok.weight.t()


def train_spec(a):
    src = "tokens:files=%s,block=%d,order=random" % (a.train, a.block)
    batch = "batch:%d" % a.batch
    if not a.echo:
        return " | ".join([src, batch])
    echo = "echo:" + a.echo
    if a.echo_at == "example":
        return " | ".join([src, echo, batch])
    return " | ".join([src, batch, echo])


def echo_factor(echo):
    """e of an echo option string (factor=E,...), 1 without echo."""
    for kv in (echo or "").split(","):
        k, _, v = kv.partition("=")
        if k == "factor":
            return float(v)
    return 1.0


def val_blocks(path, block, n):
    """n blocks (inputs, targets) of the validation file at evenly spaced
    offsets: the same subset for every cell."""
    ids = np.fromfile(path, dtype="<u2").astype(np.int64)
    windows = len(ids) - block
    starts = np.linspace(0, windows - 1, n).astype(np.int64)
    x = np.stack([ids[s:s + block] for s in starts])
    y = np.stack([ids[s + 1:s + block + 1] for s in starts])
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def evaluate(model, vx, vy, batch=256):
    model.eval()
    total = 0.0
    for i in range(0, len(vx), batch):
        logits = model(vx[i:i + batch])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                 vy[i:i + batch].reshape(-1),
                                 reduction="sum").item()
    model.train()
    return total / vx.numel()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.
                                 RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True)
    ap.add_argument("--val", required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--warmup", type=int, default=100,
                    help="steps of linear lr warm-up, then constant")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--echo", default="",
                    help="the echo stage's options, e.g. factor=2,"
                    "shuffle=10000")
    ap.add_argument("--echo-at", choices=["example", "batch"],
                    default="example")
    ap.add_argument("--target-loss", type=float, required=True)
    ap.add_argument("--max-fresh", type=int, required=True,
                    help="stop after this many fresh tokens")
    ap.add_argument("--eval-every", type=int, default=100, help="steps")
    ap.add_argument("--val-blocks", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import echoflow.torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    e = echo_factor(a.echo)
    tokens_per_step = a.batch * a.block
    model = LM(a.vocab, a.block, a.d_model, a.layers, a.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / a.warmup))
    vx, vy = val_blocks(a.val, a.block, a.val_blocks)
    spec = train_spec(a)
    loader = echoflow.torch.Loader(spec, seed=a.seed,
                                   as_tuple=("inputs", "targets"))

    step = 0
    curve = []  # (step, fresh tokens, validation loss)
    res = {"reached": False, "diverged": False, "fresh_to_target": None,
           "steps_to_target": None, "time_to_target_s": None}
    eval_s = train_s = 0.0
    fresh_counted = 0  # fresh blocks by the batches' identities, to check e

    def fresh_tokens():
        return int(round(step * tokens_per_step / e))

    def check():
        nonlocal eval_s
        t = time.monotonic()
        loss = evaluate(model, vx, vy)
        eval_s += time.monotonic() - t
        curve.append((step, fresh_tokens(), round(loss, 4)))
        if not math.isfinite(loss):
            res["diverged"] = True
            return True
        if loss <= a.target_loss and not res["reached"]:
            res.update(reached=True, fresh_to_target=fresh_tokens(),
                       steps_to_target=step,
                       time_to_target_s=round(train_s, 3))
            return True
        return False

    done = check()
    epoch = 0
    t = time.monotonic()
    while not done:
        loader.set_epoch(epoch)
        for item in loader:
            fresh_counted += item.identity.fresh
            x, y = item
            logits = model(x.long())
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   y.long().reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step % a.eval_every == 0 or fresh_tokens() >= a.max_fresh:
                train_s += time.monotonic() - t
                done = check() or fresh_tokens() >= a.max_fresh
                t = time.monotonic()
                if done:
                    break
        epoch += 1
    train_s += time.monotonic() - t
    out = dict(res)
    out.update(fresh=fresh_tokens(), steps=step, final_loss=curve[-1][2],
               best_loss=min(c[2] for c in curve),
               train_time_s=round(train_s, 3), eval_time_s=round(eval_s, 3),
               tokens_per_s=round(step * tokens_per_step / max(train_s, 1e-9)),
               fresh_counted=fresh_counted * a.block,
               echo_effective_factor=round(step * a.batch /
                                           max(fresh_counted, 1), 4),
               epochs=epoch, train_spec=spec, curve=curve,
               params=sum(p.numel() for p in model.parameters()))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
