"""qdp.encode, qdp.plan, qdp.status and the default client they share, against the CPU daemon:
the state itself comes back (NumPy, or a CPU tensor), equal to the NumPy reference, and the
daemon keeps nothing; bad devices and dtypes are refused before anything is sent; a forked
child makes a client of its own. The GPU cases are in test_gpu.py."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Iterator

import numpy as np
import pytest
from qdpref import assert_close, batch, state

import qdp
from qdp import _functions


@pytest.fixture
def default(daemon: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[qdp.Client]:
    """The default client, made for the test daemon and closed after the test."""
    monkeypatch.setenv("QDP_TARGET", daemon.target)
    _functions._default.close()
    yield qdp.default_client()
    _functions._default.close()


def test_encode_returns_the_reference_state_as_numpy_and_keeps_nothing(default, daemon) -> None:
    X = np.random.default_rng(3).uniform(-1, 1, size=(5, 6))
    with qdp.Client(daemon.target) as other:  # sees the daemon as another process would
        before = other.status().states
        psi = qdp.encode(X, "angle", 6)
        assert other.status().states == before  # nothing to release, nothing left
    assert isinstance(psi, np.ndarray) and psi.shape == (5, 64) and psi.dtype == np.complex128
    assert_close(psi, batch("angle", X, 6), np.complex128)


def test_encode_of_one_sample_is_one_state(default) -> None:
    x = [1.0, 2.0, 3.0, 4.0]
    psi = qdp.encode(x, "amplitude", 2, dtype="complex64")
    assert psi.shape == (4,) and psi.dtype == np.complex64
    assert_close(psi, state("amplitude", x, 2), np.complex64)


def test_device_cpu_gives_a_tensor(default, torch) -> None:
    t = qdp.encode([[0.0, 1.0], [2.0, 0.5]], "phase", 2, device="cpu")
    assert isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.shape == (2, 4)
    assert_close(t.numpy(), batch("phase", [[0.0, 1.0], [2.0, 0.5]], 2), np.complex128)


def test_device_cuda_on_a_cpu_daemon_is_refused_with_the_way_out(default, torch) -> None:
    with pytest.raises(qdp.NotSupported, match="has no GPU") as e:
        qdp.encode([1.0, 2.0], "amplitude", 1, device="cuda")
    assert e.value.field == "device" and "device" in e.value.message


@pytest.mark.parametrize("kw, field", [({"device": "tpu"}, "device"),
                                       ({"dtype": "float64"}, "dtype")])
def test_bad_arguments_are_refused_naming_the_field(default, kw, field) -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        qdp.encode([1.0, 2.0], "amplitude", 1, **kw)
    assert e.value.field == field


def test_the_default_client_is_shared_and_plan_and_status_use_it(default) -> None:
    assert qdp.default_client() is default
    p = qdp.plan(np.ones((2, 4)), "amplitude", 2)
    assert p.feasible and p.total_bytes == 2 * 4 * 16
    assert qdp.status().devices[0].name == "cpu:0"


def test_a_forked_child_makes_its_own_client(default) -> None:
    # A gRPC channel does not survive fork: the child must not reuse the parent's client.
    qdp.encode([1.0, 1.0], "amplitude", 1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            fresh = _functions._default.client() is not default
            os.write(w, bytes([0 if fresh else 2]))
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == bytes([0])
    assert qdp.default_client() is default  # the parent's is untouched


def test_import_does_not_make_a_client() -> None:
    code = ("import qdp, sys; from qdp import _functions; "
            "sys.exit(0 if _functions._default._client is None else 1)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_large_batch_is_encoded_once_from_shared_memory(default) -> None:
    """A batch above the staging size goes through the client's staging region, in one job."""
    X = np.random.default_rng(11).uniform(-1, 1, (300, 1024))  # 2.3 MiB of float64
    before = qdp.status()
    got = qdp.encode(X, "amplitude", 10)
    assert_close(got, batch("amplitude", X, 10), got.dtype)
    assert qdp.status().states == before.states


def test_a_small_result_comes_back_in_one_call(default, monkeypatch) -> None:
    qdp.encode([1.0], "angle", 1)  # the first asks the daemon's devices once (Status)
    calls = []
    conn = default._conn
    real = conn.call
    monkeypatch.setattr(conn, "call", lambda m, *a, **k: calls.append(m) or real(m, *a, **k))
    x = [0.5, 1.0, 1.5]
    psi = qdp.encode(x, "angle", 3)
    assert calls == ["Encode"]  # no Fetch, no Release: the daemon kept nothing
    assert_close(psi, state("angle", x, 3), np.complex128)
    assert psi.flags.writeable and qdp.status().states == 0


def test_a_larger_result_is_fetched(default, monkeypatch) -> None:
    from qdp import client as qclient

    monkeypatch.setattr(qclient, "REPLY_AMPLITUDES_BYTES", 0)
    X = np.random.default_rng(4).uniform(-1, 1, (3, 16))
    psi = qdp.encode(X, "amplitude", 4, dtype="complex64")
    assert psi.shape == (3, 16) and psi.dtype == np.complex64
    assert_close(psi, batch("amplitude", X, 4), np.complex64)
    assert qdp.status().states == 0


def test_reply_amplitudes_is_refused_with_out_or_views_and_above_its_size(default,
                                                                          sweeping_daemon):
    c = default
    r = c._request("angle", 3, "complex128", "auto", None, None, "")
    c._fill_input(r, c._input([0.5, 1.0, 1.5], "angle"))
    r.reply_amplitudes = True
    r.views = True
    with pytest.raises(qdp.InvalidArgument) as e:
        c.call("Encode", r)
    assert e.value.field == "reply_amplitudes" and "views" in e.value.message
    r.views = False
    r.out.ipc_handle = bytes(64)
    with pytest.raises(qdp.InvalidArgument) as e:
        c.call("Encode", r)
    assert e.value.field == "reply_amplitudes" and "out" in e.value.message
    with qdp.Client(sweeping_daemon.target) as big:  # no budgets: a 128 MiB state is made
        r = big._request("basis", 22, "complex128", "auto", None, None, "")
        big._fill_input(r, big._input(np.array([0, 1]), "basis"))
        r.reply_amplitudes = True
        with pytest.raises(qdp.InvalidArgument) as e:
            big.call("Encode", r)
        assert e.value.field == "reply_amplitudes"
        assert e.value.need_bytes == 128 << 20 and e.value.free_bytes == 64 << 20
        assert big.status().states == 0  # released, not kept
