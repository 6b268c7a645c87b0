#!/usr/bin/env bash
# On the GPU host (no cargo), after every piece of pack.sh's archives was carried (join.sh's
# layout: target/fa-proof/c<N>/<v>.tar.xz.<NN>): joins and checks each variant's archive,
# then runs upstream's tests/flash_attn_tests.rs through bench/candle-proof/run-gpu.sh, one
# thread, a fresh JIT cache (cold), then the same cache (warm). Results in $OUT/fa-results.tgz
# (run-gpu.sh's files per variant: env, list, cold/warm output, rc, seconds, JIT cache).
# Usage: h100.sh variant...   (default: kiln upstream; a variant whose pieces are missing is
# reported in error.txt and skipped)
set -uo pipefail
OUT="${OUT:?set OUT}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
[ $# -gt 0 ] || set -- kiln upstream
res=$(mktemp -d /tmp/fa-results.XXXXXX)
ran=()
for v in "$@"; do
  if bash "$HERE/join.sh" "$v" > "$res/join-$v.txt" 2>&1; then ran+=("$v"); else cat "$res/join-$v.txt" >> "$res/error.txt"; fi
done
if [ ${#ran[@]} -gt 0 ]; then
  OUT="$res" THREADS="${THREADS:-1}" KILN_PROOF_PACK="$REPO/target/fa-proof" KILN_PROOF_NAME=fa-proof KILN_PROOF_BIN=flash_attn_tests \
    bash "$REPO/bench/candle-proof/run-gpu.sh" "${ran[@]}"
fi
tar -czf "$OUT/fa-results.tgz" -C "$res" .
for v in "${ran[@]}"; do
  echo "== $v: cold rc $(cat "$res/$v-cold.rc" 2>/dev/null) in $(cat "$res/$v-cold.seconds" 2>/dev/null) s; $(grep -h '^test result' "$res/$v-cold.txt" 2>/dev/null)"
done
cat "$res/error.txt" 2>/dev/null
exit 0
