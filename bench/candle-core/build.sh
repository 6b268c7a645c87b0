#!/usr/bin/env bash
# Builds candle-core 0.11.1 --features cuda and its integration tests (one binary,
# `all_tests`) twice, from clean target dirs, in the same run on this machine:
#   upstream: candle-kernels 0.11.1 from crates.io; its build.rs runs nvcc (CUDA 13.0,
#             CUDA_COMPUTE_CAP=90, through a wrapper that logs each call);
#   kiln:     candle-kernels patched to kiln's crate; no nvcc anywhere on PATH (asserted).
# Per variant, two timed cargo calls (dev profile, cargo's default -j):
#   lib:   cargo build --offline --locked --features cuda                   (candle-core + deps)
#   tests: cargo build --offline --locked --features cuda --test all_tests  (dev-deps + test binary)
# Results: $WORK/results/<variant>.json (+ cargo --timings HTML, nvcc log, build log).
# PROFILE=release builds both with --release (issue 16's cold-suite proof); default: dev.
# KILN_GPUS="sm90 ..." narrows the kiln variant to those GPUs as docs/consuming.md's quick start
# does (`--cfg kiln_gpu="sm90"` per GPU, here through RUSTFLAGS): only their part crates are built.
# Usage: build.sh [variant...]   (default: upstream kiln)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

[ $# -gt 0 ] && VARIANTS=("$@")
PROFILE="${PROFILE:-dev}"
case "$PROFILE" in
  dev) profile_args=() ;;
  release) profile_args=(--release) ;;
  *) echo "PROFILE must be dev or release, not $PROFILE" >&2; exit 1 ;;
esac
mkdir -p "$RESULTS"


now() { date +%s.%N; }

timed_cargo() { # label logfile args...
  local label=$1 log=$2; shift 2
  local t0 t1
  echo "== $label: cargo $*" >> "$log"
  t0=$(now)
  if ! /usr/bin/time -f "%e %U %S" -o "$log.time" cargo "$@" >> "$log" 2>&1; then
    echo "cargo $* failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    return 1
  fi
  t1=$(now)
  # wall (ours), then /usr/bin/time's wall, user, sys (children included: rustc, nvcc, cc).
  echo "$label $(echo "$t1 - $t0" | bc) $(cat "$log.time")"
}

if pgrep -f "xtask dist" >/dev/null; then
  echo "note: cargo xtask dist is running on this machine too (load)" >&2
fi
for v in "${VARIANTS[@]}"; do
  dir="$WORK/$v/candle-core-$CANDLE_CORE_VERSION"
  tdir="$WORK/target-$v"
  log="$RESULTS/$v-build.log"
  nvcclog="$RESULTS/$v-nvcc.log"
  rm -rf "$tdir" "$log" "$nvcclog"
  : > "$nvcclog"
  (
    cd "$dir"
    export CARGO_TARGET_DIR="$tdir" CUDA_HOME="$LINKROOT" KILN_PROOF_NVCC_LOG="$nvcclog"
    unset CUDA_PATH CUDA_ROOT CUDA_TOOLKIT_ROOT_DIR NVCC NVCC_CCBIN CUDA_COMPUTE_CAP RUSTC_WRAPPER
    if [ "$v" = upstream ]; then
      export NVCC="$NVCC_WRAP/bin/nvcc" PATH="$NVCC_WRAP/bin:$(clean_path)" CUDA_COMPUTE_CAP=$UPSTREAM_COMPUTE_CAP
      nvcc_seen="$(command -v nvcc)"
    else
      export PATH="$(clean_path)"
      refuse_nvcc || exit 1
      if [ -n "${KILN_GPUS:-}" ]; then
        RUSTFLAGS=""
        for g in $KILN_GPUS; do RUSTFLAGS="$RUSTFLAGS --cfg kiln_gpu=\"$g\""; done
        export RUSTFLAGS="${RUSTFLAGS# }"
      fi
      nvcc_seen="none"
    fi
    echo "== $v: $(date -u +%FT%TZ) RUSTFLAGS=${RUSTFLAGS:-} load $(cut -d' ' -f1-3 /proc/loadavg) nvcc=$nvcc_seen PATH=$PATH" > "$log"
    load0=$(cut -d' ' -f1 /proc/loadavg)
    lib=$(timed_cargo lib "$log" build "${profile_args[@]}" --offline --locked --features cuda --timings) || exit 1
    cp "$tdir/cargo-timings/cargo-timing.html" "$RESULTS/$v-timing-lib.html" 2>/dev/null || true
    tests=$(timed_cargo tests "$log" build "${profile_args[@]}" --offline --locked --features cuda --test "$TEST_TARGET" --timings) || exit 1
    cp "$tdir/cargo-timings/cargo-timing.html" "$RESULTS/$v-timing-tests.html" 2>/dev/null || true
    load1=$(cut -d' ' -f1 /proc/loadavg)
    exe=$(test_executable cargo test "${profile_args[@]}" --offline --locked --features cuda --test "$TEST_TARGET") || exit 1
    python3 - "$v" "$lib" "$tests" "$nvcclog" "$exe" "$load0" "$load1" "$nvcc_seen" "$PROFILE" "$(needed_libs "$exe")" "${RUSTFLAGS:-}" > "$RESULTS/$v.json" <<'PY'
import json, os, platform, subprocess, sys
v, lib, tests, nvcclog, exe, load0, load1, nvcc_seen, profile, needed, rustflags = sys.argv[1:]
def parse(s):
    f = s.split()
    return {"wall_s": round(float(f[1]), 1), "user_s": float(f[3]), "sys_s": float(f[4])}
calls = [l.split(" ", 1)[1].strip() for l in open(nvcclog) if l.strip()]
compile_calls = [c for c in calls if "--version" not in c.split() and "--list-gpu-code" not in c.split()]
def out(cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
res = {
    "variant": v,
    "lib": parse(lib), "tests": parse(tests),
    "total_wall_s": round(parse(lib)["wall_s"] + parse(tests)["wall_s"], 1),
    "nvcc_calls": len(calls), "nvcc_compile_calls": len(compile_calls),
    "nvcc_on_path": nvcc_seen,
    "test_binary": exe, "test_binary_bytes": os.path.getsize(exe),
    "needed": json.loads(needed),
    "machine": {"cpu": cpu[0] if cpu else "?", "nproc": os.cpu_count(), "os": out(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
                "kernel": platform.release(), "rustc": out(["rustc", "--version"]), "cargo": out(["cargo", "--version"]),
                "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
    "loadavg_start": float(load0), "loadavg_end": float(load1),
    "profile": f"{profile}, default -j",
    "rustflags": rustflags,
}
print(json.dumps(res, indent=2))
PY
    echo "== $v done: $(cat "$RESULTS/$v.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["lib"]["wall_s"], d["tests"]["wall_s"], d["nvcc_calls"])')" >> "$log"
  ) || { echo "$v: build failed (see $log)" >&2; exit 1; }
  echo "$v: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("lib", d["lib"]["wall_s"], "s, tests", d["tests"]["wall_s"], "s, nvcc calls", d["nvcc_calls"])' "$RESULTS/$v.json")"
done
