#!/usr/bin/env python3
"""kernels.py DIR ARCH=REF_MACH...: for each c21-<module>-<arch>.hsaco in DIR, its ELF mach and
kernel list (`.kd` symbols, by binutils' readelf) against the newest code object of the same module
in kiln's compile cache whose e_flags mach is REF_MACH (hex: 0x4c gfx942, 0x41 gfx1100), i.e. what
the pinned clang 17 builds. Example: kernels.py work gfx950=0x4c gfx1201=0x41 gfx1200=0x41"""
import glob, os, re, struct, subprocess, sys

cache = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kiln")


def mach(p):
    return struct.unpack_from("<I", open(p, "rb").read(64), 48)[0] & 0xFF


def kernels(p):
    out = subprocess.run(["readelf", "-sW", p], capture_output=True, text=True, check=True).stdout
    return sorted(w[-1] for w in (l.split() for l in out.splitlines()) if w and w[-1].endswith(".kd"))


d = sys.argv[1]
for spec in sys.argv[2:]:
    arch, ref = spec.split("=")
    ref = int(ref, 16)
    for p in sorted(glob.glob(f"{d}/c21-*-{arch}.hsaco")):
        mod = re.match(rf"c21-(.+)-{arch}\.hsaco", os.path.basename(p)).group(1)
        refs = [q for q in glob.glob(f"{cache}/objects/*/*/{mod}.hsaco") if mach(q) == ref]
        if not refs:
            print(f"{arch} {mod}: mach {mach(p):#x}, {len(kernels(p))} kernels; no cached reference")
            continue
        newest = max(refs, key=os.path.getmtime)
        k, r = kernels(p), kernels(newest)
        print(f"{arch} {mod}: mach {mach(p):#x}, {len(k)} kernels; reference {ref:#x} {len(r)}: {'same list' if k == r else 'DIFFERENT'}")
