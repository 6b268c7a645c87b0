# The helpers every bench script sources (bench/*/env.sh and bench/gpu-host.sh):
# paths, the pins (read through `cargo xtask pins show --json`, never from pins.toml
# itself), checked downloads, the no-nvcc guard, the test binary cargo built and what
# a binary links. Only definitions here: sourcing it runs nothing.
# shellcheck shell=bash

BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$BENCH/.." && pwd)"

# Pins ---------------------------------------------------------------------------------
# pins_load [FILE]: the pin file as JSON, into $KILN_PINS_JSON (exported, so child scripts
# read the same). FILE: a copy made on a CPU machine (a GPU host has no cargo); without it,
# `cargo xtask pins show --json` writes one. Call it in the script itself, not in $(...).
pins_load() {
  if [ -n "${1:-}" ]; then
    [ -f "$1" ] || { echo "$1: no pins JSON (made by cargo xtask pins show --json on the CPU machine)" >&2; return 1; }
    KILN_PINS_JSON="$1"
  elif [ -z "${KILN_PINS_JSON:-}" ] || [ ! -s "$KILN_PINS_JSON" ]; then
    KILN_PINS_JSON="$(mktemp "${TMPDIR:-/tmp}/kiln-pins.XXXXXX")"
    (cd "$REPO" && cargo xtask pins show --json) > "$KILN_PINS_JSON" \
      || { echo "cargo xtask pins show --json failed" >&2; return 1; }
  fi
  export KILN_PINS_JSON
}

# pin KEY...: one value of the pins JSON, e.g. `pin sets flash-attn source sha256`; a list
# prints one item a line. Fails, naming the keys, when there is no such value.
pin() {
  [ -n "${KILN_PINS_JSON:-}" ] || { echo "pin $*: call pins_load first" >&2; return 1; }
  if command -v jq > /dev/null; then
    jq -r 'getpath($ARGS.positional) | if . == null then error("null") elif type == "array" then .[] else . end' \
      "$KILN_PINS_JSON" --args "$@" 2> /dev/null \
      || { echo "pins: no value at $*" >&2; return 1; }
  else
    python3 - "$KILN_PINS_JSON" "$@" << 'PY'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    if not isinstance(v, dict) or v.get(k) is None:
        sys.exit(f"pins: no value at {' '.join(sys.argv[2:])}")
    v = v[k]
for x in v if isinstance(v, list) else [v]:
    print(x if isinstance(x, str) else json.dumps(x))
PY
  fi
}

# Downloads ----------------------------------------------------------------------------
# crate_url NAME VERSION: where crates.io serves a .crate.
crate_url() { echo "https://static.crates.io/crates/$1/$1-$2.crate"; }

# fetch_checked URL SHA256 FILE: URL to FILE, unless FILE is already there with SHA256;
# checked either way. Every download of the bench goes through it (or pip --require-hashes).
fetch_checked() {
  if ! echo "$2  $3" | sha256sum -c --status 2> /dev/null; then
    curl -sSfL --retry 3 -o "$3.part" "$1"
    mv "$3.part" "$3"
  fi
  echo "$2  $3" | sha256sum -c --status \
    || { echo "$3 (from $1) does not have the pinned sha256 $2; nothing was built from it" >&2; return 1; }
  echo "$3: sha256 ok"
}

# nvcc ---------------------------------------------------------------------------------
# PATH without any directory that holds an nvcc.
clean_path() {
  local out="" d dirs
  IFS=: read -ra dirs <<< "$PATH"
  for d in "${dirs[@]}"; do [ -e "$d/nvcc" ] || out="${out:+$out:}$d"; done
  echo "$out"
}

# Fails (saying where) if an nvcc is reachable: on PATH or in a usual CUDA home. The kiln
# variants build with none.
refuse_nvcc() {
  local p
  if command -v nvcc > /dev/null; then
    echo "kiln variant: nvcc is on PATH ($(command -v nvcc))" >&2
    return 1
  fi
  for p in /usr/local/cuda /opt/cuda /usr/lib/cuda /usr; do
    if [ -e "$p/bin/nvcc" ]; then
      echo "kiln variant: $p/bin/nvcc exists" >&2
      return 1
    fi
  done
}

# Binaries -----------------------------------------------------------------------------
# test_executable COMMAND...: the path of the last test binary `COMMAND --no-run
# --message-format=json` built, COMMAND being a `cargo test ...` (optionally behind a
# prefix such as `unshare -n`). Fails when it built none.
test_executable() {
  "$@" --no-run --message-format=json 2> /dev/null | python3 -c '
import json, sys
exes = [m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable")]
sys.exit("cargo built no test binary") if not exes else print(exes[-1])'
}

# needed_libs FILE: the libraries FILE links (its DT_NEEDED entries), as a JSON list.
needed_libs() {
  readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().split()))'
}
