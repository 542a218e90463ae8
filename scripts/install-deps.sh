#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages echoflow needs to build, test and run its
# demo; with --bench, also what only the benchmarks need (photographs to
# decode, an optimised BLAS for PyTorch, gnuplot).
# Idempotent: installs only what is missing and says what that is.
set -euo pipefail

packages=(
  gcc make cmake pkg-config   # the build
  zlib1g-dev                  # gzip-compressed IDX files
  libzstd-dev zstd            # zstd-compressed text (zstd: test fixtures)
  libcurl4-openssl-dev        # reading http:// and https:// URLs
  libturbojpeg0-dev           # decode: JPEG images (TurboJPEG API)
  libjpeg62-turbo-dev         # decode_crop: only a JPEG's window (libjpeg API)
  libspng-dev                 # decode: PNG images; echoflow pack writes PNG
  libwebp-dev libtiff-dev     # decode: WebP and TIFF images
  libgif-dev                  # decode: GIF images (the first frame)
  libopenblas-dev             # the reference trainer's matrix products
  g++ libsentencepiece-dev    # tokenize: SentencePiece models (C++)
  libpcre2-dev                # tokenize: GPT-2's split for tiktoken ranks
  libcmocka-dev               # the test suite
  python3                     # the command-line tests read JSON with it
  python3-dev libdlpack-dev   # the Python package: CPython headers, DLPack
  python3-numpy python3-torch # ... the arrays and tensors it feeds
  python3-pytest              # ... and its tests
  python3-setuptools python3-wheel python3-build  # ... built as a wheel
  python3-pip python3-venv    # ... installed with pip, into a venv in a test
  python3-protobuf protobuf-compiler  # ... tf.train.Example fixtures, checked
  python3-torchvision python3-pil  # ... a stock torchvision pipeline, echoed
  python3-sentencepiece       # ... tokenize against SentencePiece
  nodejs                      # ... and against js-tiktoken (see below)
  nginx                       # the HTTP integration test serves shards
  openmpi-bin libopenmpi-dev  # echoflow train under mpirun
  dataset-fashion-mnist       # the real data: /usr/share/datasets/fashion-mnist
  wordnet-base                # real English text: WordNet's glosses
)
if [ "${1:-}" = "--bench" ]; then
  # Debian's torch uses the reference BLAS unless an optimised one is
  # installed; libopenblas0-pthread makes the comparison fair. The decode
  # benchmark compares with torchvision on photographs from scikit-image.
  packages+=(libopenblas0-pthread python3-skimage
             gnuplot-nox)  # the pictures of docs/ and the reproduction
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# js-tiktoken, the reference of tokenize's BPE (python/tests/
# test_tokenize.py), from the npm registry into a fixed folder
npm_dir=${EF_NPM_DIR:-/var/cache/echoflow-npm}
npm_deps() {
  if [ -f "$npm_dir/node_modules/js-tiktoken/package.json" ]; then
    return 0
  fi
  # nodesource's nodejs brings npm and conflicts with Debian's npm
  if ! command -v npm >/dev/null; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
      --no-install-recommends npm || true
  fi
  echo "install-deps: npm install js-tiktoken into $npm_dir"
  $sudo mkdir -p "$npm_dir"
  $sudo npm install --no-audit --no-fund --prefix "$npm_dir" js-tiktoken@1 ||
    echo "install-deps: npm could not install js-tiktoken; the tokenize" \
         "comparison with it will be skipped" >&2
}

sudo=""
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then
    sudo="sudo"
  fi
  npm_deps
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
npm_deps
