#!/usr/bin/env python3
"""Samples every nvcc process tree on this machine and prints one JSON line per nvcc
run when it ends: the .cu it compiled, its wall time, CPU time (user + system of nvcc
and every process under it: cudafe++, cicc, ptxas, fatbinary, gcc) and the largest
resident set of any one of those processes (VmHWM, the kernel's own high-water mark).

kiln runs nvcc in a bubblewrap sandbox whose pid-1 does not hand its children's usage
back to the caller, so this reads /proc from outside instead. It polls every PERIOD
seconds: a process's last fraction of a period of CPU is not seen (about 10 processes
per nvcc run, so at most a few seconds of one run's several minutes), and a memory
peak reached in a process's last period is missed only if it also exits in it.

Usage: sample.py OUT.jsonl [PERIOD]   (runs until killed; SIGTERM flushes and exits)
"""
import json, os, signal, sys, time

out = open(sys.argv[1], "a", buffering=1)
period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.25
tick = os.sysconf("SC_CLK_TCK")
stop = False
signal.signal(signal.SIGTERM, lambda *_: globals().__setitem__("stop", True))

def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        comm = s[s.index("(") + 1 : s.rindex(")")]
        rest = s[s.rindex(")") + 2 :].split()
        ppid, utime, stime = int(rest[1]), int(rest[11]), int(rest[12])
        hwm = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
        return comm, ppid, (utime + stime) / tick, hwm
    except (OSError, ValueError, IndexError):
        return None

runs = {}  # nvcc pid -> {"file", "start", "cpu": {pid: s}, "peak_kib"}
while not stop:
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat(int(d))
            if st:
                procs[int(d)] = st
    for pid, (comm, ppid, cpu, hwm) in procs.items():
        if comm == "nvcc" and pid not in runs:
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            cu = [a.decode() for a in argv if a.endswith(b".cu")]
            arch = [a.decode() for a in argv if a.startswith(b"-gencode") or a.startswith(b"arch=") or a.startswith(b"--gpu-architecture")]
            runs[pid] = {"file": cu[-1] if cu else "?", "arch": " ".join(arch), "start": time.time(), "cpu": {}, "peak_kib": 0}
    for pid, (comm, ppid, cpu, hwm) in procs.items():
        p, seen = pid, 0
        while p in procs and seen < 64:
            if p in runs:
                r = runs[p]
                r["cpu"][pid] = max(cpu, r["cpu"].get(pid, 0.0))
                r["peak_kib"] = max(r["peak_kib"], hwm)
                break
            p, seen = procs[p][1], seen + 1
    for pid in [p for p in runs if p not in procs]:
        r = runs.pop(pid)
        out.write(json.dumps({"file": r["file"], "arch": r["arch"], "wall_s": round(time.time() - r["start"], 1),
                              "cpu_s": round(sum(r["cpu"].values()), 1), "peak_mib": r["peak_kib"] // 1024}) + "\n")
    time.sleep(period)
