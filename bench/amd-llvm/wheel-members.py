#!/usr/bin/env python3
"""wheel-members.py PROJECT REGEX [OUTDIR]: the first x86_64 (or pure) wheel of PROJECT's latest
release on PyPI: its name, size and sha256 (PyPI's JSON API), and every member whose path matches
REGEX with its size, read with HTTP range requests (the zip's central directory, then only those
members: no 285 MB download). With OUTDIR, the matching members are written there."""
import io, json, os, re, sys, time, urllib.request, zipfile


class Ranged(io.RawIOBase):
    def __init__(self, url):
        self.url, self.pos = url, 0
        head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"))
        self.size = int(head.headers["Content-Length"])

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, off, whence=0):
        self.pos = {0: off, 1: self.pos + off, 2: self.size + off}[whence]
        return self.pos

    def readinto(self, buf):
        if self.pos >= self.size:
            return 0
        end = min(self.size, self.pos + len(buf)) - 1
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        data = urllib.request.urlopen(req).read()
        buf[: len(data)] = data
        self.pos += len(data)
        return len(data)


name, pat = sys.argv[1], re.compile(sys.argv[2])
meta = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json"))
files = [u for u in meta["urls"] if "x86_64" in u["filename"] or u["filename"].endswith("-any.whl")]
if not files:
    sys.exit(f"{name} {meta['info']['version']}: no x86_64 or pure wheel: {[u['filename'] for u in meta['urls']]}")
w = files[0]
# Some PyPI proxies answer with relative links; the files live on files.pythonhosted.org.
url = re.sub(r"^(\.\./)+packages/packages/", "https://files.pythonhosted.org/packages/", w["url"])
print(name, meta["info"]["version"], w["filename"], w["size"], w["digests"]["sha256"], url)
z = zipfile.ZipFile(io.BufferedReader(Ranged(url), buffer_size=1 << 20))
members = [i for i in z.infolist() if pat.search(i.filename)]
for i in members:
    print(f"  {i.file_size:>10} {i.filename}")
if len(sys.argv) > 3:
    os.makedirs(sys.argv[3], exist_ok=True)
    t = time.time()
    for i in members:
        open(os.path.join(sys.argv[3], os.path.basename(i.filename)), "wb").write(z.read(i))
    print(f"  extracted {len(members)} members by range requests in {time.time() - t:.1f}s")
