#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file git tracks carries the project's license line
# (LICENSE: Apache-2.0) in its first two lines: C and C++ sources and
# headers, Python, shell, CMake and the build's templates. Fails naming
# each file without it.
#
# usage: license_test.sh SOURCE_DIR
set -u
cd "$1" || exit 2
if ! files=$(git ls-files 2>/dev/null); then
    echo "license_test: $1 is not a git checkout; nothing to check" >&2
    exit 77
fi
bad=0 checked=0
while IFS= read -r f; do
    case $f in
    *.c | *.h | *.cc | *.proto | *.cjs | *.py | *.pyi | *.sh | .ci/run | \
        CMakeLists.txt | */CMakeLists.txt | *.cmake.in | *.pc.in | \
        MANIFEST.in | pyproject.toml) ;;
    *) continue ;;
    esac
    checked=$((checked + 1))
    if ! head -n 2 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0'; then
        echo "$f: no 'SPDX-License-Identifier: Apache-2.0' line at its top" >&2
        bad=1
    fi
done <<<"$files"
[ "$checked" -gt 0 ] || { echo "license_test: no source files found" >&2; exit 1; }
exit $bad
