#!/usr/bin/env python3
"""Counts for docs from run-suite.sh's output (libtest's plain format).

  parse.py --out DIR VARIANT            -> JSON counts for each run of VARIANT
  parse.py --out DIR --compare A B      -> markdown: both variants' counts, and every
                                           test whose outcome differs between them
  parse.py --out DIR --markdown A [B..] -> markdown table of the counts only

Counts per run: listed (the binary's --list), passed, failed, ignored, not reported
(listed but no result line: a crash or a hang cut the run short); the same for the
CUDA tests (cuda-tests-<variant>.txt, packed with the binary: the `_cuda`/`_gpu`
instances of test_device! and the #[cfg(feature = "cuda")] tests).
"""
import argparse
import json
import os
import re
import sys

# libtest writes `#[should_panic]` tests as `test NAME - should panic ... ok`.
RESULT = re.compile(r"^test (\S+)(?: - should panic)? \.\.\. (ok|FAILED|ignored)\b")
SUMMARY = re.compile(r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; (\d+) filtered out(?:; finished in ([\d.]+)s)?")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def listed(out, v):
    text = read(os.path.join(out, f"{v}-list.txt")) or ""
    return [l[: -len(": test")] for l in text.splitlines() if l.endswith(": test")]


def run_counts(out, v, run, names, cuda):
    text = read(os.path.join(out, f"{v}-{run}.txt"))
    if text is None:
        return None
    outcome = {}
    for line in text.splitlines():
        m = RESULT.match(line)
        if m:
            outcome[m.group(1)] = {"ok": "passed", "FAILED": "failed", "ignored": "ignored"}[m.group(2)]
    summary = None
    for line in text.splitlines():
        m = SUMMARY.match(line)
        if m:
            summary = {"result": m.group(1), "passed": int(m.group(2)), "failed": int(m.group(3)),
                       "ignored": int(m.group(4)), "finished_in_s": float(m.group(7)) if m.group(7) else None}

    def count(subset):
        c = {"listed": len(subset), "passed": 0, "failed": 0, "ignored": 0, "not_reported": 0}
        for n in subset:
            c[outcome.get(n, "not_reported")] += 1
        return c

    res = {"all": count(names), "cuda": count([n for n in names if n in cuda]),
           "summary_line": summary, "outcome": outcome}
    sec = read(os.path.join(out, f"{v}-{run}.seconds"))
    res["wall_s"] = float(sec) if sec else None
    rc = read(os.path.join(out, f"{v}-{run}.rc"))
    res["rc"] = int(rc) if rc else None
    res["failed_tests"] = sorted(n for n, o in outcome.items() if o == "failed")
    res["ignored_tests"] = sorted(n for n, o in outcome.items() if o == "ignored")
    res["unknown_results"] = sorted(set(outcome) - set(names))
    if summary and (summary["passed"], summary["failed"], summary["ignored"]) != (
            res["all"]["passed"], res["all"]["failed"], res["all"]["ignored"]):
        res["warning"] = "the summary line and the per-test lines disagree"
    return res


def variant(out, v):
    names = listed(out, v)
    cuda = set((read(os.path.join(out, f"cuda-tests-{v}.txt")) or "").split())
    runs = {}
    for run in ("cold", "warm", "local"):
        r = run_counts(out, v, run, names, cuda)
        if r is not None:
            runs[run] = r
    return {"variant": v, "listed": len(names), "cuda_listed": len([n for n in names if n in cuda]), "runs": runs}


def table(results):
    rows = ["| variant | run | listed | passed | failed | ignored | not reported | CUDA listed | CUDA passed | CUDA failed | wall s | libtest's time s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for run, c in r["runs"].items():
            a, g = c["all"], c["cuda"]
            fin = c["summary_line"]["finished_in_s"] if c["summary_line"] else "-"
            rows.append(f"| {r['variant']} | {run} | {a['listed']} | {a['passed']} | {a['failed']} | {a['ignored']} | "
                        f"{a['not_reported']} | {g['listed']} | {g['passed']} | {g['failed']} | {c['wall_s']} | {fin} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    results = [variant(a.out, v) for v in a.variants]
    if not a.compare and not a.markdown:
        for r in results:
            for c in r["runs"].values():
                c.pop("outcome")
        print(json.dumps(results if len(results) > 1 else results[0], indent=2))
        return
    print(table(results))
    if a.compare:
        if len(results) != 2:
            sys.exit("--compare takes two variants")
        x, y = results
        print()
        sx, sy = set(listed(a.out, x["variant"])), set(listed(a.out, y["variant"]))
        if sx != sy:
            print(f"Listed only by {x['variant']}: {sorted(sx - sy)}; only by {y['variant']}: {sorted(sy - sx)}")
        for run in ("cold", "warm", "local"):
            if run in x["runs"] and run in y["runs"]:
                ox, oy = x["runs"][run]["outcome"], y["runs"][run]["outcome"]
                diff = sorted(n for n in sx | sy if ox.get(n, "not reported") != oy.get(n, "not reported"))
                if diff:
                    print(f"{run} run, outcomes that differ ({x['variant']} vs {y['variant']}):")
                    for n in diff:
                        print(f"- `{n}`: {ox.get(n, 'not reported')} vs {oy.get(n, 'not reported')}")
                else:
                    print(f"{run} run: every test has the same outcome in both variants.")
        for r in results:
            for run, c in r["runs"].items():
                if c["failed_tests"]:
                    print(f"\n{r['variant']} {run}: failed: " + ", ".join(f"`{n}`" for n in c["failed_tests"]))
                if c["ignored_tests"]:
                    print(f"\n{r['variant']} {run}: ignored: " + ", ".join(f"`{n}`" for n in c["ignored_tests"]))


if __name__ == "__main__":
    main()
