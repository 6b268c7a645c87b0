#!/bin/bash
# Stub `dpkg-deb -x DEB DIR`: the stub's "debs" are fetchurl's text records;
# each is copied to DIR/.stub-debs/NNNN-<name>, numbered in unpack order.
set -eu
if [ "$#" -ne 3 ] || [ "$1" != "-x" ]; then
    echo "stub dpkg-deb: only -x DEB DIR is supported (got: $*)" >&2
    exit 2
fi
mkdir -p "$3/.stub-debs"
n=$(ls "$3/.stub-debs" | wc -l)
name=$(sed -n 's/^name=//p' "$2")
cp "$2" "$3/.stub-debs/$(printf '%04d' "$n")-$name"
