# SPDX-License-Identifier: Apache-2.0
"""One rank of the 2-process gloo job of test_ddp_even_steps.py.

    ddp_even_worker.py RANK WORLD_SIZE INIT_FILE OUT_JSON SCENARIOS_JSON

Joins the job through a file:// rendezvous, then runs each scenario in
order: a Loader or an echo() over a DataLoader, on uneven parts of 129
examples at batch 64, with a DistributedDataParallel model taking a
forward and backward step per batch (or, with "train": false, only
counting batches: the naive loop without a model, which cannot hang).
Writes, per scenario, the batches yielded, how many were padding, the
examples each batch held and len() where it is known, to OUT_JSON. The
collectives time out after 60 s, so that a hang fails the job instead of
waiting forever.
"""
import datetime
import faulthandler
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import echoflow
import echoflow.torch


def slow(sample):
    # an input slower than the step, so that echo:factor=auto echoes
    time.sleep(0.002)
    return {"index": sample["index"]}


def boom(sample):
    raise RuntimeError("boom on rank 1")


def odd_short(sample):
    # with on_error="skip": the odd partitions of 6 keep their examples
    # below 24 only, so the rank hosting them runs out long before
    i = int(sample["index"])
    if i % 2 and i >= 24:
        raise ValueError("skipped")
    return {"index": sample["index"]}


MAPS = {"slow": slow, "boom": boom, "odd_short": odd_short}


def options(sc):
    # the option only where a scenario gives it: the naive loop runs on
    # an echoflow without it too
    mode = sc["even_steps"]
    out = {} if mode is None else {"even_steps": mode}
    out.update({k: sc[k] for k in ("partitions", "on_error") if k in sc})
    return out


def loader_of(sc, rank):
    spec = sc["spec"].format(n=sc["n"][rank]) if "n" in sc else sc["spec"]
    maps = {k: f for k, f in MAPS.items() if "map:fn=" + k in spec}
    return echoflow.torch.Loader(spec, maps=maps or None, **options(sc))


def echo_of(sc, rank):
    if sc.get("sampler"):  # DistributedSampler pads: 65 examples each
        data = torch.utils.data.TensorDataset(torch.arange(129))
        sampler = torch.utils.data.distributed.DistributedSampler(
            data, shuffle=False)
        dl = torch.utils.data.DataLoader(data, batch_size=64,
                                         sampler=sampler)
        return echoflow.torch.echo(dl, factor=sc["factor"], **options(sc))
    # rank 0 holds 65 examples, rank 1 64: 2 batches of 64 against 1
    lo, hi = (0, 65) if rank == 0 else (65, 129)
    data = torch.utils.data.TensorDataset(torch.arange(lo, hi))
    dl = torch.utils.data.DataLoader(data, batch_size=64)
    return echoflow.torch.echo(dl, factor=sc["factor"], **options(sc))


def examples_of(batch):
    if isinstance(batch, dict):
        return batch["index"].view(-1).tolist()
    return batch[0].view(-1).tolist()


def step(model, opt, batch):
    x = torch.tensor(examples_of(batch), dtype=torch.float32).view(-1, 1)
    opt.zero_grad()
    F.mse_loss(model(x / 129), x / 258).backward()
    opt.step()


def run(sc, rank, model, opt):
    make = loader_of if sc["kind"] == "loader" else echo_of
    it = make(sc, rank)
    try:
        length = len(it)
    except TypeError:
        length = None
    batches, padding, seen = 0, 0, []
    resume_at = sc.get("resume_at")
    for batch in it:
        batches += 1
        seen.append(examples_of(batch))
        if getattr(it, "padded", 0):  # this batch and all after it pad
            padding += 1
        if sc.get("train", True):
            step(model, opt, batch)
        if batches == resume_at:  # every rank breaks off at this step
            state = it.state_dict()
            break
    assert getattr(it, "padded", 0) == padding
    if resume_at is not None:  # a Loader built alike goes on from there
        it.close()
        it = make(sc, rank)
        it.load_state_dict(state)
        for batch in it:
            batches += 1
            seen.append(examples_of(batch))
            step(model, opt, batch)
        padding = it.padded
    return {"batches": batches, "padding": padding, "examples": seen,
            "len": length}


def main():
    rank, world, init, out, scenarios = sys.argv[1:6]
    rank, world = int(rank), int(world)
    # a hang outside the collectives (whose own timeout is below) prints
    # every thread's stack and ends the rank, before the test gives up
    faulthandler.dump_traceback_later(150, exit=True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    results = {}
    for sc in json.loads(scenarios):
        try:
            results[sc["name"]] = run(sc, rank, model, opt)
        except echoflow.Error as e:  # every rank stopped at the same step
            results[sc["name"]] = {"error": type(e).__name__,
                                   "message": str(e)}
        dist.barrier()  # the next scenario starts together
    results["params"] = [p.detach().view(-1).tolist()
                         for p in model.parameters()]
    # DDP's reducer goes before its process group: freed after it, at
    # the function's end, it could hang the process's exit
    del model, opt
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
