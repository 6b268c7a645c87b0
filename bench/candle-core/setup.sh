#!/usr/bin/env bash
# Prepares $WORK (default /root/proof) for build.sh; nothing here is timed.
#
#  1. candle-core 0.11.1 from static.crates.io, sha256-checked, unpacked twice:
#     $WORK/upstream/candle-core-0.11.1 and $WORK/kiln/candle-core-0.11.1.
#     Each gets one extra test target, `all_tests` (tests/all_tests.rs: `mod X;` for
#     each of the crate's 16 [[test]] files), so that one binary holds every
#     integration test; the kiln copy also gets a [patch.crates-io] section.
#  2. kiln's packaged crates (target/dist/crates/*.crate, checked against
#     crates.json's sha256), unpacked into $WORK/kiln-crates: the patch points there,
#     so the build sees exactly what a registry would serve.
#  3. CUDA 13.0 from PyPI wheels pinned in cuda13-wheels.lock (version + sha256; pip --require-hashes).
#  4. $WORK/cuda-link/lib: the .so names cudarc links (-lcuda -lnvrtc -lcublas
#     -lcublasLt -lcurand) and upstream candle-kernels links (-lcudart), pointing at
#     the wheels' .so.13 files; libcuda.so is a generated stub (soname libcuda.so.1;
#     every entry point returns CUDA_ERROR_NO_DEVICE), the real driver's is used on a GPU.
#  5. $WORK/nvcc-wrap/bin/nvcc: counts and logs upstream's nvcc calls.
#  6. `cargo fetch` for both copies (downloads are not part of the timed builds).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# Usage: setup.sh [variant...]   (default: upstream kiln)
[ $# -gt 0 ] && VARIANTS=("$@")
mkdir -p "$WORK/dl" "$RESULTS"

# 1. candle-core --------------------------------------------------------------
crate="$WORK/dl/candle-core-$CANDLE_CORE_VERSION.crate"
fetch_checked "$CANDLE_CORE_URL" "$CANDLE_CORE_SHA256" "$crate"

for v in "${VARIANTS[@]}"; do
  dir="$WORK/$v/candle-core-$CANDLE_CORE_VERSION"
  rm -rf "$dir"
  mkdir -p "$WORK/$v"
  tar -xzf "$crate" -C "$WORK/$v"
  # One test binary for all 16 integration-test files (each its own module).
  mods=$(sed -n '/^\[\[test\]\]/,/^$/ s/^name = "\(.*\)"/\1/p' "$dir/Cargo.toml")
  [ "$(echo "$mods" | wc -l)" = 16 ] || { echo "expected 16 [[test]] targets, got: $mods" >&2; exit 1; }
  {
    echo "// Added by kiln's bench/candle-core: candle-core's 16 integration-test files as one binary."
    echo "// quantized_tests.rs names \`crate::quantized\` and \`crate::k_quants\` (its own imports when it is"
    echo "// a crate root); as a module, \`crate\` is this file, so the same names are imported here."
    echo "#[allow(unused_imports)]"
    echo "use candle_core::quantized::{self, k_quants};"
    for m in $mods; do echo "mod $m;"; done
  } > "$dir/tests/$TEST_TARGET.rs"
  cat >> "$dir/Cargo.toml" <<EOF

# Added by kiln's bench/candle-core.
[[test]]
name = "$TEST_TARGET"
path = "tests/$TEST_TARGET.rs"
EOF
done

# 2. kiln's crates ------------------------------------------------------------
if [[ " ${VARIANTS[*]} " == *" kiln "* ]]; then
python3 "$HERE/unpack-crates.py" "$WORK/kiln-crates" "$KILN_CRATES" > "$WORK/kiln/patch.toml"
names=$(sed -n 's/^\([a-z0-9-]*\) = { path.*/\1/p' "$WORK/kiln/patch.toml")
echo "$names" | grep -qx candle-kernels || { echo "kiln's dist has no crate named candle-kernels (the shim a [patch.crates-io] needs)" >&2; exit 1; }
cat "$WORK/kiln/patch.toml" >> "$WORK/kiln/candle-core-$CANDLE_CORE_VERSION/Cargo.toml"
fi

# 3. CUDA 13.0 wheels -----------------------------------------------------------
if [ ! -x "$CUDA13_ROOT/bin/nvcc" ]; then
  rm -rf "$CUDA13"
  python3 -m pip install --quiet --no-deps --require-hashes --only-binary :all: \
    --target "$CUDA13" -r "$HERE/cuda13-wheels.lock"
fi
"$CUDA13_ROOT/bin/nvcc" --version | tail -2

# 6 (first, for cudarc's sources). cargo fetch --------------------------------------
for v in "${VARIANTS[@]}"; do
  dir="$WORK/$v/candle-core-$CANDLE_CORE_VERSION"
  if [ "$v" = upstream ]; then
    (cd "$dir" && cargo fetch --locked)
  else
    # The packaged Cargo.lock locks upstream's candle-kernels, so the patch is
    # unused until that one entry is updated: it then names kiln's shim (and adds
    # kiln's crates); everything else stays at candle's own versions.
    (cd "$dir" && cargo update -p candle-kernels && cargo fetch --locked)
    grep -A1 '^name = "candle-kernels"$' "$dir/Cargo.lock" | grep -q "\"$(pin sets candle crate version)\"" \
      || { echo "the [patch.crates-io] entry for candle-kernels is not used (see $dir/Cargo.lock)" >&2; exit 1; }
    ! grep -q '^name = "cudaforge"$' "$dir/Cargo.lock" \
      || { echo "cudaforge (upstream's nvcc driver) is still in the kiln variant's graph" >&2; exit 1; }
  fi
done
[ ${#VARIANTS[@]} = 2 ] && diff <(grep -A1 '^name = ' "$WORK/upstream/candle-core-$CANDLE_CORE_VERSION/Cargo.lock") \
     <(grep -A1 '^name = ' "$WORK/kiln/candle-core-$CANDLE_CORE_VERSION/Cargo.lock") \
     > "$RESULTS/lock-diff.txt" || true

# 4. link root ----------------------------------------------------------------
mkdir -p "$LINKROOT/lib"
for l in cudart.so.13 nvrtc.so.13 cublas.so.13 cublasLt.so.13 curand.so.10; do
  ln -sfn "$CUDA13_ROOT/lib/lib$l" "$LINKROOT/lib/lib${l%.so.*}.so"
done
cudarc_crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/cudarc-0.19.10.crate | head -1)
tar -xzOf "$cudarc_crate" cudarc-0.19.10/src/driver/sys/mod.rs \
  | grep -oE '\bfn cu[A-Za-z0-9_]+\(' | sed 's/^fn \(.*\)(/\1/' | sort -u \
  | grep -vx 'cuGetErrorString\|cuGetErrorName' \
  | awk '{ printf "int %s(void) { return 100; }\n", $1 }' > "$LINKROOT/libcuda-stub.c"
cat >> "$LINKROOT/libcuda-stub.c" <<'C'
int cuGetErrorString(int e, const char **s) { *s = e == 100 ? "no CUDA-capable device is detected (kiln proof: stub libcuda, no driver)" : "unknown error"; return 0; }
int cuGetErrorName(int e, const char **s) { *s = e == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN"; return 0; }
C
gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$LINKROOT/libcuda.so.new" "$LINKROOT/libcuda-stub.c"
mv "$LINKROOT/libcuda.so.new" "$LINKROOT/lib/libcuda.so"
# For a run here (no driver): the stub under the name the binary asks for.
mkdir -p "$LINKROOT/nogpu"
ln -sf ../lib/libcuda.so "$LINKROOT/nogpu/libcuda.so.1"
echo "libcuda stub: $(grep -c . "$LINKROOT/libcuda-stub.c") entry points (from cudarc 0.19.10's driver bindings)"

# 5. nvcc wrapper -------------------------------------------------------------
rm -rf "$NVCC_WRAP"
mkdir -p "$NVCC_WRAP/bin"
ln -s "$CUDA13_ROOT/include" "$NVCC_WRAP/include"
cat > "$NVCC_WRAP/bin/nvcc" <<EOF
#!/bin/sh
# kiln bench/candle-core: log the call, then run the pinned CUDA 13.0 nvcc.
printf '%s %s\n' "\$(date +%s.%N)" "\$*" >> "\${KILN_PROOF_NVCC_LOG:-/dev/null}"
exec "$CUDA13_ROOT/bin/nvcc" "\$@"
EOF
chmod +x "$NVCC_WRAP/bin/nvcc"

echo "setup done: $WORK"
