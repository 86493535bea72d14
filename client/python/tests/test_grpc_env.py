"""qdp picks gRPC's lower-latency client transport when its first Client imports grpc
(qdp._grpc_env); importing qdp neither imports grpc nor changes the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qdp._grpc_env import EXPERIMENT, KNOWN, choose_transport

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@pytest.mark.parametrize("grpcio", ["1.51.1", "1.66.0", "1.84.0"])
def test_set_for_the_versions_that_know_the_experiment(grpcio) -> None:
    env: dict = {}
    assert choose_transport(env, {}, grpcio) is True
    assert env == {"GRPC_EXPERIMENTS": EXPERIMENT}


@pytest.mark.parametrize("grpcio", ["1.50.0", "1.85.0", "2.0.0", "", "x.y"])
def test_left_alone_for_other_versions(grpcio) -> None:
    env: dict = {}
    assert choose_transport(env, {}, grpcio) is False
    assert env == {}


def test_left_alone_when_grpc_is_imported_or_the_user_chose() -> None:
    for env, modules in (({}, {"grpc": object()}),
                         ({"GRPC_EXPERIMENTS": "x"}, {}),
                         ({"QDP_GRPC_DEFAULTS": "1"}, {})):
        before = dict(env)
        assert choose_transport(env, modules, "1.84.0") is False
        assert env == before
    env = {"QDP_GRPC_DEFAULTS": "0"}
    assert choose_transport(env, {}, "1.84.0") is True


def _run(code: str, **extra: str) -> str:
    """What ``code`` printed in a fresh interpreter of this package, with neither variable set
    but those of ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRPC_EXPERIMENTS", "QDP_GRPC_DEFAULTS")}
    env.update(extra)
    env["PYTHONPATH"] = PKG + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _experiments_after(code: str, **extra: str) -> str:
    """GRPC_EXPERIMENTS after ``code`` ("-": unset)."""
    return _run(code + "; import os; print(os.environ.get('GRPC_EXPERIMENTS', '-'))",
                **extra).splitlines()[-1]


# Connects to nothing; over TCP, as a Unix target's unary calls may go through libqdp instead
# (qdp._native), which imports no grpc.
FIRST_CLIENT = "import qdp; qdp.Client('127.0.0.1:1')"


def test_importing_qdp_imports_no_grpc_and_changes_nothing() -> None:
    code = ("import os, sys, qdp, qdp.readers, qdp.sampling, qdp.feature_maps; "
            "print('grpc' in sys.modules, os.environ.get('GRPC_EXPERIMENTS', '-'))")
    assert _run(code) == "False -"


def test_the_first_client_sets_it_unless_grpc_came_first_or_the_user_opts_out() -> None:
    import grpc

    v = tuple(int(p) for p in grpc.__version__.split(".")[:2])
    want = EXPERIMENT if KNOWN[0] <= v <= KNOWN[1] else "-"
    assert _experiments_after(FIRST_CLIENT) == want
    assert _experiments_after("import grpc; " + FIRST_CLIENT) == "-"
    assert _experiments_after(FIRST_CLIENT, QDP_GRPC_DEFAULTS="1") == "-"
    assert _experiments_after(FIRST_CLIENT, GRPC_EXPERIMENTS="x") == "x"


def test_a_client_works_with_the_transport_chosen(daemon) -> None:
    code = ("import qdp, numpy as np, sys; c = qdp.Client(sys.argv[1]); "
            "s = c.encode(np.ones(4), 'amplitude', 2); print(abs(s.numpy()[0]))")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    env["PYTHONPATH"] = PKG + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code, daemon.target], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) == pytest.approx(0.5)
