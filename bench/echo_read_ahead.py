# SPDX-License-Identifier: Apache-2.0
"""A fixed echo factor with nothing threaded before it: the share of a
training loop's time spent waiting for batches, with the echo stage's own
read-ahead, against a prefetch written in front of it.

    PYTHONPATH=build/python /usr/bin/python3 bench/echo_read_ahead.py

The upstream gives 1,000 items/s (throttle: a slow disk), each training
step takes 4 ms for 16 items (0.25 ms an item), so R = 4 and echo:4 should
keep the loop busy. Without reading ahead, each fresh item's 1 ms of
upstream time adds to its four copies' 1 ms of training: the loop waits
about half the time. The `reads_ahead` column is the echo stage's figure.
"""
import time

import echoflow

SPECS = [
    "range:n=1000 | throttle:rate=1000 | echo:factor=4 | batch:16",
    "range:n=1000 | throttle:rate=1000 | prefetch:depth=auto "
    "| echo:factor=4 | batch:16",
]


def run(spec):
    with echoflow.Pipeline(spec, seed=1) as p:
        waited, start = 0.0, time.perf_counter()
        it = iter(p)
        while True:
            t = time.perf_counter()
            if next(it, None) is None:
                break
            waited += time.perf_counter() - t
            time.sleep(0.004)  # the training step
        total = time.perf_counter() - start
        echo = [s for s in p.stats()["stages"] if s["name"] == "echo"][0]
    return waited / total, total, echo.get("reads_ahead")


def main():
    print("%-5s %-8s %-11s %s" % ("wait", "time", "reads_ahead", "spec"))
    for spec in SPECS:
        share, total, ahead = run(spec)
        print("%4.0f%% %6.2f s %-11s %s" % (100 * share, total, ahead, spec))


if __name__ == "__main__":
    main()
