# SPDX-License-Identifier: Apache-2.0
"""Prints the bytes of pipeline state in an `echoflow train` checkpoint,
one line per part (train/checkpoint.h): version 1's one state, or each
part of version 2 without its 40-byte header. For the benchmarks.

    /usr/bin/python3 bench/checkpoint_parts.py run.ck
"""
import struct
import sys

PART_HEADER = 40  # EFT_PART_HEADER
COUNTERS = 70  # eft_run_state's fields, 8 bytes each


def state_sizes(path):
    b = open(path, "rb").read()
    version, parts, _ = struct.unpack_from("<IIQ", b, 8)
    at = 28
    for _ in range(struct.unpack_from("<I", b, 24)[0]):  # the settings
        at += 1 + b[at] + 9
    at += COUNTERS * 8
    tensors, = struct.unpack_from("<I", b, at)
    at += 4
    for _ in range(tensors):  # values and momentum
        n, = struct.unpack_from("<Q", b, at)
        at += 8 + 8 * n
    sizes = []
    for _ in range(parts if version == 2 else 1):
        n, = struct.unpack_from("<Q", b, at)
        sizes.append(n - (PART_HEADER if version == 2 else 0))
        at += 8 + n
    return sizes


if __name__ == "__main__":
    for size in state_sizes(sys.argv[1]):
        print(size)
