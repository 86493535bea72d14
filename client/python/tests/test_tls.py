"""TLS and mutual TLS on qdpd's TCP listener, with certificates this test makes with openssl
(tests/reference/qdptls.py): the right CA, a wrong one, expired certificates on either side, a
client without a certificate under mutual TLS, certificates swapped by SIGHUP under connections
and calls in flight; the same options through the Python client, qdpctl (libqdp) and libqdp's
own checks, and the daemon's refusals at start."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Iterator, List, Optional

import numpy as np
import pytest

import qdp
from qdp import _native

import qdpref as ref
import qdptls  # makes the certificates with the openssl command (deploy/install-deps.sh --tests)
from conftest import TCP_TOKEN, Daemon, qdpd_path

CLIENT_SUBJECT = "x509:O=qdp-test,CN=alice"  # RFC 2253 order, as gRPC reports it


def qdpctl_path() -> str:
    return os.environ.get("QDPCTL") or str(
        pathlib.Path(qdpd_path()).parents[1] / "client" / "qdpctl" / "qdpctl")


@pytest.fixture(scope="module")
def certs() -> Iterator[qdptls.Certs]:
    with tempfile.TemporaryDirectory(prefix="qdp-tls.") as folder:
        yield qdptls.make(folder)


def _daemon(folder: str, *args: str) -> Daemon:
    if not os.access(qdpd_path(), os.X_OK):
        pytest.skip(f"no qdpd at {qdpd_path()}")
    d = Daemon(folder, *args)
    d.port = int(  # type: ignore[attr-defined]
        pathlib.Path(d.log).read_text().split("listening on 127.0.0.1:")[1].split()[0])
    d.tcp = f"127.0.0.1:{d.port}"  # type: ignore[attr-defined]
    return d


def _serve(certs: qdptls.Certs, *extra: str, cert: str = "", key: str = "") -> Iterator[Daemon]:
    with tempfile.TemporaryDirectory(prefix="qdp-tlsd.") as folder:
        d = _daemon(folder, "--tcp", "127.0.0.1:0", "--tcp-token", TCP_TOKEN,
                    "--tcp-tls-cert", cert or certs.server, "--tcp-tls-key", key or certs.server_key,
                    *extra)
        try:
            yield d
        finally:
            assert d.stop() == 0, pathlib.Path(d.log).read_text()[-2000:]


@pytest.fixture(scope="module")
def tls_daemon(certs) -> Iterator[Daemon]:
    """TLS, no client certificates: tokens identify callers."""
    yield from _serve(certs)


@pytest.fixture(scope="module")
def mtls_daemon(certs) -> Iterator[Daemon]:
    """Mutual TLS: client certificates of certs.ca required; a token still names its principal."""
    yield from _serve(certs, "--tcp-tls-client-ca", certs.ca)


def ctl(*args: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    exe = qdpctl_path()
    if not os.access(exe, os.X_OK):
        pytest.skip(f"no qdpctl at {exe}")
    e = {k: v for k, v in os.environ.items() if not k.startswith("QDP_")}
    e.update(env or {})
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=e)


# ---- TLS ----------------------------------------------------------------------------------------


def test_the_right_ca_and_a_token_are_served(tls_daemon, certs) -> None:
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.ca) as c:
        assert c.status().devices
        with c.encode([0.3, 0.1, 0.7], "angle", 3) as s:  # unary Encode, streamed Fetch
            assert s.info.owner == "tcp:tcp"
            ref.assert_close(s.numpy(), ref.angle([0.3, 0.1, 0.7], 3), "complex128")
        X = np.random.default_rng(3).uniform(-1, 1, size=(2, 1 << 17))  # 2 MiB: an upload
        with c.encode(X, "amplitude", 17) as s:
            ref.assert_close(s.numpy(), ref.batch("amplitude", X, 17), "complex128")


def test_a_target_by_name_is_checked_against_the_certificate(tls_daemon, certs) -> None:
    """The certificate names localhost as well as 127.0.0.1 (a root without an /etc/hosts that
    names localhost cannot resolve it: gRPC's resolver reads that file)."""
    try:
        hosts = pathlib.Path("/etc/hosts").read_text().split()
    except OSError:
        hosts = []
    if "localhost" not in hosts:
        pytest.skip("this machine's /etc/hosts does not name localhost")
    with qdp.Client(f"localhost:{tls_daemon.port}", token=TCP_TOKEN, tls_ca=certs.ca) as c:
        assert c.status().devices


def test_the_environment_gives_the_ca(tls_daemon, certs, monkeypatch) -> None:
    monkeypatch.setenv("QDP_TLS_CA", certs.ca)
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN) as c:
        assert c.status().devices
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN, tls_ca="") as c:  # "": none, clear text
        with pytest.raises(qdp.Unavailable):
            c.status()


def test_a_wrong_ca_is_unavailable_and_says_why(tls_daemon, certs) -> None:
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.wrong_ca) as c:
        with pytest.raises(qdp.Unavailable) as e:
            c.status()
    assert "certificate verify failed" in e.value.message, e.value.message


def test_a_clear_text_client_is_not_served_on_a_tls_port(tls_daemon) -> None:
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN, tls_ca="") as c:
        with pytest.raises(qdp.Unavailable):
            c.status()


def test_tls_without_a_token_is_unauthenticated(tls_daemon, certs) -> None:
    with qdp.Client(tls_daemon.tcp, token="", tls_ca=certs.ca) as c:
        with pytest.raises(qdp.Unauthenticated, match="token"):
            c.status()
    # A client certificate is not asked for without tcp_tls_client_ca, and names no one.
    pem, key = certs.client("alice")
    with qdp.Client(tls_daemon.tcp, token="", tls_ca=certs.ca, tls_cert=pem, tls_key=key) as c:
        with pytest.raises(qdp.Unauthenticated):
            c.status()


def test_the_server_name_override(tls_daemon, certs) -> None:
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.ca,
                    tls_server_name="localhost") as c:
        assert c.status().devices
    with qdp.Client(tls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.ca,
                    tls_server_name="elsewhere.example") as c:
        with pytest.raises(qdp.Unavailable):
            c.status()


def test_qdpctl_speaks_tls_through_libqdp(tls_daemon, certs, tmp_path) -> None:
    t = ["--target", tls_daemon.tcp, "--token", TCP_TOKEN]
    p = ctl(*t, "--tls-ca", certs.ca, "--json", "encode", "--encoding", "angle", "--qubits", "2",
            "--values", "0.3,1.1")
    assert p.returncode == 0, p.stderr
    ref_ = json.loads(p.stdout)["ref"]
    p = ctl(*t, "fetch", ref_, "-o", str(tmp_path / "psi.npy"), env={"QDP_TLS_CA": certs.ca})
    assert p.returncode == 0, p.stderr
    ref.assert_close(np.load(tmp_path / "psi.npy"), ref.angle([0.3, 1.1], 2), "complex128")
    assert ctl(*t, "--tls-ca", certs.ca, "rm", ref_).returncode == 0
    p = ctl(*t, "--tls-ca", certs.wrong_ca, "status")
    assert p.returncode == 3 and "UNAVAILABLE" in p.stderr, p.stderr  # exit 3: unavailable
    p = ctl(*t, "status")  # clear text to a TLS port
    assert p.returncode == 3, p.stderr
    p = ctl(*t, "--tls-ca", str(tmp_path / "nope.pem"), "status")
    assert p.returncode != 0 and "nope.pem" in p.stderr and "No such file" in p.stderr, p.stderr
    assert "--tls-ca" in ctl("--help").stdout and "--tls-cert" in ctl("--help").stdout


def test_an_expired_server_certificate_is_refused_by_clients(certs) -> None:
    pem, key = certs.leaf("server-expired", "localhost", server=True, expired=True)
    for d in _serve(certs, cert=pem, key=key):
        assert "has expired" in pathlib.Path(d.log).read_text()  # said at start
        with qdp.Client(d.tcp, token=TCP_TOKEN, tls_ca=certs.ca) as c:
            with pytest.raises(qdp.Unavailable) as e:
                c.status()
        assert "certificate" in e.value.message, e.value.message
        p = ctl("--target", d.tcp, "--token", TCP_TOKEN, "--tls-ca", certs.ca, "status")
        assert p.returncode == 3, p.stderr


# ---- mutual TLS ---------------------------------------------------------------------------------


def test_mtls_a_client_certificate_is_its_principal(mtls_daemon, certs) -> None:
    pem, key = certs.client("alice")
    with qdp.Client(mtls_daemon.tcp, token="", tls_ca=certs.ca, tls_cert=pem, tls_key=key) as c:
        with c.encode([0.2, 0.4], "angle", 2) as s:
            assert s.info.owner == CLIENT_SUBJECT
            assert [i.handle for i in c.states()] == [s.handle]
            ref.assert_close(s.numpy(), ref.angle([0.2, 0.4], 2), "complex128")
    # Through qdpctl: the same principal, from the environment's files too.
    p = ctl("--target", mtls_daemon.tcp, "--tls-ca", certs.ca, "--tls-cert", pem, "--tls-key", key,
            "--json", "encode", "--encoding", "angle", "--qubits", "1", "--values", "0.5")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["ref"]
    p = ctl("--target", mtls_daemon.tcp, "--json", "ls",
            env={"QDP_TLS_CA": certs.ca, "QDP_TLS_CERT": pem, "QDP_TLS_KEY": key})
    assert p.returncode == 0 and CLIENT_SUBJECT in p.stdout, (p.stdout, p.stderr)
    assert ctl("--target", mtls_daemon.tcp, "rm", r, env={
        "QDP_TLS_CA": certs.ca, "QDP_TLS_CERT": pem, "QDP_TLS_KEY": key}).returncode == 0


def test_mtls_a_token_names_the_principal_and_a_wrong_one_is_refused(mtls_daemon, certs) -> None:
    pem, key = certs.client("alice")
    with qdp.Client(mtls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.ca, tls_cert=pem,
                    tls_key=key) as c:
        with c.encode([0.2], "angle", 1) as s:
            assert s.info.owner == "tcp:tcp"
    with qdp.Client(mtls_daemon.tcp, token="wrong", tls_ca=certs.ca, tls_cert=pem,
                    tls_key=key) as c:
        with pytest.raises(qdp.Unauthenticated):  # never passed over for the certificate
            c.status()


def test_mtls_refuses_a_client_without_a_certificate(mtls_daemon, certs) -> None:
    with qdp.Client(mtls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.ca) as c:
        with pytest.raises(qdp.Unavailable):
            c.status()
    p = ctl("--target", mtls_daemon.tcp, "--token", TCP_TOKEN, "--tls-ca", certs.ca, "status")
    assert p.returncode == 3, p.stderr


@pytest.mark.parametrize("which", ["expired", "wrong-ca"])
def test_mtls_refuses_an_expired_or_foreign_client_certificate(mtls_daemon, certs,
                                                               which) -> None:
    pem, key = (certs.client("bob", expired=True) if which == "expired"
                else certs.client("bob", ca="wrong-ca"))
    with qdp.Client(mtls_daemon.tcp, token=TCP_TOKEN, tls_ca=certs.ca, tls_cert=pem,
                    tls_key=key) as c:
        with pytest.raises(qdp.Unavailable):
            c.status()
    assert "certificate" in pathlib.Path(mtls_daemon.log).read_text()  # the daemon's reason


# ---- SIGHUP -------------------------------------------------------------------------------------


def _wait_log(d: Daemon, text: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while pathlib.Path(d.log).read_text().count(text) < count:
        assert time.monotonic() < deadline, pathlib.Path(d.log).read_text()[-2000:]
        time.sleep(0.05)


def test_sighup_swaps_certificates_under_calls_in_flight(certs, tmp_path) -> None:
    # The files the daemon names, replaced in place; the new certificate is of the other CA, so
    # a client that trusts only the first could not make a new connection after the swap.
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(certs.server, cert)
    shutil.copy(certs.server_key, key)
    new_pem, new_key = certs.leaf("server-new", "localhost", server=True, ca="wrong-ca")
    for d in _serve(certs, cert=str(cert), key=str(key)):
        old = certs.serial(certs.server)
        assert qdptls.served_serial("127.0.0.1", d.port, certs.ca) == old
        with qdp.Client(d.tcp, token=TCP_TOKEN, tls_ca=certs.ca) as c:
            s = c.encode(np.ones(1 << 14), "amplitude", 14)  # 256 KiB of amplitudes
            req = c.wire.FetchRequest(chunk_bytes=4096)
            req.state.handle, req.state.token = s.handle, s.token
            chunks = c._conn.stream("Fetch", req)
            got: List[bytes] = [next(chunks).data for _ in range(4)]
            shutil.copy(new_pem, cert)
            shutil.copy(new_key, key)
            d.proc.send_signal(signal.SIGHUP)
            _wait_log(d, "TLS certificates re-read", 1)
            got += [m.data for m in chunks]  # the stream in flight goes on
            amps = np.frombuffer(b"".join(got), dtype=np.complex128)
            ref.assert_close(amps, ref.batch("amplitude", np.ones((1, 1 << 14)), 14).ravel(),
                             "complex128")
            assert c.status().devices  # and the connection made before the swap
            s.release()
        assert qdptls.served_serial("127.0.0.1", d.port, certs.wrong_ca) == certs.serial(new_pem)
        with qdp.Client(d.tcp, token=TCP_TOKEN, tls_ca=certs.ca) as c2:
            with pytest.raises(qdp.Unavailable):  # a new connection sees the new certificate
                c2.status()
        with qdp.Client(d.tcp, token=TCP_TOKEN, tls_ca=certs.wrong_ca) as c2:
            assert c2.status().devices
        # New files that do not load: the daemon keeps what it serves, and says why.
        shutil.copy(certs.server_key, key)  # not the key of new_pem
        d.proc.send_signal(signal.SIGHUP)
        _wait_log(d, "TLS certificates not reloaded", 1)
        assert "is not the private key of the certificate" in pathlib.Path(d.log).read_text()
        assert qdptls.served_serial("127.0.0.1", d.port, certs.wrong_ca) == certs.serial(new_pem)


# ---- refusals -----------------------------------------------------------------------------------


def _refused_start(*args: str) -> str:
    if not os.access(qdpd_path(), os.X_OK):
        pytest.skip(f"no qdpd at {qdpd_path()}")
    with tempfile.TemporaryDirectory(prefix="qdp-tlsr.") as folder:
        p = subprocess.run([qdpd_path(), "--socket", os.path.join(folder, "s.sock"), "--devices",
                            "cpu:1", "--tcp", "127.0.0.1:0", "--tcp-token", TCP_TOKEN, *args],
                           capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items()
                                if not k.startswith("QDP_")})
    assert p.returncode != 0, p.stderr
    return p.stderr


def test_the_daemon_refuses_tls_files_it_cannot_use(certs, tmp_path) -> None:
    err = _refused_start("--tcp-tls-cert", str(tmp_path / "none.pem"), "--tcp-tls-key",
                         certs.server_key)
    assert f"tcp_tls_cert = '{tmp_path / 'none.pem'}' cannot be read: No such file" in err, err
    _, other_key = certs.client("alice")
    err = _refused_start("--tcp-tls-cert", certs.server, "--tcp-tls-key", other_key)
    assert f"tcp_tls_key = '{other_key}' is not the private key of the certificate" in err, err
    err = _refused_start("--tcp-tls-cert", certs.server_key, "--tcp-tls-key", certs.server_key)
    assert "holds no PEM certificate" in err, err
    err = _refused_start("--tcp-tls-cert", certs.server, "--tcp-tls-key", certs.server_key,
                         "--tcp-tls-client-ca", certs.server_key)
    assert "tcp_tls_client_ca" in err and "holds no PEM certificate" in err, err
    err = _refused_start()
    assert "tcp_tls_cert and tcp_tls_key" in err and "tcp_plaintext = yes" in err, err
    err = _refused_start("--tcp-tls-cert", certs.server)
    assert "tcp_tls_key" in err, err


def test_clients_refuse_tls_for_a_unix_socket_and_name_unreadable_files(
        tls_daemon, certs, tmp_path, monkeypatch) -> None:
    with pytest.raises(qdp.InvalidArgument, match="Unix socket") as e:
        qdp.Client(tls_daemon.target, tls_ca=certs.ca)
    assert e.value.field == "tls_ca"
    monkeypatch.setenv("QDP_TLS_CA", certs.ca)  # the environment's: ignored for a unix: target
    with qdp.Client(tls_daemon.target) as c:
        assert c.status().devices
    monkeypatch.delenv("QDP_TLS_CA")
    pem, key = certs.client("alice")
    with pytest.raises(qdp.InvalidArgument, match="go together"):
        qdp.Client(tls_daemon.tcp, tls_ca=certs.ca, tls_cert=pem)
    with pytest.raises(qdp.InvalidArgument, match="tls_ca"):
        qdp.Client(tls_daemon.tcp, tls_cert=pem, tls_key=key)
    with pytest.raises(qdp.NotFound, match="nope.pem") as e:
        qdp.Client(tls_daemon.tcp, tls_ca=str(tmp_path / "nope.pem"))
    assert e.value.field == "tls_ca"
    with pytest.raises(qdp.InvalidArgument, match="no PEM"):
        qdp.Client(tls_daemon.tcp, tls_ca=os.devnull)


def test_libqdp_checks_its_tls_options(tls_daemon, certs, tmp_path, monkeypatch) -> None:
    lib = _native.library()
    if lib is None:
        pytest.skip("no libqdp of this version (QDP_LIBQDP)")

    def create(target: str, **tls: str) -> tuple:
        o = _native._Opts(ctypes.sizeof(_native._Opts), target.encode(), TCP_TOKEN.encode(),
                          b"t", 0, 0, 0, None, None,
                          *(tls[k].encode() if k in tls else None
                            for k in ("tls_ca", "tls_cert", "tls_key", "tls_server_name")))
        h = ctypes.c_void_p()
        rc = lib.lib.qdp_client_create(ctypes.byref(o), ctypes.byref(h))
        if rc == 0:
            lib.lib.qdp_client_destroy(h)
            return 0, ""
        e = lib.lib.qdp_last_error().contents
        return rc, e.field.decode(), e.msg.decode()

    for k in ("QDP_TLS_CA", "QDP_TLS_CERT", "QDP_TLS_KEY", "QDP_TLS_SERVER_NAME"):
        monkeypatch.delenv(k, raising=False)
    INVALID, NOT_FOUND = 3, 5
    assert create(tls_daemon.target, tls_ca=certs.ca)[:2] == (INVALID, "tls_ca")
    monkeypatch.setenv("QDP_TLS_CA", certs.ca)
    assert create(tls_daemon.target)[0] == 0  # the environment's: ignored for unix:
    monkeypatch.delenv("QDP_TLS_CA")
    rc, field, msg = create(tls_daemon.tcp, tls_ca=str(tmp_path / "nope.pem"))
    assert (rc, field) == (NOT_FOUND, "tls_ca") and "nope.pem" in msg, msg
    pem, key = certs.client("alice")
    assert create(tls_daemon.tcp, tls_ca=certs.ca, tls_cert=pem)[:2] == (INVALID, "tls_key")
    assert create(tls_daemon.tcp, tls_cert=pem, tls_key=key)[:2] == (INVALID, "tls_ca")
    assert create(tls_daemon.tcp, tls_ca=os.devnull)[0] == INVALID
    assert create(tls_daemon.tcp, tls_ca=certs.ca, tls_cert=pem, tls_key=key)[0] == 0
    # An older caller's struct (without the TLS fields) reads them as NULL.
    o = _native._Opts(ctypes.sizeof(_native._Opts), tls_daemon.target.encode(), b"", b"t", 0, 0,
                      0, None, None)
    o.struct_size = _native._Opts.tls_ca.offset
    h = ctypes.c_void_p()
    assert lib.lib.qdp_client_create(ctypes.byref(o), ctypes.byref(h)) == 0
    lib.lib.qdp_client_destroy(h)
