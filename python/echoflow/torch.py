# SPDX-License-Identifier: Apache-2.0
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
            if step % 1000 == 0:   # a checkpoint, with the model's
                torch.save({"loader": loader.state_dict(), ...}, path)

    loader.load_state_dict(torch.load(path)["loader"])  # resume there

Data-parallel jobs: init_distributed() starts torch.distributed for the
trainers (under torchrun, or in the mpirun job of the preprocessing
service), and save_checkpoint() / load_checkpoint() keep the model, the
optimizer and every rank's Loader state in one file.
"""
import operator
import warnings

import torch
import torch.distributed
import torch.utils.data
import torch.utils.data._utils.collate
import torch.utils.dlpack

import echoflow
from echoflow import _partitions
# the data-parallel helpers: torch.distributed for the trainers, and
# checkpoints of the job with every rank's Loader state
from echoflow._distributed import (  # noqa: F401 (re-exported)
    init_distributed,
    load_checkpoint,
    save_checkpoint,
)

try:  # the C entry point of torch.from_dlpack, without its Python checks
    from_capsule = torch._C._from_dlpack
except AttributeError:  # pragma: no cover - other torch versions
    from_capsule = torch.utils.dlpack.from_dlpack


_STATE_VERSION = 1  # of the Loader's state_dict()

_BATCHES_ALREADY = (
    "echoflow.torch.Loader yields batches already (its spec ends in "
    "batch:N): give DataLoader batch_size=None")


class FieldTuple(tuple):
    """What Loader(..., as_tuple=names) yields: the named fields as torch
    tensors, in that order, e.g. (input, target). The sample's identity
    and members stay reachable as attributes, as on an echoflow.Sample
    (DataLoader's conversion makes a plain list of it, without them)."""

    identity = None
    members = None


def _collate_samples(batch, *, collate_fn_map=None):
    """default_collate of echoflow.Sample and FieldTuple items: refused when
    they are batches already (a DataLoader with a batch_size would stack
    batches into a batch of batches), otherwise as the default collates a
    mapping or a tuple."""
    if any(getattr(item, "members", None) is not None for item in batch):
        raise TypeError(_BATCHES_ALREADY)
    collate = torch.utils.data._utils.collate.collate
    elem = batch[0]
    if isinstance(elem, tuple):
        return [collate(list(f), collate_fn_map=collate_fn_map)
                for f in zip(*batch)]
    return type(elem)({k: collate([d[k] for d in batch],
                                  collate_fn_map=collate_fn_map)
                       for k in elem})


def _field_names(as_tuple):
    """Loader's as_tuple checked: None, or a tuple of field names."""
    if as_tuple is None:
        return None
    names = () if isinstance(as_tuple, (str, bytes)) else as_tuple
    try:
        names = tuple(names)
    except TypeError:
        names = ()
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError("as_tuple: give the field names in order, e.g. "
                        "('image', 'label'), not %r" % (as_tuple,))
    return names


def _hand_out(sample, names, pin):
    """A Loader's item of `sample`: a FieldTuple of fields `names`, or the
    sample; pinned when `pin`."""
    if names is not None:
        try:
            out = FieldTuple(sample[n].pin_memory() if pin else sample[n]
                             for n in names)
        except KeyError as e:
            raise KeyError("as_tuple names %r, and the samples have fields "
                           "%s" % (e.args[0], ", ".join(map(repr, sample))))
    else:
        out = echoflow.Sample((k, v.pin_memory()) for k, v in sample.items())
    out.identity = sample.identity
    out.members = sample.members
    return out


# torch >= 1.13 collates by type through this map; older ones have none
# and stack whatever they are given
if hasattr(torch.utils.data._utils.collate, "default_collate_fn_map"):
    torch.utils.data._utils.collate.default_collate_fn_map.update(
        {echoflow.Sample: _collate_samples, FieldTuple: _collate_samples})


def _retype(t, dtype):
    """The torch tensor of an echoflow field of `dtype` ("bool" or "u16")
    that DLPack 0.6 carries as another type: bool comes as uint8 and is
    viewed as torch.bool (no copy); u16 comes as int16 bits and is widened
    into an int32 copy, as torch has no uint16."""
    if dtype == "bool":
        return t.view(torch.bool)
    return t.to(torch.int32).bitwise_and_(0xFFFF)


def _tensor_to_torch(v):
    """An echoflow.Tensor as a torch tensor sharing its memory (bool), or
    an int32 copy (u16)."""
    if v.dtype == "u16":
        import numpy
        return torch.from_numpy(numpy.asarray(v).astype(numpy.int32))
    t = from_capsule(v.__dlpack__())
    return t.view(torch.bool) if v.dtype == "bool" else t


def to_torch(sample):
    """An echoflow.Sample of Tensors as one of torch.Tensors, sharing
    memory (a u16 field becomes an int32 copy: torch has no uint16). The
    torch tensors are writable views of memory that echoed copies share:
    do not write into them in place."""
    out = echoflow.Sample((k, _tensor_to_torch(v))
                          for k, v in sample.items())
    out.identity = sample.identity
    out.members = sample.members
    return out


class Loader(torch.utils.data.IterableDataset):
    """An echoflow pipeline as a PyTorch iterable: each item is an
    echoflow.Sample (a dict) of torch.Tensor, sharing the pipeline's memory
    where nothing else may still show it.

    The tensors may be written in place: one whose memory an echo copy to
    come (or anything else in the pipeline) still shares is copied before
    it is handed out, so an in-place write never reaches a later copy.
    With batch echoing (echo after batch) that is each batch but the last
    copy; with example echoing before batch, nothing (the batch is new
    memory).

    Each iteration builds a new pipeline from `spec` and reads it once
    through (a spec with `repeat` never ends). Its seed is
    echoflow.epoch_seed(seed, epoch, part), with the epoch set by
    set_epoch() and this reader's part of the data, so every epoch and every
    rank shuffles in an order of its own, the same on every rerun. A
    Loader of the `service` source reads the service's epoch of the
    same number (service:from_epoch=epoch, also in a job that resumes
    another), and is seeded with part 0 on every trainer: the service
    deals each trainer samples of its own, and a trainer's state is the
    job's, loaded by any trainer of any number (load_state_dict()).

    rank, world_size: this process's part of the data; by default those of
        torch.distributed when it is initialised, else 0 and 1. The source
        reads part rank of world_size (echoflow.Pipeline's shard).
    partitions: None (one part per rank, as above), or P, the number of
        parts of a job whose checkpoints resume on any number of ranks
        that divides P. Partition p (0 <= p < P) is a pipeline of the
        whole spec over part p of P of the data (shard=(p, P)), seeded
        echoflow.epoch_seed(seed, epoch, p): its order, shuffle and echo
        state its own, a function of seed, epoch and p only. Rank r hosts
        the partitions p with p % world_size == r (world_size must divide
        P: ValueError otherwise, naming the counts that work) and yields
        from them in turn: each next item comes from the hosted partition
        that has yielded the fewest items so far this epoch, the lowest p
        among equals; a partition that has ended is passed over; the
        epoch ends when all have. So each partition's items come in the
        same order on any number of ranks, and each round of P items (one
        from each partition) is the same items; only the rank that trains
        on them changes. state_dict() then holds each hosted partition's
        position and item count, and load_checkpoint() deals a job's
        partitions to the ranks of another world size, each remaining
        sample read once. Each partition has its own pipeline (threads,
        shuffle buffer, echo pool), P / world_size of them per rank.
        Not with source= (ValueError) nor inside DataLoader workers
        (num_workers > 0: SpecError at the first item).
    As a DataLoader's dataset (DataLoader(loader, batch_size=None,
    num_workers=W)), each worker builds its own pipeline in its own process,
    on shard rank * W + worker of world_size * W. The pipeline already runs
    on threads of its own, so num_workers=0 is the usual choice: it is the
    one that copies nothing (workers hand tensors over through shared
    memory).
    on_error, memory_budget, maps: as for echoflow.Pipeline (the budget
        is each pipeline's: one per DataLoader worker).
    as_tuple: field names, e.g. ("image", "label"): each item is then a
        FieldTuple of those fields in that order, (input, target) as torch
        code expects, with .identity and .members as attributes. A name
        the samples lack raises KeyError at the first item.
    pin_memory: with CUDA, each tensor is copied into page-locked memory
        (tensor.pin_memory()), so that .to(device, non_blocking=True)
        overlaps the copy; that copy stands in for the one above. Without
        CUDA it is a no-op, with a warning, as for DataLoader. With
        DataLoader workers, give DataLoader(pin_memory=True) instead: a
        worker's tensors reach the main process through shared memory.
    source, fields, unbatch, batched: a Python iterable as the first
        stage, as for echoflow.Pipeline: a DataLoader, a generator, a dataset. The spec
        then holds the stages after it ("echo:factor=auto,max=4 |
        batch:64"). It reads what it is given, so rank and world_size do
        not shard it (a DistributedSampler does), and it runs in the
        process that iterates the Loader: no DataLoader workers around
        the Loader (the source may have its own). Its position cannot be
        saved: state_dict() works between iterations only.
    even_steps: under DistributedDataParallel, which needs every rank to
        take the same number of steps, None (each rank yields its part's
        batches, whose counts may differ: a rank that stops first leaves
        the others waiting in a collective), "pad" or "drop": every rank
        yields the same number of batches per epoch, agreed with the
        other ranks before each batch (one all_reduce of three flags on
        torch.distributed's default group, also with echo:factor=auto,
        whose counts no rank knows in advance). "pad": a rank whose part
        ran out yields batches from the start of its part again, as
        DistributedSampler pads, until every rank's has run out, so every
        example is seen at least once; `padded` counts those batches.
        "drop": every rank stops when the first runs out. With
        partitions, a rank's part is the partitions it hosts, and "pad"
        reads them again from their starts, by the same rule. Over several
        ranks, torch.distributed must be initialised, with this rank and
        world_size (StateError or ValueError here otherwise), and the
        Loader iterated with num_workers=0.

    As a DataLoader's dataset it yields batches already: give DataLoader
    batch_size=None (a batch_size raises TypeError at the first batch
    rather than stacking batches into a batch of batches).

    state_dict() and load_state_dict() checkpoint the epoch and the
    position of the iteration running in this process, so that a Loader
    built alike and loaded yields what this one would have yielded next
    (see their docstrings). DataLoader workers (num_workers > 0) run their
    pipelines in processes of their own, out of reach: there, take states
    between epochs only.
    """

    def __init__(self, spec, *, seed=0, rank=None, world_size=None,
                 on_error="fail", memory_budget=None, maps=None,
                 as_tuple=None, pin_memory=False, source=None, fields=None,
                 unbatch=False, batched=None, even_steps=None,
                 partitions=None):
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
        self.spec, self.seed = spec, _integer("seed", seed, 2**64 - 1)
        self._service = _reads_service(spec, source)
        self.rank, self.world_size = rank, world_size
        self.partitions = partitions
        if partitions is not None:
            self.partitions = _integer("partitions", partitions, 2**31 - 1)
            _partitions.check(self.partitions, rank, world_size)
            if source is not None:
                raise ValueError(
                    "partitions=%d deals parts of the spec's source to the "
                    "ranks, and a source= iterable is read as it is given, "
                    "not split in parts: give partitions=None with source="
                    % self.partitions)
        self.on_error, self.maps = on_error, maps
        self.memory_budget = memory_budget
        self.source, self.fields, self.unbatch = source, fields, unbatch
        self.batched = batched
        self.epoch = 0
        self._pipeline = None  # that of the latest iteration here
        self._warned = set()  # the kinds of warning given (pipeline.c)
        self._epoch_of_pipeline = 0
        # (epoch, Pipeline, padded): restored by load_state_dict(), for the
        # next iteration of that epoch
        self._resumed = None
        # with partitions: the epoch's pass over the hosted partitions and
        # the wrap-round of even_steps="pad" (_partitions.Pass), and the
        # iteration in progress (a token its generator clears when it
        # ends)
        self._first = self._wrap = None
        self._iteration = None
        self.as_tuple = _field_names(as_tuple)
        self.pin_memory = bool(pin_memory)
        self.even_steps = _even_steps_mode(even_steps)
        self.padded = 0  # batches of padding in the latest iteration
        if self._agrees():
            if self.even_steps == "pad" and source is not None \
                    and _reads_once(source):
                raise ValueError(
                    "even_steps='pad' wraps round by reading this rank's "
                    "part again from its start, and the source is an "
                    "iterator, which reads once: give an iterable that "
                    "starts afresh each time (a DataLoader, a list, a "
                    "dataset), or even_steps='drop'")
            _check_group(self.even_steps, rank, world_size)
        if self.pin_memory and not torch.cuda.is_available():
            warnings.warn("echoflow.torch.Loader: pin_memory=True but CUDA "
                          "is not available: tensors are not pinned",
                          stacklevel=2)
        # Build once to raise a bad spec here rather than in a worker. No
        # thread starts before the first sample is asked for.
        if self.partitions is None:
            self._build(0, rank, world_size).close()
        for p in self._hosted():
            self._build_partition(0, p).close()

    def _build(self, epoch, part, parts):
        # a Python source reads what it is given: no shard of ours
        shard = (part, parts) if self.source is None else None
        spec, seed = self.spec, echoflow.epoch_seed(self.seed, epoch, part)
        if self._service:
            # the service's epoch is the Loader's, in a resumed job too;
            # its samples carry it. Its trainers are seeded alike: a state
            # of one is the job's, which every trainer loads
            spec = _from_epoch(spec, epoch)
            seed, epoch = echoflow.epoch_seed(self.seed, epoch, 0), 0
        return echoflow.Pipeline(
            spec, seed=seed,
            epoch=epoch, on_error=self.on_error, shard=shard,
            memory_budget=self.memory_budget, maps=self.maps,
            source=self.source, fields=self.fields, unbatch=self.unbatch,
            batched=self.batched)

    def _agrees(self):
        """Whether the iterations agree their step count with the other
        ranks (even_steps over more than one rank)."""
        return self.even_steps is not None and self.world_size > 1

    def _build_partition(self, epoch, p):
        """The pipeline of partition p in `epoch`, at its start."""
        try:
            return self._build(epoch, p, self.partitions)
        except echoflow.SpecError as e:
            raise echoflow.SpecError("echoflow.torch.Loader: partition %d of "
                                     "partitions=%d: %s"
                                     % (p, self.partitions, e)) from e

    def _hosted(self):
        """The partitions this rank hosts (none without partitions)."""
        if self.partitions is None:
            return range(0)
        return _partitions.hosted(self.partitions, self.rank,
                                  self.world_size)

    def _drop_resumed(self):
        # (epoch, Pipeline or None, padded), or with partitions (epoch,
        # Pass, padded, Pass or None)
        if self._resumed is not None:
            for held in self._resumed[1:]:
                if hasattr(held, "close"):
                    held.close()
        self._resumed = None

    def _running(self):
        """The pipeline of an iteration in progress in this process, or
        None; with partitions, that of the partition whose item was
        handed out last."""
        p = self._pipeline
        if self.partitions is not None and self._iteration is None:
            return None
        return p if p is not None and not p.closed else None

    def _in_iteration(self):
        """Whether an iteration is in progress in this process."""
        if self.partitions is not None:
            return self._iteration is not None
        return self._running() is not None

    def set_epoch(self, epoch):
        """Sets the epoch the next iteration reads, as DistributedSampler's
        set_epoch does; call it before each epoch. A state loaded for
        another epoch is dropped."""
        epoch = _integer("epoch", epoch, 2**63 - 1)
        if self._resumed is not None and self._resumed[0] != epoch:
            self._drop_resumed()
        self.epoch = epoch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        part = self.rank * workers + worker
        if self.partitions is not None:
            yield from self._iter_partitions(info)
            return
        resumed = self._resumed
        if self.source is not None and info is not None:
            raise echoflow.SpecError(
                "echoflow.torch.Loader: a Loader with source= reads its "
                "source in the process that iterates it; give the outer "
                "DataLoader num_workers=0 (a DataLoader as the source has "
                "workers of its own)")
        if resumed is not None and info is not None:
            raise echoflow.StateError(
                "state: a Loader's state resumes an iteration in the process "
                "that loaded it; DataLoader workers (num_workers > 0) each "
                "read a part of their own (load it with num_workers=0)")
        if self._agrees() and info is not None:
            raise echoflow.SpecError(
                "echoflow.torch.Loader: even_steps=%r agrees each step with "
                "the other ranks in the process that iterates the Loader, "
                "and DataLoader workers (num_workers > 0) run the pipelines "
                "in processes of their own: give the DataLoader "
                "num_workers=0" % (self.even_steps,))
        padded, from_state = 0, False
        if resumed is not None and resumed[0] == self.epoch:
            self._resumed = None
            p, padded, from_state = resumed[1], resumed[2], True
        else:
            self._drop_resumed()
            p = self._build_part(info, part)
        # pinned in the main process only (a worker's tensors cross
        # through shared memory), and pinning copies everything anyway
        pin = (self.pin_memory and info is None
               and torch.cuda.is_available())
        self.padded = padded
        passed = self._read(p, pin)
        if not self._agrees():
            yield from passed
            return
        try:
            _check_group(self.even_steps, self.rank, self.world_size)
            yield from _even_steps(
                self.even_steps, self, None if padded else passed,
                passed if padded else None,
                lambda: self._read(self._build_part(None, part), pin),
                "echoflow.torch.Loader (rank %d of world_size %d)"
                % (self.rank, self.world_size), resumed=from_state)
        finally:  # also when the ranks stop before it was read
            p.close()

    def _iter_partitions(self, info):
        """__iter__ with partitions: the hosted partitions' items by the
        rule (_partitions), from their starts or from the state loaded
        for this epoch; with even_steps, as many as every rank's."""
        if info is not None:
            raise echoflow.SpecError(
                "echoflow.torch.Loader: partitions=%d: a rank reads its "
                "partitions in turn in the process that iterates the "
                "Loader, and DataLoader workers (num_workers > 0) would "
                "each read them all: give the DataLoader num_workers=0 "
                "(each partition's pipeline runs its stages on threads of "
                "its own)" % self.partitions)
        resumed = self._resumed
        from_state = resumed is not None and resumed[0] == self.epoch
        if from_state:
            self._resumed = None
            _, first, padded, wrap = resumed
        else:
            self._drop_resumed()
            first, padded, wrap = self._new_pass(self.epoch), 0, None
        pin = self.pin_memory and torch.cuda.is_available()
        token = object()  # this iteration's, as the Loader's current one
        self._first, self._wrap, self.padded = first, wrap, padded
        self._iteration, self._epoch_of_pipeline = token, self.epoch
        self._last = None

        def handed(one_pass):
            for pipeline, s in one_pass.items():
                if self.as_tuple is not None or pin:
                    s = _hand_out(s, self.as_tuple, pin)
                # stats() and feedback() go to this item's partition
                self._pipeline, self._last = pipeline, s
                yield s

        passes = [first] if wrap is None else [first, wrap]  # to close

        def again():  # even_steps="pad": the partitions from their starts
            passes[-1].close()
            passes.append(self._new_pass(self.epoch))
            if self._iteration is token:
                self._wrap = passes[-1]
            return handed(passes[-1])

        try:
            if not self._agrees():
                yield from handed(first)
                return
            _check_group(self.even_steps, self.rank, self.world_size)
            yield from _even_steps(
                self.even_steps, self, None if padded else handed(first),
                handed(wrap) if padded and wrap is not None else None, again,
                "echoflow.torch.Loader (rank %d of world_size %d, "
                "partitions=%d)" % (self.rank, self.world_size,
                                    self.partitions), resumed=from_state)
        finally:  # also when the ranks stop before it was read
            for one_pass in passes:
                one_pass.close()
            if self._iteration is token:
                self._iteration = None

    def _new_pass(self, epoch):
        """A pass over the hosted partitions of `epoch` from their
        starts."""
        return _partitions.Pass(
            {p: (None, 0, False) for p in self._hosted()},
            lambda p: self._build_partition(epoch, p), self._prepare)

    def _prepare(self, pipeline):
        """The pipeline made to hand out torch tensors, as _read's."""
        pin = self.pin_memory and torch.cuda.is_available()
        pipeline.convert_with(from_capsule,
                              copy_shared=self._copy_shared and not pin,
                              retype=_retype)
        pipeline._warned = self._warned

    def _read(self, p, pin):
        """Yields what pipeline `p` yields, as the Loader hands it out,
        and closes it at the end; from its first item on, it is the
        pipeline of the iteration (stats(), state_dict(), feedback())."""
        # torch tensors, made in C; shared memory copied (_copy_shared is
        # for bench/handout_copy.py, which measures that copy)
        p.convert_with(from_capsule,
                       copy_shared=self._copy_shared and not pin,
                       retype=_retype)
        p._warned = self._warned  # each warning once, not every epoch
        self._pipeline, self._epoch_of_pipeline = p, self.epoch
        self._last = None
        with p:
            for s in p:
                if self.as_tuple is not None or pin:
                    s = _hand_out(s, self.as_tuple, pin)
                self._last = s
                yield s

    _last = None  # the item handed out last

    @property
    def identity(self):
        """The identity of the item this process's iteration handed out
        last (None before one): what `for x, y in loader` unpacks away,
        with .fresh, the batch's fresh examples."""
        return self._last.identity if self._last is not None else None

    @property
    def members(self):
        """The members of the batch handed out last, as Sample.members
        (None before one)."""
        return self._last.members if self._last is not None else None

    _copy_shared = True

    def _build_part(self, info, part):
        """The pipeline of this process's part; in a DataLoader worker, a
        part the source cannot give (fewer shards or files than parts)
        fails with what to do."""
        parts = self.world_size * (info.num_workers if info else 1)
        try:
            return self._build(self.epoch, part, parts)
        except echoflow.SpecError as e:
            if info is None:
                raise
            # the spec built at construction, on part rank of world_size:
            # what fails is the split between workers
            raise echoflow.SpecError(
                "echoflow.torch.Loader: DataLoader worker %d of num_workers="
                "%d (rank %d of world_size %d) reads part %d of %d, and the "
                "source cannot split its data that finely: %s. Give the "
                "DataLoader at most as many workers as each rank has parts "
                "(shards, files), or num_workers=0: the pipeline already "
                "runs its stages on threads of its own"
                % (info.id, info.num_workers, self.rank, self.world_size,
                   part, parts, e)) from e

    def __len__(self):
        """The number of items an iteration in this process yields:
        len(echoflow.Pipeline) of the part it reads (rank's part of
        world_size; in a DataLoader worker, that worker's), so that
        len(DataLoader(loader, batch_size=None)) works with
        num_workers=0. Raises TypeError with the library's message where
        the count is not known in advance (a tar source, repeat without a
        count, echo:factor=auto ...), as DataLoader expects of an
        iterable without a length.

        With DataLoader workers (num_workers=W), each worker reads part
        rank * W + worker of world_size * W and batches it alone, so what
        the workers yield together may differ from this count by batch
        rounding: up to W - 1 short batches more (or, with
        drop_remainder, fewer batches), and DataLoader warns when more
        come than len() said. Each call builds the pipeline anew (no
        thread starts), and so may read a header or a file to count
        (idx, cifar).

        With even_steps over several ranks, the count every rank yields:
        the largest of the ranks' parts ("pad") or the smallest ("drop"),
        each counted here from this Loader's spec, which every rank is
        taken to share (no collective is called). With source=, the
        other ranks' sources are not known here: their counts are equal
        only when the source is a DataLoader drawing from a
        DistributedSampler (which gives every rank as many examples),
        and otherwise len() raises TypeError.

        With partitions, the items of the partitions this rank hosts
        (under even_steps, every rank's count as above, each the sum over
        its partitions)."""
        info = torch.utils.data.get_worker_info()
        if self.partitions is not None:
            counts = [self._rank_len(r) for r in range(self.world_size)] \
                if self._agrees() else [self._rank_len(self.rank)]
            return max(counts) if self.even_steps == "pad" else min(counts)
        if self._agrees() and info is None:
            return self._even_len()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        return self._part_len(self.rank * workers + worker,
                              self.world_size * workers)

    def _rank_len(self, rank):
        """With partitions: the items of the partitions rank hosts."""
        return sum(self._part_len(p, self.partitions) for p in
                   _partitions.hosted(self.partitions, rank,
                                      self.world_size))

    def _part_len(self, part, parts):
        with self._build(self.epoch, part, parts) as p:
            return len(p)

    def _even_len(self):
        """len() under even_steps: the count every rank yields."""
        if self.source is not None:
            if _distributed_sampler(self.source) is None:
                raise TypeError(
                    "echoflow.torch.Loader: with even_steps=%r the ranks "
                    "yield as many batches as the %s of them, and the "
                    "other ranks' sources are not known here (a source "
                    "that is a DataLoader with a DistributedSampler gives "
                    "every rank as many)" % (self.even_steps, "longest"
                                              if self.even_steps == "pad"
                                              else "shortest"))
            return self._part_len(self.rank, self.world_size)
        counts = [self._part_len(r, self.world_size)
                  for r in range(self.world_size)]
        return max(counts) if self.even_steps == "pad" else min(counts)

    def state_dict(self):
        """Where this Loader stands, as a dict to pickle or torch.save:
        {"version": 1, "epoch": int, "rank": int, "world_size": int,
        "seed": int, "pipeline": None or the state_dict() of the
        pipeline}. Each rank saves and loads its own.

        With even_steps="pad", "padded" (an int) counts the batches of
        padding the iteration had yielded; when it is not 0, this rank's
        part had run out and "pipeline" is the position in the
        wrap-round (the pass over the part from its start), which the
        resumed iteration goes on with. Every rank must take its state
        at the same step.

        During an iteration in this process, between two batches: its epoch
        and the pipeline's position, so that the resumed iteration yields
        the batches that would have come next, identities and bytes (for a
        deterministic spec: echo:factor=auto depends on timing). Otherwise
        (before the first iteration, after one ended or was broken off):
        the epoch, read from its start by the next iteration; or the state
        loaded and not iterated yet. The spec is not in it: build the
        Loader alike; a pipeline or seed that differs is refused when the
        state is loaded.

        With partitions, "partitions" (P) and "parts" in place of
        "pipeline": {p: {"pipeline": None or the state_dict() of partition
        p's pipeline (None: at its start), "count": the items it has
        yielded this epoch, "ended": bool}} for each partition this rank
        hosts; with even_steps="pad", "wrap": the partitions' states in
        the wrap-round pass while "padded" is not 0, else None. A state
        holding every partition (load_checkpoint() gathers the ranks')
        loads on any number of ranks that divides P."""
        if self.partitions is not None:
            return self._partitions_state()
        p = self._running()
        epoch, padded = self._epoch_of_pipeline, self.padded
        if p is None and self._resumed is not None:
            epoch, p, padded = self._resumed
        elif p is None:
            epoch, padded = self.epoch, 0
        state = {"version": _STATE_VERSION, "epoch": epoch,
                 "rank": self.rank, "world_size": self.world_size,
                 "seed": self.seed,
                 "pipeline": p.state_dict() if p is not None else None}
        if self.even_steps == "pad":
            state["padded"] = padded
        return state

    def _partitions_state(self):
        """state_dict() with partitions."""
        if self._iteration is not None:
            epoch, first = self._epoch_of_pipeline, self._first
            padded, wrap = self.padded, self._wrap
        elif self._resumed is not None:
            epoch, first, padded, wrap = self._resumed
        else:
            epoch, first, padded, wrap = self.epoch, None, 0, None
        state = {"version": _STATE_VERSION, "epoch": epoch,
                 "rank": self.rank, "world_size": self.world_size,
                 "seed": self.seed, "partitions": self.partitions,
                 "parts": first.states() if first is not None else
                 {p: _partitions.start_state() for p in self._hosted()}}
        if self.even_steps == "pad":
            state["padded"] = padded
            state["wrap"] = wrap.states() if padded and wrap is not None \
                else None
        return state

    def load_state_dict(self, state):
        """Resumes from a state_dict(): sets the epoch, and the next
        iteration of that epoch continues where the saved one stood.
        Call it before iterating, or between iterations; set_epoch() to
        another epoch drops it. The pipeline is built and restored here,
        so a state of another spec, seed, rank or world_size raises
        SpecError (a ValueError), a corrupt one FormatError, with the
        library's message naming the stage, and the Loader stays as it
        was. StateError during an iteration in progress.

        With partitions, the state of a Loader of the same partitions,
        from any rank count: it must hold the partitions this rank hosts
        (SpecError naming them otherwise), and may hold more (those of a
        whole job, as load_checkpoint() gathers them). The wrap-round of
        even_steps="pad" comes back only on the rank that saved it (same
        rank and world_size): on another world a rank whose partitions
        have all ended pads from their starts. A state of another number
        of partitions, or one saved without partitions, is refused
        (SpecError naming both).

        A Loader of the `service` source loads the state of any trainer,
        of any number of trainers: every trainer saved the job's record
        of what all of them were handed (docs/distributed.md, Several
        trainers), and what the stages after the source held comes again
        from the workers. But a state saved while padding (even_steps=
        "pad") is its rank's."""
        if not isinstance(state, dict):
            raise TypeError("load_state_dict() takes the dict state_dict() "
                            "returned, not %s" % type(state).__name__)
        missing = [k for k in ("version", "epoch", "rank", "world_size",
                               "parts" if "partitions" in state
                               else "pipeline") if k not in state]
        if missing:
            raise echoflow.FormatError(
                "state: no %s in the dict: not one that Loader.state_dict() "
                "returned" % ", ".join(map(repr, missing)))
        if state["version"] != _STATE_VERSION:
            raise echoflow.FormatError(
                "state: version %r of the Loader's state, this echoflow "
                "reads version %d" % (state["version"], _STATE_VERSION))
        epoch = state["epoch"]
        if not isinstance(epoch, int) or epoch < 0:
            raise echoflow.FormatError(
                "state: epoch %r, expected an int >= 0" % (epoch,))
        self._check_partitions_of(state)
        # a state of the service is the job's (see above)
        shared = self._service and not state.get("padded", 0)
        if self.partitions is None and not shared and (
                state["rank"], state["world_size"]) \
                != (self.rank, self.world_size):
            raise echoflow.SpecError(
                "state: saved by rank %r of world_size %r, this Loader is "
                "rank %d of %d: each rank saves and loads a state of its own"
                % (state["rank"], state["world_size"], self.rank,
                   self.world_size))
        # the seed the user gave, not the pipeline's seed derived from it
        # for each epoch and part, which the library would name (a state
        # from before "seed" was saved has none)
        if state.get("seed", self.seed) != self.seed:
            raise echoflow.SpecError(
                "state: saved by a Loader of seed=%r, this Loader has "
                "seed=%r: build it with the seed of the saved run"
                % (state["seed"], self.seed))
        # a state from before "padded" was saved has none
        padded = state.get("padded", 0)
        if isinstance(padded, bool) or not isinstance(padded, int) \
                or padded < 0:
            raise echoflow.FormatError(
                "state: padded %r, expected an int >= 0" % (padded,))
        if padded and (self.even_steps != "pad" or (
                self.partitions is None and state["pipeline"] is None)):
            raise echoflow.SpecError(
                "state: saved while padding (%d batches of the wrap-round "
                "of even_steps='pad'), and this Loader has even_steps=%r: "
                "build it with even_steps='pad', as the saved one"
                % (padded, self.even_steps))
        if self._in_iteration():
            raise echoflow.StateError(
                "state: an iteration of this Loader is in progress; load a "
                "state before iterating, or between iterations")
        resumed = None
        if self.partitions is not None:
            resumed = self._restore_partitions(state, epoch, padded)
        elif state["pipeline"] is not None:
            p = self._build(epoch, self.rank, self.world_size)
            try:
                p.load_state_dict(state["pipeline"])
            except BaseException:
                p.close()
                raise
            resumed = (epoch, p, padded)
        self._drop_resumed()
        self._resumed = resumed
        self.epoch = epoch

    def _check_partitions_of(self, state):
        """Refuses a state of another number of partitions (SpecError
        naming both), or one of a Loader with partitions that does not
        hold every partition this one hosts."""
        saved = state.get("partitions")
        if saved != self.partitions:
            if saved is None:
                raise echoflow.SpecError(
                    "state: saved by a Loader without partitions (rank %r "
                    "of world_size %r, one part per rank), this Loader has "
                    "partitions=%d: build it without partitions=, on %r "
                    "ranks" % (state["rank"], state["world_size"],
                               self.partitions, state["world_size"]))
            raise echoflow.SpecError(
                "state: saved by a Loader of partitions=%r, this Loader has "
                "partitions=%s: build it with partitions=%r, as the saved "
                "one (it then resumes on any number of ranks that divides "
                "%r)" % (saved, "None (one part per rank: %d)"
                         % self.world_size if self.partitions is None
                         else self.partitions, saved, saved))
        if saved is None:
            return
        parts = state["parts"]
        if not isinstance(parts, dict):
            raise echoflow.FormatError(
                "state: parts %s, expected a dict of the partitions' states"
                % type(parts).__name__)
        lacking = [p for p in self._hosted() if p not in parts]
        if lacking:
            raise echoflow.SpecError(
                "state: holds partitions %s of %d, and this Loader, rank %d "
                "of world_size %d, hosts %s: give it a state that holds "
                "them (load_checkpoint() gathers every rank's)"
                % (", ".join(map(str, sorted(parts))) or "none",
                   self.partitions, self.rank, self.world_size,
                   ", ".join(map(str, self._hosted()))))

    def _restore_partitions(self, state, epoch, padded):
        """load_state_dict() with partitions: the hosted partitions'
        pipelines built and restored, as (epoch, Pass, padded, Pass of
        the wrap-round or None), or None for a state at the epoch's
        start."""
        def open_part(p):
            return self._build_partition(epoch, p)

        hosted = self._hosted()
        first = _partitions.restore(state["parts"], hosted, open_part,
                                    self._prepare)
        wrap = None
        own = (state["rank"], state["world_size"]) == (self.rank,
                                                       self.world_size)
        if not own:
            padded = 0  # the saved rank's padding is not this one's
        elif padded and state.get("wrap") is not None:
            try:
                if not isinstance(state["wrap"], dict) or any(
                        p not in state["wrap"] for p in hosted):
                    raise echoflow.FormatError(
                        "state: wrap %r, expected the states of partitions "
                        "%s" % (state["wrap"], ", ".join(map(str, hosted))))
                wrap = _partitions.restore(state["wrap"], hosted, open_part,
                                           self._prepare)
            except BaseException:
                first.close()
                raise
        if first.at_start() and not padded:
            return None
        return (epoch, first, padded, wrap)

    def __getstate__(self):
        # pickled for DataLoader workers (spawn): pipelines stay here; a
        # loaded state is marked, so that a worker refuses it
        d = self.__dict__.copy()
        d["_pipeline"] = d["_first"] = d["_wrap"] = None
        if d["_resumed"] is not None:
            d["_resumed"] = (d["_resumed"][0], None, d["_resumed"][2])
        return d

    def feedback(self, ids, values):
        """Pipeline.feedback() on the pipeline of the iteration in progress
        in this process: per-example values (losses, say) for an echo
        policy, by the ids of a batch (batch.members):

            for batch in loader:
                losses = F.cross_entropy(model(x), y, reduction="none")
                loader.feedback(batch.members, losses)
                losses.mean().backward()

        StateError when no iteration runs in this process: before the
        first, after one ended, or with DataLoader workers (num_workers >
        0), whose pipelines run in the workers' processes, out of the
        Loader's reach (there is no channel back to them); use
        num_workers=0 there (the pipeline runs its stages on threads of
        its own). With partitions, the feedback goes to the partition
        whose item was handed out last: give it for a batch before the
        next is asked for."""
        p = self._running()
        if p is None:
            raise echoflow.StateError(
                "feedback: no iteration of this Loader is in progress in "
                "this process. Feedback goes to the pipeline of the "
                "iteration in progress: give it between the batches of one. "
                "With DataLoader workers (num_workers > 0) the pipelines run "
                "in the workers' processes, which feedback cannot reach; "
                "use num_workers=0 for echo policies")
        p.feedback(ids, values)

    def stats(self):
        """The stats of the pipeline of the current (or last) iteration in
        this process, as echoflow.Pipeline.stats(); None before the first.
        With DataLoader workers, the pipelines live in the workers. With
        partitions, the pipeline of the partition whose item was handed
        out last (each partition has its own)."""
        return self._pipeline.stats() if self._pipeline else None

    def close(self):
        """Stops and frees the pipeline of an iteration still running, and
        that of a state loaded and not iterated yet (with partitions,
        every hosted partition's)."""
        if self._pipeline:
            self._pipeline.close()
        for one_pass in (self._first, self._wrap):
            if one_pass is not None:
                one_pass.close()
        self._drop_resumed()


def _integer(name, value, high):
    """value as an int from 0 to high, numpy's integers included, or a
    TypeError or ValueError naming it: the pipeline takes its seeds and
    epochs as unsigned 64-bit numbers, which would wrap a negative one."""
    if isinstance(value, bool):
        raise TypeError("%s must be an int, not bool" % name)
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s"
                        % (name, type(value).__name__)) from None
    if not 0 <= value <= high:
        raise ValueError("%s must be from 0 to %d, not %d"
                         % (name, high, value))
    return value


# even_steps: every rank of a data-parallel job takes the same number of
# steps per epoch.
#
# DistributedDataParallel all-reduces the gradients in every backward
# pass, so a rank that leaves its loop a step early leaves the others
# waiting in a collective for ever. The ranks' batch counts differ when
# their parts differ (shards split unevenly, a partial last batch) and,
# by design, with echo:factor=auto, where each rank echoes as its own R
# says: no rank knows in advance how many batches any rank will yield.
# So the ranks agree step by step, as torch's Join does: before each
# batch goes out, one all_reduce (MAX) of three flags on the default
# process group says whether any rank still has a batch of its own part
# ("pad") or whether any has run out ("drop"), whether a rank has nothing
# to pad with (its part is empty), and whether a rank's input failed.
# Every rank sees the same reduced flags, so every rank takes the same
# decision; a failure is shared the same way, so that every rank raises
# instead of one raising and the others waiting.
#
# "pad" wraps round as DistributedSampler does: a rank whose part ran
# out yields batches from the start of its part again (a new pass with
# the same seed: the same batches, for a deterministic spec) until every
# rank's part has run out, so every example is seen at least once.
# Nothing of the first pass is kept for this: the wrap-round reads the
# part again. "drop" stops every rank when the first runs out; the rest
# of the longer parts is not read.

_END = object()  # what next() gives at the end of a pass


def _even_steps_mode(even_steps):
    """even_steps checked: None, "pad" or "drop"."""
    if even_steps is None or (isinstance(even_steps, str)
                              and even_steps in ("pad", "drop")):
        return even_steps
    raise ValueError("even_steps must be None, 'pad' (ranks that run out "
                     "wrap round their part) or 'drop' (every rank stops "
                     "at the shortest count), not %r" % (even_steps,))


def _check_group(even_steps, rank, world_size):
    """Refuses even_steps over world_size > 1 ranks without the
    torch.distributed group they agree through, or with a group of
    another rank or size: the agreement would wait for ranks that are not
    there."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise echoflow.StateError(
            "even_steps=%r: rank %d of world_size %d agrees the number of "
            "steps with the other ranks through torch.distributed's default "
            "process group, which is not initialised: call torch."
            "distributed.init_process_group() first, or give "
            "even_steps=None" % (even_steps, rank, world_size))
    if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        raise ValueError(
            "even_steps=%r: this reader is rank %d of world_size %d, and "
            "torch.distributed's default process group, which the ranks "
            "agree through, is rank %d of %d"
            % (even_steps, rank, world_size, dist.get_rank(),
               dist.get_world_size()))


def _reads_service(spec, source):
    """Whether a Loader of this spec and source reads the `service`
    source: its first stage is the service's."""
    if source is not None:
        return False
    stages = echoflow.split_spec(spec)
    return bool(stages) and stages[0].split(":", 1)[0].strip() == "service"


def _from_epoch(spec, epoch):
    """A spec of the `service` source that reads the service's epoch
    `epoch` (service:from_epoch), its other options as they are."""
    stages = echoflow.split_spec(spec)
    name, _, options = stages[0].partition(":")
    options = [o for o in [options.strip()] if o]
    stages[0] = "%s:%s" % (name.strip(),
                           ",".join(options + ["from_epoch=%d" % epoch]))
    return " | ".join(stages)


def _reads_once(iterable):
    """Whether iterating `iterable` again cannot start it afresh (a
    generator, an iterator): there is then nothing to wrap round with."""
    return iter(iterable) is iterable


def _distributed_sampler(dataloader):
    """The DistributedSampler a DataLoader draws from, or None."""
    cls = torch.utils.data.distributed.DistributedSampler
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    for s in (getattr(dataloader, "sampler", None),
              getattr(batch_sampler, "sampler", None)):
        if isinstance(s, cls):
            return s
    return None


class _Agreement:
    """The exchange of each step: one all_reduce (MAX) of three int64
    flags on the default process group (on this rank's GPU with NCCL,
    which reduces nothing else)."""

    def __init__(self, mode):
        dist = torch.distributed
        device = "cpu"
        if dist.get_backend() == dist.Backend.NCCL:
            device = torch.device("cuda", torch.cuda.current_device())
        self.pad = mode == "pad"
        self.flags = torch.zeros(3, dtype=torch.int64, device=device)

    def __call__(self, have, cannot_pad, failed):
        """Sends this rank's flags; returns (go on, a rank cannot pad, a
        rank failed), the same on every rank."""
        # pad goes on while any rank has a batch of its own, drop while
        # none lacks one: MAX of "has" or of "lacks", one reduction for
        # both
        self.flags[0] = int(have if self.pad else not have)
        self.flags[1] = int(cannot_pad)
        self.flags[2] = int(failed)
        torch.distributed.all_reduce(self.flags,
                                     op=torch.distributed.ReduceOp.MAX)
        some, cannot, fail = self.flags.tolist()
        return (some == 1 if self.pad else some == 0), cannot == 1, fail == 1


def _even_steps(mode, owner, own, wrap, again, where, resumed=False):
    """Yields the batches of `own`, this rank's pass over its part, so
    that every rank yields as many, deciding with the other ranks before
    each; then, for "pad", those of `wrap`, a pass over the part from its
    start, and of again() (another such pass) whenever one ends, as long
    as another rank still has batches of its own. An iteration resumed
    from a state (resumed=True) gives the restored pass as `own`, or, when
    it stood in the padding, as `wrap` with own=None. Counts the batches
    of padding in owner.padded. `where` names the reader in errors."""
    agree = _Agreement(mode)
    # a part that yields nothing has nothing to wrap round with; known
    # at the end of a pass begun here (a resumed one had batches)
    yielded = resumed
    try:
        while True:
            item, failed = _END, None
            if own is not None:
                try:
                    item = next(own, _END)
                except Exception as e:  # shared with the others, raised
                    failed = e
                if item is _END:
                    own = None
            have = item is not _END
            yielded = yielded or have
            cannot_pad = mode == "pad" and failed is None and not yielded
            go, some_cannot, some_failed = agree(have, cannot_pad,
                                                 failed is not None)
            if failed is not None:
                raise failed
            if some_failed:
                raise echoflow.StoppedError(
                    "%s: even_steps=%r: the input of another rank failed "
                    "(that rank's error says why), so this rank stops too "
                    "rather than wait for it" % (where, mode))
            if not go:
                return
            if some_cannot:
                raise echoflow.StateError(
                    "%s: even_steps='pad': %s part of the epoch yields no "
                    "batch, so it has nothing to wrap round with while "
                    "other ranks still have batches; give every rank some "
                    "data, or use even_steps='drop'"
                    % (where, "this rank's" if cannot_pad else "a rank's"))
            if have:
                yield item
                continue
            item = next(wrap, _END) if wrap is not None else _END
            if item is _END:  # a new pass over the part, from its start
                if wrap is not None:
                    wrap.close()
                wrap = again()
                item = next(wrap, _END)
                if item is _END:
                    raise echoflow.StateError(
                        "%s: even_steps='pad': this rank's part yielded "
                        "batches once, and nothing when read again from "
                        "its start to wrap round" % where)
            owner.padded += 1
            yield item
    finally:
        for it in (own, wrap):
            if it is not None:
                it.close()


def echo(dataloader, factor="auto", *, max=4, shuffle=None, pool=None,
         mode="example", seed=0, even_steps=None):
    """Echoes what an existing DataLoader yields, in one line: the
    DataLoader stays as it is (its dataset, transforms and workers), and
    an echo stage stands after it, so that the training loop does not wait
    for it when it is the slow part.

        loader = DataLoader(ImageFolder(root, transform), batch_size=64,
                            shuffle=True, num_workers=2)
        for images, labels in echoflow.torch.echo(loader, max=4):
            ...                     # what the DataLoader yields, echoed

    factor: "auto" (echo only when the training loop would otherwise wait,
        at most `max` uses of each example) or a number >= 1 (each item
        used that many times; fractional: per item, at random).
    mode: "example" (the default, the better one in the paper): each batch
        is split into its examples, which are echoed, shuffled and batched
        again at the DataLoader's batch_size (its drop_last too), so that
        the copies of an example land in different batches. "batch": whole
        batches are echoed as they came.
    shuffle: the size of the buffer that spreads the copies apart, in
        examples ("example") or batches ("batch"); default four batches'
        worth of examples, or 0 batches. It fills with fresh examples at
        the start of each iteration before the first batch comes out.
    pool: with factor="auto", how many recent items the echo stage picks
        its echoes from, the least echoed first: default 16 batches' worth
        of examples, or 4 batches. A small pool at a high R echoes the same
        few items in a row, which then share batches.
    seed: of the echo stage's random decisions.
    even_steps: under DistributedDataParallel, None (each rank yields what
        its DataLoader and echo stage give), "pad" or "drop": every rank
        of torch.distributed's default group yields the same number of
        batches per iteration, agreed with the others step by step (one
        all_reduce of a few flags per batch). "pad": a rank whose
        DataLoader ran out iterates it again and yields its batches,
        echoed, until every rank's has run out; "drop": every rank stops
        when the first runs out. Without torch.distributed initialised
        there is one rank and nothing to agree, unless the DataLoader's
        DistributedSampler says num_replicas > 1, which is refused.

    Each iteration reads the DataLoader once through, as iterating it
    would, and yields its structure (a single tensor, or tuples, lists,
    dicts and namedtuples nested as a collate_fn makes them) with the same
    types and dtypes. Each leaf is a field: a tensor of bool, uint8, int8,
    int16, int32, int64, float16, bfloat16, float32 or float64, or a list
    (or tuple) of str, one per example (the paths of (img, label, path)).
    A leaf of another type raises a CallbackError naming its field ("2",
    "1.0" for the first item of the second) and its type. Copies of an example share its
    memory in the pipeline, never with the tensors handed out, which may
    be written in place. stats() says what the echo stage did (fresh and
    echoed items, effective factor, time the loop waited)."""
    return Echo(dataloader, factor, max=max, shuffle=shuffle, pool=pool,
                mode=mode, seed=seed, even_steps=even_steps)


class Echo:
    """What echo() returns: an iterable over a DataLoader's batches with
    echoes, re-iterable like the DataLoader (one pass each time)."""

    def __init__(self, dataloader, factor="auto", *, max=4, shuffle=None,
                 pool=None, mode="example", seed=0, even_steps=None):
        if mode not in ("example", "batch"):
            raise ValueError("echo: mode must be 'example' or 'batch', not "
                             "%r" % (mode,))
        if factor != "auto":
            if isinstance(factor, bool) or not isinstance(factor,
                                                          (int, float)):
                raise TypeError("echo: factor must be 'auto' or a number "
                                ">= 1, not %r" % (factor,))
            if not factor >= 1:
                raise ValueError("echo: factor must be 'auto' or a number "
                                 ">= 1, not %r" % (factor,))
        if isinstance(max, bool) or not isinstance(max, int) or max < 1:
            raise ValueError("echo: max must be an int >= 1, not %r" % (max,))
        batch_size = getattr(dataloader, "batch_size", None)
        if mode == "example" and batch_size is None and getattr(
                dataloader, "batch_sampler", None) is not None:
            raise ValueError(
                "echo: the DataLoader's batches come from a batch_sampler, "
                "so they have no one size to batch the examples at again; "
                "use mode='batch'")
        if shuffle is None:  # enough to put copies in different batches
            shuffle = 4 * batch_size if mode == "example" and batch_size \
                else 0
        if isinstance(shuffle, bool) or not isinstance(shuffle, int) \
                or shuffle < 0:
            raise ValueError("echo: shuffle must be an int >= 0, not %r"
                             % (shuffle,))
        if pool is None:
            pool = 16 * batch_size if mode == "example" and batch_size \
                else 4
        if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
            raise ValueError("echo: pool must be an int >= 1, not %r"
                             % (pool,))
        self.dataloader, self.factor, self.max = dataloader, factor, max
        self.shuffle, self.pool, self.mode = shuffle, pool, mode
        self.seed = seed
        self.even_steps = _even_steps_mode(even_steps)
        if self.even_steps == "pad" and _reads_once(dataloader):
            raise ValueError(
                "echo: even_steps='pad' wraps round by iterating the "
                "DataLoader again, and this one is an iterator, which reads "
                "once: give the DataLoader itself, or even_steps='drop'")
        self.padded = 0  # batches of padding in the latest iteration
        # examples are batched again only when the DataLoader batched them
        self._rebatch = batch_size if mode == "example" else None
        self._pipeline = None
        self._warned = set()
        echoflow.Pipeline(self._spec(), source=()).close()  # checks it

    def _spec(self):
        if self.factor == "auto":
            spec = "echo:factor=auto,max=%d,pool=%d" % (self.max, self.pool)
        else:
            spec = "echo:factor=%r" % (self.factor,)
        if self.shuffle:
            spec += ",shuffle=%d" % self.shuffle
        if self._rebatch:
            spec += " | batch:size=%d" % self._rebatch
            if getattr(self.dataloader, "drop_last", False):
                spec += ",drop_remainder=true"
        return spec

    def _world(self):
        """(rank, world_size) that even_steps agrees over: torch.distributed's
        default group, or one rank without it."""
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        sampler = _distributed_sampler(self.dataloader)
        if sampler is not None and sampler.num_replicas > 1:
            _check_group(self.even_steps, sampler.rank, sampler.num_replicas)
        return 0, 1

    def __iter__(self):
        self.padded = 0
        if self.even_steps is None:
            yield from self._pass()
            return
        rank, world = self._world()
        if world == 1:
            yield from self._pass()
            return
        yield from _even_steps(self.even_steps, self, self._pass(), None,
                               self._pass, "echo (rank %d of world_size %d)"
                               % (rank, world))

    def _pass(self):
        """One pass over the DataLoader, echoed."""
        layout = []  # of the first batch: how to give batches back

        def batches():
            items = iter(self.dataloader)
            echoflow._reading(items)  # for exit to wake (see there)
            for b in items:
                shape, fields = _layout_of(b)
                if not layout:
                    layout.append(shape)
                yield fields

        # the previous pass's thread may still be inside its DataLoader
        # iterator (a loop that broke off): with persistent workers the
        # new iter() would reset that very iterator under it
        last = self._pipeline
        if last is not None:
            last.close()
            last._wait_source()
        p = echoflow.Pipeline(self._spec(), seed=self.seed, source=batches(),
                              unbatch=self._rebatch is not None,
                              read_ahead=max(256, 2 * (self._rebatch or 1)))
        p.convert_with(from_capsule, retype=_retype)
        p._warned = self._warned  # each warning once, not every epoch
        self._pipeline, self._last = p, None
        with p:
            for s in p:
                self._last = s
                yield _rebuild(layout[0], s)

    _last = None  # the sample of the batch handed out last

    @property
    def identity(self):
        """The identity of the batch handed out last (None before one):
        .fresh counts its examples new from the DataLoader, the rest are
        echoes."""
        return self._last.identity if self._last is not None else None

    @property
    def members(self):
        """The identities of the batch's examples, as Sample.members, for
        the batch handed out last (None before one, or without
        re-batching)."""
        return self._last.members if self._last is not None else None

    def __len__(self):
        """The batches one iteration yields, when known in advance: with
        an integer factor, from the DataLoader's length (and its sampler's,
        for example echoing). With factor="auto" or a fractional factor
        the echo stage decides at run time: TypeError, as for any
        iterable of unknown length. With even_steps over several ranks,
        the count of every rank: known where the DataLoader draws from a
        DistributedSampler (every rank then has as many batches), and
        TypeError otherwise, since the other ranks' DataLoaders are not
        known here."""
        if self.factor == "auto" or self.factor != int(self.factor):
            raise TypeError(
                "echo: with factor=%r the echo stage decides how many "
                "copies to make at run time, so the number of batches is "
                "not known in advance (len(dataloader) of them are fresh)"
                % (self.factor,))
        if self.even_steps is not None and self._world()[1] > 1 \
                and _distributed_sampler(self.dataloader) is None:
            raise TypeError(
                "echo: with even_steps=%r every rank yields as many batches "
                "as the %s of them, and the other ranks' DataLoaders are "
                "not known here (a DistributedSampler gives every rank as "
                "many)" % (self.even_steps, "longest"
                           if self.even_steps == "pad" else "shortest"))
        e = int(self.factor)
        if not self._rebatch:
            return len(self.dataloader) * e
        b = self._rebatch
        dl = self.dataloader
        examples = len(dl) * b if dl.drop_last else len(dl.sampler)
        n = examples * e
        return n // b if dl.drop_last else -(-n // b)

    def stats(self):
        """The stats of the pipeline of the current (or last) iteration,
        as echoflow.Pipeline.stats(): stages[0] is the DataLoader, then
        the echo stage ("fresh", "echoed", "effective_factor", ...). None
        before the first iteration."""
        return self._pipeline.stats() if self._pipeline else None


def _name(prefix, key):
    return str(key) if prefix is None else "%s.%s" % (prefix, key)


def _is_texts(value):
    """Whether value is a list (or tuple, as default_collate gives) of str:
    a batch's texts, one per example, which the pipeline holds as a text
    field."""
    return (isinstance(value, (list, tuple)) and bool(value)
            and all(isinstance(v, str) for v in value))


def _flatten(value, prefix, fields):
    """The layout of a DataLoader's batch `value` (a tree of dicts, tuples
    and lists over tensors, and lists of str), its leaves put
    into `fields` by name ("0", "2.1", "meta.path"), which the pipeline
    holds as fields. _rebuild() makes the same tree again."""
    if isinstance(value, dict):
        return ("dict", type(value),
                [(k, _flatten(v, _name(prefix, k), fields))
                 for k, v in value.items()])
    if _is_texts(value):
        name = _name(prefix, 0) if prefix is None else prefix
        fields[name] = value
        return ("texts", type(value), name)
    if isinstance(value, (tuple, list)):
        kind = "list" if isinstance(value, list) else "tuple"
        return (kind, type(value),
                [_flatten(v, _name(prefix, i), fields)
                 for i, v in enumerate(value)])
    name = _name(prefix, 0) if prefix is None else prefix
    fields[name] = value
    return ("field", None, name)


def _layout_of(batch):
    """The layout of a DataLoader's batch, and its fields by name."""
    fields = {}
    return _flatten(batch, None, fields), fields


def _rebuild(layout, sample):
    """A batch laid out as the DataLoader's (_layout_of) from `sample`."""
    kind, cls, what = layout
    if kind == "field":
        return sample[what]
    if kind == "texts":  # a list of str, as the pipeline hands it
        texts = sample[what]
        return texts if cls is list else cls(texts)
    if kind == "dict":
        items = [(k, _rebuild(sub, sample)) for k, sub in what]
        return dict(items) if cls is dict else cls(items)
    values = [_rebuild(sub, sample) for sub in what]
    if cls in (tuple, list):
        return cls(values)
    if hasattr(cls, "_fields"):  # a namedtuple
        return cls(*values)
    return cls(values)
