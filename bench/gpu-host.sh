#!/usr/bin/env bash
# The one entry on an NVIDIA GPU host that has only the driver (no cargo, no CUDA toolkit,
# no kiln toolchain). Everything it runs was made on a CPU machine and carried. Run from
# the repository root with OUT set:
#
#   bash bench/gpu-host.sh PROOF [ARG...]
#
# Each call writes one archive, $OUT/<proof>[-<args>].tgz (gpu.txt: the device and driver,
# then the proof's files), so that a proof too long for one call runs as several calls.
#
# candle-suite [VARIANT...]   candle-core 0.11.1's suite (bench/candle-core: setup, build,
#     pack), per variant (default kiln upstream): <v>-* from bench/candle-core/run-suite.sh,
#     THREADS (default 8) test threads, cold then warm JIT cache.
#     Carried: target/candle-proof/<v>.tar.xz and .sha256.
# targets [STEP...]   kiln's drop-in on each pinned target (default: dropin suite libptx leg):
#     dropin    dropin-<mode>.jsonl, .jitcache: first load of all 11 modules through candle's
#               path, fresh JIT cache: sass (the default), and the PTX of each pinned level
#               (targets.cuda_ptx of target/candle-proof/pins.json) forced with KILN_PTX_ARCH
#     suite     suite-sass/: candle-core's suite with kiln, 1 thread, cold then warm
#     suite-ptx suite-ptx/: the same on the highest pinned PTX level (the JIT fallback),
#               8 threads, cold only
#     libptx    libptx-{0,1}.json, .jitcache: candle's MMQ quantizer from kiln's static
#               library (bench/candle-core/libptx) on the sm_90 SASS, and with
#               CUDA_FORCE_PTX_JIT=1 on its compute_90 PTX (what a GPU beyond nvcc 12.4 runs):
#               the same bytes. (CUDA_FORCE_PTX_JIT breaks cuBLAS's own kernels, so candle's
#               suite cannot run under it.)
#     leg       leg/: what `load-bench` writes
#     Carried: target/candle-proof/{kiln.tar.xz,dropin-load,libptx,pins.json}
#     (bench/candle-core: build.sh kiln with PROFILE=release; pack.sh kiln; dropin-load.sh;
#     dropin-load.sh libptx), and for leg what load-bench needs.
# flash-attn [VARIANT...]   upstream's tests/flash_attn_tests.rs (bench/flash-attn), per
#     variant (default kiln upstream): joins and checks pack.sh's pieces (target/fa-proof/
#     c<N>/<v>.tar.xz.<NN>, carried over several calls), then run-suite.sh's files, one
#     thread (THREADS), cold then warm; a variant whose pieces are missing is reported in
#     error.txt and skipped.
# load-bench   the NVIDIA leg of the GPU matrix and the loader's cold-load numbers:
#     load-best.{json,md}, load-ptx.{json,md}   load-bench, CUDA_CACHE_DISABLE=1 (SKIP_LOAD=1: not)
#     list.json                                 nextest's list (knows the skipped tests)
#     junit.xml, nextest.txt, run.txt           kiln-kernel-tests on sm_90, --profile ci as in CI
#     Carried, in target/gpu-b/ (KILN_GPU_B: another folder; made on the CPU machine):
#       cargo nextest archive -p kiln-kernel-tests -p kiln-loader --archive-file target/gpu-b/kiln-tests.tar.zst
#       xz -c "$(command -v cargo-nextest)" > target/gpu-b/cargo-nextest.xz
#       cargo build --release -p kiln-loader --bin load-bench && cp target/release/load-bench target/gpu-b/
#       target/gpu-b/dist-sm90/ (or dist-sm90.tar.xz holding dsm90/): target/dist's manifest.json,
#         cuda/sm_90, the PTX levels, and affine/fill of cuda/sm_80 and cuda/compute_80 (the
#         loader's fixture)
#     Back on the CPU machine:
#       cargo xtask test-matrix --from-junit sm_90=<results>/junit.xml --list sm_90=<results>/list.json
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT="${OUT:?set OUT}"
PROOF="${1:?usage: gpu-host.sh candle-suite|targets|flash-attn|load-bench [ARG...]}"
shift
CANDLE_PACK="$REPO/target/candle-proof"

# The settings each step makes itself (a value from the caller's environment would change
# what the step measures).
STEP_ENV=(-u KILN_PTX_ARCH -u CUDA_FORCE_PTX_JIT)

# jit_run NAME [VAR=VALUE...] COMMAND...: COMMAND with a fresh CUDA JIT cache, output to
# $res/NAME; what the driver JIT-compiled meanwhile goes to $res/<NAME less its suffix>.jitcache.
jit_run() {
  local name=$1 cache rc
  shift
  cache=$(mktemp -d /tmp/kiln-jit.XXXXXX)
  env "${STEP_ENV[@]}" CUDA_CACHE_PATH="$cache" "$@" > "$res/$name" 2>&1
  rc=$?
  echo "rc=$rc $(find "$cache" -type f | wc -l) files, $(du -sk "$cache" | cut -f1) KiB" > "$res/${name%.*}.jitcache"
  rm -rf "$cache"
}

step_dropin() {
  local mode modes
  pins_load "$CANDLE_PACK/pins.json" && modes=$(pin targets cuda_ptx) || return 1
  jit_run dropin-sass.jsonl "$CANDLE_PACK/dropin-load"
  for mode in $modes; do
    jit_run "dropin-$mode.jsonl" KILN_PTX_ARCH="$mode" "$CANDLE_PACK/dropin-load"
  done
}

step_suite() {
  env "${STEP_ENV[@]}" OUT="$res/suite-sass" THREADS=1 bash "$BENCH/candle-core/run-suite.sh" kiln
}

step_suite_ptx() {
  local top
  pins_load "$CANDLE_PACK/pins.json" && top=$(pin targets cuda_ptx | tail -n 1) || return 1
  env "${STEP_ENV[@]}" OUT="$res/suite-ptx" THREADS=8 WARM=0 KILN_PTX_ARCH="$top" bash "$BENCH/candle-core/run-suite.sh" kiln
}

# The static library's compute_90 PTX, JIT-compiled (CUDA_FORCE_PTX_JIT=1 makes the driver
# ignore the SASS), against its sm_90 SASS: the same quantized bytes, and a JIT cache that fills.
step_libptx() {
  jit_run libptx-0.json "$CANDLE_PACK/libptx"
  jit_run libptx-1.json CUDA_FORCE_PTX_JIT=1 "$CANDLE_PACK/libptx"
}

step_leg() {
  mkdir -p "$res/leg"
  (res="$res/leg" load_bench > "$res/leg/run.txt" 2>&1)
}

# kiln-kernel-tests on sm_90 through the carried nextest archive, and load-bench; into $res.
load_bench() {
  local B="${KILN_GPU_B:-$REPO/target/gpu-b}" x="${TMPDIR:-/tmp}" filter junit rc
  if [ -f "$B/dist-sm90.tar.xz" ]; then
    tar -C "$B" -xJf "$B/dist-sm90.tar.xz" && rm -rf "$B/dist-sm90" && mv "$B/dsm90" "$B/dist-sm90"
  fi
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
    "$B/cargo-nextest.xz" "$B/cargo-nextest" && chmod +x "$B/cargo-nextest"
  export KILN_DIST_DIR="$B/dist-sm90" KILN_TEST_ARCH=sm_90
  if [ -z "${SKIP_LOAD:-}" ]; then
    CUDA_CACHE_DISABLE=1 "$B/load-bench" --prefer best --out "$res/load-best.json"
    CUDA_CACHE_DISABLE=1 "$B/load-bench" --prefer ptx --out "$res/load-ptx.json"
  fi
  mkdir -p "$x/kiln-extract" "$x/kiln-extract-list"
  filter='package(kiln-kernel-tests) | package(kiln-loader)'
  (cd "$REPO" && "$B/cargo-nextest" nextest list --archive-file "$B/kiln-tests.tar.zst" --workspace-remap . -E "$filter" \
    --extract-to "$x/kiln-extract-list" --message-format json) > "$res/list.json" 2> "$res/list.err"
  (cd "$REPO" && "$B/cargo-nextest" nextest run --archive-file "$B/kiln-tests.tar.zst" --workspace-remap . -E "$filter" \
    --extract-to "$x/kiln-extract" --profile ci --no-tests=fail) > "$res/nextest.txt" 2>&1
  rc=$?
  junit=$(find "$REPO/target" "$x/kiln-extract" -path '*nextest/ci/junit.xml' 2> /dev/null | head -n 1)
  cp "$junit" "$res/junit.xml" || echo "no junit.xml" >&2
  tail -n 5 "$res/nextest.txt"
  return $rc
}

flash_attn() {
  local v ran=()
  for v in "$@"; do
    if bash "$BENCH/flash-attn/join.sh" "$v" > "$res/join-$v.txt" 2>&1; then ran+=("$v"); else cat "$res/join-$v.txt" >> "$res/error.txt"; fi
  done
  [ ${#ran[@]} -gt 0 ] || return 1
  OUT="$res" THREADS="${THREADS:-1}" KILN_PROOF_PACK="$REPO/target/fa-proof" KILN_PROOF_NAME=fa-proof KILN_PROOF_BIN=flash_attn_tests \
    bash "$BENCH/candle-core/run-suite.sh" "${ran[@]}"
  for v in "${ran[@]}"; do
    echo "== $v: cold rc $(cat "$res/$v-cold.rc" 2> /dev/null) in $(cat "$res/$v-cold.seconds" 2> /dev/null) s; $(grep -h '^test result' "$res/$v-cold.txt" 2> /dev/null)"
  done
}

res=$(mktemp -d "/tmp/kiln-$PROOF.XXXXXX")
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv > "$res/gpu.txt" 2>&1
rc=0
case "$PROOF" in
  candle-suite)
    [ $# -gt 0 ] || set -- kiln upstream
    OUT="$res" THREADS="${THREADS:-8}" bash "$BENCH/candle-core/run-suite.sh" "$@" || rc=$?
    ;;
  targets)
    [ $# -gt 0 ] || set -- dropin suite libptx leg
    for step in "$@"; do
      case "$step" in
        dropin) step_dropin || rc=1 ;;
        suite) step_suite || rc=1 ;;
        suite-ptx) step_suite_ptx || rc=1 ;;
        libptx) step_libptx || rc=1 ;;
        leg) step_leg || rc=1 ;;
        *) echo "targets: no step $step (dropin suite suite-ptx libptx leg)" | tee -a "$res/error.txt" >&2; rc=2 ;;
      esac
    done
    ;;
  flash-attn)
    [ $# -gt 0 ] || set -- kiln upstream
    flash_attn "$@" || rc=$?
    cat "$res/error.txt" 2> /dev/null
    ;;
  load-bench) load_bench || rc=$? ;;
  *)
    echo "no proof $PROOF: candle-suite, targets, flash-attn or load-bench" >&2
    rm -rf "$res"
    exit 2
    ;;
esac
name=$(IFS=-; echo "$PROOF${1:+-$*}")
tar -czf "$OUT/$name.tgz" -C "$res" .
echo "$OUT/$name.tgz (rc $rc)"
exit $rc
