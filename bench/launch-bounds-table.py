#!/usr/bin/env python3
"""Prints docs/launch-bounds.md's per-module table for some AMD archs, from a dist manifest.

    python3 bench/launch-bounds-table.py target/dist/manifest.json gfx1200 gfx1201 gfx950

Per module and arch: the largest VGPR and SGPR counts, the largest VGPR spill and how many
kernels spill VGPRs, and the largest scratch (bytes per lane), read from each artifact's
`resources` (kiln-validate reads them from the code object's metadata). The bound column is
the module's `.max_flat_workgroup_size` (pins.toml [flags.hip_max_threads_per_block]).
"""
import json
import sys


def main():
    manifest, archs = sys.argv[1], sys.argv[2:]
    arts = [a for a in json.load(open(manifest))["artifacts"] if a["kind"] == "hsaco"]
    modules = sorted({a["module"] for a in arts})
    head = ["module", "kernels", "bound"]
    for g in archs:
        head += [f"{g} max VGPR / SGPR", f"{g} VGPR spill (max, kernels)", f"{g} scratch max (B)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for m in modules:
        row, kernels, bound = [m], None, None
        for g in archs:
            art = next((a for a in arts if a["module"] == m and a["arch"] == g), None)
            if art is None:
                sys.exit(f"{manifest} has no {g} code object for {m}")
            r = art["resources"]
            kernels = len(r)
            bound = max(k["max_flat_workgroup_size"] for k in r)
            spills = [k["vgpr_spills"] for k in r]
            row += [
                f'{max(k["vgprs"] for k in r)} / {max(k["sgprs"] for k in r)}',
                f"{max(spills)}, {sum(1 for s in spills if s)}",
                str(max(k["scratch_bytes"] for k in r)),
            ]
        print("| " + " | ".join([row[0], str(kernels), str(bound)] + row[1:]) + " |")


if __name__ == "__main__":
    main()
