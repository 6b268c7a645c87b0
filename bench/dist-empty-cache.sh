#!/usr/bin/env bash
# A full `cargo xtask dist` from an empty compile cache, downloads excluded,
# against its own lower bound: the sum of its jobs' times over the cores.
#
#   bench/dist-empty-cache.sh LABEL [XTASK]    (XTASK: default target/debug/xtask)
#
# The cache is fresh (/tmp/kiln-bench/LABEL/cache) but its debs/, toolchains/,
# sources/, fetch/, wheels/ and tools/ are hard links to the real cache's ($KILN_CACHE_DIR or
# ~/.cache/kiln; run a dist there first): no download and no unpacking is
# timed, every compile, archive, bundle, payload and the packaging are. Prints
# the dist's wall time, Σ job time (every `built` line's seconds, plus the
# packaging after the jobs: from its "packaging" line to the dist's last
# line), that ÷ cores, and the ratio; the log (each line with the seconds
# since the start) and a load sample every 30 s (what else ran) stay in
# /tmp/kiln-bench/LABEL/.
set -euo pipefail
LABEL="${1:?usage: $0 LABEL [XTASK]}"
XTASK="${2:-target/debug/xtask}"
REAL="${KILN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln}"
D="/tmp/kiln-bench/$LABEL"
rm -rf "$D"
mkdir -p "$D/cache"
for area in debs toolchains sources fetch wheels tools; do
    # wheels/ and tools/ (the pinned ptxas) exist once a dist of issue 13's pins ran.
    [ -d "$REAL/$area" ] && cp -al "$REAL/$area" "$D/cache/$area"
done
CORES=$(nproc)
( while true; do
      echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) | $(ps -eo pcpu=,comm= --sort=-pcpu | head -6 | awk '{printf "%s %s, ", $2, $1}')"
      sleep 30
  done ) > "$D/load.txt" &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null' EXIT
START=$(date +%s.%N)
KILN_CACHE_DIR="$D/cache" "$XTASK" dist --out "$D/out" 2>&1 |
    while IFS= read -r line; do printf '%.2f %s\n' "$(echo "$(date +%s.%N) - $START" | bc)" "$line"; done > "$D/log.txt"
END=$(date +%s.%N)
kill $SAMPLER
WALL=$(echo "$END - $START" | bc)
# Σ job time: every job the runner built, and the packaging that follows the jobs.
JOBS=$(grep -E '\] built  .* \([0-9.]+ s\)$' "$D/log.txt" | sed -E 's/.*\(([0-9.]+) s\)$/\1/' | paste -sd+ | bc)
T_PACK=$(grep -E '^[0-9.]+ packaging ' "$D/log.txt" | head -1 | cut -d' ' -f1)
T_END=$(tail -1 "$D/log.txt" | cut -d' ' -f1)
PACK=$(echo "${T_END:-0} - ${T_PACK:-$T_END}" | bc)
SUM=$(echo "$JOBS + $PACK" | bc)
BOUND=$(echo "scale=1; $SUM / $CORES" | bc)
RATIO=$(printf '%.1f' "$(echo "scale=6; 100 * $SUM / $CORES / $WALL" | bc)")
printf 'label %s: wall %.1f s; Σ job time %.1f s (%.1f in the runner + %.1f packaging after it) on %s cores: bound %.1f s; bound/wall %s %%\n' \
    "$LABEL" "$WALL" "$SUM" "$JOBS" "$PACK" "$CORES" "$BOUND" "$RATIO"
echo "log: $D/log.txt; load samples: $D/load.txt"
