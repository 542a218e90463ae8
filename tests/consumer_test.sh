#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the library (component lib) from a build tree into a scratch
# prefix, then builds and runs tests/consumer against it with
# find_package(echoflow).
# usage: consumer_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=${1:?usage: consumer_test.sh BUILD_DIR SOURCE_DIR}
src=${2:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ef_consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" --component lib >/dev/null
cmake -S "$src/tests/consumer" -B "$tmp/build" \
    -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log"; exit 1; }
# the installed library, not the build tree's
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/$(gcc -print-multiarch 2>/dev/null)" \
    "$tmp/build/consumer"
