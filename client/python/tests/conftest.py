"""Fixtures: one real qdpd on the CPU backend (two host-memory devices) for the whole session, on
a socket in a fresh temporary folder, and a client of it per test; and the optional libraries
(pyarrow, torch), skipping the test where one is not installed.

The daemon is $QDPD, else build/daemon/qdpd of this checkout (``sh deploy/build.sh``); without
one every test that needs it is skipped with that reason. The tests compare states with the
checkout's NumPy reference of the encodings, tests/reference/qdpref.py (imported as ``ref``),
which this file puts on sys.path.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

import pytest

import qdp

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "reference"))


def qdpd_path() -> str:
    return os.environ.get("QDPD") or str(ROOT / "build" / "daemon" / "qdpd")


class Daemon:
    """A running qdpd: its socket, target and log."""

    def __init__(self, folder: str, *args: str, devices: str = "cpu:2") -> None:
        self.socket = os.path.join(folder, "qdpd.sock")
        self.log = os.path.join(folder, "qdpd.log")
        self.target = "unix:" + self.socket
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([qdpd_path(), "--socket", self.socket,
                                          "--devices", devices, *args],
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"qdpd exited with {self.proc.returncode}: "
                                   f"{pathlib.Path(self.log).read_text()[-2000:]}")
            if os.path.exists(self.socket) and b"listening on unix:" in \
                    pathlib.Path(self.log).read_bytes():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("qdpd did not listen within 30 s")
            time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -1
        return self.proc.returncode


def _start(*args: str, devices: str = "cpu:2") -> Iterator[Daemon]:
    if not os.access(qdpd_path(), os.X_OK):
        pytest.skip(f"no qdpd at {qdpd_path()}: build it (sh deploy/build.sh) or set QDPD")
    with tempfile.TemporaryDirectory(prefix="qdp-py.") as folder:
        os.chmod(folder, 0o755)
        d = Daemon(folder, *args, devices=devices)
        try:
            yield d
        finally:
            rc = d.stop()
        assert rc == 0, f"qdpd exited with {rc} after SIGTERM"
        assert not os.path.exists(d.socket), "qdpd left its socket behind"


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """qdpd on cpu:2 with 64 MiB per device and 96 MiB per client: refusals are cheap."""
    yield from _start("--device-budget", str(64 << 20), "--client-budget", str(96 << 20))


@pytest.fixture(scope="session")
def gpu_daemon() -> Iterator[Daemon]:
    """qdpd on every GPU of the node (--devices auto); tests that need it skip on a CPU one. View
    leases of exited clients end within about two seconds (a 1 s grace, swept every second)."""
    yield from _start("--lease-grace", "1", "--expire-interval", "1", devices="auto")


@pytest.fixture(scope="session")
def sweeping_daemon() -> Iterator[Daemon]:
    """qdpd on cpu:2 that sweeps every second with a 1 s grace: what a killed client left
    registered is unregistered within about two seconds of its death."""
    yield from _start("--lease-grace", "1", "--expire-interval", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TCP_TOKEN = "pytest-token-0123456789abcdef"


@pytest.fixture(scope="session")
def tcp_daemon() -> Iterator[Daemon]:
    """qdpd on cpu:2 that also listens on TCP in clear text (127.0.0.1, a free port, token
    TCP_TOKEN); its ``tcp`` attribute is the TCP target."""
    port = free_port()
    for d in _start("--tcp", f"127.0.0.1:{port}", "--tcp-token", TCP_TOKEN, "--tcp-plaintext"):
        d.tcp = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
        yield d


def client_of(daemon: Daemon, **kwargs: Any) -> Iterator[qdp.Client]:
    """A client of ``daemon`` (``kwargs`` go to qdp.Client) for one test; after the test, nothing
    of it may be left there."""
    c = qdp.Client(daemon.target, name="pytest", **kwargs)
    try:
        yield c
    finally:
        c.close()
    with qdp.Client(daemon.target) as check:
        left = check.states()
        st = check.status()
    assert not left, f"states left on the daemon: {[s.handle for s in left]}"
    assert st.regions == 0, f"{st.regions} regions left registered"


@pytest.fixture
def client(daemon: Daemon) -> Iterator[qdp.Client]:
    """A client of the session's daemon; after the test, nothing of it may be left there."""
    yield from client_of(daemon)


@pytest.fixture
def unpooled(daemon: Daemon) -> Iterator[qdp.Client]:
    """A client of the session's daemon that keeps no fetch regions (region_cache_bytes=0), for
    tests that count the regions of its inputs."""
    yield from client_of(daemon, region_cache_bytes=0)


@pytest.fixture
def pa() -> Any:
    return pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install pyarrow)")


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is not installed")
