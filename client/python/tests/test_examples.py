"""The examples in examples/ run against the CPU daemon and say what they checked."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from conftest import free_port

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples"

pytest.importorskip("torch")


def run(name: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"{name} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_train_hybrid(daemon) -> None:
    said = run("train_hybrid.py", "--target", daemon.target, "--steps", "25")
    assert "25 steps, loss" in said


def test_train_through_encoding(daemon) -> None:
    said = run("train_through_encoding.py", "--target", daemon.target, "--steps", "40")
    assert "40 steps, loss" in said, said


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ddp_shards(daemon, world) -> None:
    said = run("ddp_shards.py", "--target", daemon.target, "--world", str(world),
               "--port", str(free_port()))
    assert f"world {world}:" in said and "read once each" in said
