#!/usr/bin/env bash
# Prepares $FA_WORK (default /root/proof/fa) for build.sh; nothing here is timed.
#
#  1. candle-flash-attn from static.crates.io, sha256-checked against the pin (bench/lib.sh's `pin`).
#  2. One consumer crate per variant, $FA_WORK/<v>/fa-consumer: it depends on
#     candle-core (cuda) and candle-flash-attn 0.11.1 as any user would, and its one
#     test target is upstream's own tests/flash_attn_tests.rs, taken from the crate.
#     Its Cargo.lock starts from the one upstream publishes. The kiln copy adds a
#     [patch.crates-io] for kiln's crates (both sets, sha256-checked).
#  3. Upstream's CUTLASS "by hand": its build.rs (cudaforge 0.1.6) clones
#     NVIDIA/cutlass at 7d49e6c7 with git into $CUDAFORGE_HOME/git/checkouts/
#     cutlass-<commit>/ and reuses a checkout whose `git rev-parse HEAD` is that
#     commit. This machine cannot reach GitHub, so the checkout is made from the
#     tree kiln verified (nvidia-cutlass 3.5.0.0's include/, byte-identical to that
#     commit's: docs/kernel-sets.md), and a `git` on the build's PATH answers
#     rev-parse with the commit and refuses everything else.
#  4. bench/candle-core/setup.sh's CUDA 13.0 wheels, link folder and nvcc wrapper
#     (run it first), plus a wrapper that records each nvcc's CPU time and peak memory.
#  5. `cargo fetch` for both (downloads are not part of the timed builds).
# Usage: setup.sh [variant...]   (default: upstream kiln; kiln needs kiln's crates)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
[ $# -gt 0 ] && FA_VARIANTS=("$@")
has() { [[ " ${FA_VARIANTS[*]} " == *" $1 "* ]]; }
[ -x "$CUDA13_ROOT/bin/nvcc" ] && [ -e "$LINKROOT/lib/libcudart.so" ] \
  || { echo "run bench/candle-core/setup.sh first (CUDA 13.0 wheels, $LINKROOT)" >&2; exit 1; }
! has kiln || [ -f "$KILN_FA_CRATES/crates.json" ] || { echo "$KILN_FA_CRATES: run cargo xtask dist --set flash-attn first" >&2; exit 1; }
mkdir -p "$WORK/dl" "$FA_RESULTS"

# 1. the crate ----------------------------------------------------------------
crate="$WORK/dl/candle-flash-attn-$FA_VERSION.crate"
fetch_checked "$FA_URL" "$FA_SHA256" "$crate"
src="$FA_WORK/src"
rm -rf "$src" && mkdir -p "$src" && tar -xzf "$crate" -C "$src"
src="$src/candle-flash-attn-$FA_VERSION"

# 2. consumers ----------------------------------------------------------------
for v in "${FA_VARIANTS[@]}"; do
  dir="$FA_WORK/$v/fa-consumer"
  rm -rf "$dir" && mkdir -p "$dir/src" "$dir/tests"
  : > "$dir/src/lib.rs"
  cp "$src/tests/$FA_TEST.rs" "$dir/tests/"
  cp "$src/Cargo.lock" "$dir/Cargo.lock"
  cat > "$dir/Cargo.toml" <<TOML
# Made by kiln's bench/flash-attn/setup.sh: a consumer of candle-flash-attn $FA_VERSION whose
# test is upstream's own tests/$FA_TEST.rs (from the pinned crate).
[package]
name = "fa-consumer"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
candle = { package = "candle-core", version = "=0.11.1", features = ["cuda"] }
candle-flash-attn = "=$FA_VERSION"
half = { version = "2.3.1", features = ["num-traits"] }

[dev-dependencies]
anyhow = { version = "1", features = ["backtrace"] }
# Upstream's tests call candle_nn::ops::softmax; its dev-dependency is a path in the
# workspace, which the published Cargo.toml drops (Cargo.toml.orig has it).
candle-nn = { version = "=0.11.1", features = ["cuda"] }

[[test]]
name = "$FA_TEST"
path = "tests/$FA_TEST.rs"

[workspace]
TOML
done
! has kiln || python3 "$BENCH/candle-core/unpack-crates.py" "$FA_WORK/kiln-crates" "$KILN_CRATES" "$KILN_FA_CRATES" \
  >> "$FA_WORK/kiln/fa-consumer/Cargo.toml"

# 3. CUTLASS by hand ------------------------------------------------------------
commit=$(sed -n 's/^const CUTLASS_COMMIT: &str = "\([0-9a-f]*\)";/\1/p' "$src/build.rs")
[ ${#commit} = 40 ] || { echo "no CUTLASS_COMMIT in $src/build.rs" >&2; exit 1; }
tree=$(ls -d "${KILN_CACHE_DIR:-$HOME/.cache/kiln}"/tools/nvidia-cutlass-*/files 2>/dev/null | head -1)
[ -n "$tree" ] && [ -f "$tree/cutlass/version.h" ] || { echo "kiln's verified CUTLASS tree is not in the cache: cargo xtask dist --set flash-attn" >&2; exit 1; }
grep -q '#define CUTLASS_MAJOR 3' "$tree/cutlass/version.h" && grep -q '#define CUTLASS_MINOR 5' "$tree/cutlass/version.h" \
  || { echo "$tree is not CUTLASS 3.5" >&2; exit 1; }
checkout="$FA_WORK/cudaforge/git/checkouts/cutlass-${commit:0:16}"
rm -rf "$checkout" && mkdir -p "$checkout"
cp -r "$tree" "$checkout/include"
mkdir -p "$FA_WORK/git-shim"
cat > "$FA_WORK/git-shim/git" <<SH
#!/bin/sh
# kiln bench/flash-attn: CUTLASS was provided by hand ($checkout), no git, no network.
if [ "\$*" = "rev-parse HEAD" ]; then echo $commit; exit 0; fi
echo "kiln bench/flash-attn git shim: refusing 'git \$*' (CUTLASS is provided by hand)" >&2
exit 1
SH
chmod +x "$FA_WORK/git-shim/git"
echo "CUTLASS $commit by hand: $(find "$checkout/include" -type f | wc -l) files from $tree"

# 4. an nvcc wrapper that measures, and can resume -------------------------------
# Upstream's build is hours of nvcc on 2 cores and cudaforge keeps nothing until all 53
# objects are done, so an interrupted build (a session's end) would start over. With
# KILN_PROOF_NVCC_CACHE set (build.sh --resume), each object nvcc finished is kept under
# a key of its whole command line and the crate's kernels/ folder (CUTLASS is the fixed
# tree above, the nvcc the pinned one): a rerun copies it back instead of compiling it
# again, and says so in the log. Each object is measured once, when it was compiled.
mkdir -p "$FA_WORK/nvcc-time/bin"
ln -sfn "$CUDA13_ROOT/include" "$FA_WORK/nvcc-time/include"
cat > "$FA_WORK/nvcc-time/bin/nvcc" <<SH
#!/bin/bash
# kiln bench/flash-attn: each nvcc run's wall, CPU (user+sys, its children included) and
# largest resident set, one line per run, then the pinned CUDA 13.0 nvcc; with a cache,
# <log>.cached says when each object was compiled or reused.
log="\${KILN_PROOF_NVCC_LOG:-/dev/null}" cache="\${KILN_PROOF_NVCC_CACHE:-}" out= cu= prev=
for a in "\$@"; do [ "\$prev" = -o ] && out=\$a; case \$a in *.cu) cu=\$a;; esac; prev=\$a; done
if [ -z "\$cache" ] || [ -z "\$out" ] || [ -z "\$cu" ]; then
  exec /usr/bin/time -a -o "\$log" -f "%e %U %S %M \$*" "$CUDA13_ROOT/bin/nvcc" "\$@"
fi
key=\$( { printf '%s\\n' "\$@"; find "\$(dirname "\$cu")" -type f | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -c1-64)
if [ -f "\$cache/\$key.o" ]; then
  cp "\$cache/\$key.o" "\$out" && echo "\$(date +%s) cached \$cu" >> "\$log.cached"; exit \$?
fi
/usr/bin/time -a -o "\$log" -f "%e %U %S %M \$*" "$CUDA13_ROOT/bin/nvcc" "\$@" || exit \$?
echo "\$(date +%s) compiled \$cu" >> "\$log.cached"
mkdir -p "\$cache" && cp "\$out" "\$cache/\$key.o.part" && mv "\$cache/\$key.o.part" "\$cache/\$key.o"
SH
chmod +x "$FA_WORK/nvcc-time/bin/nvcc"

# 5. cargo fetch ------------------------------------------------------------------
for v in "${FA_VARIANTS[@]}"; do
  (cd "$FA_WORK/$v/fa-consumer" && cargo fetch)
done
has kiln || { echo "setup done (${FA_VARIANTS[*]}): $FA_WORK"; exit 0; }
grep -A1 '^name = "candle-flash-attn"$' "$FA_WORK/kiln/fa-consumer/Cargo.lock" | grep -q "\"$FA_KILN_VERSION\"" \
  || { echo "the kiln consumer does not use kiln's candle-flash-attn (see its Cargo.lock)" >&2; exit 1; }
! grep -q '^name = "cudaforge"$' "$FA_WORK/kiln/fa-consumer/Cargo.lock" \
  || { echo "cudaforge (upstream's nvcc driver) is still in the kiln consumer's graph" >&2; exit 1; }
echo "setup done: $FA_WORK"
