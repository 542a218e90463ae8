#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The shared library exports the public API and nothing else: every
# function echoflow.h declares, and no internal ef__ symbol.
# usage: exports_test.sh LIBECHOFLOW_SO ECHOFLOW_H
set -u
lib=${1:?usage: exports_test.sh LIBECHOFLOW_SO ECHOFLOW_H}
header=${2:?}
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
declared=$(grep -oE '^EF_API [^(]*\bef_[a-z0-9_]+\(' "$header" |
           grep -oE 'ef_[a-z0-9_]+\($' | tr -d '(' | sort)
internal=$(grep -E '^ef__' <<<"$exported")
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
extra=$(comm -23 <(echo "$exported" | grep -E '^ef_[a-z]') <(echo "$declared"))
status=0
[ -z "$internal" ] || { echo "FAIL: internal symbols exported:" $internal; status=1; }
[ -z "$missing" ] || { echo "FAIL: declared but not exported:" $missing; status=1; }
[ -z "$extra" ] || { echo "FAIL: exported but not declared EF_API:" $extra; status=1; }
[ "$status" -ne 0 ] || echo "ok: $(wc -l <<<"$declared") public functions exported, nothing else of ours"
exit "$status"
