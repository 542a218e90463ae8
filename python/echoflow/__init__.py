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
    stages,
)

__all__ = [
    "CallbackError", "Error", "FormatError", "Identity", "OutOfMemoryError",
    "Pipeline", "PipelineWarning", "ReadError", "Sample", "ShapeError",
    "SpecError", "StateError", "StoppedError", "Tensor", "UnsupportedError",
    "__version__", "epoch_seed", "split_spec", "stages",
]


def _split_unquoted(text, sep):
    """`text` split at each `sep` that is not inside double quotes, each
    part stripped."""
    parts, start, quoted = [], 0, False
    for i, c in enumerate(text):
        if c == '"':
            quoted = not quoted
        elif c == sep and not quoted:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def split_spec(spec):
    """The stages of a spec as texts: `spec` split at each '|' that is not
    inside double quotes, each part stripped."""
    return _split_unquoted(spec, "|")


def _split_options(text):
    """NAME[:OPT,...] into (name, [option texts]); commas inside quotes
    stay."""
    name, _, opts = text.partition(":")
    return name.strip(), _split_unquoted(opts, ",") if opts.strip() else []


def epoch_seed(seed, epoch, part=0):
    """The seed of the pipeline that reads part `part` of the data in epoch
    `epoch` of a run seeded `seed`: `seed` itself for epoch 0 of part 0,
    another for every other pair, so that epochs and parts (ranks, workers)
    each shuffle in an order of their own."""
    return (seed + epoch * 0x9E3779B97F4A7C15
            + part * 0xD1B54A32D192ED03) % 2**64


def _as_field(name, value):
    """What a Python map returns for field `name`, as something the C side
    takes: a Tensor, or a C-contiguous buffer of numbers."""
    if isinstance(value, Tensor):
        return value
    try:
        if memoryview(value).c_contiguous:
            return value
    except TypeError:
        pass
    import numpy
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # torch
        value = value.detach().cpu().numpy()
    a = numpy.asarray(value)
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


_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # The library's threads must not outlive the interpreter: a map thread
    # that waits for the GIL at exit would never get it.
    for p in list(_live):
        p.close()


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
        the built-in stages: use them for what those cannot do.

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
                 memory_budget=None, maps=None):
        super().__init__(spec, seed, on_error, shard, memory_budget)
        maps = dict(maps or {})
        if not maps:
            self.parse(spec)
        else:
            used = set()
            for text in split_spec(spec):
                name, opts = _split_options(text)
                at, fn = _map_name(opts) if name == "map" else (None, None)
                if fn in maps:
                    if not callable(maps[fn]):
                        raise TypeError("map %r is not callable" % fn)
                    rest = ",".join(opts[:at] + opts[at + 1:])
                    self.add_map(_adapt(maps[fn]), fn, rest)
                    used.add(fn)
                else:
                    self.parse(text)
            unused = sorted(set(maps) - used)
            if unused:
                raise SpecError("maps: %s named by no map:fn=NAME stage of "
                                "the spec" % ", ".join(map(repr, unused)))
        _live.add(self)

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


def _map_name(opts):
    """Where a map stage's fn option stands and what it names: fn=NAME, or
    NAME first and bare. (None, None) without one."""
    for i, o in enumerate(opts):
        key, eq, value = o.partition("=")
        if eq and key.strip() == "fn":
            return i, value.strip().strip('"')
        if not eq and i == 0:
            return i, key.strip()
    return None, None
