"""qdp.encode, qdp.plan, qdp.status and the default client they share, against the CPU daemon:
the state itself comes back (NumPy, or a CPU tensor), equal to the NumPy reference, and the
daemon keeps nothing; bad devices and dtypes are refused before anything is sent; a forked
child makes a client of its own. The GPU cases are in test_gpu.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
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


def test_encode_returns_the_reference_state_as_numpy_and_keeps_nothing(default) -> None:
    X = np.random.default_rng(3).uniform(-1, 1, size=(5, 6))
    before = qdp.status().states
    psi = qdp.encode(X, "angle", 6)
    assert isinstance(psi, np.ndarray) and psi.shape == (5, 64) and psi.dtype == np.complex128
    assert_close(psi, batch("angle", X, 6), np.complex128)
    assert qdp.status().states == before  # nothing to release


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


@pytest.mark.parametrize("encoding, cols, dtype", [("amplitude", 256, "complex128"),
                                                   ("angle", 8, "complex64"),
                                                   ("iqp", 36, "complex128"),
                                                   ("basis", 0, "complex128")])
def test_a_batch_in_pieces_gives_the_bits_of_one_encode(default, monkeypatch, encoding, cols,
                                                        dtype) -> None:
    rng = np.random.default_rng(11)
    X = rng.integers(0, 256, size=37) if encoding == "basis" else rng.uniform(-1, 1, (37, cols))
    whole = qdp.encode(X, encoding, 8, dtype=dtype)
    monkeypatch.setattr(_functions, "CHUNK_BYTES", 64)  # every batch in pieces
    staged = []
    real = _functions._Stager.pipeline
    monkeypatch.setattr(_functions._Stager, "pipeline",
                        lambda self, parts, encode: staged.append([len(p) for p in parts])
                        or real(self, parts, encode))
    for _ in range(2):  # the second time through buffers kept from the first
        got = qdp.encode(X, encoding, 8, dtype=dtype)
        k = _functions.CHUNKS
        assert staged[-1] == [37 * (i + 1) // k - 37 * i // k for i in range(k)]
        assert got.dtype == whole.dtype and got.shape == whole.shape
        assert np.array_equal(got.view(np.uint8), whole.view(np.uint8))
    assert_close(whole, batch(encoding, X, 8), whole.dtype)


def test_a_failing_piece_raises_after_every_piece_ended(default, monkeypatch) -> None:
    monkeypatch.setattr(_functions, "CHUNK_BYTES", 64)
    X = np.ones((8, 4))
    X[5, 2] = np.nan  # in the third piece
    with pytest.raises(qdp.InvalidArgument):
        qdp.encode(X, "amplitude", 2)
    before = qdp.status().states
    assert qdp.encode(np.ones((8, 4)), "amplitude", 2).shape == (8, 4)  # nothing left stuck
    assert qdp.status().states == before


@pytest.mark.filterwarnings("error")  # NumPy 1 warns where NumPy 2 raises: arrays compared
def test_the_stager_reuses_any_free_buffer() -> None:
    class Maker:  # Client.empty's part the stager uses, without a daemon
        def empty(self, count: int, dtype: Any) -> np.ndarray:
            return np.zeros(count, dtype)

    stager = _functions._Stager(Maker())  # type: ignore[arg-type]
    seen: dict = {}

    staged_both = threading.Event()

    def keep(k: int, x: np.ndarray) -> None:  # what part k was staged as, and where
        seen[k] = (x.copy(), x.ctypes.data)
        if k == 0:  # holds its buffer until part 1 is staged: two buffers are made
            staged_both.wait(10)
        else:
            staged_both.set()

    try:
        big, small = np.ones(4 << 20), np.arange(1 << 10, dtype=np.float64)  # 32 MiB, 8 KiB
        stager.pipeline([big, small], keep)  # two buffers made: 32 MiB and 1 MiB
        assert np.array_equal(seen[0][0], big) and np.array_equal(seen[1][0], small)
        at_big, at_small = seen[0][1], seen[1][1]
        stager.pipeline([small[:5]], keep)  # the smallest free buffer that fits is taken
        assert np.array_equal(seen[0][0], small[:5]) and seen[0][1] == at_small
        stager.pipeline([big], keep)
        assert np.array_equal(seen[0][0], big) and seen[0][1] == at_big
    finally:
        stager.close()
