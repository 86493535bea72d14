"""Unary calls through libqdp (qdp._native) answer as grpcio's do: the same replies, the same
Error subclasses with the same fields; grpc is not even imported for them; a child of ``fork``
falls back to grpcio; and the calls finalizers make run on the connection's own thread, before
any later call of the connection."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Iterator

import numpy as np
import pytest

import qdp
from qdp import _native

import qdpref as ref

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _libqdp() -> str:
    lib = _native.library()
    if lib is None:
        pytest.skip("no libqdp of this version here (set QDP_LIBQDP to a build's "
                    "client/libqdp/libqdp.so.0)")
    return lib.lib._name


@pytest.fixture(params=["libqdp", "grpcio"])
def both(request, daemon, monkeypatch) -> Iterator[qdp.Client]:
    """A client of the session's daemon through each transport."""
    if request.param == "libqdp":
        _libqdp()
    else:
        monkeypatch.setenv("QDP_LIBQDP", "0")
    with qdp.Client(daemon.target) as c:
        assert c._conn.native == (request.param == "libqdp")
        yield c


def test_replies_are_the_same(both: qdp.Client) -> None:
    x = np.random.default_rng(3).uniform(-1, 1, (5, 16))
    with both.encode(x, "amplitude", 4) as s:
        assert s.info.batch == 5 and s.handle in {i.handle for i in both.states()}
        ref.assert_close(s.numpy(), ref.batch("amplitude", x, 4), np.complex128)
    assert both.status().states == 0 and both.health() == "SERVING"


def _error(c: qdp.Client, fn: Any) -> qdp.Error:
    with pytest.raises(qdp.Error) as e:
        fn(c)
    return e.value


@pytest.mark.parametrize("call", [
    lambda c: c.encode(np.ones(8), "amplitude", 2),  # 8 values for 4 amplitudes
    lambda c: c.encode(np.ones(4), "amplitude", 60),  # past max_qubits
    lambda c: c.encode(np.ones((1 << 10, 1 << 12)), "angle", 12),  # past the device budget
    lambda c: c.state("s0123456789abcdef", "t").info,
])
def test_errors_are_the_same(daemon, monkeypatch, call) -> None:
    _libqdp()
    with qdp.Client(daemon.target) as c:
        native = _error(c, call)
    monkeypatch.setenv("QDP_LIBQDP", "0")
    with qdp.Client(daemon.target) as c:
        assert not c._conn.native
        plain = _error(c, call)
    assert type(native) is type(plain) and native.message == plain.message
    for name in ("field", "rank", "device", "cause", "need_bytes", "free_bytes", "status"):
        assert getattr(native, name) == getattr(plain, name), name


def test_an_unreachable_daemon_is_named(tmp_path) -> None:
    _libqdp()
    with qdp.Client(f"unix:{tmp_path}/none.sock") as c:
        with pytest.raises(qdp.Unavailable, match="none.sock"):
            c.status()


def test_a_method_the_wire_lacks_is_refused_before_sending(client: qdp.Client) -> None:
    _libqdp()
    t = client._conn._native
    with pytest.raises(qdp.Unimplemented) as e:
        t.call("Encodes", b"", 5.0)
    assert e.value.field == "method"


def _run(code: str, **env: str) -> str:
    """What ``code`` printed in a fresh interpreter of this package and this libqdp."""
    full = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""),
                QDP_LIBQDP=_libqdp(), **env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_unary_calls_import_no_grpc(daemon) -> None:
    _libqdp()
    code = """
        import sys, numpy as np, qdp
        with qdp.Client(%r) as c:
            s = c.encode(np.ones(4), "amplitude", 2)
            s.numpy()  # FetchInto a region: unary calls and a descriptor handed over
            s.release()
            print("grpc" in sys.modules)
    """ % daemon.target
    assert _run(code) == "False"


def test_a_forked_child_uses_grpcio(daemon) -> None:
    _libqdp()
    code = """
        import os, numpy as np, qdp
        with qdp.Client(%r) as c:
            c.health()
        pid = os.fork()
        if pid == 0:
            with qdp.Client(%r) as c:
                with c.encode(np.ones(4), "amplitude", 2) as s:
                    ok = abs(s.numpy()[0] - 0.5) < 1e-12
            os._exit(0 if ok and not c._conn.native else 3)
        print(os.waitpid(pid, 0)[1])
    """ % (daemon.target, daemon.target)
    assert _run(code) == "0"


def test_collected_states_are_released_on_the_connections_thread(client: qdp.Client,
                                                                 monkeypatch) -> None:
    conn = client._conn
    threads = []
    real = conn.release_quietly

    def release(handle: str, token: str) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(1.0)  # a slow release: the next call still sees it done
        real(handle, token)

    monkeypatch.setattr(conn, "release_quietly", release)
    s = client.encode([1.0, 2.0], "amplitude", 1)
    handle = s.handle
    t0 = time.monotonic()
    del s  # no cycle holds a State: collected here
    assert time.monotonic() - t0 < 0.5  # the collecting thread did not wait for the daemon
    deadline = time.monotonic() + 10
    while not threads and time.monotonic() < deadline:  # the connection's thread takes it
        time.sleep(0.01)
    assert handle not in {i.handle for i in client.states()}  # List waited for the release
    assert threads == ["qdp-later"]


def test_a_call_runs_what_is_still_queued_itself(client: qdp.Client) -> None:
    conn = client._conn
    ran = []
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:  # holds the connection's thread until the gate opens
        started.set()
        gate.wait(10)

    conn.later(hold)
    assert started.wait(10)
    conn.later(lambda: ran.append(threading.current_thread().name))
    t = threading.Timer(0.3, gate.set)
    t.start()
    client.health()  # runs the second job here, then waits for the first
    assert ran == ["MainThread"] and gate.is_set()
    t.join()


def test_close_makes_the_deferred_calls_first(daemon) -> None:
    c = qdp.Client(daemon.target)
    s = c.encode([1.0, 2.0], "amplitude", 1)
    handle = s.handle
    c._conn.later(lambda: time.sleep(0.2))  # ahead of the release in the queue
    del s
    gc.collect()
    c.close()
    with qdp.Client(daemon.target) as other:
        assert handle not in {i.handle for i in other.states()}



def test_a_call_that_runs_a_queued_release_is_not_held_by_it(client: qdp.Client) -> None:
    """The next call runs a collected state's queued release itself; the release's own call
    must not wait for the job it is part of."""
    conn = client._conn
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:  # keeps the connection's thread from taking the release
        started.set()
        gate.wait(10)

    s = client.encode([1.0, 2.0], "amplitude", 1)
    handle = s.handle
    conn.later(hold)
    assert started.wait(10)
    del s  # its release is queued behind hold
    listed: list = []
    t = threading.Thread(target=lambda: listed.append({i.handle for i in client.states()}))
    t.start()  # runs the release, then waits for hold
    time.sleep(0.3)
    gate.set()
    t.join(10)
    assert not t.is_alive(), "the call waited for the release it was making"
    assert listed and handle not in listed[0]
