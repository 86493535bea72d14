"""The package as a user meets it: one version, the project's, and a public surface of the API
alone (no implementation thresholds), readable in one screen."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

import pytest

import qdp

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_the_version_is_the_projects() -> None:
    meson = ROOT / "meson.build"
    if not meson.exists():
        pytest.skip("no meson.build: these tests run outside the repository")
    m = re.search(r"project\([^)]*?version\s*:\s*'([^']+)'", meson.read_text(), re.S)
    assert m, "meson.build's project() has no version"
    assert qdp.__version__ == m.group(1)
    try:
        dist = importlib.metadata.distribution("qdp")
    except importlib.metadata.PackageNotFoundError:
        return  # imported from the source tree, not installed
    init = pathlib.Path(str(dist.locate_file("qdp/__init__.py"))).resolve()
    if init == pathlib.Path(qdp.__file__).resolve():  # the installed package is this one
        assert dist.version == qdp.__version__, "pyproject.toml's version is not qdp.__version__"


def test_the_public_surface_is_the_api() -> None:
    assert len(qdp.__all__) == len(set(qdp.__all__))
    for name in qdp.__all__:
        assert hasattr(qdp, name), name
    numbers = [n for n in qdp.__all__ if isinstance(getattr(qdp, n), (int, float))]
    assert not numbers, f"qdp.__all__ exports implementation figures: {numbers}"
    assert "LARGE_BYTES" not in dir(qdp) and qdp.client.LARGE_BYTES == 1 << 20
    for name in ("Client", "State", "Error", "InvalidArgument", "TtlCappedWarning", "StateInfo",
                 "Plan", "Status", "default_target", "format_bytes", "feature_maps",
                 "LocalDaemon"):
        assert name in qdp.__all__, name
