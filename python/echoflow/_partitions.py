# SPDX-License-Identifier: Apache-2.0
"""The partitions of a data-parallel job (echoflow.torch.Loader's
partitions=P): the rule that deals them to the ranks, one rank's pass over
the partitions it hosts, and their states, which a checkpoint gathers from
every rank and another number of ranks takes up.

The rule (the C trainer's `echoflow train --partitions P` follows it too):

- A job fixes a number of partitions P, whatever its number of ranks.
  Partition p (0 <= p < P) is one pipeline of the whole spec over part p
  of P of the data (shard=(p, P)), seeded epoch_seed(seed, epoch, p): a
  shuffle and echo state of its own, its order a function of seed, epoch
  and p only.
- Rank r of a world of M ranks hosts the partitions p with p % M == r, so
  M must divide P. It yields from them in turn: each next item comes from
  the hosted partition that has yielded the fewest items so far this
  epoch, the lowest p among equals; a partition that has ended is passed
  over; the rank's epoch ends when all of its partitions have ended.
- So for every M dividing P the items of each partition come in the same
  order, and each round of P items (one from each partition) is the same
  items: only which rank trains on them changes. A checkpoint holds every
  partition's state (its pipeline's position and its item count), which
  the ranks of any such M take up, each the partitions it now hosts: the
  rest of the epoch is read once, shuffle buffers and echo pools as they
  were.

Nothing here knows torch: the Loader gives the pipelines and hands the
items out.
"""
import echoflow

_END = object()  # what next() gives at the end of a partition


def divisors(n):
    """The numbers of ranks that n partitions can be dealt to."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _counts_text(counts):
    """1, 2, 3 or 6."""
    words = [str(c) for c in counts]
    return words[0] if len(words) == 1 else "%s or %s" % (
        ", ".join(words[:-1]), words[-1])


def check(partitions, rank, world_size):
    """Refuses a world that cannot host `partitions` (an int >= 1 already
    checked as an int): ValueError naming both and the counts that work."""
    if partitions < 1:
        raise ValueError("partitions must be an int >= 1 (or None: one per "
                         "rank), not %d" % partitions)
    if partitions % world_size:
        raise ValueError(
            "partitions=%d over world_size %d: rank r hosts the partitions "
            "p with p %% world_size == r, so world_size must divide "
            "partitions; with partitions=%d, %s ranks work (or give "
            "partitions a multiple of %d)"
            % (partitions, world_size, partitions,
               _counts_text(divisors(partitions)), world_size))


def hosted(partitions, rank, world_size):
    """The partitions rank `rank` of `world_size` hosts, in order."""
    return range(rank, partitions, world_size)


def start_state():
    """The state of a partition at the start of its epoch."""
    return {"pipeline": None, "count": 0, "ended": False}


def part_state(value, p):
    """(pipeline state or None, count, ended) of partition p's saved state
    `value`, checked; FormatError naming what is wrong."""
    if not isinstance(value, dict) or not {"pipeline", "count",
                                           "ended"} <= set(value):
        raise echoflow.FormatError(
            "state: partition %d: expected a dict of 'pipeline', 'count' "
            "and 'ended', not %r" % (p, value))
    count, ended = value["count"], value["ended"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise echoflow.FormatError(
            "state: partition %d: count %r, expected an int >= 0"
            % (p, count))
    if not isinstance(ended, bool):
        raise echoflow.FormatError(
            "state: partition %d: ended %r, expected a bool" % (p, ended))
    pipeline = value["pipeline"]
    if pipeline is not None and (ended or not isinstance(pipeline, dict)):
        raise echoflow.FormatError(
            "state: partition %d: pipeline %s, expected a pipeline's "
            "state_dict() or None%s" % (p, type(pipeline).__name__,
                                        " (it has ended)" if ended else ""))
    return pipeline, count, ended


class Pass:
    """One pass of a rank over the partitions it hosts: their pipelines,
    opened when first read (or restored before), the items each has
    yielded and which have ended. items() yields by the rule above."""

    def __init__(self, parts, open_part, prepare):
        """parts: {p: (Pipeline or None, count, ended)} for every hosted
        partition, the pass takes ownership of the pipelines (close()
        frees them); open_part(p): a new pipeline of partition p at its
        start; prepare(pipeline): called once before a pipeline's first
        item is read here (the Loader's tensor conversion)."""
        self._pipelines = {p: v[0] for p, v in parts.items()
                           if v[0] is not None}
        self.counts = {p: v[1] for p, v in parts.items()}
        self.ended = {p for p, v in parts.items() if v[2]}
        self._open, self._prepare = open_part, prepare
        self._prepared = set()

    def at_start(self):
        """Whether nothing of the pass has been read."""
        return not self._pipelines and not self.ended and \
            not any(self.counts.values())

    def _next_part(self):
        """The partition the next item comes from, or None at the end."""
        live = [p for p in self.counts if p not in self.ended]
        return min(live, key=lambda p: (self.counts[p], p)) if live else None

    def items(self):
        """Yields (pipeline, item) by the rule, the pipeline being that of
        the item's partition; closes every pipeline at the end, or when
        the generator is closed."""
        try:
            while True:
                p = self._next_part()
                if p is None:
                    return
                pipeline = self._pipelines.get(p)
                if pipeline is None:
                    pipeline = self._pipelines[p] = self._open(p)
                if p not in self._prepared:
                    self._prepare(pipeline)
                    self._prepared.add(p)
                item = next(pipeline, _END)
                if item is _END:
                    self.ended.add(p)
                    del self._pipelines[p]
                    pipeline.close()
                    continue
                self.counts[p] += 1
                yield pipeline, item
        finally:
            self.close()

    def states(self):
        """{p: state} of every hosted partition, to save: the position of
        its pipeline after the items it has yielded (None when it has not
        been opened: its start), its count, and whether it has ended."""
        return {p: {"pipeline": self._pipelines[p].state_dict()
                    if p in self._pipelines else None,
                    "count": self.counts[p], "ended": p in self.ended}
                for p in self.counts}

    def close(self):
        """Stops and frees the pipelines the pass holds."""
        for pipeline in self._pipelines.values():
            pipeline.close()


def restore(states, hosted_parts, open_part, prepare):
    """A Pass of the partitions `hosted_parts` at the positions of
    `states` ({p: saved state}, which may hold more partitions): each
    pipeline built and restored here, so that a state of another spec or
    seed raises now, naming the partition, and nothing is kept."""
    parts = {}
    try:
        for p in hosted_parts:
            pipeline_state, count, ended = part_state(states[p], p)
            pipeline = None
            if pipeline_state is not None:
                pipeline = open_part(p)
                parts[p] = (pipeline, count, ended)  # closed on failure
                try:
                    pipeline.load_state_dict(pipeline_state)
                except Exception as e:
                    raise _placed(e, "partition %d" % p)
            parts[p] = (pipeline, count, ended)
    except BaseException:
        for pipeline, _, _ in parts.values():
            if pipeline is not None:
                pipeline.close()
        raise
    return Pass(parts, open_part, prepare)


def _placed(e, where):
    """Exception e again, of its type, its message led by `where`."""
    try:
        out = type(e)("%s: %s" % (where, e))
    except Exception:  # a type that takes other arguments
        return e
    out.__cause__ = e
    return out


def gather(states):
    """One Loader state holding every partition, from the states of every
    rank of a saved job (in rank order), for the ranks of another world
    size to take their partitions from. The ranks' wrap-round passes of
    even_steps="pad" are left out: they belong to the ranks that read
    them, and a rank of the new world pads from its own partitions'
    starts when it must. FormatError when the states do not make one
    job's (another number of partitions, epochs that differ, a partition
    twice or missing)."""
    first = states[0]
    partitions, epoch = first["partitions"], first["epoch"]
    parts = {}
    for rank, state in enumerate(states):
        if state.get("partitions") != partitions:
            raise echoflow.FormatError(
                "state: rank 0 saved partitions=%r and rank %d partitions="
                "%r: not the states of one job"
                % (partitions, rank, state.get("partitions")))
        if state["epoch"] != epoch:
            raise echoflow.FormatError(
                "state: rank 0 saved its position in epoch %r and rank %d "
                "in epoch %r: the ranks save at the same step, in the same "
                "epoch" % (epoch, rank, state["epoch"]))
        for p, value in state["parts"].items():
            if p in parts:
                raise echoflow.FormatError(
                    "state: partition %r saved by two ranks" % (p,))
            parts[p] = value
    missing = sorted(set(range(partitions)) - set(parts))
    if missing:
        raise echoflow.FormatError(
            "state: the ranks' states hold no partition %s of %d"
            % (", ".join(map(str, missing)), partitions))
    out = dict(first, rank=None, world_size=len(states), parts=parts)
    if "padded" in first:
        out.update(padded=0, wrap=None)
    return out
