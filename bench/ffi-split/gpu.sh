#!/usr/bin/env bash
# On an NVIDIA GPU host (driver only): runs bench/ffi-split/build.sh's two harness builds
# (upstream's fat objects with NVIDIA's runtime; kiln's host-only objects, launch.rs and the
# sm_90 cubins) twice each, then compares their outputs byte for byte. Writes $OUT/runs.txt
# and the raw outputs.
#
#   OUT=... bash bench/ffi-split/gpu.sh CARRY      (CARRY: build.sh's WORK/carry, carried over)
set -uo pipefail
C="$(cd "${1:?the carried folder}" && pwd)"
: "${OUT:?set OUT to the folder for the results}"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/runs.txt"
for b in fat split fat split; do
  (cd "$OUT" && CUBIN_DIR="$C" "$C/$b") 2>&1 | tee -a "$OUT/runs.txt" || echo "$b exited with $?" | tee -a "$OUT/runs.txt"
done
for n in mmvq mmq moe moe_wmma; do
  if cmp -s "$OUT/fat-$n.bin" "$OUT/split-$n.bin"; then
    echo "$n: fat and split outputs identical ($(stat -c %s "$OUT/fat-$n.bin") bytes)"
  else
    echo "$n: fat and split outputs DIFFER"
  fi | tee -a "$OUT/runs.txt"
done
echo "what each binary loads:" | tee -a "$OUT/runs.txt"
for b in fat split; do echo "$b: $(ldd "$C/$b" | awk '{print $1}' | paste -sd' ')"; done | tee -a "$OUT/runs.txt"
