#!/usr/bin/python3
"""Makes a wheel of qdp built by `pip wheel .` run on Linux machines other than the one it was
built on: the shared libraries its binaries need that a target cannot be expected to have are
grafted into the package, and the wheel is tagged for any Python 3.

    python3 deploy/repair-wheel.py dist/qdp-0.7.0-cp311-cp311-linux_x86_64.whl [-w DIR]

writes DIR/qdp-0.7.0-py3-none-linux_x86_64.whl (DIR: the input's folder) and prints what it
grafted, what the target must have, and the newest symbol versions the binaries need of those.
Needs ldd, readelf (binutils) and patchelf (Debian's `patchelf`).

Policy. The ELF files of the wheel (qdp/_bin/qdpd, qdp/_bin/qdpctl, qdp/_lib/libqdp.so.0) are
resolved with ldd, transitively, with LD_LIBRARY_PATH unset. Every library found outside the
wheel is grafted, except those expected on the target (EXPECTED below):
- glibc's libraries and its loader: the target needs a glibc at least as new as the newest
  GLIBC_ symbol version printed (the build machine's at most);
- libstdc++ and libgcc_s, the GCC runtime that gRPC core (C++) needs, present wherever C++ runs;
- libssl.so.3 and libcrypto.so.3: every distribution with a glibc new enough for these
  binaries ships OpenSSL 3, whose ABI holds across 3.x, and its copy gets the distribution's
  security fixes where a grafted one would not; a target with another soname (OpenSSL 1.1)
  has too old a glibc anyway;
- the NVIDIA libraries: libcuda (the driver's, never grafted), NCCL (libnccl.so.2, from the
  target's packages or LD_LIBRARY_PATH) and a dynamic CUDA runtime (qdp links cudart statically,
  nvcc's default, so none is needed).
What is grafted, on a Debian 12 build: gRPC core (libgrpc, libgpr, libupb, libaddress_sorting)
with abseil, re2 and c-ares, protobuf-c, libuv, zlib, and libmicrohttpd with GnuTLS and the
libraries GnuTLS needs (nettle, hogweed, gmp, p11-kit, libtasn1, libidn2, libunistring, libffi).

Each grafted library is copied into qdp/_lib under its soname, which is the name the loader looks
for; it keeps that soname (no hashed name as auditwheel gives): the binaries run as processes of
their own, and a program that loads libqdp beside another copy of one of these libraries gets
the copy loaded first, of the same soname and so of the same ABI. Every ELF file of the repaired
wheel gets one run path, $ORIGIN to qdp/_lib (qdp/_bin: $ORIGIN/../_lib; qdp/_lib: $ORIGIN), or
none where it needs nothing there: no folder of the build machine is left in a run path.

Tag. meson-python tags a wheel with files in the package's platlib by the interpreter that built
it (cp311-cp311), taking them for extension modules. qdp holds none: its Python is pure and its
binaries do not link libpython (both checked here), so the repaired wheel is py3-none with the
input's platform tag (linux_x86_64). It claims no manylinux tag: NCCL, which a CUDA build links,
is not among the libraries manylinux allows.

Afterwards every ELF file of the repaired wheel is resolved again with ldd: a library not found,
or found outside the wheel without being expected on the target, is an error.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

#: Where the package's libraries are, and where grafted ones go.
LIBDIR = "qdp/_lib"

#: Sonames expected on the target (regular expressions, whole names): see the policy above.
EXPECTED = (
    r"ld-linux-x86-64\.so\.2", r"libc\.so\.6", r"libm\.so\.6", r"libdl\.so\.2", r"librt\.so\.1",
    r"libpthread\.so\.0", r"libresolv\.so\.2", r"libutil\.so\.1",
    r"libstdc\+\+\.so\.6", r"libgcc_s\.so\.1",
    r"libssl\.so\.3", r"libcrypto\.so\.3",
    r"libcuda\.so\.1", r"libnccl\.so\.2", r"libcudart\.so\.\d+",
)
_EXPECTED = re.compile("|".join(f"(?:{p})" for p in EXPECTED))

#: The symbol-version families whose newest version the report prints.
VERSION_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC", "OPENSSL")

_WHEEL_NAME = re.compile(r"^(?P<stem>[^-]+-[^-]+(?:-\d[^-]*)?)-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
                         r"(?P<plat>[^-]+)\.whl$")
_EXTENSION = re.compile(r"\.(?:cpython-[^/]*|abi3|pypy[^/]*)\.so$")


class RepairError(Exception):
    """A wheel that cannot be repaired, with the reason and what to do."""


def run(cmd: List[str], env: Optional[Dict[str, str]] = None) -> str:
    """Runs a tool and returns its standard output; a failure raises RepairError with its error."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    except FileNotFoundError as e:
        raise RepairError(f"{cmd[0]} is missing: install it (Debian: apt-get install "
                          f"{'patchelf' if cmd[0] == 'patchelf' else 'binutils libc-bin'})") from e
    if done.returncode != 0:
        raise RepairError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_files(root: Path) -> List[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def ldd(path: Path) -> Dict[str, Optional[str]]:
    """Every library `path` loads, transitively: soname to the path the loader finds (None: not
    found), as a process started with LD_LIBRARY_PATH unset sees them."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    found: Dict[str, Optional[str]] = {}
    for line in run(["ldd", str(path)], env=env).splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, where = (s.strip() for s in line.partition("=>"))
            found[name] = None if where.startswith("not found") else where.split(" (")[0]
        elif line.startswith("/"):  # the loader itself
            where = line.split(" (")[0]
            found[os.path.basename(where)] = where
    found.pop("linux-vdso.so.1", None)
    return found


def dynamic(path: Path) -> Tuple[List[str], Optional[str]]:
    """The NEEDED entries and the SONAME of an ELF file."""
    needed, soname = [], None
    for line in run(["readelf", "-d", "-W", str(path)]).splitlines():
        m = re.search(r"\((NEEDED|SONAME)\).*\[(.*)\]", line)
        if m and m.group(1) == "NEEDED":
            needed.append(m.group(2))
        elif m:
            soname = m.group(2)
    return needed, soname


def version_needs(path: Path) -> Dict[str, Set[str]]:
    """The symbol versions an ELF file needs, by the library (soname) that defines them."""
    needs: Dict[str, Set[str]] = {}
    current = None
    for line in run(["readelf", "-V", "-W", str(path)]).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            current = needs.setdefault(m.group(1), set())
            continue
        m = re.search(r"Name: (\S+)", line)
        if m and current is not None:
            current.add(m.group(1))
    return needs


def newest(versions: Iterable[str], family: str) -> Optional[str]:
    """The newest FAMILY_x.y.z among `versions`, by number."""
    best: Optional[Tuple[Tuple[int, ...], str]] = None
    for v in versions:
        m = re.fullmatch(re.escape(family) + r"_(\d+(?:\.\d+)*)", v)
        if m:
            key = tuple(int(x) for x in m.group(1).split("."))
            if best is None or key > best[0]:
                best = (key, v)
    return best[1] if best else None


def check_pure_python(root: Path, elves: List[Path]) -> None:
    """Refuses a wheel whose tag must name an interpreter: extension modules, or libpython."""
    ext = [str(p.relative_to(root)) for p in root.rglob("*.so") if _EXTENSION.search(p.name)]
    if ext:
        raise RepairError(f"the wheel holds extension modules ({', '.join(ext)}), which need "
                          f"its interpreter's tag, not py3-none: repair it with auditwheel")
    for p in elves:
        py = [n for n in dynamic(p)[0] if n.startswith("libpython")]
        if py:
            raise RepairError(f"{p.relative_to(root)} links {py[0]}: the wheel cannot be tagged "
                              f"py3-none; repair it with auditwheel")


def graft(root: Path, elves: List[Path]) -> Dict[str, str]:
    """Copies into LIBDIR each library the wheel's ELF files load from outside it that the target
    is not expected to have; returns soname -> where it was copied from."""
    libdir = root / LIBDIR
    grafted: Dict[str, str] = {}
    missing: Dict[str, List[str]] = {}
    for elf in elves:
        for name, where in ldd(elf).items():
            if where is None:
                if not _EXPECTED.fullmatch(name):
                    missing.setdefault(name, []).append(str(elf.relative_to(root)))
                continue
            if Path(where).resolve().is_relative_to(root.resolve()) or _EXPECTED.fullmatch(name):
                continue
            grafted.setdefault(name, where)
    if missing:
        raise RepairError("libraries not found on this machine, so not grafted: " + "; ".join(
            f"{n} (needed by {', '.join(by)})" for n, by in sorted(missing.items())) +
            ": install them (or set LD_LIBRARY_PATH to their folder) and repair again")
    libdir.mkdir(parents=True, exist_ok=True)
    for name, where in sorted(grafted.items()):
        dest = libdir / name
        if dest.exists():
            raise RepairError(f"{LIBDIR}/{name} is in the wheel already, yet the loader found "
                              f"{where} for it: its run paths are wrong, not repaired")
        soname = dynamic(Path(where))[1]
        if soname != name:
            raise RepairError(f"{where} is loaded as {name} but its SONAME is {soname}: copying it "
                              f"under {name} would rename it; not repaired")
        shutil.copyfile(where, dest)
        os.chmod(dest, 0o755)
    return grafted


def set_run_paths(root: Path) -> None:
    """One run path per ELF file: $ORIGIN to LIBDIR where it needs a library there, else none."""
    libdir = root / LIBDIR
    inside = {p.name for p in libdir.iterdir()} if libdir.is_dir() else set()
    for elf in elf_files(root):
        needed = dynamic(elf)[0]
        if any(n in inside for n in needed):
            rel = os.path.relpath(libdir, elf.parent)
            run(["patchelf", "--set-rpath", "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}",
                 str(elf)])
        else:
            run(["patchelf", "--remove-rpath", str(elf)])


def verify(root: Path) -> Tuple[Set[str], Dict[str, Set[str]]]:
    """Resolves every ELF file of the repaired tree again: everything must come from the wheel
    or be expected on the target. Returns the expected sonames used, and the symbol versions
    needed of them."""
    expected: Set[str] = set()
    versions: Dict[str, Set[str]] = {}
    bad: List[str] = []
    for elf in elf_files(root):
        rel = elf.relative_to(root)
        for name, where in ldd(elf).items():
            if _EXPECTED.fullmatch(name):
                expected.add(name)
            elif where is None:
                bad.append(f"{rel}: {name} not found")
            elif not Path(where).resolve().is_relative_to(root.resolve()):
                bad.append(f"{rel}: {name} loaded from {where}, outside the wheel")
        for lib, names in version_needs(elf).items():
            if _EXPECTED.fullmatch(lib):
                versions.setdefault(lib, set()).update(names)
    if bad:
        raise RepairError("the repaired wheel does not resolve: " + "; ".join(bad))
    return expected, versions


def retag(root: Path, wheel: str) -> str:
    """Rewrites the WHEEL file's tags as py3-none-PLATFORM; returns the new wheel's name."""
    m = _WHEEL_NAME.match(wheel)
    if not m:
        raise RepairError(f"{wheel} is not a wheel's file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    if "." in m.group("plat") or not m.group("plat").startswith("linux_"):
        raise RepairError(f"{wheel}: platform tag {m.group('plat')}; this script repairs one "
                          f"linux_ARCH wheel built here")
    tag = f"py3-none-{m.group('plat')}"
    (info,) = root.glob("*.dist-info")
    text = (info / "WHEEL").read_text()
    lines = [l for l in text.splitlines() if not l.startswith("Tag:")] + [f"Tag: {tag}"]
    (info / "WHEEL").write_text("\n".join(lines) + "\n")
    return f"{m.group('stem')}-{tag}.whl"


def write_wheel(root: Path, dest: Path) -> None:
    """Zips the tree as a wheel, its RECORD rewritten (a hash and size per file), modes kept."""
    (info,) = root.glob("*.dist-info")
    record = info / "RECORD"
    files = sorted(p for p in root.rglob("*") if p.is_file() and p != record)
    files.sort(key=lambda p: p.is_relative_to(info))  # the metadata last, as wheels have it
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for p in files:
        data = p.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([p.relative_to(root).as_posix(), f"sha256={digest}", len(data)])
    writer.writerow([record.relative_to(root).as_posix(), "", ""])
    record.write_text(out.getvalue())
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files + [record]:
            zi = zipfile.ZipInfo.from_file(p, p.relative_to(root).as_posix())
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (os.stat(p).st_mode & 0xFFFF) << 16
            z.writestr(zi, p.read_bytes())


def repair(wheel: Path, outdir: Path) -> Path:
    """Repairs `wheel` into `outdir`; prints the report; returns the repaired wheel's path."""
    with tempfile.TemporaryDirectory(prefix="qdp-repair.") as tmp:
        root = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            for zi in z.infolist():
                z.extract(zi, root)
                mode = zi.external_attr >> 16
                if mode:
                    os.chmod(root / zi.filename, mode & 0o7777)
        name = retag(root, wheel.name)
        elves = elf_files(root)
        if not elves:
            raise RepairError(f"{wheel.name} holds no binaries: it needs no repair")
        check_pure_python(root, elves)
        grafted = graft(root, elves)
        set_run_paths(root)
        expected, versions = verify(root)
        dest = outdir / name
        if dest.resolve() == wheel.resolve():
            raise RepairError(f"{wheel} is already tagged {name}: repair the wheel pip built")
        write_wheel(root, dest)

        size = sum((root / LIBDIR / n).stat().st_size for n in grafted)
        print(f"grafted into {LIBDIR}: {len(grafted)} libraries, {size / 2**20:.1f} MiB")
        width = max(map(len, grafted), default=0)
        for n, where in sorted(grafted.items()):
            print(f"  {n:{width}}  from {where}")
        print(f"expected on the target: {' '.join(sorted(expected))}")
        needs = sorted(filter(None, (newest(set().union(*versions.values()), f)
                                     for f in VERSION_FAMILIES))) if versions else []
        print(f"newest symbol versions needed of those: {' '.join(needs) or 'none'}")
        print(f"wrote {dest} ({dest.stat().st_size / 2**20:.1f} MiB)")
        return dest


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Graft the libraries a wheel of qdp needs (see the "
                                 "policy at the top of this file) and tag it py3-none.")
    ap.add_argument("wheel", type=Path, help="the wheel `pip wheel .` built")
    ap.add_argument("-w", "--wheel-dir", type=Path,
                    help="where the repaired wheel goes (default: the input's folder)")
    args = ap.parse_args(argv)
    if not args.wheel.is_file():
        print(f"repair-wheel: {args.wheel}: no such file", file=sys.stderr)
        return 2
    outdir = args.wheel_dir or args.wheel.parent
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        repair(args.wheel, outdir)
    except RepairError as e:
        print(f"repair-wheel: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
