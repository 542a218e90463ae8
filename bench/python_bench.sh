#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Python binding benchmark, in one run: (1) what iterating a batched
# pipeline from Python costs against the C loop of `echoflow run --json`,
# through echoflow.Pipeline and through echoflow.torch.Loader (torch tensors
# by DLPack), and where the per-batch time goes; (2) a PyTorch training
# loop fed by PyTorch's DataLoader and by echoflow.torch.Loader on the JPEG
# decode + random_resized_crop(224) + flip + normalize work of
# decode_bench.sh. Prints the markdown of docs/BENCHMARKS.md's "Python
# binding" section (tables on stdout, progress on stderr).
#
# usage: bench/python_bench.sh [BUILD_DIR] [SCALE]
#   BUILD_DIR  default build; needs its echoflow CLI and Python package
#   SCALE      multiplies the work: 1 (default) is sized for under 10
#              minutes on an idle 2-core machine (0.5 took 5.5 minutes on a
#              busy one); below 0.5, 3 repetitions instead of 5 and 1 round
#              of the training loop instead of 3; 0.1 for a quick try
# needs: scripts/install-deps.sh --bench (python3-torch, python3-torchvision,
# python3-pil, python3-skimage, dataset-fashion-mnist)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
scale=${2:-1}
cli=$build/echoflow
py=/usr/bin/python3
fm=/usr/share/datasets/fashion-mnist
fail() { echo "python_bench: $1" >&2; exit "${2:-1}"; }
[ -x "$cli" ] || fail "build echoflow first ($cli)"
compgen -G "$build/python/echoflow/_echoflow*.so" >/dev/null ||
    fail "no Python package in $build/python"
[ -f "$fm/train-images-idx3-ubyte.gz" ] ||
    fail "$fm is missing: scripts/install-deps.sh"
"$py" -c "import sys; sys.exit(not float(sys.argv[1]) > 0)" "$scale" \
    2>/dev/null || fail "SCALE must be a number > 0, not '$scale'" 2
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_python.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# the data: decode_bench's 256 photographs (JPEG files and one WebDataset
# shard) and 20,000 Fashion-MNIST images packed as PNG in two shards
"$py" "$here/photos.py" "$tmp" 256
idx="idx:images=$fm/train-images-idx3-ubyte.gz"
idx+=",labels=$fm/train-labels-idx1-ubyte.gz"
"$cli" pack --per-shard 10000 "$idx | take:20000" "$tmp/fmnist-%06d.tar" \
    >/dev/null

# the training loop: IMAGES per feeding and round, 3 rounds (1 below 0.5)
read -r images rounds < <("$py" -c '
import sys; s = float(sys.argv[1])
print(max(256, round(3072 * s / 32) * 32), 3 if s >= 0.5 else 1)' "$scale")

commit=$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "Run of \`bench/python_bench.sh ${1:-build} $scale\` on commit $commit,"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores;" \
    "load average at the start: $(load)."
echo
echo "### Binding overhead"
echo
"$py" "$here/python_binding.py" "$cli" "$tmp" "$fm" "$scale"
echo "### A training loop fed by each loader"
echo
"$py" "$here/python_loader.py" "$tmp" "$images" "$rounds"
echo "Load average at the end: $(load)."
