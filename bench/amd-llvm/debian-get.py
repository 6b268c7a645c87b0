#!/usr/bin/env python3
"""debian-get.py SUITE PACKAGE...: downloads each package's .deb, at the version the suite's
Packages index lists, from deb.debian.org into debs/, checks it against the index's sha256 and
prints suite, package, version, size, sha256, fetch time and pool path (tab-separated)."""
import hashlib, os, re, sys, time, urllib.request

suite, want = sys.argv[1], set(sys.argv[2:])
os.makedirs("debs", exist_ok=True)
for para in open(f"Packages-{suite}").read().split("\n\n"):
    f = dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", para, re.M))
    if f.get("Package") not in want:
        continue
    want.discard(f["Package"])
    t = time.time()
    data = urllib.request.urlopen("http://deb.debian.org/debian/" + f["Filename"]).read()
    dt = time.time() - t
    got = hashlib.sha256(data).hexdigest()
    if got != f["SHA256"]:
        sys.exit(f"{f['Filename']}: sha256 {got}, the index says {f['SHA256']}")
    open("debs/" + os.path.basename(f["Filename"]), "wb").write(data)
    print(f"{suite}\t{f['Package']}\t{f['Version']}\t{len(data)}\t{got}\t{dt:.2f}s\t{f['Filename']}", flush=True)
if want:
    sys.exit(f"not in {suite}: {' '.join(sorted(want))}")
