#!/usr/bin/env python3
"""debian-find.py REGEX [SUITE...]: every binary package of Debian's main/amd64 whose name fully
matches REGEX, per suite: suite, package, version, .deb size, source. Reads Packages-<suite>
in the current folder (eval.sh downloads them from deb.debian.org)."""
import re, sys

pat = re.compile(sys.argv[1])
suites = sys.argv[2:] or ["trixie", "trixie-backports", "forky", "sid", "experimental"]
for s in suites:
    for para in open(f"Packages-{s}").read().split("\n\n"):
        f = dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", para, re.M))
        if "Package" in f and pat.fullmatch(f["Package"]):
            print(f"{s:17} {f['Package']:28} {f['Version']:40} {f['Size']:>10} {f.get('Source', '')}")
