#!/usr/bin/env python3
"""build.sh's result: <variant>.json from one variant's build records.

Usage: result.py variant segments timefile nvcclog test_binary needed load0 load1 nvcc_seen threads
(needed: the binary's NEEDED libraries as a JSON list, bench/lib.sh's needed_libs; build.sh
calls it at a build's end; it can be run again on the same records.)"""
import json, os, subprocess, sys
v, segf, timef, nvcclog, exe, needed, load0, load1, nvcc_seen, threads = sys.argv[1:]
t = open(timef).read().split()
# An interrupted segment has a start only: it counts up to its last finished nvcc before the
# next segment's start (later compiles belong to the next segment).
marks = [l.split() for l in open(nvcclog + ".cached")] if os.path.exists(nvcclog + ".cached") else []
ends = [float(m[0]) for m in marks if m[1:2] == ["compiled"]]
lines = [[float(x) for x in line.split()] for line in open(segf) if line.strip()]
segments = []
for i, f in enumerate(lines):
    if len(f) == 2:
        segments.append({"start": int(f[0]), "wall_s": round(f[1] - f[0], 1)})
    else:
        until = lines[i + 1][0] if i + 1 < len(lines) else float("inf")
        done = [e for e in ends if f[0] <= e < until]
        segments.append({"start": int(f[0]), "wall_s": round(max(done) - f[0], 1) if done else 0.0, "interrupted": True})
wall = sum(s["wall_s"] for s in segments)
reused = sum(1 for m in marks if m[1:2] == ["cached"])
runs = []
for line in open(nvcclog):
    f = line.split(" ", 4)
    if len(f) == 5 and ".cu" in f[4]:
        cu = [a for a in f[4].split() if a.endswith(".cu")]
        runs.append({"file": os.path.basename(cu[-1]) if cu else "?", "wall_s": float(f[0]),
                     "cpu_s": round(float(f[1]) + float(f[2]), 1), "peak_mib": int(f[3]) // 1024})
def out(cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
print(json.dumps({
    "variant": v, "wall_s": round(float(wall), 1), "segments": segments, "nvcc_objects_reused": reused,
    "user_s_last_segment": float(t[1]), "sys_s_last_segment": float(t[2]),
    "nvcc_on_path": nvcc_seen, "cudaforge_threads": threads or None, "nvcc_compiles": len(runs),
    "nvcc_cpu_s": round(sum(r["cpu_s"] for r in runs), 1), "nvcc": runs,
    "test_binary": exe, "test_binary_bytes": os.path.getsize(exe),
    "needed": json.loads(needed),
    "loadavg_start": float(load0), "loadavg_end": float(load1), "nproc": os.cpu_count(),
    "rustc": out(["rustc", "--version"]), "profile": "release, default -j, no network (unshare -n)",
}, indent=2))
