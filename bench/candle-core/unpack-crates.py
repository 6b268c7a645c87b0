#!/usr/bin/env python3
"""Unpacks kiln's packaged crates for a [patch.crates-io] and prints that section.

Usage: unpack-crates.py DEST CRATES_DIR [CRATES_DIR...]
Each CRATES_DIR is a dist folder's crates/ (crates.json beside the .crate files); every
.crate is checked against crates.json's sha256 before it is unpacked into DEST, so the
build sees exactly what a registry would serve. A crate listed in two folders (the
candle set's CUDA runtime crate, which the flash-attn set links and does not republish)
is unpacked once.
"""
import hashlib, json, os, shutil, sys, tarfile

dest, dirs = sys.argv[1], sys.argv[2:]
shutil.rmtree(dest, ignore_errors=True)
os.makedirs(dest)
print("\n# Added by kiln's bench: kiln's packaged crates, unpacked from")
for d in dirs:
    print(f"# {d} (sha256 checked against crates.json).")
print("[patch.crates-io]")
seen = set()
for crates_dir in dirs:
    for e in json.load(open(os.path.join(crates_dir, "crates.json"))):
        if e["name"] in seen:
            continue
        seen.add(e["name"])
        path = os.path.join(os.path.dirname(crates_dir), e["file"])
        data = open(path, "rb").read()
        got = hashlib.sha256(data).hexdigest()
        if got != e["sha256"]:
            sys.exit(f"{path}: sha256 {got}, crates.json says {e['sha256']}")
        with tarfile.open(path, "r:gz") as t:
            t.extractall(dest, filter="data")
        print(f'{e["name"]} = {{ path = "{dest}/{e["name"]}-{e["version"]}" }}  # sha256 {got}')
