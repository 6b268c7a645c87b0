#!/usr/bin/env bash
# What `cargo xtask dist --shard K/N` plans for an empty cache, from the committed
# job-costs.toml and this checkout's plan (nothing is compiled; the pinned toolchain and
# sources must be in the cache, as after any dist): the dist's longest job, its longest
# unit (a job and the jobs that read its output, which a shard never splits: a static
# library's PTX and its sm_90/sm_100/sm_120 cubins), and per N the slowest shard's wall
# with 2 workers a machine, scheduled as kiln-build's runner does (docs/benchmarks.md).
#
#   bench/shard-plan.sh [N...]             (default: 1 4 8)
#   SET=flash-attn bench/shard-plan.sh 8   (another set)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 1 4 8
args=(-j "${WORKERS:-2}")
[ -n "${SET:-}" ] && args+=(--set "$SET")
# The plan's provisioning lines go to stderr; the figures to stdout.
cargo run --quiet --package kiln-dist --example shard-plan -- "${args[@]}" "$@"
