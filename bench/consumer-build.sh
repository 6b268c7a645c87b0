#!/usr/bin/env bash
# What a consumer of kiln's crates pays, measured as a consumer meets it (issue 33, item 6):
# the quick start (examples/quick-start/cuda) built from a loopback registry holding a dist's
# crates, with a clean CARGO_HOME, narrowed to some GPUs, `cargo build --release --timings`.
#
#   bench/consumer-build.sh [GPU...]        (default: sm90; "all": not narrowed)
#
#   KILN_DIST_DIR   the dist whose crates are published (default target/dist)
#   WORK            scratch folder (default /tmp/kiln-consumer-build; emptied first)
#   CUDARC_CUDA_VERSION, KILN_CUDA_LINK_STUBS   passed to the quick start's build only (its
#                   .cargo/config.toml's [env] gives them otherwise), e.g. 13000 and 1 for a
#                   binary that runs on CUDA 13's libraries (bench/quick-start-cuda13.sh)
#
# Prints, and writes to $WORK/result.txt:
#   - the bytes (and crates) the clean CARGO_HOME downloaded from kiln's registry;
#   - the unit time cargo --timings gives each of kiln's crates (build scripts included), and
#     their sum: what kiln's crates add to the consumer's build, on this machine's cores.
# crates.io's crates (candle-core and its dependencies) are downloaded too, and not counted.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
DIST="${KILN_DIST_DIR:-$REPO/target/dist}"
W="${WORK:-/tmp/kiln-consumer-build}"
GPUS=("$@")
[ ${#GPUS[@]} -gt 0 ] || GPUS=(sm90)
[ -f "$DIST/crates/crates.json" ] || { echo "$DIST/crates/crates.json: no packaged dist (run cargo xtask dist)" >&2; exit 1; }
rm -rf "$W"
mkdir -p "$W"

# The registry, on a free loopback port; stopped when this script ends.
# kiln's own xtask is built without the consumer's CUDA settings (a CUDARC_CUDA_VERSION of
# another major would rebuild the workspace's cudarc for it); the consumer's build gets them.
XTASK=(env -u CUDARC_CUDA_VERSION -u KILN_CUDA_LINK_STUBS cargo xtask)
# In a process group of its own (setsid): cargo, the xtask and the registry server it starts
# are all stopped at the end, not only cargo (which would leave the server running).
(cd "$REPO" && exec setsid "${XTASK[@]}" registry serve --dir "$W/registry" --port 0 > "$W/serve.log" 2>&1) &
SERVE=$!
trap 'kill -- -$SERVE 2>/dev/null || true; wait $SERVE 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  INDEX=$(grep -o 'sparse+http://127.0.0.1:[0-9]*/' "$W/serve.log" | head -1 || true)
  [ -n "$INDEX" ] && break
  kill -0 $SERVE 2>/dev/null || { cat "$W/serve.log" >&2; exit 1; }
  sleep 1
done
[ -n "$INDEX" ] || { echo "the registry did not start: $W/serve.log" >&2; exit 1; }
echo "registry: $INDEX"
(cd "$REPO" && CARGO_REGISTRIES_KILN_INDEX="$INDEX" CARGO_REGISTRIES_KILN_TOKEN=any \
  "${XTASK[@]}" publish --dist "$DIST" --registry kiln --execute > "$W/publish.log" 2>&1) \
  || { tail -20 "$W/publish.log" >&2; exit 1; }

# The quick start as docs/consuming.md has it, narrowed as asked.
cp -r "$REPO/examples/quick-start/cuda" "$W/qs"
flags=""
if [ "${GPUS[0]}" != all ]; then
  for g in "${GPUS[@]}"; do flags="$flags\"--cfg\", 'kiln_gpu=\"$g\"', "; done
  printf '\n[build]\nrustflags = [%s]\n' "${flags%, }" >> "$W/qs/.cargo/config.toml.new"
fi
sed -i "s|sparse+http://127.0.0.1:8787/|$INDEX|; /^\[build\]/,\$d" "$W/qs/.cargo/config.toml"
[ -f "$W/qs/.cargo/config.toml.new" ] && cat "$W/qs/.cargo/config.toml.new" >> "$W/qs/.cargo/config.toml" && rm "$W/qs/.cargo/config.toml.new"
export CARGO_HOME="$W/home" CARGO_TARGET_DIR="$W/target"
mkdir -p "$CARGO_HOME"
t0=$(date +%s.%N)
(cd "$W/qs" && cargo build --release --timings > "$W/build.log" 2>&1) || { tail -30 "$W/build.log" >&2; exit 1; }
t1=$(date +%s.%N)

python3 - "$W" "$DIST/crates/crates.json" "${GPUS[*]}" "$(echo "$t1 - $t0" | bc)" <<'PY' | tee "$W/result.txt"
import glob, json, os, re, sys
w, crates_json, gpus, wall = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ours = {r["name"] for r in json.load(open(crates_json))}
ours |= {"candle-kernels"}
down = {}
for d in glob.glob(os.path.join(w, "home/registry/cache/127.0.0.1-*")):
    for f in os.listdir(d):
        name = re.sub(r"-\d+\.\d+\.\d+.*\.crate$", "", f)
        down[name] = os.path.getsize(os.path.join(d, f))
html = open(glob.glob(os.path.join(w, "target/cargo-timings/cargo-timing.html"))[0]).read()
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);", html, re.S).group(1))
kiln = {}
for u in units:
    if u["name"] in ours:
        key = u["name"] + (" (build script)" if u.get("target", "").strip().startswith("build script") or "build-script" in u.get("target", "") else "")
        kiln[key] = kiln.get(key, 0) + u["duration"]
print(f"quick start narrowed to: {gpus}; cargo build --release, {os.cpu_count()} cores, {wall:.1f} s wall in all")
print(f"downloaded from kiln's registry: {sum(down.values()):,} bytes in {len(down)} crates")
for n, b in sorted(down.items(), key=lambda x: -x[1]):
    print(f"  {n:<40} {b:>12,}")
print(f"unit time of kiln's crates (cargo --timings): {sum(kiln.values()):.2f} s")
for n, s in sorted(kiln.items(), key=lambda x: -x[1]):
    print(f"  {n:<52} {s:>7.2f} s")
PY
