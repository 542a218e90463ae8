#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions a batch: the C loop of `echoflow run` against
# `echoflow.Pipeline` on the same Fashion-MNIST IDX spec (batches of 128),
# counted by valgrind's callgrind, which the machine's load does not move.
# Each loop runs 500 and 2,500 batches; the difference over 2,000 is the
# cost of a batch, start-up (reading and inflating the files) cancelled.
#
#   bench/binding_instructions.sh [BUILD_DIR]     (a few minutes)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
fm=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_instr.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
command -v valgrind >/dev/null || { echo "apt-get install valgrind" >&2; exit 1; }

count() { # LOOP BATCHES: prints the instructions callgrind collected
    local spec="idx:images=$fm/train-images-idx3-ubyte.gz,labels=$fm/train-labels-idx1-ubyte.gz"
    spec+=" | repeat | take:$(($2 * 128)) | shuffle:10000 | batch:128"
    local cmd=("$build/echoflow" run --json "$spec")
    [ "$1" = pipeline ] && cmd=(/usr/bin/python3 -c "import sys, echoflow
for s in echoflow.Pipeline(sys.argv[1]): pass" "$spec")
    PYTHONPATH=$build/python valgrind --tool=callgrind \
        --callgrind-out-file="$tmp/out" "${cmd[@]}" >/dev/null 2>"$tmp/err"
    grep -o 'Collected : [0-9]*' "$tmp/err" | awk '{print $3}'
}
for loop in c pipeline; do
    a=$(count "$loop" 500)
    b=$(count "$loop" 2500)
    echo "$loop: $(( (b - a) / 2000 )) instructions a batch"
done
