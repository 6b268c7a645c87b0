#!/usr/bin/env bash
# Packs what the GPU run carries, in the layout bench/candle-core/run-suite.sh reads
# (KILN_PROOF_NAME=fa-proof, KILN_PROOF_BIN=flash_attn_tests):
#   <v>.tar.xz = fa-proof-<v>/
#       flash_attn_tests   the test binary build.sh made (debug info stripped)
#       cuda-tests.txt     every test it lists (each of upstream's tests runs on CUDA)
#       info.json          variant, sha256 and sizes of the binary, what it links
# A binary of fat cubins is far over one device call's 64 MiB, so the archive is cut into
# pieces of at most $FA_PIECE_MIB MiB, target/fa-proof/c<N>/<v>.tar.xz.<NN>, one folder per
# call (carry c1 in the first call, c2 in the next, ...: a warm machine keeps what the
# earlier calls carried); join.sh puts them back together there and checks the sha256.
# Usage: pack.sh [variant...]
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
[ $# -gt 0 ] && FA_VARIANTS=("$@")
PIECE_MIB="${FA_PIECE_MIB:-60}"
rm -rf "$FA_PACK"; mkdir -p "$FA_PACK"
stage_root="$FA_WORK/pack"
for v in "${FA_VARIANTS[@]}"; do
  json="$FA_RESULTS/$v.json"
  [ -f "$json" ] || { echo "$json missing: run build.sh $v first" >&2; exit 1; }
  exe=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_binary"])' "$json")
  stage="$stage_root/fa-proof-$v"
  rm -rf "$stage"; mkdir -p "$stage"
  cp "$exe" "$stage/$FA_TEST"
  strip --strip-debug "$stage/$FA_TEST"
  LD_LIBRARY_PATH="$LINKROOT/nogpu:$CUDA13_ROOT/lib" "$stage/$FA_TEST" --list 2>/dev/null | sed -n 's/: test$//p' | sort > "$stage/cuda-tests.txt"
  [ -s "$stage/cuda-tests.txt" ] || { echo "$v: the test binary lists no tests" >&2; exit 1; }
  python3 - "$v" "$exe" "$stage/$FA_TEST" "$json" > "$stage/info.json" <<'PY'
import hashlib, json, os, sys
v, exe, stripped, j = sys.argv[1:]
r = json.load(open(j))
print(json.dumps({"variant": v, "built_binary_bytes": os.path.getsize(exe), "stripped_binary_bytes": os.path.getsize(stripped),
                  "stripped_sha256": hashlib.sha256(open(stripped, "rb").read()).hexdigest(), "needed": r["needed"]}, indent=2))
PY
  tar -C "$stage_root" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "fa-proof-$v" \
    | xz -6 -T2 > "$FA_PACK/$v.tar.xz.part"
  mv "$FA_PACK/$v.tar.xz.part" "$FA_PACK/$v.tar.xz"
  sha256sum "$FA_PACK/$v.tar.xz" | cut -d' ' -f1 > "$FA_PACK/$v.tar.xz.sha256"
  echo "$v: $(stat -c %s "$FA_PACK/$v.tar.xz") bytes packed; $(wc -l < "$stage/cuda-tests.txt") tests listed; binary $(stat -c %s "$exe") -> $(stat -c %s "$stage/$FA_TEST") stripped"
done
# Pieces, filled into call folders of at most PIECE_MIB MiB each.
python3 - "$FA_PACK" "$PIECE_MIB" "${FA_VARIANTS[@]}" <<'PY'
import os, sys
pack, mib, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
limit = mib << 20
call, used = 1, 0
for v in variants:
    src = os.path.join(pack, f"{v}.tar.xz")
    data = open(src, "rb")
    n = 0
    while True:
        room = limit - used
        if room < (1 << 20):
            call, used, room = call + 1, 0, limit
        chunk = data.read(room)
        if not chunk:
            break
        d = os.path.join(pack, f"c{call}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{v}.tar.xz.{n:02d}"), "wb") as f:
            f.write(chunk)
        n, used = n + 1, used + len(chunk)
    os.remove(src)
# Each call's folder holds the sha256 files, whichever is carried first.
calls = [d for d in sorted(os.listdir(pack)) if os.path.isdir(os.path.join(pack, d))]
for v in variants:
    sha = open(os.path.join(pack, f"{v}.tar.xz.sha256")).read()
    for d in calls:
        open(os.path.join(pack, d, f"{v}.sha256"), "w").write(sha)
    os.remove(os.path.join(pack, f"{v}.tar.xz.sha256"))
for d in sorted(os.listdir(pack)):
    p = os.path.join(pack, d)
    if os.path.isdir(p):
        print(d, sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p)), "bytes:", " ".join(sorted(os.listdir(p))))
PY
