#!/usr/bin/env bash
# Runs a packed test suite (one binary per variant: candle-core 0.11.1's integration tests,
# packed by pack.sh, or another proof's) on a CUDA machine that has no cargo; the GPU-host
# entry bench/gpu-host.sh calls it (`candle-suite`, `targets`, `flash-attn`), and sanity.sh
# here with a stub libcuda. Run from the repository root:
#
#   OUT=... bash bench/candle-core/run-suite.sh kiln upstream
#
# with target/candle-proof/<variant>.tar.xz carried. Per variant, into $OUT:
#   <v>-env.txt        GPU, driver, the libraries the binary resolves (ldd)
#   <v>-list.txt       the binary's --list
#   <v>-cold.txt       test run 1: empty CUDA JIT cache (a fresh CUDA_CACHE_PATH)
#   <v>-warm.txt       test run 2: same cache, now warm
#   <v>-*.rc, <v>-*.seconds, cuda-tests-<v>.txt, <v>-info.json
#   <v>-*.jitcache     files and KiB in the JIT cache after the run (0 when nothing was JIT-compiled)
# Settings (environment):
#   THREADS=8              --test-threads for both runs
#   CUDA_CACHE_DISABLE=1   no JIT cache at all (slow: every module load JIT-compiles)
#   WARM=0                 skip the warm run
#   KILN_PROOF_LIBDIRS     library dirs to use instead of torch's nvidia wheels
#   KILN_PROOF_UNPACK      where to unpack (default: a temp dir)
#   KILN_PTX_ARCH          (kiln) hand the driver that PTX level instead of SASS: the JIT fallback
#   FILTER                 run only the tests whose names contain it (libtest's filter)
#   KILN_PROOF_PACK, KILN_PROOF_NAME, KILN_PROOF_BIN
#                          another proof's packs (bench/flash-attn): the folder of <v>.tar.xz,
#                          the archive's top folder prefix (<name>-<v>), the test binary in it
# The runtime libraries candle-core links (libcublas.so.13, libcublasLt.so.13,
# libcurand.so.10, libnvrtc.so.13, and for upstream libcudart.so.13) come from the
# nvidia wheels torch installed (nvidia/cu13/lib); libcuda.so.1 is the driver's.
set -uo pipefail

OUT="${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
THREADS="${THREADS:-8}"
PACKDIR="${KILN_PROOF_PACK:-$REPO/target/candle-proof}"
NAME="${KILN_PROOF_NAME:-candle-proof}"
BIN="${KILN_PROOF_BIN:-all_tests}"
[ $# -gt 0 ] || set -- kiln upstream

libdirs="${KILN_PROOF_LIBDIRS:-}"
if [ -z "$libdirs" ]; then
  libdirs=$(python3 - <<'PY'
import os
try:
    import nvidia
except ImportError:
    raise SystemExit("")
want = {"libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10", "libnvrtc.so.13", "libcudart.so.13"}
dirs = []
for root in list(nvidia.__path__):
    for d, _, files in os.walk(root):
        if want & set(files) and d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
)
fi
[ -n "$libdirs" ] || { echo "no CUDA 13 runtime libraries found (python3 -c 'import nvidia' failed?); set KILN_PROOF_LIBDIRS" | tee "$OUT/error.txt" >&2; exit 1; }
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

unpack() { # archive dest
  if command -v xz >/dev/null; then tar -C "$2" -xJf "$1"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; fi
}

base="${KILN_PROOF_UNPACK:-$(mktemp -d /tmp/candle-proof.XXXXXX)}"
mkdir -p "$base"
overall=0
for v in "$@"; do
  archive="$PACKDIR/$v.tar.xz"
  [ -f "$archive" ] || { echo "$archive was not carried" | tee -a "$OUT/error.txt" >&2; overall=1; continue; }
  if [ -f "$archive.sha256" ] && [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$(cat "$archive.sha256")" ]; then
    echo "$archive: sha256 mismatch" | tee -a "$OUT/error.txt" >&2; overall=1; continue
  fi
  rm -rf "$base/$NAME-$v"
  unpack "$archive" "$base"
  dir="$base/$NAME-$v"
  cp "$dir/cuda-tests.txt" "$OUT/cuda-tests-$v.txt"
  cp "$dir/info.json" "$OUT/$v-info.json"
  {
    echo "variant: $v"; echo "date: $(date -u +%FT%TZ)"; echo "host: $(uname -a)"
    echo "THREADS=$THREADS CUDA_CACHE_DISABLE=${CUDA_CACHE_DISABLE:-} LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv 2>&1 || true
    echo "--- ldd"; ldd "$dir/$BIN" 2>&1
  } > "$OUT/$v-env.txt"
  cd "$dir" || exit 1
  "./$BIN" --list > "$OUT/$v-list.txt" 2>&1
  echo $? > "$OUT/$v-list.rc"
  cache=$(mktemp -d "/tmp/$NAME-jit.XXXXXX")
  runs=(cold)
  [ "${WARM:-1}" = 0 ] || runs+=(warm)
  for run in "${runs[@]}"; do
    t0=$(date +%s.%N)
    CUDA_CACHE_PATH="$cache" CUDA_CACHE_MAXSIZE=4294967296 RUST_BACKTRACE=1 \
      "./$BIN" --test-threads="$THREADS" ${FILTER:+"$FILTER"} > "$OUT/$v-$run.txt" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    echo $rc > "$OUT/$v-$run.rc"
    # What the driver JIT-compiled: it writes its compute cache only for PTX it compiled.
    echo "$(find "$cache" -type f | wc -l) files, $(du -sk "$cache" | cut -f1) KiB" > "$OUT/$v-$run.jitcache"
    python3 -c "print(round($t1 - $t0, 2))" > "$OUT/$v-$run.seconds"
    echo "$v $run: rc=$rc $(tail -n 5 "$OUT/$v-$run.txt" | grep '^test result' || echo 'no summary line') ($(cat "$OUT/$v-$run.seconds") s)"
    [ $rc = 0 ] || overall=1
  done
  rm -rf "$cache"
  cd "$REPO" || exit 1
  python3 "$BENCH/candle-core/parse.py" --out "$OUT" "$v" > "$OUT/$v-counts.json" 2>>"$OUT/error.txt" || true
done
exit $overall
