# Shared settings of the candle-flash-attn proof (sourced by the other scripts). It
# reuses bench/candle-proof's CUDA 13.0 wheels, link folder and GPU-side conventions.
source "$(dirname "${BASH_SOURCE[0]}")/../candle-proof/env.sh"
FA_HERE="$REPO/bench/flash-attn"
FA_WORK="$WORK/fa"

# The pinned crate, from the one place it is pinned (pins.toml's [sets.flash-attn]).
read -r FA_VERSION FA_SHA256 < <(python3 -c '
import sys, tomllib
s = tomllib.load(open(sys.argv[1], "rb"))["sets"]["flash-attn"]["source"]
print(s["version"], s["sha256"])' "$REPO/pins.toml")
FA_URL="https://static.crates.io/crates/candle-flash-attn/candle-flash-attn-${FA_VERSION}.crate"

# kiln's crates: the candle set's (candle-kernels and its CUDA runtime crate) and the
# flash-attn set's (`cargo xtask dist --set flash-attn`).
KILN_FA_CRATES="${KILN_FA_CRATES:-$REPO/target/dist-flash-attn/crates}"

FA_PACK="$REPO/target/fa-proof"      # what the GPU run carries (ignored by git)
FA_RESULTS="$FA_WORK/results"
FA_TEST=flash_attn_tests
# The consumer's dependencies, as upstream's Cargo.toml names them (its tests say `candle::`).
FA_VARIANTS=(upstream kiln)
