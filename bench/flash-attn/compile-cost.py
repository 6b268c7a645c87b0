#!/usr/bin/env python3
"""What `cargo xtask dist --set flash-attn` cost, per file and in all, from sample.py's
records of one such build: prints a Markdown report (docs/results/flash-attn/compile-cost.md).

Keeps the nvcc runs of the set's own kernels (`/kiln/src/kernels/*.cu` inside kiln's sandbox,
both sms in one nvcc: `-gencode sm_80 -gencode sm_90`); sample.py also sees every other nvcc on
the machine (tests, other builds), which are left out here and counted in the output. Where a
file was compiled more than once (a test compiling flash_api.cu again), the first run is kept:
the build's own (a run killed mid-way is never recorded: sample.py dies with it). A run whose
wall time is over 1.15x its CPU time shared the cores with other work: its CPU time stands, its
wall does not, and the report marks it.

Usage: compile-cost.py SAMPLES.jsonl [EXPECTED_FILES] [KEPT.jsonl]
  EXPECTED_FILES: 53 for flash-attn; KEPT.jsonl: the records kept, one per file, written there
  (docs/results/flash-attn/nvcc.jsonl: the raw figures behind the report).
"""
import json
import os
import sys

samples = sys.argv[1]
expected = int(sys.argv[2]) if len(sys.argv) > 2 else 53
kept_path = sys.argv[3] if len(sys.argv) > 3 else None
BOTH = ("compute_80", "compute_90")

kept, others = {}, 0
for line in open(samples):
    r = json.loads(line)
    f, arch = r["file"], r["arch"]
    if not (f.startswith("/kiln/src/kernels/") and all(a in arch for a in BOTH)):
        others += 1
        continue
    name = f.rsplit("/", 1)[1]
    if name in kept:
        others += 1
    else:
        kept[name] = r

rows = sorted(kept.items(), key=lambda kv: -kv[1]["cpu_s"])
if kept_path:
    with open(kept_path, "w") as f:
        for name in sorted(kept):
            f.write(json.dumps(kept[name]) + "\n")
cpu = sum(r["cpu_s"] for _, r in rows)
shared = [n for n, r in rows if r["wall_s"] > 1.15 * r["cpu_s"]]
peak = max((r["peak_mib"] for _, r in rows), default=0)

print(f"# candle-flash-attn 0.11.1 through kiln: the compile cost of each file\n")
print(f"From `{samples.rsplit('/', 1)[-1]}` (bench/flash-attn/sample.py during `cargo xtask dist --set "
      f"flash-attn`), printed by bench/flash-attn/compile-cost.py.\n")
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"- machine (this report is printed where the samples were taken): {os.cpu_count()} x {model}")
print(f"- files measured: {len(rows)} of {expected}" + ("" if len(rows) == expected else " (the build is not complete)"))
print(f"- nvcc CPU time, all measured files, sm_80 + sm_90: **{cpu:,.0f} s** ({cpu / 3600:.2f} CPU-hours)")
print(f"- so, for these files, on 2 idle cores running 2 nvcc at a time: about **{cpu / 2 / 60:,.0f} min** of wall")
print(f"- largest resident set of any one process of one nvcc: **{peak / 1024:.1f} GiB** (2 at once: "
      f"{2 * peak / 1024:.1f} GiB)")
print(f"- runs that shared the cores with other work (wall > 1.15x CPU; their CPU time stands): {len(shared)}")
print(f"- nvcc runs left out (other builds and tests on the machine, a file's later reruns): {others}\n")
print("| file | CPU s | wall s | peak MiB |")
print("|---|---:|---:|---:|")
for n, r in rows:
    mark = " (shared)" if n in shared else ""
    print(f"| {n} | {r['cpu_s']:.1f} | {r['wall_s']:.1f}{mark} | {r['peak_mib']} |")
