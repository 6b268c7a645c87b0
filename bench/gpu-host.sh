#!/usr/bin/env bash
# Issue 13's proof on an NVIDIA GPU host that has only the driver (no cargo, no
# CUDA toolkit), and issue 16's again with the crates of the new targets. Run
# from the repository root with OUT set; carried, all made on the CPU machine:
#   target/gpu-b/                 as bench/h100-leg.sh wants it, with dist-sm90.tar.xz
#                                 (manifest.json, cuda/sm_90, compute_70, compute_89, the
#                                 loader's sm_80/compute_80 fixture)
#   target/candle-proof/kiln.tar.xz, dropin-load, libptx   (bench/candle-proof: build.sh kiln,
#                                 PROFILE=release; pack.sh kiln; dropin-load.sh; dropin-load.sh libptx)
# Results: $OUT/issue13-<steps>.tgz holding
#   gpu.txt
#   dropin-<mode>.jsonl, .jitcache  first load of all 11 modules through candle's path,
#                                   fresh JIT cache: sass (the default), and the PTX of
#                                   each carried level forced with KILN_PTX_ARCH (compute_70
#                                   is the floor a V100/T4 JITs when its sm feature is off)
#   suite-sass/                     candle-core's suite, release, 1 thread, cold then warm
#   libptx-{0,1}.json, .jitcache    candle's MMQ quantizer from kiln's static library
#                                   (bench/candle-proof/libptx), on the sm_90 SASS and with
#                                   CUDA_FORCE_PTX_JIT=1 on its compute_90 PTX (what a GPU
#                                   beyond nvcc 12.4, Blackwell, runs): the same bytes
#   (CUDA_FORCE_PTX_JIT breaks cuBLAS's own kernels, so candle's suite cannot run under it.)
#   leg/                            bench/h100-leg.sh: kiln-kernel-tests on sm_90, load-bench
# Arguments: the steps to run (default all: dropin suite libptx leg), for calls that must each
# end within a time limit; each call writes its own $OUT/issue13-<steps>.tgz.
set -uo pipefail
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(dropin suite libptx leg)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
OUT="${OUT:?set OUT}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
res=$(mktemp -d /tmp/issue13-results.XXXXXX)
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv > "$res/gpu.txt" 2>&1
want dropin && for mode in sass compute_70 compute_80 compute_89; do
  cache=$(mktemp -d /tmp/dropin-jit.XXXXXX)
  if [ $mode = sass ]; then unset KILN_PTX_ARCH; else export KILN_PTX_ARCH=$mode; fi
  CUDA_CACHE_PATH="$cache" "$REPO/target/candle-proof/dropin-load" > "$res/dropin-$mode.jsonl" 2>&1
  echo "rc=$? $(find "$cache" -type f | wc -l) files, $(du -sk "$cache" | cut -f1) KiB" > "$res/dropin-$mode.jitcache"
  rm -rf "$cache"
done
unset KILN_PTX_ARCH
want suite && OUT="$res/suite-sass" THREADS=1 bash "$REPO/bench/candle-proof/run-gpu.sh" kiln
# The static library's compute_90 PTX, JIT-compiled (CUDA_FORCE_PTX_JIT=1 makes the driver
# ignore the SASS), against its sm_90 SASS: the same quantized bytes, and a JIT cache that fills.
if want libptx; then
  for force in 0 1; do
    cache=$(mktemp -d /tmp/libptx-jit.XXXXXX)
    if [ $force = 1 ]; then export CUDA_FORCE_PTX_JIT=1; else unset CUDA_FORCE_PTX_JIT; fi
    CUDA_CACHE_PATH="$cache" "$REPO/target/candle-proof/libptx" > "$res/libptx-$force.json" 2>&1
    echo "rc=$? $(find "$cache" -type f | wc -l) files, $(du -sk "$cache" | cut -f1) KiB" > "$res/libptx-$force.jitcache"
    rm -rf "$cache"
  done
  unset CUDA_FORCE_PTX_JIT
fi
if want leg; then
  tar -C "$REPO/target/gpu-b" -xJf "$REPO/target/gpu-b/dist-sm90.tar.xz"
  mkdir -p "$res/leg"
  (cd "$REPO" && rm -rf target/gpu-b/dist-sm90 && mv target/gpu-b/dsm90 target/gpu-b/dist-sm90 \
    && OUT="$res/leg" bash bench/h100-leg.sh target/gpu-b > "$res/leg/run.txt" 2>&1)
fi
name=$(IFS=-; echo "${steps[*]}")
tar -czf "$OUT/issue13-$name.tgz" -C "$res" .
