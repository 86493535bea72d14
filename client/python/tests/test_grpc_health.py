"""The standard gRPC health service (grpc.health.v1.Health) that load balancers and Kubernetes
probes ask: Check is SERVING for the daemon and qdp.Qdp, NOT_FOUND for other names; Watch sends
the status and stays open; no token needed over TCP. Messages are encoded by hand: the health
proto is two one-field messages."""

from __future__ import annotations

import grpc
import pytest

CHECK = "/grpc.health.v1.Health/Check"
SERVING, NOT_SERVING = 1, 2


def request(service: str) -> bytes:
    raw = service.encode()
    return (b"\x0a" + bytes([len(raw)]) + raw) if raw else b""  # field 1, length-delimited


def status_of(reply: bytes) -> int:
    if not reply:
        return 0  # UNKNOWN: proto3 leaves a zero enum out
    assert reply[0] == 0x08 and len(reply) == 2, reply  # field 1, varint
    return reply[1]


def check(target: str, service: str = "") -> int:
    with grpc.insecure_channel(target) as ch:
        return status_of(ch.unary_unary(CHECK)(request(service), timeout=10))


@pytest.mark.parametrize("service", ["", "qdp.Qdp"])
def test_the_daemon_serves(daemon, service) -> None:
    assert check(daemon.target, service) == SERVING


def test_an_unknown_service_is_not_found(daemon) -> None:
    with pytest.raises(grpc.RpcError) as e:
        check(daemon.target, "other.Service")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "other.Service" in e.value.details()


def test_a_probe_over_tcp_needs_no_token(tcp_daemon) -> None:
    assert check(tcp_daemon.tcp) == SERVING
    # qdp's own calls still do.
    with grpc.insecure_channel(tcp_daemon.tcp) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/qdp.Qdp/Health")(b"", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("service,want", [("", SERVING), ("qdp.Qdp", SERVING),
                                           ("other.Service", 3)])  # 3: SERVICE_UNKNOWN
def test_watch_sends_the_status_and_keeps_the_stream_open(tcp_daemon, service, want) -> None:
    """Watch over TCP, no token: the status at once, then nothing while nothing changes: the
    stream stays open until its deadline (or the client's cancel)."""
    watch = "/grpc.health.v1.Health/Watch"
    with grpc.insecure_channel(tcp_daemon.tcp) as ch:
        stream = ch.unary_stream(watch)(request(service), timeout=1.5)
        assert status_of(next(stream)) == want
        with pytest.raises(grpc.RpcError) as e:
            next(stream)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        other = ch.unary_stream(watch)(request(service), timeout=30)
        assert status_of(next(other)) == want
        other.cancel()
