# SPDX-License-Identifier: Apache-2.0
"""echoflow.torch's data-parallel helpers: torch.distributed started for the
trainer ranks (under torchrun, or in the mpirun job of the preprocessing
service), and one checkpoint of the job, model and optimizer with every
rank's Loader state, written atomically by rank 0.

    rank, world_size = echoflow.torch.init_distributed()
    model = DistributedDataParallel(net)
    loader = echoflow.torch.Loader(spec, seed=0, even_steps="pad")
    extra = echoflow.torch.load_checkpoint(path, model, opt, loader) \\
        if os.path.exists(path) else {"step": 0}
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)      # keeps the state loaded for it
        for batch in loader:
            ...
            if step % 100 == 0:
                echoflow.torch.save_checkpoint(path, model, opt, loader,
                                               extra={"step": step})

Every call here is a collective of the trainers: every rank calls it at
the same step. A failure on one rank (a state that cannot be saved, a
file that cannot be read) is told to every rank, and every rank raises,
naming the rank that failed, rather than leave the others waiting in a
collective.

A checkpoint of Loaders built with partitions=P holds every partition's
state, and resumes on any number of ranks that divides P: each rank takes
the partitions it now hosts (echoflow/_partitions.py says how they are
dealt). So does a checkpoint of the Python trainers of the service, on
any number of trainers: each trainer's Loader state is the job's. Other
Loaders without partitions resume on the saved number of ranks only.
"""
import builtins
import datetime
import os
import socket

import torch
import torch.distributed as dist

import echoflow
from echoflow import _echoflow, _partitions

_FORMAT = "echoflow.torch checkpoint"
_VERSION = 1  # of the checkpoint's layout
_ADDRESS_BYTES = 256  # trainer 0's "host:port", padded, for the broadcast


def init_distributed(backend="gloo", timeout=None):
    """Starts torch.distributed's default process group for this trainer
    and returns (rank, world_size):

    - already started: its rank and size, nothing done;
    - under torchrun (RANK and WORLD_SIZE in the environment): from its
      variables (env://);
    - started by mpirun (the job of `echoflow serve` workers, or plain
      `mpirun -np N python train.py`): the trainers only, the workers
      taking no part. The process joins the job as a trainer (as a
      `service` source would), its rank being its place among the
      trainers; trainer 0 opens a TCPStore on a free port and tells the
      other trainers its address through the job's MPI
      (ef_service_trainers_bcast). The address is $MASTER_ADDR when set
      (give it, `mpirun -x MASTER_ADDR=host`, when the trainers are on
      several hosts and the host name does not reach trainer 0), else
      this host's name;
    - otherwise: a group of one process (rank 0 of 1), so that
      DistributedDataParallel and the checkpoints work alike.

    backend: "gloo" (CPU tensors) or "nccl"; timeout: a
    datetime.timedelta for the collectives (torch's default when None)."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    kw = {} if timeout is None else {"timeout": timeout}
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, init_method="env://", **kw)
    elif _echoflow._service_launched():
        rank, world, store = _meet_trainers(timeout)
        dist.init_process_group(backend, store=store, rank=rank,
                                world_size=world, **kw)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0,
                                world_size=1, **kw)
    return dist.get_rank(), dist.get_world_size()


def _meet_trainers(timeout):
    """(rank, world_size, store) of this trainer in the mpirun job: its
    place among the trainers, and a TCPStore that trainer 0 opened and
    the others reach at the address trainer 0 broadcast to them."""
    info = _echoflow._service_join_trainer()
    rank, world = info["role_rank"], info["trainers"]
    wait = timeout or datetime.timedelta(seconds=300)
    store, said = None, bytes(_ADDRESS_BYTES)
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or _host_name()
        try:
            # port 0: a free one, bound here, so no other process takes it
            store = dist.TCPStore(host, 0, world, True, wait,
                                  wait_for_workers=False)
            said = ("%s %d" % (host, store.port)).encode()
        except Exception as e:  # told to the others, who would wait
            said = ("! %s" % e).encode()
            if len(said) > _ADDRESS_BYTES:
                said = said[:_ADDRESS_BYTES]
        said = said.ljust(_ADDRESS_BYTES, b"\0")
    said = _echoflow._service_trainers_bcast(said).rstrip(b"\0").decode()
    if said.startswith("!"):
        raise echoflow.StateError(
            "init_distributed: trainer 0 of %d in the mpirun job could not "
            "open the store the trainers meet at: %s" % (world, said[2:]))
    if store is None:
        host, port = said.rsplit(" ", 1)
        store = dist.TCPStore(host, int(port), world, False, wait)
    return rank, world, store


def _host_name():
    """This host's name when it resolves (gloo resolves it too), else
    the loopback address: the trainers are then on this host."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
        return name
    except OSError:
        return "127.0.0.1"


def _world():
    """(rank, world_size) of the default group; 0 and 1 without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _as_list(loaders):
    """The loaders argument as a list: None, one Loader or a sequence."""
    if loaders is None:
        return []
    if hasattr(loaders, "state_dict"):
        return [loaders]
    return list(loaders)


def _unwrap(model):
    """The module a DistributedDataParallel wraps, so that the checkpoint
    loads into the bare model too (an evaluation without DDP)."""
    ddp = torch.nn.parallel.DistributedDataParallel
    return model.module if isinstance(model, ddp) else model


def _placed(e, where):
    """Exception e again, of its type where it can be, its message led by
    `where` (the call, the rank, the loader)."""
    try:
        out = type(e)("%s: %s" % (where, e))
    except Exception:  # a type that takes other arguments
        out = echoflow.Error("%s: %s: %s" % (where, type(e).__name__, e))
    out.__cause__ = e
    return out


def _agree(error, rank, world):
    """Raises on every rank when any rank failed: this rank's own error
    where it failed, else the first failed rank's, of its type where that
    is an echoflow or builtin exception. A collective: every rank calls
    it with its error or None."""
    if world > 1:
        mine = None if error is None else (type(error).__name__, str(error))
        every = [None] * world
        dist.all_gather_object(every, mine)
    else:
        every = [None]
    if error is not None:
        raise error
    for name, text in filter(None, every):
        cls = getattr(echoflow, name, None) or getattr(builtins, name, None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = echoflow.Error
        try:
            out = cls(text)
        except Exception:
            out = echoflow.Error(text)
        raise out


def _loader_states(where, loaders):
    """Each loader's state_dict(), or the error that names it."""
    states = []
    for i, loader in enumerate(loaders):
        try:
            states.append(loader.state_dict())
        except Exception as e:
            raise _placed(e, "%s, loader %d" % (where, i))
    return states


def save_checkpoint(path, model, optimizer=None, loaders=None, extra=None):
    """Saves the job at this step to `path`, a collective: every rank
    calls it at the same step, between batches.

    model: its state_dict() (a DistributedDataParallel's module's, so
        that it loads with or without DDP), taken on rank 0, as DDP keeps
        every rank's alike; optimizer: likewise, or None.
    loaders: an echoflow.torch.Loader, a list of them (the same count on
        every rank), or None. Each rank's states are gathered to rank 0,
        with each rank's torch random generator state: with partitions,
        every partition's state, so that the file resumes on other
        numbers of ranks (load_checkpoint).
    extra: anything torch.save takes (the step, say), given back by
        load_checkpoint().

    Rank 0 writes a temporary file beside `path`, flushes it to the disk
    (fsync) and renames it over `path`, so `path` is the previous
    checkpoint or this one, never a part of one. A Loader whose state
    cannot be saved (a pipeline with tar:ordered=false) raises on every
    rank, naming the rank and the loader, and nothing is written; so
    does a write that fails on rank 0."""
    rank, world = _world()
    where = "save_checkpoint(%r), rank %d of %d" % (path, rank, world)
    mine, error = None, None
    try:
        own = _as_list(loaders)
        mine = {"loaders": _loader_states(where, own),
                "specs": [loader.spec for loader in own],
                "torch_rng": torch.get_rng_state()}
    except Exception as e:
        error = e
    _agree(error, rank, world)
    every = [None] * world if rank == 0 else None
    if world > 1:
        dist.gather_object(mine, every, dst=0)
    else:
        every = [mine]
    error = None
    if rank == 0:
        try:
            _write(path, {
                "format": _FORMAT, "version": _VERSION,
                "echoflow": echoflow.__version__, "world_size": world,
                "model": _unwrap(model).state_dict(),
                "optimizer": optimizer.state_dict()
                if optimizer is not None else None,
                "ranks": every, "extra": extra})
        except Exception as e:
            error = _placed(e, where)
    _agree(error, rank, world)


def _write(path, checkpoint):
    """torch.save to a temporary file beside path, fsync, rename over path
    and fsync the folder, so that path holds a whole checkpoint whatever
    happens (the old one until the rename)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path, where):
    """The checkpoint at path, checked to be a whole one of ours."""
    try:
        checkpoint = torch.load(path, map_location="cpu")
    except (OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise echoflow.FormatError(
            "%s: cannot be read (%s: %s): truncated, or not written by "
            "save_checkpoint" % (where, type(e).__name__, e)) from e
    except RuntimeError as e:  # torch's zip reader
        raise echoflow.FormatError(
            "%s: not a whole checkpoint (%s): truncated, or not written by "
            "save_checkpoint" % (where, e)) from e
    except Exception as e:  # pickle's
        raise echoflow.FormatError(
            "%s: not a checkpoint (%s: %s)" % (where, type(e).__name__, e)) \
            from e
    if not isinstance(checkpoint, dict) or \
            checkpoint.get("format") != _FORMAT:
        raise echoflow.FormatError(
            "%s: not a checkpoint of echoflow.torch.save_checkpoint (no "
            "format %r in it)" % (where, _FORMAT))
    if checkpoint.get("version") != _VERSION:
        raise echoflow.FormatError(
            "%s: checkpoint version %r, this echoflow reads version %d"
            % (where, checkpoint.get("version"), _VERSION))
    return checkpoint


def _holds_pipeline(state):
    """Whether a Loader's state holds a pipeline's position (which the
    library compares with the Loader's spec when it is loaded)."""
    parts = state.get("parts")
    return state.get("pipeline") is not None or (
        isinstance(parts, dict) and any(
            isinstance(v, dict) and v.get("pipeline") is not None
            for v in parts.values()))


def _states_for(where, checkpoint, rank, world, loaders):
    """The state of each loader for this rank: its own on the saved
    number of ranks; on another, every rank's partitions gathered into
    one state, from which the Loader takes those it now hosts, or for a
    Loader of the service, trainer 0's (each trainer's is the job's). A
    loader saved without partitions is refused there, naming both
    counts."""
    saved, ranks = checkpoint["world_size"], checkpoint["ranks"]
    count = len(loaders)
    if len(ranks[0]["loaders"]) != count:
        raise echoflow.SpecError(
            "%s: holds the states of %d loaders per rank, and %d were "
            "given: give the loaders of the saved run, in its order"
            % (where, len(ranks[0]["loaders"]), count))
    if saved == world:
        return ranks[rank]["loaders"]
    states = []
    for i in range(count):
        every = [r["loaders"][i] for r in ranks]
        if getattr(loaders[i], "_service", False):
            states.append(every[0])
            continue
        if every[0].get("partitions") is None:
            raise echoflow.SpecError(
                "%s: saved by a job of %d ranks, and this job has %d: its "
                "loader %d has no partitions (one part per rank), so it "
                "resumes on %d ranks only. To resume on another number of "
                "ranks, a job builds its Loaders with partitions=P from its "
                "start (partitions=6 resumes on 1, 2, 3 or 6 ranks)"
                % (where, saved, world, i, saved))
        try:
            states.append(_partitions.gather(every))
        except Exception as e:
            raise _placed(e, "%s, loader %d" % (where, i))
    return states


def _restore(where, checkpoint, rank, world, model, optimizer, loaders):
    """Loads this rank's part of a read checkpoint: the loaders first (the
    step that refuses another spec or seed), then the model, optimizer
    and random generator (the saved rank's, on the saved number of
    ranks only)."""
    saved = checkpoint["world_size"]
    states = _states_for(where, checkpoint, rank, world, loaders)
    specs = checkpoint["ranks"][0]["specs"]
    for i, (loader, state) in enumerate(zip(loaders, states)):
        spec = specs[i]
        # a state at an epoch's start holds no pipeline for the library
        # to compare with the Loader's: the spec texts are compared
        if not _holds_pipeline(state) and spec != loader.spec:
            raise echoflow.SpecError(
                "%s, loader %d: saved by a Loader of spec %r, this Loader "
                "has spec %r: build it with the spec of the saved run"
                % (where, i, spec, loader.spec))
        try:
            loader.load_state_dict(state)
        except Exception as e:
            raise _placed(e, "%s, loader %d" % (where, i))
    _unwrap(model).load_state_dict(checkpoint["model"])
    if optimizer is not None:
        if checkpoint["optimizer"] is None:
            raise echoflow.SpecError(
                "%s: holds no optimizer state (saved with optimizer=None)"
                % where)
        optimizer.load_state_dict(checkpoint["optimizer"])
    if saved == world:  # on another count, no rank is a saved one
        torch.set_rng_state(checkpoint["ranks"][rank]["torch_rng"])


def load_checkpoint(path, model, optimizer=None, loaders=None):
    """Resumes from a save_checkpoint() file, a collective: every rank
    calls it before training, with what it gave save_checkpoint (the
    Loaders built alike: same spec, seed, even_steps, partitions). Each
    rank reads `path` (one host, or a shared file system) and loads the
    model, the optimizer, its own Loader states and its random generator;
    returns `extra`. Iterate each loader from its epoch on (loader.epoch;
    its set_epoch() to that epoch keeps the state).

    Loaders with partitions=P resume on any number of ranks that divides
    P: on the saved number, each rank takes its own state as above; on
    another, every rank's partitions are gathered and each rank takes
    those it now hosts, at their saved positions (each remaining sample
    of the epoch is read once), and keeps its own random generator (the
    saved ones were other ranks'). Loaders of the service resume on any
    number of trainers: each takes trainer 0's state, the job's record of
    what every trainer was handed, and the samples not handed out come
    from the workers, dealt among the trainers there are now.

    Refused on every rank, naming the rank that failed, before the model
    or optimizer changes: a checkpoint of Loaders without partitions
    (but those of the service) on another number of ranks (SpecError
    naming both counts, and saying that a job resumes elsewhere with
    partitions=); a Loader of another number of partitions
    (partitions=None is one per rank), spec or seed (the Loader's own
    SpecError, naming both); a file that is not a whole checkpoint
    (FormatError); a missing one (FileNotFoundError)."""
    rank, world = _world()
    where = "load_checkpoint(%r), rank %d of %d" % (path, rank, world)
    extra, error = None, None
    try:
        checkpoint = _read(path, where)
        _restore(where, checkpoint, rank, world, model, optimizer,
                 _as_list(loaders))
        extra = checkpoint["extra"]
    except Exception as e:
        error = e if where in str(e) else _placed(e, where)
    _agree(error, rank, world)
    return extra
