#!/usr/bin/env bash
# On an NVIDIA GPU host (driver only): runs bench/ffi-split/build.sh's two harness builds
# (upstream's fat objects with NVIDIA's runtime; kiln's host-only objects, launch.rs and the
# sm_90 cubins), each twice, then compares, for every function candle-kernels' src/ffi.rs
# declares, the outputs of the two builds byte for byte: one line per function (identical /
# DIFFER / missing), then `N passed, M failed` (functions). The function list is the
# harness's own (`fat --list`, built from ffi.rs). Writes $OUT/runs.txt, the raw outputs of
# the first runs in $OUT/run1/ (`<build>-<function>.bin`, `<build>-layout.txt`: which call
# wrote which bytes; the second runs' outputs are compared with them, then removed). Exit status: 0 only if every function's
# outputs are identical and both builds' own checks passed.
#
#   OUT=... bash bench/ffi-split/gpu.sh CARRY      (CARRY: build.sh's WORK/carry, carried over)
set -uo pipefail
C="$(cd "${1:?the carried folder}" && pwd)"
: "${OUT:?set OUT to the folder for the results}"
log() { tee -a "$OUT/runs.txt"; }
# The cubins travel packed (build.sh: carry/cubins.tar.gz); unpacked outside OUT.
CUBINS="$(mktemp -d "${TMPDIR:-/tmp}/ffi-split-cubins.XXXXXX")"
trap 'rm -rf "$CUBINS"' EXIT
tar -xzf "$C/cubins.tar.gz" -C "$CUBINS" || { echo "$C/cubins.tar.gz: cannot unpack" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/runs.txt"
mapfile -t FUNCS < <("$C/fat" --list | grep -v '^#')
[ "${#FUNCS[@]}" -gt 0 ] || { echo "$C/fat --list printed no functions" | log; exit 1; }
cmp -s <("$C/fat" --list) <("$C/split" --list) || { echo "fat and split list different functions" | log; exit 1; }
status=0
for run in 1 2; do
  mkdir -p "$OUT/run$run"
  for b in fat split; do
    (cd "$OUT/run$run" && OUT="$OUT/run$run" CUBIN_DIR="$CUBINS" timeout 60 "$C/$b") 2>&1 | log
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || { echo "run $run: $b exited with $rc" | log; status=1; }
  done
done
echo "fat against split, function by function (run 1; the layout of each file: run1/fat-layout.txt):" | log
passed=0 failed=0
for f in "${FUNCS[@]}"; do
  a="$OUT/run1/fat-$f.bin" b="$OUT/run1/split-$f.bin"
  if [ ! -s "$a" ] || [ ! -s "$b" ]; then
    line="$f: missing output ($( [ -s "$a" ] || echo "fat " )$( [ -s "$b" ] || echo split))"
    failed=$((failed + 1))
  elif cmp -s "$a" "$b"; then
    line="$f: identical ($(stat -c %s "$a") bytes)"
    passed=$((passed + 1))
  else
    line="$f: DIFFER ($(cmp "$a" "$b" 2>&1 | head -1); $(cmp -l "$a" "$b" 2> /dev/null | wc -l) bytes differ; fat $(stat -c %s "$a"), split $(stat -c %s "$b") bytes)"
    failed=$((failed + 1))
  fi
  echo "$line" | log
done
cmp -s "$OUT/run1/fat-layout.txt" "$OUT/run1/split-layout.txt" \
  || { echo "fat and split made different calls: diff run1/fat-layout.txt run1/split-layout.txt" | log; status=1; }
same=0
for f in "${FUNCS[@]}"; do
  for b in fat split; do cmp -s "$OUT/run1/$b-$f.bin" "$OUT/run2/$b-$f.bin" && same=$((same + 1)); done
done
echo "run 2 against run 1: $same of $((2 * ${#FUNCS[@]})) outputs (functions x builds) identical" | log
rm -f "$OUT"/run2/*.bin # compared; run1's are the record
echo "what each binary loads:" | log
for b in fat split; do echo "$b: $(ldd "$C/$b" | awk '{print $1}' | paste -sd' ')"; done | log
echo "$passed passed, $failed failed" | log
[ "$failed" = 0 ] && [ "$status" = 0 ]
