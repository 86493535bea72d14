"""qdp picks gRPC's lower-latency client transport when it is imported first (qdp._grpc_env)."""

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


def _experiments_after(code: str, **extra: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRPC_EXPERIMENTS", "QDP_GRPC_DEFAULTS")}
    env.update(extra)
    env["PYTHONPATH"] = PKG + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code + "; import os; "
                          "print(os.environ.get('GRPC_EXPERIMENTS', '-'))"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_importing_qdp_first_sets_it_and_grpc_first_does_not() -> None:
    import grpc

    v = tuple(int(p) for p in grpc.__version__.split(".")[:2])
    want = EXPERIMENT if KNOWN[0] <= v <= KNOWN[1] else "-"
    assert _experiments_after("import qdp") == want
    assert _experiments_after("import grpc, qdp") == "-"
    assert _experiments_after("import qdp", QDP_GRPC_DEFAULTS="1") == "-"


def test_a_client_works_with_the_transport_chosen(daemon) -> None:
    code = ("import qdp, numpy as np, sys; c = qdp.Client(sys.argv[1]); "
            "s = c.encode(np.ones(4), 'amplitude', 2); print(abs(s.numpy()[0]))")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    env["PYTHONPATH"] = PKG + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code, daemon.target], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) == pytest.approx(0.5)
