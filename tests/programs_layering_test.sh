#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The programs on top of the library keep to what docs/design.md ("Layers")
# gives them: train/ and cli/ include their own headers, each other's
# (cli/ runs the trainer), the public header and src/common/, nothing else
# of src/. And CRC-32C is written once, in src/common/: a second table of
# the Castagnoli polynomial in the library or a program is a copy that can
# drift from the one the formats are checked with.
#
# usage: programs_layering_test.sh SOURCE_DIR
set -u
root=$(realpath "$1")
bad=0

checked=0
for dir in train cli; do
    while IFS= read -r -d '' file; do
        lineno=0
        while IFS= read -r line; do
            lineno=$((lineno + 1))
            [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] ||
                continue
            name=${BASH_REMATCH[1]}
            checked=$((checked + 1))
            target=""
            for d in "$(dirname "$file")" "$root/train" "$root/src/common" \
                "$root/include"; do
                if [ -f "$d/$name" ]; then
                    target=$(realpath "$d/$name")
                    break
                fi
            done
            case $target in
            "$root"/train/* | "$root"/cli/* | "$root"/include/* | \
                "$root"/src/common/*) ;;
            *)
                echo "${file#"$root"/}:$lineno: \"$name\" is not a header" \
                    "of train/, cli/, src/common/ or include/"
                bad=1
                ;;
            esac
        done <"$file"
    done < <(find "$root/$dir" -type f \( -name '*.c' -o -name '*.h' \) -print0)
done
if [ "$checked" -eq 0 ]; then
    echo "no #include found under $root/train or $root/cli: wrong folder?"
    exit 1
fi

# the reflected Castagnoli polynomial, however it is spelled
copies=$(grep -rlis '0x82f63b78' "$root/src" "$root/train" "$root/cli" \
    "$root/python/src" | grep -v "^$root/src/common/")
if [ -n "$copies" ]; then
    echo "CRC-32C implemented outside src/common/ (use common/crc32c.h):"
    echo "${copies//"$root"\//}"
    bad=1
fi

if [ "$bad" -ne 0 ]; then
    exit 1
fi
echo "train/, cli/: $checked includes within their layer; one CRC-32C"
