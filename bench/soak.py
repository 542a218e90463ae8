# SPDX-License-Identifier: Apache-2.0
"""The soak test's driver (bench/soak.sh starts it with the server running).

Reads Fashion-MNIST, packed into WebDataset shards, over HTTP from
tests/http_server.py with --random-faults (503s, cuts and stalls, again and
again) through one echoflow pipeline in this process, for a given time:

  tar (2 readers, short timeout, enough tries) | decode | repeat
  | throttle (the slow upstream) | echo:factor=auto,max=4

and a consumer that emulates a training step per item, faster than the
throttle, so that the echo stage echoes. It checks that nothing is lost:
in every epoch (pass over the data) that completes, the fresh samples
(echo_copy 0) are each of the 60000 once, with the label the IDX file
gives; nothing is skipped or abandoned.
Every few seconds it prints the process's RSS and open file descriptors,
and after a warm-up it fails when either grows past a tolerance (see
RSS_* and FD_SLACK for the figures and why). Exit status 0 on pass, 1 on
failure, with what failed.

usage: soak.py --url BASE --work DIR --duration SECONDS [--seed S]
               [--tries N] [--fault-counts PATH]
Needs ECHOFLOW_CLI (for packing) and the echoflow package on PYTHONPATH.
"""
import argparse
import gzip
import json
import os
import sys
import threading
import time

import echoflow

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples"))
import shards  # noqa: E402

N = 60000          # Fashion-MNIST train
PER_SHARD = 5000   # 12 shards: many requests, many faults per epoch
UP_RATE = 3000     # items/s out of the upstream (throttle)
STEP_US = 125      # the consumer's step: 8000 items/s at most, so R ~ 2.7
ECHO_MAX = 4
TIMEOUT_S = 1.0    # a stall costs a reader this long
SAMPLE_S = 5.0     # RSS and fds, one line each
HANG_S = 90        # no item for this long: the pipeline is stuck
# Warm-up: 20% of the run, at least 30 s (buffers, pools, curl
# connections and malloc arenas filled), at most 5 minutes and half the run
WARMUP_MIN_S, WARMUP_MAX_S = 30, 300
# After the warm-up, RSS may not exceed its first post-warm-up sample by
# more than 10% + 4 MB (about 6 MB on the ~24 MB this process settles at).
# Measured: it moves by 0.1 to 0.2 MB after the warm-up. What may
# legitimately fill up later is bounded and small: 2 HTTP read-ahead
# buffers of 256 KiB, curl's, the 2 x 16 queued samples of the tar
# readers, the echo pool of 64 (samples of ~2 KB): under 1 MB in all, so
# the margin is several times noise plus those. What it catches: a 2-minute
# run checks 90 s, so a leak of ~70 KB/s (10 bytes per item, or a 64 KB
# buffer per request); the 1-hour run checks 55 minutes, ~2 KB/s.
RSS_FRACTION, RSS_SLACK_MB = 0.10, 4.0
# The fd count may not exceed its value at the warm-up's end by more than
# 8. Measured, sampled every 20 ms: 12 while both readers stream (each
# holds its connection and curl's wake-up socketpair: 3 fds), down to 9
# while one is between shards. A warm-up-end sample taken with both
# readers between shards would be 6 below the steady count, and for a
# moment a reader may hold a new connection beside one curl has yet to
# close: 2 x (3 + 1) = 8. A leak of one fd per request (about one a
# second) or per shard (one every 2 s) passes 8 within 20 s.
FD_SLACK = 8
MAX_PROBLEMS = 20  # messages kept; the rest are counted


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def read_faults(path):
    """The server's counts (http_server.py --fault-counts), or None."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def idx_labels():
    """The labels of Fashion-MNIST train, from the IDX file, as bytes."""
    path = os.path.join(shards.FASHION_MNIST, "train-labels-idx1-ubyte.gz")
    with gzip.open(path) as f:
        data = f.read()
    assert len(data) == 8 + N, path
    return data[8:]


class Soak:
    """What the consumer has seen, and what went wrong. The consumer
    thread writes the counters; the monitor thread only reads them."""

    def __init__(self):
        self.items = self.fresh = self.echoed = 0
        self.epoch = 0             # the epoch whose fresh samples arrive now
        self.epochs_done = 0
        self.seen = bytearray(N)   # keys seen fresh in this epoch
        self.seen_count = 0
        self.problems = []
        self.nproblems = 0
        self.last_item = time.monotonic()

    def problem(self, msg):
        self.nproblems += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(msg)

    def close_epoch(self):
        """The epoch ended (the next one began): every key once."""
        if self.seen_count != N:
            missing = [k for k in range(N) if not self.seen[k]]
            self.problem("epoch %d: %d of %d samples seen fresh, %d missing "
                         "(keys %s%s)" % (self.epoch, self.seen_count, N,
                                          len(missing), missing[:5],
                                          " ..." if len(missing) > 5 else ""))
        else:
            self.epochs_done += 1
        self.seen = bytearray(N)
        self.seen_count = 0

    def check(self, sample, labels):
        """One sample: identity, key, label, and the epoch bookkeeping."""
        ident = sample.identity
        key = int(sample["__key__"])
        self.items += 1
        self.last_item = time.monotonic()
        # the tar source's identity: (shard << 32) + position in the shard
        if not 0 <= key < N or ident.index != (
                (key // PER_SHARD) << 32) + key % PER_SHARD:
            self.problem("key %d with identity index %d" % (key, ident.index))
            return
        if memoryview(sample["label"]).tolist() != labels[key]:
            self.problem("key %d: label %s, the IDX file says %d" % (
                key, memoryview(sample["label"]).tolist(), labels[key]))
        if ident.echo_copy:
            self.echoed += 1
            if ident.echo_copy >= ECHO_MAX:
                self.problem("key %d: echo copy %d with max=%d" % (
                    key, ident.echo_copy, ECHO_MAX))
            return
        self.fresh += 1
        if ident.epoch != self.epoch:
            if ident.epoch != self.epoch + 1:
                self.problem("a fresh sample of epoch %d during epoch %d" % (
                    ident.epoch, self.epoch))
                return
            self.close_epoch()
            self.epoch += 1
        if self.seen[key]:
            self.problem("epoch %d: key %d fresh twice" % (self.epoch, key))
            return
        self.seen[key] = 1
        self.seen_count += 1


class Monitor(threading.Thread):
    """Every SAMPLE_S: one line of figures. Stops the pipeline at the end
    of the run, or when no item came for HANG_S."""

    def __init__(self, soak, pipeline, duration, fault_counts):
        super().__init__(daemon=True)
        self.soak, self.pipeline = soak, pipeline
        self.duration, self.fault_counts = duration, fault_counts
        self.samples = []  # (elapsed, rss MB, fds)
        self.hung = False
        self.done = threading.Event()
        self.start_time = time.monotonic()

    def sample(self):
        s = self.soak
        t = time.monotonic() - self.start_time
        rss, fds = rss_mb(), open_fds()
        self.samples.append((t, rss, fds))
        f = read_faults(self.fault_counts) or {}
        print("soak: %5.0fs items %9d epochs %3d echoed %.2f rss %6.1f MB "
              "fds %3d | server %d requests: 503 %d, cut %d, stall %d" % (
                  t, s.items, s.epochs_done, s.echoed / max(1, s.items), rss,
                  fds, f.get("requests", 0), f.get("503", 0),
                  f.get("cut", 0), f.get("stall", 0)), flush=True)

    def run(self):
        self.sample()
        end = self.start_time + self.duration
        while not self.done.wait(min(SAMPLE_S,
                                     max(0, end - time.monotonic()))):
            now = time.monotonic()
            if now >= end:
                break
            self.sample()
            if now - self.soak.last_item > HANG_S:
                self.hung = True
                break
        self.pipeline.stop()


def spec(url, pattern, tries):
    # ordered=false: a stalled shard holds up only its own reader; the
    # echo stage starts its own thread for the upstream (docs/echoing.md)
    return ("tar:urls=%s/%s,cycle=2,ordered=false,timeout=%g,tries=%d "
            "| decode | repeat | throttle:rate=%d "
            "| echo:factor=auto,max=%d" % (url, pattern, TIMEOUT_S, tries,
                                           UP_RATE, ECHO_MAX))


def leak_checks(samples, warmup_s):
    """Problems with RSS and fds after the warm-up, and the figures."""
    after = [s for s in samples if s[0] >= warmup_s]
    if len(after) < 2:
        return ["only %d samples after the %.0f s warm-up: run longer"
                % (len(after), warmup_s)], {}
    rss0, fd0 = after[0][1], after[0][2]
    rss_max = max(s[1] for s in after)
    fd_max = max(s[2] for s in after)
    rss_limit = rss0 * (1 + RSS_FRACTION) + RSS_SLACK_MB
    fd_limit = fd0 + FD_SLACK
    out = []
    if rss_max > rss_limit:
        t = next(s[0] for s in after if s[1] == rss_max)
        out.append("RSS grew from %.1f MB at the warm-up's end to %.1f MB "
                   "(at %.0f s), over the limit of %.1f MB"
                   % (rss0, rss_max, t, rss_limit))
    if fd_max > fd_limit:
        t = next(s[0] for s in after if s[2] == fd_max)
        out.append("open fds grew from %d at the warm-up's end to %d (at "
                   "%.0f s), over the limit of %d" % (fd0, fd_max, t,
                                                      fd_limit))
    figures = {"rss0": rss0, "rss_max": rss_max, "rss_limit": rss_limit,
               "fd0": fd0, "fd_max": fd_max, "fd_limit": fd_limit}
    return out, figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the server's base URL")
    ap.add_argument("--work", required=True, help="shards go to WORK/shards")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--fault-counts", default="")
    args = ap.parse_args()

    pattern = shards.pack_fashion_mnist(os.path.join(args.work, "shards"),
                                        per_shard=PER_SHARD)
    labels = idx_labels()
    warmup_s = min(WARMUP_MAX_S, args.duration / 2,
                   max(WARMUP_MIN_S, 0.2 * args.duration))
    text = spec(args.url, pattern, args.tries)
    print("soak: %g s (warm-up %.0f s), seed %d, step %d us:\n  %s"
          % (args.duration, warmup_s, args.seed, STEP_US, text), flush=True)

    soak = Soak()
    rss_start, fds_start = rss_mb(), open_fds()
    p = echoflow.Pipeline(text, seed=args.seed, on_error="skip")
    mon = Monitor(soak, p, args.duration, args.fault_counts)
    mon.start()
    # the step: a sleep per block of items, cheaper than one per item
    block, pause = 32, 32 * STEP_US / 1e6
    try:
        for sample in p:
            soak.check(sample, labels)
            if soak.items % block == 0:
                time.sleep(pause)
    except echoflow.Error as e:
        soak.problem("the pipeline failed: %s" % e)
    elapsed = time.monotonic() - mon.start_time
    mon.done.set()
    mon.join()
    stats = p.stats()
    p.close()
    mon.sample()  # the end figures, after the pipeline's threads are gone

    problems = list(soak.problems)
    if soak.nproblems > len(problems):
        problems.append("... and %d more" % (soak.nproblems - len(problems)))
    if mon.hung:
        problems.append("no item for %d s: the pipeline hung" % HANG_S)
    # anything skipped or abandoned is lost data
    if stats["skipped"]:
        problems.append("%d skipped (samples dropped), the first: %s" % (
            stats["skipped"], stats["first_skip"]))
    if stats["abandoned"]:
        problems.append("%d shards abandoned, %d bytes unread, the first: %s"
                        % (stats["abandoned"], stats["lost_bytes"],
                           stats["first_abandon"]))
    if soak.epoch == 0:
        problems.append("no epoch ended, so none was checked: run longer")
    leaks, fig = leak_checks(mon.samples[:-1], warmup_s)
    problems += leaks
    faults = read_faults(args.fault_counts) or {}
    for kind in ("503", "cut", "stall"):
        if not faults.get(kind):
            problems.append("the server injected no %s: that fault went "
                            "untested" % kind)
    if soak.echoed == 0:
        problems.append("nothing was echoed: auto echo went untested")

    tar = next(s for s in stats["stages"] if s["name"] == "tar")
    rss = [s[1] for s in mon.samples]
    fds = [s[2] for s in mon.samples]
    print("soak: summary")
    print("  duration  %.1f s (warm-up %.0f s), status %s"
          % (elapsed, warmup_s, stats["status"]))
    print("  items     %d: fresh %d, echoed %d (%.2f), %.0f items/s"
          % (soak.items, soak.fresh, soak.echoed,
             soak.echoed / max(1, soak.items), soak.items / elapsed))
    print("  epochs    %d ended, %d of them complete (each of the %d "
          "samples fresh once); the last %d/%d when stopped"
          % (soak.epoch, soak.epochs_done, N, soak.seen_count, N))
    print("  lost      skipped %d, abandoned %d (%d bytes), problems %d"
          % (stats["skipped"], stats["abandoned"], stats["lost_bytes"],
             soak.nproblems))
    print("  server    %d requests: 503 %d, cut %d, stall %d, clean %d; "
          "client retries %d, shards opened %d"
          % (faults.get("requests", 0), faults.get("503", 0),
             faults.get("cut", 0), faults.get("stall", 0),
             faults.get("clean", 0), tar["retries"], tar["shards"]))
    print("  rss MB    start %.1f, warm-up end %.1f, end %.1f, max %.1f "
          "(limit %.1f)" % (rss_start, fig.get("rss0", 0), rss[-1], max(rss),
                            fig.get("rss_limit", 0)))
    print("  fds       start %d, warm-up end %d, end %d, max %d (limit %d)"
          % (fds_start, fig.get("fd0", 0), fds[-1], max(fds),
             fig.get("fd_limit", 0)))
    print("  held      at most %.1f MB in the pipeline's queues and "
          "buffers" % (stats["peak_bytes_held"] / 2**20))
    if problems:
        for msg in problems:
            print("soak: FAIL: %s" % msg)
        return 1
    print("soak: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
