#!/usr/bin/env bash
# Local check, no GPU: runs the PACKED binaries (target/candle-proof/<v>.tar.xz) through
# run-suite.sh exactly as the GPU run will, except that libcuda.so.1 is setup.sh's stub
# (every entry point answers CUDA_ERROR_NO_DEVICE, as a driver with no GPU does) and the
# CUDA 13 libraries are the wheels'. Expected and checked:
#   - every test that is not a CUDA test passes (or is ignored upstream);
#   - every CUDA test fails, at device creation, with CUDA_ERROR_NO_DEVICE;
#   - with no libcuda.so.1 at all the binary cannot start (candle-core's cudarc links
#     libcuda dynamically; that is candle-core's choice, the same in both variants).
# Results: $WORK/sanity/ (+ sanity.md, the summary for the docs).
# Usage: sanity.sh [variant...]   (default: upstream kiln)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

[ $# -gt 0 ] && VARIANTS=("$@")
S="$WORK/sanity"
rm -rf "$S"
mkdir -p "$S"
status=0
for v in "${VARIANTS[@]}"; do
  OUT="$S" THREADS=2 WARM=0 KILN_PROOF_UNPACK="$S/unpacked" \
    KILN_PROOF_LIBDIRS="$LINKROOT/nogpu:$CUDA13_ROOT/lib" \
    bash "$HERE/run-suite.sh" "$v" || true
  for f in "$S/$v-cold".*; do mv "$f" "${f/-cold./-local.}"; done
  # Without any libcuda.so.1:
  rc=0
  LD_LIBRARY_PATH="$CUDA13_ROOT/lib" "$S/unpacked/candle-proof-$v/all_tests" --list > "$S/$v-nolibcuda.txt" 2>&1 || rc=$?
  echo $rc > "$S/$v-nolibcuda.rc"
  python3 - "$S" "$v" "$HERE" <<'PY' || status=1
import json, re, subprocess, sys
S, v, here = sys.argv[1:]
r = json.loads(subprocess.run([sys.executable, f"{here}/parse.py", "--out", S, v], capture_output=True, text=True, check=True).stdout)
run = r["runs"]["local"]
text = open(f"{S}/{v}-local.txt", errors="replace").read()
blocks = dict(re.findall(r"^---- (\S+) stdout ----\n(.*?)(?=^---- |^failures:\s*$)", text, re.M | re.S))
cuda = set(open(f"{S}/cuda-tests-{v}.txt").read().split())
listed = [l[:-6] for l in open(f"{S}/{v}-list.txt").read().splitlines() if l.endswith(": test")]
problems = []
cpu_failed = [n for n in run["failed_tests"] if n not in cuda]
if cpu_failed:
    problems.append(f"CPU tests failed: {cpu_failed}")
cuda_not_failed = sorted(n for n in cuda if n not in run["failed_tests"])
if cuda_not_failed:
    problems.append(f"CUDA tests that did not fail without a GPU: {cuda_not_failed}")
no_device = [n for n in cuda if "CUDA_ERROR_NO_DEVICE" in blocks.get(n, "")]
other = sorted(n for n in cuda if n not in no_device)
if other:
    problems.append(f"CUDA tests that failed otherwise than with CUDA_ERROR_NO_DEVICE: {other}")
nolib = open(f"{S}/{v}-nolibcuda.txt", errors="replace").read().strip()
a = run["all"]
summary = {
    "variant": v, "listed": a["listed"], "passed": a["passed"], "failed": a["failed"], "ignored": a["ignored"],
    "not_reported": a["not_reported"], "cuda_listed": run["cuda"]["listed"], "cuda_failed_no_device": len(no_device),
    "ignored_tests": run["ignored_tests"], "wall_s": run["wall_s"], "problems": problems,
    "no_libcuda": nolib.splitlines()[-1] if nolib else "",
    "example_cuda_failure": next((blocks[n].strip() for n in sorted(no_device)), ""),
}
json.dump(summary, open(f"{S}/{v}-sanity.json", "w"), indent=2)
print(json.dumps(summary, indent=2))
sys.exit(1 if problems else 0)
PY
done
exit $status
