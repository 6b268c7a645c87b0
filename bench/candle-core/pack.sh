#!/usr/bin/env bash
# Packs what the GPU run carries, one file per variant:
#   target/candle-proof/<variant>.tar.xz = candle-proof-<variant>/
#       all_tests          the test binary build.sh made (debug info stripped, symbols kept)
#       tests/*            candle-core's test data files (pth/npy/npz tests open tests/...)
#       cuda-tests.txt     which tests run on CUDA (from the test sources, see below)
#       info.json          variant, sha256 and sizes of the binary, what it links (NEEDED)
# xz because the GPU machine's Python can always unpack it (lzma is in the stdlib).
# Usage: pack.sh [variant...]   (default: upstream kiln)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

[ $# -gt 0 ] && VARIANTS=("$@")
mkdir -p "$PACK"

for v in "${VARIANTS[@]}"; do
  json="$RESULTS/$v.json"
  [ -f "$json" ] || { echo "$json missing: run build.sh $v first" >&2; exit 1; }
  exe=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_binary"])' "$json")
  src="$WORK/$v/candle-core-$CANDLE_CORE_VERSION"
  stage="$WORK/pack/candle-proof-$v"
  rm -rf "$stage"
  mkdir -p "$stage/tests"
  cp "$exe" "$stage/$TEST_TARGET"
  strip --strip-debug "$stage/$TEST_TARGET"
  # Data files only (not the .rs sources).
  find "$src/tests" -maxdepth 1 -type f ! -name '*.rs' ! -name '*.py' -exec cp {} "$stage/tests/" \;
  # CUDA tests: the third name of each test_device!-style invocation
  # (`x, x_cpu, x_cuda|x_gpu, x_metal`) plus #[test] fns under #[cfg(feature = "cuda")];
  # qualified with the module (= file) name, as the combined binary lists them.
  python3 - "$src/tests" > "$stage/cuda-tests.txt" <<'PY'
import os, re, sys
d = sys.argv[1]
names = set()
for f in sorted(os.listdir(d)):
    if not f.endswith(".rs") or f == "all_tests.rs":
        continue
    mod = f[:-3]
    text = open(os.path.join(d, f)).read()
    for m in re.finditer(r"(?<![$\w])(\w+_cpu)\s*,\s*(\w+)\s*,\s*(\w+_metal)\b", text):
        names.add(f"{mod}::{m.group(2)}")
    for m in re.finditer(r'#\[cfg\(feature = "cuda"\)\]\s*#\[test\]\s*(?:#\[[^\]]*\]\s*)*fn\s+(\w+)', text):
        names.add(f"{mod}::{m.group(1)}")
print("\n".join(sorted(names)))
PY
  # Listing needs the binary to start: the libcuda stub and the wheels' libs stand in here.
  LD_LIBRARY_PATH="$LINKROOT/nogpu:$CUDA13_ROOT/lib" "$stage/$TEST_TARGET" --list 2>/dev/null | sed -n 's/: test$//p' | sort > "$WORK/pack/$v-list.txt"
  missing=$(comm -23 "$stage/cuda-tests.txt" "$WORK/pack/$v-list.txt" | grep -v '^cutile_tests::' || true)
  [ -z "$missing" ] || { echo "$v: CUDA tests from the sources that the binary does not list: $missing" >&2; exit 1; }
  comm -12 "$stage/cuda-tests.txt" "$WORK/pack/$v-list.txt" > "$stage/cuda-tests.txt.new"
  mv "$stage/cuda-tests.txt.new" "$stage/cuda-tests.txt"
  python3 - "$v" "$exe" "$stage/$TEST_TARGET" "$json" > "$stage/info.json" <<'PY'
import hashlib, json, os, sys
v, exe, stripped, j = sys.argv[1:]
r = json.load(open(j))
print(json.dumps({
    "variant": v,
    "built_binary_bytes": os.path.getsize(exe),
    "stripped_binary_bytes": os.path.getsize(stripped),
    "stripped_sha256": hashlib.sha256(open(stripped, "rb").read()).hexdigest(),
    "needed": r["needed"],
}, indent=2))
PY
  out="$PACK/$v.tar.xz"
  tar -C "$WORK/pack" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "candle-proof-$v" \
    | xz -9e -T2 > "$out.part"
  mv "$out.part" "$out"
  sha256sum "$out" | cut -d' ' -f1 > "$out.sha256"
  python3 - "$v" "$out" "$stage" "$WORK/pack/$v-list.txt" > "$RESULTS/$v-pack.json" <<'PY'
import json, os, sys
v, out, stage, listing = sys.argv[1:]
info = json.load(open(os.path.join(stage, "info.json")))
info.update({
    "carried_file": os.path.relpath(out, os.path.join(os.path.dirname(out), "..", "..")),
    "carried_bytes": os.path.getsize(out),
    "carried_sha256": open(out + ".sha256").read().strip(),
    "listed": sum(1 for _ in open(listing)),
    "cuda_listed": sum(1 for _ in open(os.path.join(stage, "cuda-tests.txt"))),
})
print(json.dumps(info, indent=2))
PY
  echo "$v: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["carried_file"], d["carried_bytes"], "bytes;", d["listed"], "tests listed,", d["cuda_listed"], "on CUDA; binary", d["built_binary_bytes"], "->", d["stripped_binary_bytes"], "stripped")' "$RESULTS/$v-pack.json")"
done
total=0
for v in "${VARIANTS[@]}"; do total=$((total + $(stat -c %s "$PACK/$v.tar.xz"))); done
echo "carried in total: $total bytes ($((total / 1048576)) MiB; the limit per device call is 64 MiB)"
