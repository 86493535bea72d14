"""qdp._tools: where the bundled executables are, and the console scripts that run them. Each test
runs the module as installed, copied into a package of its own in a temporary folder whose _bin
holds what the test puts there (a shell script standing for qdpd)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import qdp._tools


def package(tmp_path: pathlib.Path, *binaries: str) -> pathlib.Path:
    """A package `pkg` in tmp_path holding qdp's _tools.py and, in _bin, a script per name that
    prints its arguments, one a line, and exits 7."""
    pkg = tmp_path / "pkg"
    (pkg / "_bin").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(qdp._tools.__file__, pkg / "_tools.py")
    for name in binaries:
        script = pkg / "_bin" / name
        script.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\nexit 7\n")
        script.chmod(0o755)
    return pkg


def run(tmp_path: pathlib.Path, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)


def test_binary_names_the_file_in_bin_or_none(tmp_path: pathlib.Path) -> None:
    pkg = package(tmp_path, "qdpd")
    r = run(tmp_path, "import pkg._tools as t; print(t.binary('qdpd')); print(t.binary('qdpctl'))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str((pkg / "_bin" / "qdpd").resolve()), "None"]


def test_binary_refuses_another_name() -> None:
    with pytest.raises(ValueError, match=r"name is 'ls'.*qdpd, qdpctl"):
        qdp._tools.binary("ls")


def test_the_console_script_runs_the_binary_with_its_arguments(tmp_path: pathlib.Path) -> None:
    package(tmp_path, "qdpd")
    r = run(tmp_path, "import sys, pkg._tools as t; "
                      "sys.argv = ['qdpd', '--version', 'two words', '']; t.qdpd()")
    assert r.stdout.splitlines() == ["--version", "two words", ""]
    assert r.returncode == 7, r.stderr  # the binary's own status: the process became it


def test_the_console_script_without_the_binary_says_how_to_get_it(tmp_path: pathlib.Path) -> None:
    package(tmp_path)
    r = run(tmp_path, "import sys, pkg._tools as t; sys.argv = ['qdpctl', 'status']; t.qdpctl()")
    assert r.returncode == 1
    assert "qdpctl: this qdp package was installed without its binaries" in r.stderr
    assert "pip install ." in r.stderr
