"""Failures are qdp.Error subclasses named after their status, carrying the ErrorDetail fields
and saying what to do."""

from __future__ import annotations

import numpy as np
import pytest

import qdp


def test_bad_qubits_names_the_field(client: qdp.Client) -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode(np.ones(4), "angle", 3)  # 4 angles for 3 qubits
    assert e.value.status == "INVALID_ARGUMENT" and e.value.field
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode([1.0], "amplitude", 0)
    assert e.value.field == "qubits", repr(e.value)
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode([1.0], "amplitude", 61)
    assert e.value.field == "qubits" and "61" in e.value.message


def test_zero_norm(client: qdp.Client) -> None:
    with pytest.raises(qdp.InvalidArgument, match="zero norm") as e:
        client.encode(np.zeros((2, 4)), "amplitude", 2)
    assert e.value.field.startswith("input")
    assert "Fix the named field" in str(e.value)


def test_non_finite(client: qdp.Client) -> None:
    with pytest.raises(qdp.InvalidArgument):
        client.encode([0.1, np.nan], "angle", 2)


def test_budget_refusal_carries_the_bytes(client: qdp.Client) -> None:
    # 2^24 complex128 amplitudes are 256 MiB: past 64 MiB per device and 96 MiB per client.
    with pytest.raises(qdp.ResourceExhausted) as e:
        client.encode(3, "basis", 24, policy="single")
    err = e.value
    assert err.need_bytes >= 256 << 20 and err.need_bytes > err.free_bytes
    assert err.detail()["need_bytes"] == err.need_bytes
    assert "release states" in str(err)
    # The daemon's message gives sizes for people; the exact bytes follow it.
    assert str(err).startswith(err.message.rstrip(".") + f" (need_bytes={err.need_bytes}, "
                               f"free_bytes={err.free_bytes}).")
    assert client.states() == []


@pytest.mark.parametrize("n,text", [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
    (1048535, "1024 KiB"),  # 1023.96 KiB, printed to one decimal as qdpctl does
    (16 << 40, "16 TiB"), (11188373267, "10.4 GiB"), (3 << 60, "3 EiB"),
    ((1 << 64) - 1, "16 EiB")])
def test_format_bytes_in_binary_units(n: int, text: str) -> None:
    assert qdp.format_bytes(n) == text


def test_memory_this_process_cannot_map_is_refused_with_its_size(client: qdp.Client) -> None:
    # 2^58 float64 values are 2 EiB: more than any address space maps.
    with pytest.raises(qdp.ResourceExhausted, match="2 EiB shared-memory region") as e:
        client.empty(1 << 58)
    assert "smaller array" in str(e.value)


def test_a_closed_client_says_so(daemon) -> None:
    c = qdp.Client(daemon.target)
    with c.encode([1.0, 2.0], "amplitude", 1) as s:
        other = c.state(s.handle, s.token)  # not released by close: only this client is gone
        c.close()
    for call in (c.status, other.numpy, lambda: c.encode([1.0], "angle", 1)):
        with pytest.raises(qdp.FailedPrecondition, match="client .* is closed: make a new"):
            call()


def test_plan_says_why_without_allocating(client: qdp.Client) -> None:
    p = client.plan(None, "amplitude", 24, shape=(1, 1 << 24), policy="even")
    assert not p.feasible and p.message
    assert p.total_bytes == 16 << 24 and len(p.needs) == 2
    assert all(not n.fits and n.need_bytes > n.budget_bytes for n in p.needs)
    ok = client.plan(np.ones((4, 16)), "amplitude", 4)
    assert ok.feasible and ok.total_bytes == 4 * 16 * 16 and ok.shards
    assert client.states() == []


def test_unknown_names_are_refused_here(client: qdp.Client) -> None:
    with pytest.raises(qdp.InvalidArgument, match="amplitude, angle") as e:
        client.encode([1.0], "amplitudes", 1)
    assert e.value.field == "encoding"
    with pytest.raises(qdp.InvalidArgument, match="complex64"):
        client.encode([1.0], "amplitude", 1, dtype="float64")
    with pytest.raises(qdp.InvalidArgument, match="policy"):
        client.encode([1.0], "amplitude", 1, policy="fast")
    with pytest.raises(qdp.InvalidArgument, match="real values"):
        client.encode(np.ones(2, np.complex128), "amplitude", 1)
    with pytest.raises(qdp.InvalidArgument, match="dimensions"):
        client.encode(np.ones((2, 2, 2)), "amplitude", 3)


def test_wrong_token_reads_as_not_found(client: qdp.Client) -> None:
    with client.encode([1.0, 2.0], "amplitude", 1) as s:
        with pytest.raises(qdp.NotFound, match="client.states"):
            client.state(s.handle, "0" * 32)
        same = client.state(s.handle, s.token)
        np.testing.assert_allclose(same.numpy(), s.numpy())
    with pytest.raises(qdp.NotFound):
        s.numpy()  # released by the with block


def test_no_daemon_is_unavailable(tmp_path) -> None:
    with qdp.Client(f"unix:{tmp_path}/none.sock", timeout=5) as c:
        with pytest.raises(qdp.Unavailable, match="QDP_TARGET") as e:
            c.status()
        assert isinstance(e.value, qdp.Error)
        with pytest.raises(qdp.Unavailable):
            c.encode(np.ones(1 << 18), "amplitude", 18)  # the handoff of a region fails alike


def test_error_classes() -> None:
    e = qdp.errors.error_for("RESOURCE_EXHAUSTED", "too big", need_bytes=10, free_bytes=3)
    assert isinstance(e, qdp.ResourceExhausted) and e.detail() == {"need_bytes": 10,
                                                                   "free_bytes": 3}
    assert isinstance(qdp.NotSupported("x"), NotImplementedError)
    for name in ("InvalidArgument", "ResourceExhausted", "NotFound", "FailedPrecondition",
                 "DataLoss", "Unavailable", "PermissionDenied", "OutOfRange"):
        assert issubclass(getattr(qdp, name), qdp.Error)
