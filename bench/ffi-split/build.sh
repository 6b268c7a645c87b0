#!/usr/bin/env bash
# Builds candle-kernels' static MoE/MMQ library the per-target way that docs/static-library.md
# measures and chooses, next to upstream's way, and prints what each job costs and weighs:
#
#   bench/ffi-split/build.sh [WORK]      (WORK: default /tmp/kiln-ffi-split)
#
#   FFI_SPLIT_SMS   the sms whose cubins are built (default: sm_90; "all": the library's pinned
#                   sass list)
#   FFI_SPLIT_REUSE=1  keep what an earlier run left in WORK (its jobs.tsv lines too): only
#                   missing outputs are built (e.g. after a harness change)
#   FFI_SPLIT_DIST=DIR  take the split build from a dist that builds the library per target
#                   (pins.toml's staticlib.kernels = "per-target"): DIR/cuda/lib/lib<lib>.a is
#                   the host objects' archive and DIR/cuda/sm_90/<lib>/<stem>.cubin the cubins,
#                   exactly what the drop-in ships; only the fat reference objects are built
#
# In kiln's pinned root (bwrap, as kiln's jobs run), from the verified candle-kernels sources
# in kiln's cache (run `cargo xtask dist` or `cargo xtask toolchain` first):
#   host     per source: one host-only object. nvcc's device pass is one PTX-only arch, the
#            compile gets the library's whole arch list (kernels/cuda/kiln_arch_list.h),
#            then objcopy renames every NVIDIA runtime call (`cudaLaunchKernel_ptsz` ->
#            `kiln_<lib>_cudaLaunchKernel_ptsz`, ...) and replaces the object's fatbin with a
#            tag naming its module ("KILNMOD\0<stem>\0"); lists what else it leaves undefined
#            (WORK/runtime-functions.txt: the runtime every object together calls)
#   cubin    per source and sm: the kernels as a cubin (the library's flags and forced headers,
#            and the same whole arch list: CUB's kernel names spell it)
#   ref      upstream's way: per source, a fat object for sm_90 (all 15: the harness calls
#            a function of each)
# Then the harness (bench/ffi-split/harness) twice: `fat` (ref objects + NVIDIA's static
# runtime from the pinned toolchain) and `split` (host objects + the drop-in's launch.rs);
# bench/ffi-split/gpu.sh runs both on a GPU host. The harness calls every function
# candle-kernels' src/ffi.rs declares and writes each one's outputs to its own file
# (harness/src/main.rs says what with what; docs/static-library.md lists the families); its
# build.rs reads that ffi.rs (FFI_RS) and fails, naming the function, when one is not
# called. After the build, `--list` of both binaries must agree, and a function ffi.rs gates
# behind a feature upstream's library is built without (candle_launch_moe_align: `cutile`)
# must be absent from both libraries, or this script fails.
#
# Writes WORK/jobs.tsv (job, seconds, bytes, zstd -19 bytes), WORK/functions.txt (the
# harness's --list) and WORK/carry/: the two binaries, the cubins (cubins.tar.gz) and gpu.sh,
# run on a GPU host as `OUT=... bash CARRY/gpu.sh CARRY`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
W="${1:-/tmp/kiln-ffi-split}"
mkdir -p "$W/work" "$W/carry"
pins_load
CACHE="${KILN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln}"
ROOT="$CACHE/toolchains/$(pin toolchain identity)"
[ -d "$ROOT/usr" ] || { echo "$ROOT: the pinned root is not unpacked: run cargo xtask toolchain" >&2; exit 1; }
SRC="$(find "$CACHE/sources" -maxdepth 1 -type d -name "candle-kernels-$(pin sets candle source version)-*" | head -1)"
[ -d "$SRC/src" ] || { echo "candle-kernels' verified sources are not in $CACHE/sources: run cargo xtask dist" >&2; exit 1; }
mapfile -t SOURCES < <(pin sets candle staticlib sources)
mapfile -t FLAGS < <(pin sets candle flags cuda_staticlib)
mapfile -t FORCED < <(pin sets candle staticlib force_include)
mapfile -t LIB_SASS < <(pin sets candle staticlib sass)
mapfile -t LIB_PTX < <(pin sets candle staticlib ptx)
LIB="$(pin sets candle staticlib name)"
# The arch list nvcc defines for one fat object of all of them: 700,750,...,900 (commas
# escaped: nvcc splits option values at unescaped commas).
LIST="$(printf '%s\n' "${LIB_SASS[@]#sm_}" "${LIB_PTX[@]#compute_}" | sort -nu | paste -sd, | sed 's/,/0\\,/g')0"
if [ "${FFI_SPLIT_SMS:-sm_90}" = all ]; then SMS=("${LIB_SASS[@]}"); else read -ra SMS <<< "${FFI_SPLIT_SMS:-sm_90}"; fi
REF_SOURCES=("${SOURCES[@]}") # the harness calls a function of every source
REUSE="${FFI_SPLIT_REUSE:-}"
have() { [ -n "$REUSE" ] && [ -s "$W/work/$1" ]; }

sandbox() {
  bwrap --ro-bind "$ROOT" / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent \
    --cap-drop ALL --new-session --clearenv --setenv PATH /usr/bin:/bin --setenv HOME /tmp \
    --setenv TMPDIR /tmp --setenv LC_ALL C --bind "$W/work" /kiln/job --ro-bind "$SRC" /kiln/src \
    --ro-bind "$REPO/kernels/cuda" /kiln/kernels --chdir /kiln/job -- "$@"
}
forced=()
for h in "${FORCED[@]}"; do forced+=(-include "/kiln/kernels/$h"); done
[ -n "$REUSE" ] && [ -s "$W/jobs.tsv" ] || printf 'job\tseconds\tbytes\tzstd19_bytes\n' > "$W/jobs.tsv"
record() { # JOB SECONDS FILE
  local raw z
  raw=$(stat -c %s "$W/work/$3"); z=$(zstd -19 -q -c "$W/work/$3" | wc -c)
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$raw" "$z" | tee -a "$W/jobs.tsv"
}
timed() { # prints the seconds the command took
  local t0 t1; t0=$(date +%s.%N); "$@" > "$W/work/last.log" 2>&1 || { cat "$W/work/last.log" >&2; return 1; }
  t1=$(date +%s.%N); echo "$t1 - $t0" | bc
}

DIST="${FFI_SPLIT_DIST:-}"
if [ -n "$DIST" ]; then
  [ -f "$DIST/cuda/lib/lib$LIB.a" ] || { echo "$DIST/cuda/lib/lib$LIB.a: no static library in that dist" >&2; exit 1; }
  SOURCES_BUILT=()
else
  SOURCES_BUILT=("${SOURCES[@]}")
fi
for rel in "${SOURCES_BUILT[@]}"; do
  stem="$(basename "$rel" .cu)"
  if ! have "$stem.o"; then
    s=$(timed sandbox nvcc -c -gencode=arch=compute_70,code=compute_70 "${FLAGS[@]}" "${forced[@]}" \
        -include /kiln/kernels/kiln_arch_list.h "-DKILN_ARCH_LIST=$LIST" -o "$stem.host.o" "/kiln/src/$rel")
    mapfile -t runtime < <(nm -u "$W/work/$stem.host.o" | awk '{print $2}' | grep -E '^_{0,2}cuda')
    printf '%s\n' "${runtime[@]}" > "$W/work/$stem.runtime"
    nm -u "$W/work/$stem.host.o" | awk '{print $2}' | grep -vE '^_{0,2}cuda|^_GLOBAL_OFFSET_TABLE_$' > "$W/work/$stem.other" || true
    echo "$stem: ${#runtime[@]} runtime functions; beyond them, $(grep -c . "$W/work/$stem.other") undefined ($(grep -cE '^_Z|^__cxa|^__gxx|^_Unwind' "$W/work/$stem.other") of them C++ runtime)"
    printf 'KILNMOD\0%s\0' "$stem" > "$W/work/$stem.tag"
    args=()
    for r in "${runtime[@]}"; do args+=(--redefine-sym "$r=kiln_${LIB}_$r"); done
    sandbox objcopy "${args[@]}" --update-section ".nv_fatbin=$stem.tag" "$stem.host.o" "$stem.o"
    record "host $stem" "$s" "$stem.o"
  fi
  for sm in "${SMS[@]}"; do
    have "$stem.$sm.cubin" && continue
    s=$(timed sandbox nvcc --cubin "-gencode=arch=compute_${sm#sm_},code=$sm" "${FLAGS[@]}" "${forced[@]}" \
        -include /kiln/kernels/kiln_arch_list.h "-DKILN_ARCH_LIST=$LIST" -o "$stem.$sm.cubin" "/kiln/src/$rel")
    record "cubin $stem $sm" "$s" "$stem.$sm.cubin"
  done
done
for rel in "${REF_SOURCES[@]}"; do
  stem="$(basename "$rel" .cu)"
  have "$stem.ref.o" && continue
  s=$(timed sandbox nvcc -c -gencode=arch=compute_90,code=sm_90 "${FLAGS[@]}" "${forced[@]}" -o "$stem.ref.o" "/kiln/src/$rel")
  record "ref $stem sm_90" "$s" "$stem.ref.o"
done

# The two harness builds: the same program linked either way.
rm -f "$W/work/libsplit.a" "$W/work/libref.a"
if [ -n "$DIST" ]; then
  cp "$DIST/cuda/lib/lib$LIB.a" "$W/work/libsplit.a"
  for rel in "${SOURCES[@]}"; do
    stem="$(basename "$rel" .cu)"
    cp "$DIST/cuda/sm_90/$LIB/$stem.cubin" "$W/work/$stem.sm_90.cubin"
  done
else
  (cd "$W/work" && ar rcsD libsplit.a $(for rel in "${SOURCES[@]}"; do echo "$(basename "$rel" .cu).o"; done))
fi
(cd "$W/work" && ar rcsD libref.a $(for rel in "${REF_SOURCES[@]}"; do echo "$(basename "$rel" .cu).ref.o"; done))
mkdir -p "$W/lib-split" "$W/lib-fat"
cp "$W/work/libsplit.a" "$W/lib-split/libffi_under_test.a"
cp "$W/work/libref.a" "$W/lib-fat/libffi_under_test.a"
cp "$ROOT/usr/lib/x86_64-linux-gnu/libcudart_static.a" "$W/lib-fat/"
# The harness declares what candle-kernels' own ffi.rs declares (and its build.rs checks it
# calls each function).
export FFI_RS="$SRC/src/ffi.rs"
t0=$(date +%s)
(cd "$HERE/harness" && FFI_LIB_DIR="$W/lib-split" CARGO_TARGET_DIR="$W/t-split" cargo build -q --release --features split \
  && FFI_LIB_DIR="$W/lib-fat" CARGO_TARGET_DIR="$W/t-fat" cargo build -q --release --features fat)
echo "harness: both builds in $(( $(date +%s) - t0 )) s"
rm -rf "$W/carry" && mkdir -p "$W/carry"
cp "$W/t-split/release/ffi-split-check" "$W/carry/split"
cp "$W/t-fat/release/ffi-split-check" "$W/carry/fat"
# The cubins packed (33 MB of them gzip to 9): gpu.sh unpacks them.
(cd "$W/work" && tar -czf "$W/carry/cubins.tar.gz" $(for rel in "${SOURCES[@]}"; do echo "$(basename "$rel" .cu).sm_90.cubin"; done))
cp "$HERE/gpu.sh" "$W/carry/" # the carry runs as it was built: OUT=... bash CARRY/gpu.sh CARRY
"$W/carry/fat" --list > "$W/functions.txt"
cmp -s "$W/functions.txt" <("$W/carry/split" --list) \
  || { echo "the fat and split harness builds list different functions" >&2; exit 1; }
# A function ffi.rs gates behind a feature is skipped only while the library lacks it.
while read -r name; do
  for a in "$W/work/libsplit.a" "$W/work/libref.a"; do
    if nm -g --defined-only "$a" 2> /dev/null | awk '{print $3}' | grep -x "$name" > /dev/null; then
      echo "$a defines $name, which ffi.rs declares only behind a feature: the harness must call it" >&2
      exit 1
    fi
  done
done < <(sed -n 's/^# \([A-Za-z0-9_]*\):.*/\1/p' "$W/functions.txt")
echo "harness: calls all $(grep -vc '^#' "$W/functions.txt") functions of $FFI_RS; not built upstream: $(grep '^#' "$W/functions.txt" | sed 's/^# //' | paste -sd';')"
echo "carry: $(du -sb "$W/carry" | cut -f1) bytes in $W/carry"
if [ -z "$DIST" ]; then
  cat "$W"/work/*.runtime | sort -u > "$W/runtime-functions.txt"
  echo "NVIDIA runtime functions the ${#SOURCES[@]} host objects call: $(grep -c . "$W/runtime-functions.txt") ($W/runtime-functions.txt)"
fi
echo "libsplit.a (host code of all ${#SOURCES[@]} objects): $(stat -c %s "$W/work/libsplit.a") bytes, zstd -19 $(zstd -19 -q -c "$W/work/libsplit.a" | wc -c)"
echo "wrote $W/jobs.tsv and $W/carry/ (bench/ffi-split/gpu.sh runs it on a GPU host)"
