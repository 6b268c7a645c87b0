#!/usr/bin/env bash
# On the GPU machine: joins pack.sh's pieces (target/fa-proof/c*/<v>.tar.xz.NN, carried over
# several calls) into target/fa-proof/<v>.tar.xz and checks each against its sha256, so that
# bench/candle-core/run-suite.sh can run it (bench/gpu-host.sh flash-attn calls it). Usage: join.sh variant...
set -euo pipefail
PACK="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/fa-proof"
for v in "$@"; do
  pieces=$(cd "$PACK" && ls c*/"$v".tar.xz.[0-9]* | sort -t. -k4,4n)
  (cd "$PACK" && cat $pieces > "$v.tar.xz")
  got=$(sha256sum "$PACK/$v.tar.xz" | cut -d' ' -f1)
  want=$(cat "$(ls "$PACK"/c*/"$v".sha256 | head -1)")
  [ "$got" = "$want" ] || { echo "$v: joined archive sha256 $got, packed $want: a piece is missing or damaged ($pieces)" >&2; exit 1; }
  echo "$got" > "$PACK/$v.tar.xz.sha256"
  echo "$v: $(echo $pieces | wc -w) pieces joined, sha256 ok"
done
