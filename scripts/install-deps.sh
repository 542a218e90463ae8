#!/usr/bin/env bash
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
  libopenblas-dev             # the reference trainer's matrix products
  libcmocka-dev               # the test suite
  python3                     # the command-line tests read JSON with it
  python3-dev libdlpack-dev   # the Python package: CPython headers, DLPack
  python3-numpy python3-torch # ... the arrays and tensors it feeds
  python3-pytest              # ... and its tests
  python3-protobuf protobuf-compiler  # ... tf.train.Example fixtures, checked
  python3-torchvision python3-pil  # ... a stock torchvision pipeline, echoed
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

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
