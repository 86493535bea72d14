"""Client.kernel against the CPU daemon: the fidelities and overlaps of resident batches equal
those of the reference states (tests/reference, computed here), exactly symmetric with itself, in
the states' precision; a matrix over 4 MiB comes through shared memory; and the refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qdpref import batch, state

import qdp


def reference(encoding: str, X: np.ndarray, Y: np.ndarray, n: int) -> np.ndarray:
    """<x_i|y_j> of the reference states, summed in NumPy."""
    return batch(encoding, X, n).conj() @ batch(encoding, Y, n).T


@pytest.mark.parametrize("encoding,n,values", [("amplitude", 6, 50), ("angle", 5, 5),
                                               ("iqp", 4, 10), ("phase", 3, 3)])
def test_kernel_is_the_reference_overlaps(client: qdp.Client, encoding: str, n: int,
                                          values: int) -> None:
    rng = np.random.default_rng(7)
    X, Y = rng.uniform(-1, 1, size=(9, values)), rng.uniform(-1, 1, size=(4, values))
    with client.encode(X, encoding, n) as a, client.encode(Y, encoding, n) as b:
        O = reference(encoding, X, Y, n)
        K = client.kernel(a, b)
        assert K.shape == (9, 4) and K.dtype == np.float64
        np.testing.assert_allclose(K, np.abs(O) ** 2, rtol=0, atol=1e-14)
        ov = client.kernel(a, b, overlaps=True)
        assert ov.dtype == np.complex128
        np.testing.assert_allclose(ov, O, rtol=0, atol=1e-14)
        S = client.kernel(a)
        np.testing.assert_array_equal(S, S.T)  # computed once per pair, mirrored
        np.testing.assert_allclose(np.diag(S), 1.0, rtol=0, atol=1e-14)
        So = client.kernel(a, overlaps=True)
        np.testing.assert_array_equal(So, So.conj().T)


def test_kernel_of_complex64_states_is_float32(client: qdp.Client) -> None:
    X = np.random.default_rng(8).uniform(-1, 1, size=(6, 16))
    with client.encode(X, "amplitude", 4, dtype="complex64") as a:
        K = client.kernel(a)
        assert K.dtype == np.float32
        np.testing.assert_allclose(K, np.abs(reference("amplitude", X, X, 4)) ** 2, atol=1e-6)
        assert client.kernel(a, overlaps=True).dtype == np.complex64


def test_a_large_matrix_comes_through_shared_memory(client: qdp.Client) -> None:
    X = np.random.default_rng(9).uniform(-1, 1, size=(800, 16))
    with client.encode(X, "amplitude", 4) as a:
        K = client.kernel(a)  # 800 x 800 float64: 5.1 MB, over the 4 MiB a reply carries here
        assert K.shape == (800, 800)
        np.testing.assert_allclose(K, np.abs(reference("amplitude", X, X, 4)) ** 2, atol=1e-14)


def test_kernel_refusals(client: qdp.Client) -> None:
    with client.encode(np.ones((2, 4)), "amplitude", 2) as a, \
            client.encode(np.ones((2, 8)), "amplitude", 3) as b:
        with pytest.raises(qdp.InvalidArgument) as e:
            client.kernel(a, b)
        assert e.value.field == "b" and "3 qubits" in str(e.value)
        with pytest.raises(qdp.InvalidArgument):
            client.kernel(np.ones((2, 4)))  # type: ignore[arg-type]
    with pytest.raises(qdp.NotFound):
        client.kernel(a)  # released with the with block


def test_state_kernel_pairs_it_with_itself_or_another(client: qdp.Client) -> None:
    rng = np.random.default_rng(12)
    X, Y = rng.uniform(-1, 1, size=(5, 4)), rng.uniform(-1, 1, size=(3, 4))
    with client.encode(X, "angle", 4) as a, client.encode(Y, "angle", 4) as b:
        O = reference("angle", X, Y, 4)
        np.testing.assert_allclose(a.kernel(), np.abs(reference("angle", X, X, 4)) ** 2,
                                   rtol=0, atol=1e-14)
        np.testing.assert_allclose(a.kernel(b), np.abs(O) ** 2, rtol=0, atol=1e-14)
        np.testing.assert_allclose(a.kernel(b, overlaps=True), O, rtol=0, atol=1e-14)
        assert b.kernel(a).shape == (3, 5)


def test_fidelity_and_inner_of_two_single_states(client: qdp.Client) -> None:
    x, y = [0.3, -1.2, 2.0], [0.8, -0.7, 2.5]
    want = np.vdot(state("phase", x, 3), state("phase", y, 3))  # <x|y>, x conjugated
    assert abs(want.imag) > 0.1  # the order of the pair shows in the result
    with client.encode(x, "phase", 3) as a, client.encode([y], "phase", 3) as b:
        assert b.batch == 1 and b.shape == (1, 8)  # a batch of one is a single state too
        ip = a.inner(b)
        assert isinstance(ip, complex)
        assert abs(ip - want) < 1e-14
        assert abs(b.inner(a) - want.conjugate()) < 1e-14
        f = a.fidelity(b)
        assert isinstance(f, float)
        assert abs(f - abs(want) ** 2) < 1e-14
        assert abs(a.fidelity(a) - 1.0) < 1e-14


def test_fidelity_and_inner_refuse_what_is_not_one_state_each(client: qdp.Client) -> None:
    with client.encode(np.ones((2, 4)), "amplitude", 2) as two, \
            client.encode([1.0, 2.0], "amplitude", 2) as one, \
            client.encode([1.0, 2.0], "amplitude", 3) as wider, \
            client.encode([1.0, 2.0], "amplitude", 2, dtype="complex64") as narrow:
        for bad, field, words in ((lambda: two.fidelity(one), "state", "batch of 2"),
                                  (lambda: one.inner(two), "other", "batch of 2"),
                                  (lambda: one.fidelity(np.ones(4)), "other", "ndarray"),
                                  (lambda: one.inner(wider), "other", "3 qubits"),
                                  (lambda: one.fidelity(narrow), "other", "complex64"),
                                  (lambda: one.kernel(wider), "other", "3 qubits")):
            with pytest.raises(qdp.InvalidArgument) as e:
                bad()
            assert e.value.field == field and words in str(e.value), e.value


def test_kernel_of_another_clients_state_by_its_token(client: qdp.Client, daemon: Any) -> None:
    X = np.random.default_rng(10).uniform(-1, 1, size=(3, 4))
    with client.encode(X, "amplitude", 2) as a, qdp.Client(daemon.target) as other:
        mine = other.state(a.handle, a.token)  # the token is the capability
        np.testing.assert_array_equal(other.kernel(mine), client.kernel(a))


def test_the_one_call_kernel_encodes_pairs_and_releases(daemon: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from qdp import _functions

    monkeypatch.setenv("QDP_TARGET", daemon.target)
    _functions._default.close()
    try:
        rng = np.random.default_rng(11)
        X, Y = rng.uniform(-1, 1, size=(7, 6)), rng.uniform(-1, 1, size=(4, 6))
        with qdp.Client(daemon.target) as other:
            before = other.status().states
            K = qdp.kernel(X, encoding="angle", qubits=6)
            KXY = qdp.kernel(X, Y, encoding="angle", qubits=6, overlaps=True)
            assert other.status().states == before  # both batches released
        np.testing.assert_allclose(K, np.abs(reference("angle", X, X, 6)) ** 2, atol=1e-14)
        np.testing.assert_allclose(KXY, reference("angle", X, Y, 6), atol=1e-14)
        with pytest.raises(qdp.InvalidArgument):
            qdp.kernel(X, rng.uniform(-1, 1, size=(2, 5)), encoding="angle", qubits=6)  # 5 angles
        with pytest.raises(qdp.InvalidArgument, match="encoding='angle'") as e:
            qdp.kernel(X, "angle", qubits=6)  # the encoding where Y goes
        assert e.value.field == "Y"
    finally:
        _functions._default.close()


def test_kernel_of_inputs_is_the_reference_in_tiles(client: qdp.Client, tmp_path: Any) -> None:
    """Client.kernel_of under max_bytes 2000, X of 9 rows by Y of 4, keeping no state; X from a
    .npy file too. Amplitude and iqp go by rows: iqp in tiles of 3 (two tiles of 3 rows of 16
    amplitudes, 2 * 3 * 256 B), amplitude of 2 (with its real parts' operands, 2 * 2 * 384 B);
    angle by blocks: of 4 amplitudes of every row (real parts and the encode, 9 * 4 * 32 B)."""
    rng = np.random.default_rng(12)
    before = client.status().states
    for encoding, values in (("amplitude", 13), ("angle", 4), ("iqp", 10)):
        X, Y = rng.uniform(-1, 1, size=(9, values)), rng.uniform(-1, 1, size=(4, values))
        O = reference(encoding, X, Y, 4)
        for mb in (2000, 0):
            np.testing.assert_allclose(client.kernel_of(X, encoding, 4, Y, max_bytes=mb),
                                       np.abs(O) ** 2, rtol=0, atol=1e-14)
            ov = client.kernel_of(X, encoding, 4, Y, overlaps=True, max_bytes=mb)
            np.testing.assert_allclose(ov, O, rtol=0, atol=1e-14)
            S = client.kernel_of(X, encoding, 4, max_bytes=mb)
            np.testing.assert_array_equal(S, S.T)
            np.testing.assert_allclose(S, np.abs(reference(encoding, X, X, 4)) ** 2, atol=1e-14)
        np.save(tmp_path / "x.npy", X)
        np.testing.assert_allclose(client.kernel_of(str(tmp_path / "x.npy"), encoding, 4, Y),
                                   np.abs(O) ** 2, atol=1e-14)
    assert client.status().states == before


def test_kernel_of_large_inputs_through_shared_memory(client: qdp.Client) -> None:
    # Each over the 1 MiB sent inline: X through the staging region, Y a region of its own.
    rng = np.random.default_rng(13)
    X, Y = rng.uniform(-1, 1, size=(10, 1 << 14)), rng.uniform(-1, 1, size=(9, 1 << 14))
    K = client.kernel_of(X, "amplitude", 14, Y, max_bytes=8 << 20)
    np.testing.assert_allclose(K, np.abs(reference("amplitude", X, Y, 14)) ** 2, atol=1e-14)


def test_kernel_of_refusals(client: qdp.Client) -> None:
    X = np.random.default_rng(14).uniform(-1, 1, size=(5, 16))
    with pytest.raises(qdp.InvalidArgument) as e:
        client.kernel_of(X, "amplitude", 4, max_bytes=100)
    # One row of each of two tiles of 16 amplitudes, and of each operand of their real parts.
    assert e.value.field == "max_bytes" and e.value.need_bytes == 2 * 256 + 2 * 16 * 8
    with pytest.raises(qdp.InvalidArgument) as e:
        client.kernel_of(X, "amplitude", 4, policy="even")
    assert e.value.field == "encode.placement.policy"
    with pytest.raises(qdp.InvalidArgument) as e:
        client.kernel_of(X, "amplitude", 4, max_bytes=-1)
    assert e.value.field == "max_bytes"
    Z = X.copy()
    Z[3] = 0  # a zero norm in the second tile of 2 rows
    with pytest.raises(qdp.InvalidArgument) as e:
        client.kernel_of(Z, "amplitude", 4, max_bytes=2 * (2 * 256 + 2 * 16 * 8))
    assert "rows 2 to 3" in str(e.value), str(e.value)


def test_kernel_of_names_input_b_in_its_refusals(client: qdp.Client) -> None:
    req = client.wire.KernelRequest()
    req.encode.encoding, req.encode.qubits = 2, 2  # angle
    req.encode.input.dtype, req.encode.input.rows, req.encode.input.cols = 2, 1, 2
    req.encode.input.data = np.array([0.1, 0.2]).tobytes()
    req.input_b.dtype, req.input_b.rows, req.input_b.cols = 2, 1, 2
    req.input_b.shm.length = 16  # shared memory with no descriptor handed over
    with pytest.raises(qdp.Error) as e:
        client.call("Kernel", req)
    assert e.value.field == "input_b.shm.fd_ticket", (e.value.field, str(e.value))
    req.input_b.ClearField("shm")
    req.input_b.path = "/nonexistent/y.npy"
    with pytest.raises(qdp.Error) as e:
        client.call("Kernel", req)
    assert e.value.field.startswith("input_b."), (e.value.field, str(e.value))


@pytest.mark.parametrize("encoding,n,values", [("amplitude", 6, 50), ("angle", 5, 5),
                                               ("iqp", 4, 10), ("phase", 3, 3)])
def test_qdp_kernel_is_one_call_with_the_resident_matrix_bits(daemon: Any, client: qdp.Client,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              encoding: str, n: int,
                                                              values: int) -> None:
    """qdp.kernel sends the inputs in one Kernel call (no Encode), and its matrix has the bits of
    Client.kernel of the resident states: by blocks (angle, phase) or by rows (amplitude, iqp)
    with no bound, the daemon takes the resident form's tiles and operands."""
    from qdp import _functions

    monkeypatch.setenv("QDP_TARGET", daemon.target)
    _functions._default.close()
    try:
        rng = np.random.default_rng(16)
        X, Y = rng.uniform(-1, 1, size=(11, values)), rng.uniform(-1, 1, size=(6, values))
        c = qdp.default_client()
        calls = []
        call = c._owner.conn.call
        monkeypatch.setattr(c._owner.conn, "call", lambda method, *a, **kw: calls.append(method)
                            or call(method, *a, **kw))
        K = qdp.kernel(X, encoding=encoding, qubits=n)
        O = qdp.kernel(X, Y, encoding=encoding, qubits=n, overlaps=True)
        assert calls == ["Kernel", "Kernel"]  # no Encode, no Release
        with client.encode(X, encoding, n) as a, client.encode(Y, encoding, n) as b:
            np.testing.assert_array_equal(K, client.kernel(a))
            np.testing.assert_array_equal(O, client.kernel(a, b, overlaps=True))
    finally:
        _functions._default.close()
