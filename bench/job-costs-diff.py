#!/usr/bin/env python3
"""Compares two job-costs.toml files (seconds per compile job): where Σ job time went.

    git show REV:job-costs.toml > /tmp/before.toml
    python3 bench/job-costs-diff.py /tmp/before.toml job-costs.toml

Prints Σ seconds per backend/kind, per AMD arch and per module, before and after, with the
jobs only one side has counted on their own (new targets, or a changed plan).
"""
import sys
import tomllib
from collections import defaultdict


def load(path):
    with open(path, "rb") as f:
        return tomllib.load(f)["seconds"]


def group(costs, key):
    out = defaultdict(float)
    for job, s in costs.items():
        out[key(job)] += s
    return out


def table(title, before, after, key):
    b, a = group(before, key), group(after, key)
    print(f"\n| {title} | before (s) | after (s) | change |")
    print("|---|---|---|---|")
    for k in sorted(set(b) | set(a)):
        x, y = b.get(k, 0.0), a.get(k, 0.0)
        change = f"{(y - x) / x * 100:+.0f} %" if x else "new"
        print(f"| {k} | {x:.1f} | {y:.1f} | {change} |")


def main():
    before, after = load(sys.argv[1]), load(sys.argv[2])
    kind = lambda j: j.split()[0]
    table("kind", before, after, kind)
    hip = lambda c: {j: s for j, s in c.items() if kind(j) == "hsaco"}
    table("AMD arch", hip(before), hip(after), lambda j: j.split()[1])
    table("AMD module (all archs)", hip(before), hip(after), lambda j: j.split()[2])
    common = set(before) & set(after)
    sb, sa = sum(before[j] for j in common), sum(after[j] for j in common)
    print(f"\njobs in both: {len(common)}, Σ {sb:.1f} s -> {sa:.1f} s ({(sa - sb) / sb * 100:+.0f} %)")
    only = set(after) - set(before)
    print(f"jobs only after: {len(only)}, Σ {sum(after[j] for j in only):.1f} s")
    gone = set(before) - set(after)
    print(f"jobs only before: {len(gone)}, Σ {sum(before[j] for j in gone):.1f} s")
    print(f"Σ all: {sum(before.values()):.1f} s -> {sum(after.values()):.1f} s")


if __name__ == "__main__":
    main()
