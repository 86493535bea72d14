"""Sessions (OpenSession, Heartbeat, CloseSession): what a client makes ends with it, even when it
is SIGKILLed; what it made to outlive it stays; a TCP client's session ends when its heartbeats
stop; nobody else may name a session; a daemon restart leaves the client a new one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import qdp
from conftest import TCP_TOKEN, Daemon, _start, client_of, free_port, qdpd_path
from polling import wait_for
from qdp.records import enum_number

Q = 8

# A client that makes two states in its session, one that outlives it and a region in it, says
# their handles and tokens, and waits to be killed.
HOLDER = """
import sys, time
import numpy as np
import qdp
c = qdp.Client(sys.argv[1], name="pytest-holder", **eval(sys.argv[2]))
x = np.random.default_rng(3).uniform(-1, 1, size=(4, 1 << 8))
a = c.encode(x[:, :8], "angle", 8)
b = c.encode(x[0], "amplitude", 8)
kept = c.encode(x[1], "amplitude", 8, outlive=True)
region = c.empty(1 << 12) if c.socket_path else None
print(c.session or "-", a.handle, a.token, b.handle, kept.handle, kept.token, flush=True)
time.sleep(600)
"""


def wait_until(what: Callable[[], Any], seconds: float = 20) -> bool:
    return wait_for(lambda: bool(what()), True, seconds)


def holder(target: str, **client_kwargs: Any) -> "tuple[subprocess.Popen, list]":
    p = subprocess.Popen([sys.executable, "-c", HOLDER, target, repr(client_kwargs)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, QDP_TOKEN=TCP_TOKEN))
    line = p.stdout.readline().split()
    if len(line) != 6:
        p.kill()
        raise AssertionError(f"the holder printed {line}: {p.communicate()[1][-2000:]}")
    return p, line


@pytest.fixture(scope="module")
def tcp_sweeping() -> Iterator[Daemon]:
    """qdpd sweeping every second (1 s grace), also on TCP in clear text with TCP_TOKEN."""
    port = free_port()
    for d in _start("--lease-grace", "1", "--expire-interval", "1", "--tcp", f"127.0.0.1:{port}",
                    "--tcp-token", TCP_TOKEN, "--tcp-plaintext"):
        d.tcp = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
        yield d


@pytest.fixture
def sweeper(tcp_sweeping: Daemon) -> Iterator[qdp.Client]:
    yield from client_of(tcp_sweeping)


def handles(c: qdp.Client) -> set:
    return {s.handle for s in c.states()}


def test_a_killed_clients_session_releases_what_it_made(sweeper: qdp.Client,
                                                        tcp_sweeping: Daemon) -> None:
    p, (sid, a, a_token, b, kept, kept_token) = holder(tcp_sweeping.target)
    try:
        assert sid.startswith("c") and len(sid) == 33
        assert {a, b, kept} <= handles(sweeper)
        assert sweeper.status().regions >= 1
        info = sweeper.state(a, a_token).info
        assert info.session == sid
        assert sweeper.state(kept, kept_token).info.session == ""
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    t0 = time.monotonic()
    assert wait_until(lambda: not ({a, b} & handles(sweeper))), \
        "the killed client's session states are still there"
    print(f"bench op=session-sweep s={time.monotonic() - t0:.2f}")
    assert wait_until(lambda: sweeper.status().regions == 0)
    # What was made to outlive it is still there, for whoever holds its token.
    assert kept in handles(sweeper)
    sweeper.state(kept, kept_token).release()


def test_without_a_session_a_killed_clients_states_stay(sweeper: qdp.Client,
                                                        tcp_sweeping: Daemon) -> None:
    p, (sid, a, a_token, b, kept, kept_token) = holder(tcp_sweeping.target, session=False)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert sid == "-"
    time.sleep(2.5)  # sweeps past the grace
    assert {a, b, kept} <= handles(sweeper)
    for h in (a, b, kept):
        sweeper.call("Release", sweeper.wire.StateRef(handle=h))  # by handle: the same uid


def test_a_tcp_session_ends_when_its_heartbeats_stop(tcp_sweeping: Daemon) -> None:
    c = qdp.Client(tcp_sweeping.tcp, token=TCP_TOKEN, heartbeat=1.0)
    try:
        s = c.encode(np.ones(1 << Q), "amplitude", Q)
        sid = c.session
        assert sid and s.info.session == sid
        time.sleep(2.5)  # the heartbeat thread keeps it past its 1 s timeout
        assert s.info.session == sid
        p, (hsid, a, a_token, b, kept, kept_token) = holder(tcp_sweeping.tcp, heartbeat=1.0)
        p.send_signal(signal.SIGKILL)  # its heartbeats stop
        p.wait()
        assert hsid.startswith("c")
        assert wait_until(lambda: not ({a, b} & handles(c))), "the lapsed session's states stayed"
        assert kept in handles(c)
        c.state(kept, kept_token).release()
        # The heartbeat of a lapsed session is NOT_FOUND, naming the field.
        with pytest.raises(qdp.NotFound) as e:
            c.call("Heartbeat", c.wire.SessionRef(session=hsid))
        assert e.value.field == "session"
    finally:
        c.close()


def test_a_tcp_session_needs_a_heartbeat(tcp_sweeping: Daemon) -> None:
    with qdp.Client(tcp_sweeping.tcp, token=TCP_TOKEN) as c:
        with pytest.raises(qdp.InvalidArgument) as e:
            c.call("OpenSession", c.wire.OpenSessionRequest())
        assert e.value.field == "heartbeat_ms" and "heartbeat" in e.value.message
        with pytest.raises(qdp.InvalidArgument) as e:
            c.call("OpenSession", c.wire.OpenSessionRequest(heartbeat_ms=10 ** 9))
        assert "session_max_heartbeat" in e.value.message


def test_close_ends_the_session_and_only_its_own(client: qdp.Client, daemon: Daemon) -> None:
    x = np.ones(1 << Q)
    with qdp.Client(daemon.target) as other:
        s = other.encode(x, "amplitude", Q)
        kept = other.encode(x, "amplitude", Q, outlive=True)
        mine = client.encode(x, "amplitude", Q)
        sid = other.session
        assert sid and sid != client.session
        # A session is its identity's: another client of the same uid that knows its id may
        # beat and close it (another uid may not: the abuse suite); an unknown id is NOT_FOUND.
        with pytest.raises(qdp.NotFound):
            client.call("CloseSession", client.wire.SessionRef(session="c" + "0" * 32))
        ref = client.wire.SessionRef(session=sid)
        info = client.call("Heartbeat", ref)  # the same uid: the same owner
        assert info.session == sid and info.pid == os.getpid()
        reply = client.call("CloseSession", ref)
        assert reply.states == 1 and reply.freed_bytes == s.size * 16
    assert s.handle not in handles(client)
    assert {mine.handle, kept.handle} <= handles(client)
    client.state(kept.handle, kept.token).release()
    mine.release()


def test_a_request_naming_an_ended_session_keeps_nothing(client: qdp.Client) -> None:
    r = client.wire.EncodeRequest(encoding=2, qubits=2)  # angle
    r.input.dtype = enum_number("DType", "float64", "dtype", "input.dtype")
    r.input.data = np.ones(2).tobytes()
    r.session = "c" + "1" * 32
    with pytest.raises(qdp.NotFound) as e:
        client.call("Encode", r)
    assert e.value.field == "session"
    assert client.states() == []


def test_outlive_is_refused_with_out(client: qdp.Client) -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode(np.ones(4), "amplitude", 2, out=np.zeros(4, complex), outlive=True)
    assert e.value.field in ("outlive", "out")


def test_heartbeat_must_be_seconds(daemon: Daemon) -> None:
    for bad in (0, -1, "1", True):
        with pytest.raises(qdp.InvalidArgument) as e:
            qdp.Client(daemon.target, heartbeat=bad)
        assert e.value.field == "heartbeat"


def test_a_restarted_daemon_gives_the_client_a_new_session() -> None:
    if not os.access(qdpd_path(), os.X_OK):
        pytest.skip(f"no qdpd at {qdpd_path()}")
    with tempfile.TemporaryDirectory(prefix="qdp-py.") as folder:
        os.chmod(folder, 0o755)
        d = Daemon(folder)
        try:
            c = qdp.Client(d.target)
            c.encode(np.ones(1 << Q), "amplitude", Q)
            old = c.session
            d.proc.kill()
            d.proc.wait()
            d = Daemon(folder)
            s = None
            deadline = time.monotonic() + 20
            while s is None:
                try:
                    s = c.encode(np.ones(1 << Q), "amplitude", Q)
                except qdp.Unavailable:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            assert c.session != old and s.info.session == c.session
            c.close()
            with qdp.Client(d.target) as check:
                assert check.states() == []
        finally:
            assert d.stop() == 0
