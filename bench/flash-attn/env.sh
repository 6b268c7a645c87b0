# shellcheck shell=bash disable=SC2034  # settings, read by the scripts that source this
# Shared settings of the candle-flash-attn proof (sourced by the other scripts). It
# reuses bench/candle-core's CUDA 13.0 wheels, link folder and GPU-side conventions, and
# bench/lib.sh's helpers through it.
# shellcheck source=../candle-core/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../candle-core/env.sh"
FA_HERE="$BENCH/flash-attn"
FA_WORK="$WORK/fa"

# The pinned crate: pins.toml's [sets.flash-attn] source, through bench/lib.sh's `pin`.
FA_VERSION="$(pin sets flash-attn source version)"
FA_SHA256="$(pin sets flash-attn source sha256)"
FA_URL="$(crate_url "$(pin sets flash-attn source crate)" "$FA_VERSION")"
# The version of kiln's drop-in crate for it (<version>+kiln.<revision>).
FA_KILN_VERSION="$(pin sets flash-attn crate version)"

# kiln's crates: the candle set's (candle-kernels and its CUDA runtime crate) and the
# flash-attn set's (`cargo xtask dist --set flash-attn`).
KILN_FA_CRATES="${KILN_FA_CRATES:-$REPO/target/dist-flash-attn/crates}"

FA_PACK="$REPO/target/fa-proof"      # what the GPU run carries (ignored by git)
FA_RESULTS="$FA_WORK/results"
FA_TEST=flash_attn_tests
# The consumer's dependencies, as upstream's Cargo.toml names them (its tests say `candle::`).
FA_VARIANTS=(upstream kiln)
