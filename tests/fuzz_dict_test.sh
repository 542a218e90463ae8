#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The spec fuzzer's dictionary knows every stage and option the registry
# has (as `echoflow stages` lists them), so that a new stage is fuzzed from
# the start. Fails naming each stage or option key it lacks.
#
# usage: fuzz_dict_test.sh ECHOFLOW_CLI DICT
set -u
cli=$1 dict=$2
listing=$("$cli" stages) || { echo "fuzz_dict_test: '$cli stages' failed" >&2; exit 1; }
bad=0 stages=0
while IFS= read -r line; do
    if [[ $line =~ ^([a-z0-9_]+)$ ]]; then
        want="\"${BASH_REMATCH[1]}\""
        stages=$((stages + 1))
    elif [[ $line =~ ^\ \ \ \ ([a-z0-9_]+)\ +(int|float|bool|string|factor|int\|auto) ]]; then
        want="\"${BASH_REMATCH[1]}=\""
    else
        continue
    fi
    if ! grep -qxF "$want" "$dict"; then
        echo "$dict: no $want (from '$line')" >&2
        bad=1
    fi
done <<<"$listing"
[ "$stages" -gt 0 ] || { echo "fuzz_dict_test: no stages listed" >&2; exit 1; }
exit $bad
