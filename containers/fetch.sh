#!/bin/sh
# fetch.sh LIST DEST [MIRROR...]: downloads every file LIST names into DEST as
# <sha256>.<extension>, each checked against its sha256 before it is kept.
#
# LIST is one of the generated containers/*/packages.txt, rust.txt or wheels.txt:
# lines of `<sha256> <size> <path>` (size `-` where the pin has none: PyPI wheels),
# `#` lines are comments. A path that is a URL is
# fetched from there; any other is tried below each MIRROR in turn (the mirrors
# of pins.toml [toolchain]). A file whose sha256 is not the listed one stops
# the build: it is never retried from another mirror, as kiln's own fetch does.
#
# Runs in the Containerfiles' Debian stage, which has no curl or wget: apt's
# own downloader, apt-helper, does the transfers.
set -eu

if [ $# -lt 2 ]; then
  echo "usage: fetch.sh LIST DEST [MIRROR...]" >&2
  exit 2
fi
list=$1
dest=$2
shift 2
mkdir -p "$dest"

grep -v '^#' "$list" | while read -r sha size path; do
  [ -n "$sha" ] || continue
  out="$dest/$sha.${path##*.}"
  [ -e "$out" ] && continue
  case "$path" in
    https://* | http://*) urls=$path ;;
    *) urls=; for m in "$@"; do urls="$urls $m/$path"; done ;;
  esac
  got=
  for url in $urls; do
    if /usr/lib/apt/apt-helper download-file "$url" "$out.part" >/dev/null 2>&1; then
      got=$url
      break
    fi
    echo "fetch.sh: cannot download $url; trying the next mirror" >&2
  done
  if [ -z "$got" ]; then
    echo "fetch.sh: $path is on none of the mirrors:$urls" >&2
    exit 1
  fi
  actual=$(sha256sum "$out.part" | cut -d' ' -f1)
  if [ "$actual" != "$sha" ]; then
    rm -f "$out.part"
    echo "fetch.sh: sha256 mismatch for $got: pinned $sha, got $actual; the download was discarded" >&2
    exit 1
  fi
  if [ "$size" != "-" ] && [ "$(wc -c < "$out.part")" -ne "$size" ]; then
    rm -f "$out.part"
    echo "fetch.sh: $got is not the pinned $size bytes" >&2
    exit 1
  fi
  mv "$out.part" "$out"
done
