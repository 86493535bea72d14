"""The standard gRPC health service (grpc.health.v1.Health/Check) that load balancers and
Kubernetes probes ask: SERVING for the daemon and qdp.Qdp, NOT_FOUND for other names, no token
needed over TCP. Messages are encoded by hand: the health proto is two one-field messages."""

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


def test_watch_is_not_offered_yet(daemon) -> None:
    with grpc.insecure_channel(daemon.target) as ch:
        with pytest.raises(grpc.RpcError) as e:
            list(ch.unary_stream("/grpc.health.v1.Health/Watch")(b"", timeout=10))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
