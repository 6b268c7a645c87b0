#!/usr/bin/env bash
# Issue 16's proof on an NVIDIA GPU host (no cargo): carried target/candle-proof/
# (kiln.tar.xz from pack.sh, dropin-load from dropin-load.sh). Writes everything
# into one archive, $OUT/dropin-results.tgz:
#   gpu.txt                        the device and driver
#   dropin-{sass,ptx}.jsonl        dropin-load: first load of all 11 modules through
#                                  candle's path, fresh JIT cache; ptx = KILN_PTX_ARCH=compute_89
#   dropin-{sass,ptx}.jitcache     what the driver put in its JIT cache meanwhile
#   suite-sass/                    candle-core's suite, 1 thread, fresh JIT cache, then warm
#   suite-ptx/                     the same with KILN_PTX_ARCH=compute_89 (the JIT fallback), 8 threads
set -uo pipefail
OUT="${OUT:?set OUT}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
res=$(mktemp -d /tmp/dropin-results.XXXXXX)
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv > "$res/gpu.txt" 2>&1
for mode in sass ptx; do
  cache=$(mktemp -d /tmp/dropin-jit.XXXXXX)
  if [ $mode = ptx ]; then export KILN_PTX_ARCH=compute_89; else unset KILN_PTX_ARCH; fi
  CUDA_CACHE_PATH="$cache" "$REPO/target/candle-proof/dropin-load" > "$res/dropin-$mode.jsonl" 2>&1
  echo "rc=$? $(find "$cache" -type f | wc -l) files, $(du -sk "$cache" | cut -f1) KiB" > "$res/dropin-$mode.jitcache"
  rm -rf "$cache"
done
unset KILN_PTX_ARCH
OUT="$res/suite-sass" THREADS=1 bash "$REPO/bench/candle-proof/run-gpu.sh" kiln
OUT="$res/suite-ptx" THREADS=8 WARM=0 KILN_PTX_ARCH=compute_89 bash "$REPO/bench/candle-proof/run-gpu.sh" kiln
tar -czf "$OUT/dropin-results.tgz" -C "$res" .
