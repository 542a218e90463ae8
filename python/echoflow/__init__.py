# SPDX-License-Identifier: Apache-2.0
"""echoflow: training input pipelines built around data echoing.

    import echoflow
    spec = "idx:images=...,labels=... | shuffle:10000 | echo:2 | batch:128"
    with echoflow.Pipeline(spec, seed=0) as p:
        for sample in p:              # an echoflow.Sample: dict of Tensors
            images = numpy.asarray(sample["image"])   # no copy
        print(p.stats()["stages"])

The pipeline runs on the library's own threads; iterating waits for the next
sample with the GIL released. Tensors are read-only views of the
pipeline's memory, kept alive by reference: numpy.asarray(t),
numpy.from_dlpack(t) and torch.from_dlpack(t) share it without a copy.
echoflow.torch.Loader feeds a PyTorch training loop. docs/python.md has the
rules.
"""
import atexit
import sys
import threading
import time
import weakref

from ._echoflow import (
    CallbackError,
    Error,
    FormatError,
    Identity,
    OutOfMemoryError,
    PipelineWarning,
    ReadError,
    Sample,
    ShapeError,
    SpecError,
    StateError,
    StoppedError,
    Tensor,
    UnsupportedError,
    _Pipeline,
    __version__,
    _epoch_seed,
    _split_spec,
    stages,
    write_tokens,
)

__all__ = [
    "CallbackError", "Error", "FormatError", "Identity", "OutOfMemoryError",
    "Pipeline", "PipelineWarning", "ReadError", "Sample", "ShapeError",
    "SpecError", "StateError", "StoppedError", "Tensor", "UnsupportedError",
    "__version__", "epoch_seed", "split_spec", "stages", "write_tokens",
]


def split_spec(spec):
    """The stages of a spec as texts: `spec` split at each '|' that is not
    inside double quotes, each part stripped. A helper for programs that
    show or edit specs; Pipeline hands the library the whole spec. The
    library's own split (ef_spec_stage)."""
    return _split_spec(spec)


def epoch_seed(seed, epoch, part=0):
    """The seed of the pipeline that reads part `part` of the data in epoch
    `epoch` of a run seeded `seed`: `seed` itself for epoch 0 of part 0,
    another for every other pair, so that epochs and parts (ranks, workers)
    each shuffle in an order of their own. The library's own formula
    (ef_epoch_seed), which the preprocessing service uses too."""
    return _epoch_seed(seed, epoch, part)


def _as_field(name, value):
    """What a Python map returns for field `name`, as something the C side
    takes: a Tensor, a C-contiguous buffer of numbers, text, or a list of
    texts (str or bytes: a batch's ragged field)."""
    if isinstance(value, (Tensor, str)):
        return value
    if isinstance(value, list) and value and all(
            isinstance(v, (str, bytes)) for v in value):
        return value
    if isinstance(value, float):  # as a Python source takes it: float32
        import numpy
        return numpy.float32(value)
    try:
        if memoryview(value).c_contiguous:
            return value
    except TypeError:
        pass
    import numpy
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # torch
        value = value.detach().cpu().numpy()
    try:
        a = numpy.asarray(value)
    except ValueError as e:  # ragged nesting
        raise TypeError("field %r: a %s is not an array of numbers (%s)"
                        % (name, type(value).__name__, e)) from None
    if a.dtype == object:
        raise TypeError("field %r: a %s is not an array of numbers"
                        % (name, type(value).__name__))
    return a if a.flags.c_contiguous else numpy.ascontiguousarray(a)


def _to_numpy(name, value):
    """`value` as a numpy array: torch tensors are detached and brought to
    the CPU (a copy from a GPU), everything else goes through asarray."""
    import numpy
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch
        value = value.detach().cpu().numpy()
    try:
        a = numpy.asarray(value)
    except ValueError as e:  # ragged nested sequences
        raise TypeError("feedback: %s: %s" % (name, e)) from None
    if a.size == 0:  # [] has no shape to check and no dtype of its own
        return a.reshape(0, *a.shape[1:])
    return a


def _feedback_ids(ids):
    """ids as feedback() takes them: Sample.members, or Identity tuples,
    into a C-contiguous int64 array [n, 4]."""
    import numpy
    a = _to_numpy("ids", ids)
    if a.size == 0:
        return numpy.empty((0, 4), numpy.int64)
    if a.dtype.kind not in "iu":
        raise TypeError("feedback: ids must be integers (Sample.members, or "
                        "echoflow.Identity tuples), not an array of %s"
                        % a.dtype)
    if a.ndim != 2 or a.shape[1] != 4:
        raise ValueError("feedback: ids must have shape [n, 4], one row "
                         "(index, epoch, echo_copy, fresh) per example as "
                         "Sample.members or a list of echoflow.Identity, not "
                         "shape %s" % (list(a.shape),))
    return numpy.ascontiguousarray(a, dtype=numpy.int64)


def _feedback_values(values):
    """values as feedback() takes them: any 1-D sequence of numbers, into a
    C-contiguous float64 array."""
    import numpy
    a = _to_numpy("values", values)
    if a.size == 0:
        return numpy.empty(0, numpy.float64)
    if a.dtype.kind not in "iuf":
        raise TypeError("feedback: values must be real numbers, not an "
                        "array of %s" % a.dtype)
    if a.ndim != 1:
        raise ValueError("feedback: values must be 1-D, one per id, not "
                         "shape %s" % (list(a.shape),))
    return numpy.ascontiguousarray(a, dtype=numpy.float64)


def _adapt(fn):
    def call(sample):
        out = fn(sample)
        if isinstance(out, dict):
            out = {k: _as_field(k, v) for k, v in out.items()}
        return out
    return call


def _source_items(source):
    """An iterator over `source`: an iterable, or a map-style dataset (a
    torch Dataset: __getitem__ and __len__) read by index in order."""
    if hasattr(source, "__iter__"):
        return iter(source)
    return (source[i] for i in range(len(source)))


def _source_value(value):
    """`value` as the C side imports it without a copy: torch tensors
    detached and contiguous, numpy arrays C-contiguous; the rest as is."""
    if hasattr(value, "detach") and hasattr(value, "is_contiguous"):
        value = value.detach()
        if not value.is_contiguous():
            value = value.contiguous()
        # torch 1.13's DLPack has no bool: its numpy view (no copy) has
        if str(value.dtype) == "torch.bool" and value.device.type == "cpu":
            return value.numpy()
        return value
    flags = getattr(value, "flags", None)
    if flags is not None and not flags.c_contiguous:
        import numpy
        return numpy.ascontiguousarray(value)
    return value


def _source_fields(item, names):
    """The (name, value) pairs of an item of a Python source: a dict by its
    keys, a tuple or list by `names` (default "0", "1", ...), anything
    else as the one field names[0] (default "0")."""
    if isinstance(item, dict):
        return [(k, _source_value(v)) for k, v in item.items()]
    if not isinstance(item, (tuple, list)):
        item = (item,)
    if names is None:
        names = [str(i) for i in range(len(item))]
    elif len(names) != len(item):
        raise ValueError("source: an item of %d values, and fields names %d"
                         " (%s)" % (len(item), len(names), ", ".join(names)))
    return [(n, _source_value(v)) for n, v in zip(names, item)]


def _yields_batches(source):
    """Whether `source` is a torch DataLoader that batches (with a
    batch_size or a batch_sampler), whose items are batches. torch is not
    imported for it: a DataLoader's caller has done so."""
    torch = sys.modules.get("torch")
    data = getattr(getattr(torch, "utils", None), "data", None)
    loader = getattr(data, "DataLoader", None)
    return (isinstance(loader, type) and isinstance(source, loader)
            and getattr(source, "batch_sampler", None) is not None)


def _feed_loop(feed, source, names):
    """The thread of a Python source: a pass over `source` each time the
    pipeline asks for one, its items put into `feed`, until the pipeline
    is closed. What the iterable raises fails the pipeline."""
    try:
        while True:
            if feed.wait_pass() < 0:
                return
            items = _source_items(source)
            _reading(items)
            for item in items:
                if not feed.put(_source_fields(item, names)):
                    return
            feed.end()
    except BaseException as e:  # the consumer raises it as the cause
        feed.fail(e)


_live = weakref.WeakSet()

# The threads of Python sources still running, each with the iterator it
# reads (None before its first pass). A pipeline freed before exit
# (echoflow.torch.echo() drops its own once the loop breaks) leaves its
# thread shutting its iterable down: exit waits for that too.
_feeders = {}


def _feed_thread(feed, source, names):
    try:
        _feed_loop(feed, source, names)
    finally:
        _feeders.pop(threading.current_thread(), None)


def _reading(items):
    """Called on a source's thread: it now reads iterator `items`, the one
    exit wakes (_wake_at_exit). A source that wraps another's iterator
    (echoflow.torch.echo()'s generator over a DataLoader) names the inner
    one after the outer one was named."""
    thread = threading.current_thread()
    if thread in _feeders:
        _feeders[thread] = items


def _wake_at_exit(items):
    """Ends the wait of a source's thread inside next() of a torch
    DataLoader's iterator with workers, so that exit need not wait for a
    batch. That wait polls the workers' result queue for up to 5 s
    (MP_STATUS_CHECK_INTERVAL) at a time, and after Ctrl-C, which reaches
    the workers too, no batch comes: exit took 5 s where the DataLoader
    alone takes 1. An item that is not a batch makes that next() raise,
    ending the thread, whose iterator then shuts its workers down as
    usual. Only at exit: a persistent iterator is never read again."""
    queue = getattr(items, "_data_queue", None)
    if queue is None or getattr(items, "_shutdown", True):
        return
    try:
        queue.put(None)
    except Exception:  # closed already: the thread is not waiting on it
        pass


# How long exit waits for a Python source's thread to let go of its
# iterable once the pipeline is closed. A torch DataLoader's shutdown
# waits up to 5 s for each worker process to end (its
# MP_STATUS_CHECK_INTERVAL), so on a loaded machine two workers passed
# 10 s, and the process aborted as below.
_FEEDER_EXIT_S = 30


@atexit.register
def _close_all():
    # The library's threads must not outlive the interpreter: a map thread
    # that waits for the GIL at exit would never get it. A map stuck in
    # its call for good is left to end with the process.
    pipelines = list(_live)
    for p in pipelines:
        p._close_at_exit()
    # A source's thread, woken by the close, drops its iterator: a torch
    # DataLoader's shuts its workers down then. Done after finalisation
    # began, that cleanup was cut off inside torch's C++ code, which
    # aborted the process ("terminate called without an active exception").
    # The freed pipelines' threads were woken when they were closed.
    feeders = list(_feeders.items())
    for _, items in feeders:
        _wake_at_exit(items)
    deadline = time.monotonic() + _FEEDER_EXIT_S
    for feeder, _ in feeders:
        if feeder is not threading.current_thread():
            feeder.join(max(0.0, deadline - time.monotonic()))


class Pipeline(_Pipeline):
    """An input pipeline built from a text spec (`echoflow stages` lists the
    stages and their options). Iterating yields echoflow.Sample objects.

    seed: every random decision derives from it (0 to 2**64 - 1).
    on_error: "fail" raises on a bad sample; "skip" drops it and counts it
        in stats().
    shard: (part, count): the source reads only that part of the data, as
        its option shard=part/count would, so that `count` readers read it
        once between them.
    memory_budget: the most payload bytes the pipeline's queues and buffers
        may hold together (0: no limit; None: the library's default, 1 GiB).
        Queues wait for room; a sample larger than the budget, or a shuffle
        buffer or echo pool that alone passes it, raises OutOfMemoryError
        (a MemoryError) naming the stage.
    maps: Python callables for `map:fn=NAME` stages: NAME -> fn(sample) ->
        dict of field name to Tensor or array. They run on the map stage's
        threads and hold the GIL while they run, so they are slower than
        the built-in stages: use them for what those cannot do. A name no
        stage of the spec uses raises SpecError.
    source: a Python iterable as the first stage, the spec's stages after
        it: a torch DataLoader (workers included), an IterableDataset, a
        generator, a list, or a map-style dataset (__getitem__ and
        __len__), read by index in order. Each pass of the pipeline (one,
        or each of `repeat`) iterates it once, on a thread of its own that
        holds the GIL only while it calls Python. An item is a dict (its
        keys name the fields), a tuple or list (named by `fields`, default
        "0", "1", ...) or one value (fields[0], default "0"). Values: torch
        tensors on the CPU and numpy arrays (uint8, int32, int64, float32;
        taken without a copy through DLPack, made contiguous first if they
        are not), bytes and other buffers (without a copy), str (UTF-8
        bytes, uint8), int (int64) and float (float32). What the iterable
        raises fails the pipeline: a CallbackError whose __cause__ it is.
        From the iterable, this pipeline's next(), len(), state_dict(),
        load_state_dict() and close() raise StateError, as each would
        wait for the source itself; stats() and stop() work.
        Its position cannot be saved (state_dict() raises
        UnsupportedError), and it reads what it is given: shard it before
        (a DistributedSampler), not with shard=.
    fields: the field names of a source's tuple items, in order.
    unbatch: the source yields batches (a DataLoader with a batch_size):
        each is split into its examples along the first dimension, as views
        of its memory, so that the stages after it (echo, shuffle, batch)
        see examples.
    batched: the source yields batches, kept whole: each item is one
        sample that is a batch of its rows (every field has the batch size
        as its first dimension; Sample.members numbers them), as `batch`
        makes, so that the stages that transform one example (flip,
        to_chw, crop_mirror_normalize ...) refuse it with SpecError rather
        than take a batch for one image. None (the default): True for a
        torch DataLoader that batches (a batch_size or a batch_sampler),
        unless unbatch is given; False otherwise. batched=True and
        unbatch=True together raise ValueError.
    read_ahead: how many items (examples, with unbatch) a source's thread
        may read ahead of the pipeline (default 256).
    epoch: the epoch this pipeline reads, for the identities it hands out
        (Sample.identity.epoch, the epoch column of Sample.members, what
        its maps see): the first pass is `epoch`, a repeat's next pass
        epoch + 1, and so on. feedback() takes identities back alike. It
        labels, and changes no random draw (the seed does that:
        epoch_seed()). echoflow.torch.Loader gives its set_epoch() here.

    A bad spec raises SpecError (a ValueError) naming the stage and option;
    a data error raises the Error subclass of its kind with the library's
    message. stop() ends the iteration from any thread; close() (or the
    end of a with-block) frees the pipeline; the tensors it gave out stay
    valid.

    state_dict() gives the position between two samples, a small dict of
    bytes and ints (it names items by identity, never holds their data);
    load_state_dict() on a pipeline built alike, before its first sample,
    resumes there:

        state = p.state_dict()              # pickle or torch.save it
        q = echoflow.Pipeline(spec, seed=0)
        q.load_state_dict(state)            # q goes on where p stood
    """

    def __init__(self, spec, *, seed=0, on_error="fail", shard=None,
                 memory_budget=None, maps=None, source=None, fields=None,
                 unbatch=False, batched=None, read_ahead=256, epoch=0):
        if source is not None and shard not in (None, (0, 1)):
            raise SpecError(
                "shard: a Python source reads what it is given; give each "
                "process its own part before (torch's DistributedSampler), "
                "not shard=%r" % (shard,))
        super().__init__(spec, seed, on_error, shard, memory_budget)
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise TypeError("epoch must be an int, not %s"
                            % type(epoch).__name__)
        self._epoch_base = epoch
        if source is not None:
            self._add_source(source, fields, unbatch, batched, read_ahead)
        elif fields is not None or unbatch or batched is not None:
            raise TypeError("fields, unbatch and batched are options of a "
                            "source; give source= too")
        maps = dict(maps or {})
        for name in sorted(maps, key=str):
            if not isinstance(name, str):
                raise TypeError("maps: a map's name must be a str, not %r"
                                % (name,))
            if not callable(maps[name]):
                raise TypeError("map %r is not callable" % name)
            # the library runs it at the spec's map:fn=NAME stages, and
            # fails the parse naming any name no stage uses
            self.bind_map(name, _adapt(maps[name]))
        if spec.strip():
            self.parse(spec)
        elif maps:  # a source alone: nothing to parse, nothing to map
            raise SpecError("maps: %s named by no map:fn=NAME stage of the "
                            "spec" % ", ".join(map(repr, sorted(maps))))
        _live.add(self)

    def _add_source(self, source, fields, unbatch, batched, read_ahead):
        if not (hasattr(source, "__iter__") or (
                hasattr(source, "__getitem__") and hasattr(source, "__len__"))):
            raise TypeError("source must be an iterable or a map-style "
                            "dataset (__getitem__ and __len__), not %s"
                            % type(source).__name__)
        names = None
        if fields is not None:
            names = [fields] if isinstance(fields, str) else list(fields)
            if not all(isinstance(n, str) and n for n in names):
                raise TypeError("fields must be a sequence of field names "
                                "(non-empty str), not %r" % (fields,))
        if not isinstance(read_ahead, int) or read_ahead < 1:
            raise ValueError("read_ahead must be an int >= 1, not %r"
                             % (read_ahead,))
        if batched and unbatch:
            raise ValueError("source: unbatch=True splits the source's "
                             "batches into examples, batched=True keeps "
                             "them whole: give one of them")
        if batched is None:
            batched = not unbatch and _yields_batches(source)
        # the items of a pass, for len(): an unbatched source's examples
        # are known only once its batches are
        length = None
        if not unbatch:
            try:
                length = len(source)
            except TypeError:
                pass
        options = "" if length is None else "length=%d" % length
        feed = self.add_source(read_ahead, bool(unbatch), options,
                               bool(batched))
        feeder = threading.Thread(
            target=_feed_thread, args=(feed, source, names),
            name="echoflow-source", daemon=True)
        _feeders[feeder] = None
        self._feeder = feeder
        feeder.start()

    def _wait_source(self):
        """Once closed: waits until the source's thread has let go of its
        iterable, so that the next pass may start one over the same
        object (a DataLoader with persistent workers hands out one
        iterator, reset by each iter())."""
        feeder = getattr(self, "_feeder", None)
        if feeder is not None and feeder is not threading.current_thread():
            feeder.join()

    def feedback(self, ids, values):
        """Tells the pipeline's echo stages what each example cost, for
        echo policies (echo:policy=...): one value per example, such as its
        training loss, by its identity.

        ids: a batch's Sample.members (int64 [n, 4]), or a sequence of
            echoflow.Identity (sample.identity of unbatched examples).
        values: n real numbers: a sequence, a numpy array or a torch tensor
            (detached; one on a GPU is copied to the CPU), as float64.

        Echo stages without a policy ignore it, as they ignore identities
        they no longer hold. Callable from any thread, also while another
        waits in next(); the GIL is released during the call. Lengths that
        differ, or a value that is NaN or infinite, raise ValueError and
        nothing is applied; ids or values of the wrong kind or shape raise
        TypeError or ValueError saying what was expected. Needs numpy."""
        ids, values = _feedback_ids(ids), _feedback_values(values)
        if len(ids) != len(values):
            raise ValueError("feedback: %d ids and %d values; expected one "
                             "value per id" % (len(ids), len(values)))
        self._feedback(ids, values)

    def __len__(self):
        """The number of items a run yields (what iterating gives before
        it stops), where it is known in advance: the whole run's, also
        after iterating began. Each stage maps its upstream's count
        (docs/python.md, Length): range n, idx its files' records, a
        batch of b ceil(n / b) (floor with drop_remainder), echo:F F per
        item, repeat:count count passes, take:k at most k. Where it is not
        known (a tar or tfrecord source, repeat without a count, echo with
        a fractional factor, auto or a policy) raises TypeError with the
        library's message naming the stage, as len() of any iterable
        without a length does, so that DataLoader and others go on
        without one. With on_error="skip" it counts the run with nothing
        dropped: an upper bound."""
        return self._length()

    def __bool__(self):
        # a pipeline is true, whatever its length (or none)
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "echoflow.Pipeline(%r)" % self.stats()["spec"]

