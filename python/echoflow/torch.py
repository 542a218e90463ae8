"""echoflow for PyTorch: a Loader that yields torch tensors sharing the
pipeline's memory, sharded over torch.distributed ranks and DataLoader
workers.

    from echoflow.torch import Loader
    loader = Loader("tar:urls=... | decode | shuffle:10000 "
                    "| echo:factor=auto,max=4 | batch:128")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            x, y = batch["image"], batch["label"]   # torch.Tensor, no copy
"""
import torch
import torch.distributed
import torch.utils.data
import torch.utils.dlpack

import echoflow

try:  # the C entry point of torch.from_dlpack, without its Python checks
    from_capsule = torch._C._from_dlpack
except AttributeError:  # pragma: no cover - other torch versions
    from_capsule = torch.utils.dlpack.from_dlpack


def to_torch(sample):
    """An echoflow.Sample of Tensors as one of torch.Tensors, sharing
    memory. The torch tensors are writable views of memory that echoed
    copies share: do not write into them in place."""
    out = echoflow.Sample((k, from_capsule(v.__dlpack__()))
                          for k, v in sample.items())
    out.identity = sample.identity
    return out


class Loader(torch.utils.data.IterableDataset):
    """An echoflow pipeline as a PyTorch iterable: each item is an
    echoflow.Sample (a dict) of torch.Tensor, sharing the pipeline's memory.

    Each iteration builds a new pipeline from `spec` and reads it once
    through (a spec with `repeat` never ends). Its seed is
    echoflow.epoch_seed(seed, epoch, part), with the epoch set by
    set_epoch() and this reader's part of the data, so every epoch and every
    rank shuffles in an order of its own, the same on every rerun.

    rank, world_size: this process's part of the data; by default those of
        torch.distributed when it is initialised, else 0 and 1. The source
        reads part rank of world_size (echoflow.Pipeline's shard).
    As a DataLoader's dataset (DataLoader(loader, batch_size=None,
    num_workers=W)), each worker builds its own pipeline in its own process,
    on shard rank * W + worker of world_size * W. The pipeline already runs
    on threads of its own, so num_workers=0 is the usual choice: it is the
    one that copies nothing (workers hand tensors over through shared
    memory).
    on_error, memory_budget, maps: as for echoflow.Pipeline (the budget
        is each pipeline's: one per DataLoader worker).
    """

    def __init__(self, spec, *, seed=0, rank=None, world_size=None,
                 on_error="fail", memory_budget=None, maps=None):
        super().__init__()
        if rank is None and world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = 0, 1
        elif rank is None or world_size is None:
            raise ValueError("give rank and world_size together, or neither")
        if not 0 <= rank < world_size:
            raise ValueError("rank %d of world_size %d: expected 0 <= rank < "
                             "world_size" % (rank, world_size))
        self.spec, self.seed = spec, seed
        self.rank, self.world_size = rank, world_size
        self.on_error, self.maps = on_error, maps
        self.memory_budget = memory_budget
        self.epoch = 0
        self._pipeline = None
        # Build once to raise a bad spec here rather than in a worker. No
        # thread starts before the first sample is asked for.
        echoflow.Pipeline(spec, seed=seed, on_error=on_error,
                          shard=(rank, world_size),
                          memory_budget=memory_budget, maps=maps).close()

    def set_epoch(self, epoch):
        """Sets the epoch the next iteration reads, as DistributedSampler's
        set_epoch does; call it before each epoch."""
        if epoch < 0:
            raise ValueError("epoch must be >= 0, not %d" % epoch)
        self.epoch = epoch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        part = self.rank * workers + worker
        p = echoflow.Pipeline(
            self.spec, seed=echoflow.epoch_seed(self.seed, self.epoch, part),
            on_error=self.on_error, shard=(part, self.world_size * workers),
            memory_budget=self.memory_budget, maps=self.maps)
        p.convert_with(from_capsule)  # torch tensors, made in C
        self._pipeline = p
        with p:
            yield from p

    def stats(self):
        """The stats of the pipeline of the current (or last) iteration in
        this process, as echoflow.Pipeline.stats(); None before the first.
        With DataLoader workers, the pipelines live in the workers."""
        return self._pipeline.stats() if self._pipeline else None

    def close(self):
        """Stops and frees the pipeline of an iteration still running."""
        if self._pipeline:
            self._pipeline.close()
