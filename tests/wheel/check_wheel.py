"""What a wheel of qdp holds, read from the zip alone:

    check_wheel.py WHEEL SOURCE_DIR [--repaired]

- every file of the Python package (client/python/qdp, caches left out) under qdp/, byte for
  byte, with qdp/_bin/qdpd, qdp/_bin/qdpctl and qdp/_lib/libqdp.so.0, executable, and nothing
  else: no .data folder (nothing of the system's layout); a repaired wheel also holds the
  libraries grafted into qdp/_lib, executable, and only there;
- its METADATA version is meson.build's project version, its entry points are the console scripts
  qdpd and qdpctl of qdp._tools, and its RECORD lists every other file with its sha256 and size;
- a repaired wheel is tagged py3-none-linux_x86_64, in its name and its WHEEL file.
Prints one line per check; exits 1 when any fails."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

BINARIES = ("qdp/_bin/qdpd", "qdp/_bin/qdpctl", "qdp/_lib/libqdp.so.0")


def main(wheel: Path, source: Path, repaired: bool) -> int:
    fails: List[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"{'ok' if ok else 'FAIL'}: {what}")
        if not ok:
            fails.append(what)

    m = re.search(r"project\([^)]*?version\s*:\s*'([^']+)'", (source / "meson.build").read_text(),
                  re.S)
    assert m, "meson.build's project() has no version"
    version = m.group(1)
    pkg = source / "client" / "python" / "qdp"
    want = {f"qdp/{p.relative_to(pkg).as_posix()}": p.read_bytes() for p in pkg.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}

    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        info = f"qdp-{version}.dist-info"
        data = {n: z.read(n) for n in names}
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}

    meta = [n for n in names if n.startswith(info + "/")]
    body = [n for n in names if n not in meta]
    check(all(want[n] == data.get(n) for n in want),
          f"every file of client/python/qdp is in qdp/ as it is in the source ({len(want)})")
    extra = sorted(set(body) - set(want) - set(BINARIES))
    if repaired:
        grafted = [n for n in extra if re.fullmatch(r"qdp/_lib/lib[^/]+\.so[.\d]*", n)]
        check(bool(grafted), f"grafted libraries in qdp/_lib: {len(grafted)}")
        extra = sorted(set(extra) - set(grafted))
    else:
        grafted = []
    check(all(n in body for n in BINARIES), f"the binaries are there: {', '.join(BINARIES)}")
    check(not extra, f"nothing else outside the metadata: {extra or 'none'}")
    check(all(modes.get(n, 0) & 0o111 for n in (*BINARIES, *grafted)),
          "the binaries and libraries are executable")
    check(not any(".data/" in n for n in names), "no .data folder (nothing of the system layout)")

    fields = dict(l.split(": ", 1) for l in data[f"{info}/METADATA"].decode().splitlines()
                  if ": " in l)
    check(fields.get("Version") == version, f"METADATA's version is meson.build's {version}")
    scripts = data.get(f"{info}/entry_points.txt", b"").decode()
    check("qdpd = qdp._tools:qdpd" in scripts and "qdpctl = qdp._tools:qdpctl" in scripts,
          "the console scripts qdpd and qdpctl run qdp._tools")

    record: Dict[str, List[str]] = {r[0]: r for r in csv.reader(
        io.StringIO(data[f"{info}/RECORD"].decode())) if r}
    bad = []
    for n in names:
        if n == f"{info}/RECORD":
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data[n]).digest()).rstrip(b"=").decode()
        if record.get(n, [None, None, None])[1:] != [f"sha256={digest}", str(len(data[n]))]:
            bad.append(n)
    check(not bad and set(record) == set(names),
          f"RECORD has every file's sha256 and size: {bad or 'yes'}")

    tags = [l.split(": ", 1)[1] for l in data[f"{info}/WHEEL"].decode().splitlines()
            if l.startswith("Tag: ")]
    print(f"tag: {', '.join(tags)} ({wheel.name}, {wheel.stat().st_size / 2**20:.1f} MiB)")
    if repaired:
        check(tags == ["py3-none-linux_x86_64"] and wheel.name.endswith(
            "-py3-none-linux_x86_64.whl"), "tagged py3-none-linux_x86_64, in WHEEL and its name")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), "--repaired" in sys.argv[3:]))
