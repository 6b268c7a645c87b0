#!/usr/bin/env bash
# The consumer build of candle-flash-attn 0.11.1, timed, both variants from clean target
# dirs in the same run on this machine (bench/flash-attn/setup.sh first):
#   upstream: candle-flash-attn and candle-kernels from crates.io; their build.rs run
#             nvcc (CUDA 13.0, CUDA_COMPUTE_CAP=90: sm_90a, the H100's), CUTLASS by hand;
#   kiln:     both patched to kiln's crates; no nvcc anywhere (asserted).
# One cargo call per variant: `cargo build --release --offline --locked --tests` (every
# dependency and the test binary), with no network at all (`unshare -n`: no interface
# but loopback), as a machine without GitHub builds.
# cudaforge runs thread_percentage(0.5) of the cores: one nvcc at a time on 2 cores.
# FA_UPSTREAM_THREADS (default 2) overrides that through CUDAFORGE_THREADS, in upstream's
# favour, so that its build fits in a session; the figure says which it used.
# Results: $FA_RESULTS/<v>.json, <v>-build.log, upstream-nvcc.log (per nvcc: wall, user,
# sys, max RSS KiB, argv).
# --resume: go on with an interrupted build instead of starting clean. Upstream's objects
# that nvcc already finished are reused (setup.sh's nvcc cache; cudaforge itself keeps
# nothing until all 53 are done), each measured once, when it compiled; the figure's wall
# is the sum of the segments, an interrupted one counted up to its last finished nvcc.
# Usage: build.sh [--resume] [variant...]
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
RESUME=
[ "${1:-}" = --resume ] && { RESUME=1; shift; }
[ $# -gt 0 ] && FA_VARIANTS=("$@")
THREADS_UP="${FA_UPSTREAM_THREADS:-2}"
mkdir -p "$FA_RESULTS"
command -v unshare >/dev/null || { echo "unshare (util-linux) is needed" >&2; exit 1; }

for v in "${FA_VARIANTS[@]}"; do
  dir="$FA_WORK/$v/fa-consumer"
  tdir="$FA_WORK/target-$v"
  log="$FA_RESULTS/$v-build.log"
  nvcclog="$FA_RESULTS/$v-nvcc.log"
  segments="$FA_RESULTS/$v-segments.txt"    # per segment: start [end] (epoch seconds)
  cache="$FA_WORK/nvcc-cache/$v"
  if [ -z "$RESUME" ]; then
    rm -rf "$tdir" "$cache"; : > "$log"; : > "$nvcclog"; : > "$nvcclog.cached"; : > "$segments"
  elif [ ! -s "$segments" ]; then
    echo "$v: nothing to resume ($segments is empty): run build.sh $v" >&2; exit 1
  fi
  (
    cd "$dir"
    export CARGO_TARGET_DIR="$tdir" CUDA_HOME="$LINKROOT" KILN_PROOF_NVCC_LOG="$nvcclog" CARGO_NET_OFFLINE=true
    export KILN_PROOF_NVCC_CACHE="$cache"
    unset CUDA_PATH CUDA_ROOT CUDA_TOOLKIT_ROOT_DIR NVCC NVCC_CCBIN CUDA_COMPUTE_CAP RUSTC_WRAPPER CUDAFORGE_THREADS
    if [ "$v" = upstream ]; then
      export NVCC="$FA_WORK/nvcc-time/bin/nvcc" PATH="$FA_WORK/git-shim:$FA_WORK/nvcc-time/bin:$(clean_path)"
      export CUDA_COMPUTE_CAP=$UPSTREAM_COMPUTE_CAP CUDAFORGE_HOME="$FA_WORK/cudaforge" CUDAFORGE_THREADS=$THREADS_UP
      nvcc_seen="$(command -v nvcc)"
    else
      export PATH="$(clean_path)"
      refuse_nvcc || exit 1
      nvcc_seen=none
    fi
    echo "== $v: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) nvcc=$nvcc_seen${RESUME:+ (resumed)}" >> "$log"
    load0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    [ -z "$(tail -c1 "$segments")" ] || echo >> "$segments"   # an interrupted segment's line
    printf '%s' "$t0" >> "$segments"
    unshare -n /usr/bin/time -f "%e %U %S %M" -o "$log.time" \
      cargo build --release --offline --locked --tests >> "$log" 2>&1 \
      || { echo "$v: cargo build failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo " $t1" >> "$segments"
    load1=$(cut -d' ' -f1 /proc/loadavg)
    exe=$(test_executable unshare -n cargo test --release --offline --locked --test "$FA_TEST") || exit 1
    python3 "$FA_HERE/result.py" "$v" "$segments" "$log.time" "$nvcclog" "$exe" "$(needed_libs "$exe")" \
      "$load0" "$load1" "$nvcc_seen" "${CUDAFORGE_THREADS:-}" > "$FA_RESULTS/$v.json"
  ) || exit 1
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["variant"] + ":", d["wall_s"], "s wall,", d["nvcc_compiles"], "nvcc compiles,", d["nvcc_cpu_s"], "CPU-s of nvcc; test binary", d["test_binary_bytes"], "bytes")' "$FA_RESULTS/$v.json"
done
