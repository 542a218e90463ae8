# SPDX-License-Identifier: Apache-2.0
"""The Python binding benchmark, part 1: what iterating a batched pipeline
from Python costs against the C loop of `echoflow run --json SPEC`, and
where that cost goes. Prints markdown tables on stdout, progress on stderr.

Every case is one spec run three ways, alternated, REPS times (the order
rotates each time, so that none always runs first), each run in a process
of its own:
  C         `echoflow run --json SPEC` (pulls every item, frees it)
  pipeline  `for s in echoflow.Pipeline(SPEC): pass`
  loader    `for b in echoflow.torch.Loader(SPEC): pass` (every field made
            a torch.Tensor through DLPack)
A run's rate is items / elapsed_s from the pipeline's own stats on all
three sides: the same clock, from the end of the stages' open (startup:
reading and unzipping files) to the last next(). The tables give medians.

The breakdown measures the parts of the per-batch cost: one next() of
each loop on a source that costs almost nothing (range), with the
pipeline on the main thread and on another (where the binding does not
guard against Ctrl-C); then to_torch and its parts in tight loops over one
held batch, in CPU time of the calling thread. From those it gives what
the binding should add to each case's batch, a figure that a busy
machine disturbs less than the alternated runs.

usage: python_binding.py ECHOFLOW_CLI DATA_DIR FASHION_MNIST_DIR SCALE
       python_binding.py run pipeline|pipeline-thread|loader SPEC
           (one run; prints its items and elapsed_s)
DATA_DIR holds photos-000000.tar (bench/photos.py) and
fmnist-{000000..000001}.tar (echoflow pack of 20,000 Fashion-MNIST images).
"""
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time

import echoflow

BATCH = 128
MEAN_STD = 'mean="0.485,0.456,0.406",std="0.229,0.224,0.225"'


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def note(text):
    """A paragraph of the markdown, wrapped as docs/BENCHMARKS.md is."""
    print(textwrap.fill(text, 76))
    print()


def examples(base, scale, least):
    """base * scale examples, a whole number of batches, at least `least`."""
    return max(least, round(base * scale / BATCH) * BATCH)


def cases(data, fmnist, scale):
    """(name, what a batch holds, spec, examples per run) of each case."""
    idx = ("idx:images=%s/train-images-idx3-ubyte.gz,"
           "labels=%s/train-labels-idx1-ubyte.gz" % (fmnist, fmnist))
    n = examples(600000, scale, 20 * BATCH)
    yield ("Fashion-MNIST, IDX", "u8 [128,28,28], i64 [128]",
           "%s | repeat | take:%d | shuffle:10000 | batch:%d"
           % (idx, n, BATCH), n)
    n = examples(20000, scale, 20 * BATCH)
    yield ("Fashion-MNIST, WebDataset + PNG decode",
           "u8 [128,28,28,1], i64 [128], 2 x u8 key/url",
           "tar:urls=%s/fmnist-{000000..000001}.tar | repeat | take:%d "
           "| decode | shuffle:10000 | batch:%d" % (data, n, BATCH), n)
    n = examples(1024, scale, 2 * BATCH)
    t = "threads=2"
    yield ("photos, JPEG decode + crop + flip + normalize",
           "f32 [128,3,224,224], i64 [128], 2 x u8 key/url",
           "tar:urls=%s/photos-000000.tar | repeat | take:%d | decode:%s "
           "| random_resized_crop:size=224,%s | flip:%s | normalize:%s,%s "
           "| to_chw:%s | batch:%d"
           % (data, n, t, t, t, MEAN_STD, t, t, BATCH), n)


# ---- one run of each kind, each in a process of its own: (items, elapsed_s)

def run_c(cli, spec):
    out = subprocess.run([cli, "run", "--json", spec], check=True,
                         capture_output=True, text=True).stdout
    d = json.loads(out)
    if d["status"] != "ok":
        sys.exit("python_binding: %s: %s" % (spec, d.get("error")))
    return d["items"], d["elapsed_s"]


def run_python(loop, spec):
    """`loop` (pipeline, pipeline-thread or loader) over `spec` in a new
    interpreter, as the C loop runs in a new process: a long-lived process
    that waits while the other side runs would have the scheduler's favour
    on a busy machine."""
    out = subprocess.run([sys.executable, __file__, "run", loop, spec],
                         check=True, capture_output=True, text=True).stdout
    items, elapsed = out.split()
    return int(items), float(elapsed)


def checked(stats):
    if stats["status"] != "ok":
        sys.exit("python_binding: %s: %s" % (stats["spec"], stats["status"]))
    return stats["items"], stats["elapsed_s"]


def loop_pipeline(spec):
    with echoflow.Pipeline(spec) as p:
        for _ in p:
            pass
    return checked(p.stats())


def loop_loader(spec):
    import echoflow.torch
    loader = echoflow.torch.Loader(spec)
    for _ in loader:
        pass
    return checked(loader.stats())


def loop_on_thread(spec):
    """loop_pipeline on a thread other than the main one, where next()
    does not guard against Ctrl-C."""
    result = []
    t = threading.Thread(target=lambda: result.append(loop_pipeline(spec)))
    t.start()
    t.join()
    return result[0]


LOOPS = [
    ("C", "C loop, `echoflow run --json`"),
    ("pipeline", "`echoflow.Pipeline`"),
    ("loader", "`echoflow.torch.Loader` (to torch)"),
]


def measure(cli, spec, reps):
    """{loop: [(items, elapsed_s), ...]} over `reps` rotations, after one
    run of the C loop that warms the file cache."""
    def run(k):
        return run_c(cli, spec) if k == "C" else run_python(k, spec)
    run("C")
    out = {k: [] for k, _ in LOOPS}
    for r in range(reps):
        order = [k for k, _ in LOOPS]
        order = order[r % 3:] + order[:r % 3]
        for k in order:
            out[k].append(run(k))
        log("  rep %d: %s" % (r + 1, ", ".join(
            "%s %.1f batches/s" % (k, out[k][-1][0] / out[k][-1][1])
            for k in order)))
    items = {n for k in out for n, _ in out[k]}
    if len(items) != 1:
        sys.exit("python_binding: the loops saw different batch counts: %s"
                 % sorted(items))
    return out


def fmt(x, digits=0):
    return "{:,.{}f}".format(x, digits)


def overhead_table(results, reps):
    """results: [(name, what, spec, examples, runs)]; returns the median C
    batches/s of each case."""
    print("| case | batch | loop | batches/s | examples/s | Python / C "
          "| per-rep range | best of %d: Python / C | overhead us/batch "
          "| under 3%% |" % reps)
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: "
          "| --- |")
    c_rates = []
    for name, what, _, n, runs in results:
        rate = {k: statistics.median(i / s for i, s in runs[k])
                for k in runs}
        best = {k: max(i / s for i, s in runs[k]) for k in runs}
        c_rates.append(rate["C"])
        batches = runs["C"][0][0]
        for k, label in LOOPS:
            if k == "C":
                cells = ["1.000", "-", "1.000", "-", "-"]
            else:
                pairs = [(i / s) / (ic / sc)
                         for (i, s), (ic, sc) in zip(runs[k], runs["C"])]
                ratio = rate[k] / rate["C"]
                cells = ["%.3f" % ratio,
                         "%.3f-%.3f" % (min(pairs), max(pairs)),
                         "%.3f" % (best[k] / best["C"]),
                         "%.1f" % (1e6 / rate[k] - 1e6 / rate["C"]),
                         "yes" if ratio >= 0.97 else "**no**"]
            print("| %s | %s | %s | %s | %s | %s |"
                  % (name if k == "C" else "", what if k == "C" else "",
                     label, fmt(rate[k], 1), fmt(rate[k] * n / batches),
                     " | ".join(cells)))
    print()
    note("batches/s and examples/s: median of %d runs per loop, "
         "alternated; Python / C: of the medians; \"per-rep range\": the "
         "lowest and highest ratio of a Python run to the C run of the "
         "same rotation; best of %d: of the fastest run of each loop; "
         "overhead: 1/(Python batches/s) - 1/(C batches/s) of the "
         "medians; under 3%%: median Python / C >= 0.97." % (reps, reps))
    return c_rates


# ---- the breakdown ----

def per_call_us(fn, seconds):
    """Microseconds of this thread's CPU time per call of fn(), calling it
    for about `seconds` of it: CPU time, so that other processes on a busy
    machine do not count."""
    n, elapsed = 0, 0.0
    batch = 64
    start = time.thread_time()
    while elapsed < seconds:
        for _ in range(batch):
            fn()
        n += batch
        elapsed = time.thread_time() - start
        batch = min(batch * 2, 65536)
    return elapsed / n * 1e6


def first_batch(spec):
    with echoflow.Pipeline(spec) as p:
        return next(iter(p))


def per_next_us(cli, scale, reps=3):
    """Microseconds per item of each loop over a range source, which costs
    almost nothing: {loop: median over `reps` runs}."""
    spec = "range:n=%d" % max(100000, round(1000000 * scale))
    per_item = {k: [] for k in ("C", "pipeline", "pipeline-thread",
                                "loader")}
    for _ in range(reps):
        for k in per_item:
            items, elapsed = (run_c(cli, spec) if k == "C"
                              else run_python(k, spec))
            per_item[k].append(elapsed / items * 1e6)
    return spec, {k: statistics.median(v) for k, v in per_item.items()}


def breakdown_tables(cli, results, c_rates, scale):
    log("breakdown")
    spec, us = per_next_us(cli, scale)
    import torch
    import echoflow.torch
    torch.set_num_threads(1)
    secs = max(0.2, min(scale, 1.0))

    def to_torch_us(sample):
        return per_call_us(lambda: echoflow.torch.to_torch(sample), secs)

    one = first_batch(spec)
    batches = [first_batch(r[2]) for r in results]
    field = batches[0]["image"]
    from_capsule = torch._C._from_dlpack
    tt1 = to_torch_us(one)
    tts = [to_torch_us(b) for b in batches]
    per_field = per_call_us(lambda: from_capsule(field.__dlpack__()), secs)
    rows = [
        ("one next() in C (`echoflow run --json \"%s\"`)" % spec, us["C"]),
        ("one `Pipeline` next() on the main thread, same spec",
         us["pipeline"]),
        ("one `Pipeline` next() on another thread (no Ctrl-C guard)",
         us["pipeline-thread"]),
        ("one `Loader` next() on the main thread, same spec", us["loader"]),
        ("`to_torch` of one item of that spec (1 field)", tt1),
    ] + [("`to_torch` of one batch of %s (%d fields)" % (r[0], len(b)), tt)
         for r, b, tt in zip(results, batches, tts)] + [
        ("one field: `t.__dlpack__()` and `torch._C._from_dlpack`",
         per_field),
        ("one field: `torch.from_dlpack(t)`",
         per_call_us(lambda: torch.from_dlpack(field), secs)),
        ("`echoflow.Sample` of 2 fields",
         per_call_us(lambda: echoflow.Sample(batches[0].items()), secs)),
        ("one system call (`os.getppid()`), for scale",
         per_call_us(os.getppid, secs)),
    ]
    print("| where the per-batch time goes | us per call |")
    print("| --- | ---: |")
    for what, t in rows:
        print("| %s | %.2f |" % (what, t))
    print()
    note("The next() rows: median of 3 runs of each loop, each in a "
         "process of its own (pipeline stats, wall clock); the others: "
         "tight loops over one held sample, in CPU time of the calling "
         "thread.")

    # What the binding adds to a batch: one next() over C's; the Loader
    # converts each field in C (a capsule and torch._C._from_dlpack), so
    # its next() over C's, measured on one field, plus one field's
    # conversion for each further field (counted with the __dlpack__ call,
    # which the Loader does not make: an upper bound).
    pipe = us["pipeline"] - us["C"]
    print("| case | C us/batch | Pipeline adds us/batch | % of C "
          "| Loader adds us/batch | % of C | under 3% |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r, rate, b in zip(results, c_rates, batches):
        c = 1e6 / rate
        loader = us["loader"] - us["C"] + (len(b) - 1) * per_field
        print("| %s | %s | %.1f | %.2f%% | %.1f | %.2f%% | %s |"
              % (r[0], fmt(c, 1), pipe, 100 * pipe / c, loader,
                 100 * loader / c,
                 "yes" if max(pipe, loader) < 0.03 * c else "**no**"))
    print()
    note("Expected from the breakdown, against the median C loop above: "
         "Pipeline adds one next()'s binding cost over C (measured on a "
         "1-field item); the Loader adds its next() over C (1 field) and "
         "one field's conversion for each further field of the case's "
         "batch.")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        loop = {"pipeline": loop_pipeline, "pipeline-thread": loop_on_thread,
                "loader": loop_loader}[sys.argv[2]]
        print("%d %.9f" % loop(sys.argv[3]))
        return
    if len(sys.argv) != 5:
        sys.exit("usage: python_binding.py ECHOFLOW_CLI DATA_DIR "
                 "FASHION_MNIST_DIR SCALE")
    cli, data, fmnist, scale = sys.argv[1:4] + [float(sys.argv[4])]
    reps = 5 if scale >= 0.5 else 3
    results = []
    for name, what, spec, n in cases(data, fmnist, scale):
        log("case: %s (%d examples per run, %d reps)" % (name, n, reps))
        results.append((name, what, spec, n, measure(cli, spec, reps)))
    c_rates = overhead_table(results, reps)
    breakdown_tables(cli, results, c_rates, scale)


if __name__ == "__main__":
    main()
