"""Every encoding and dtype against the formulas, for single samples and batches, from lists,
NumPy arrays, CPU torch tensors and .npy files."""

from __future__ import annotations

import re
from typing import List, Sequence

import numpy as np
import pytest

import qdp

import qdpref as ref

ENCODINGS = ["amplitude", "angle", "basis", "iqp", "iqp-z", "phase"]
DTYPES = ["complex64", "complex128"]


def test_the_package_encodes_what_the_wire_has_and_these_tests_cover() -> None:
    """qdp.records.ENCODINGS comes from the shipped contract (qdp.desc): an encoding added to
    the wire shows up there, and here until it has its reference formula and these tests."""
    assert qdp.records.ENCODINGS == tuple(ENCODINGS)


def undescribed(doc: str, names: Sequence[str]) -> List[str]:
    """The encodings of ``names`` that ``doc`` lacks: a row of its Notes table ("iqp-z  n  as
    iqp ..."), or a mention as "name" under Parameters."""
    notes = doc[doc.index("Notes\n"):]
    params = doc[:doc.index("Returns\n")]
    return [n for n in names if not re.search(rf"^ +{re.escape(n)} {{2,}}\S", notes, re.M)
            or f'"{n}"' not in params]


def test_help_of_encode_describes_every_encoding_of_the_wire() -> None:
    doc = qdp.Client.encode.__doc__ or ""
    assert undescribed(doc, ["iqp-zz"]) == ["iqp-zz"]  # the check sees a missing one
    missing = undescribed(doc, qdp.records.ENCODINGS)
    assert not missing, (f"help(qdp.Client.encode) does not describe {missing}: add a row to "
                         "its Notes table (values per sample, psi_b) and name it under encoding")


def sample(encoding: str, n: int, rng: np.random.Generator, rows: int = 0) -> np.ndarray:
    """Random inputs of one sample (rows 0) or a batch of rows samples."""
    if encoding == "basis":
        return rng.integers(0, 1 << n, size=rows or None).astype(np.int64)
    k = ref.values_per_sample(encoding, n)
    if encoding == "amplitude":
        k = k - 3  # fewer values than amplitudes: zero padded
    size = (rows, k) if rows else (k,)
    return rng.uniform(-np.pi, np.pi, size=size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_one_sample(client: qdp.Client, encoding: str, dtype: str) -> None:
    rng = np.random.default_rng(hash((encoding, dtype)) & 0xFFFF)
    n = 5
    x = sample(encoding, n, rng)
    with client.encode(x, encoding, n, dtype=dtype) as s:
        assert (s.encoding, s.qubits, s.batch, s.dtype) == (encoding, n, 1, dtype)
        got = s.numpy()
        assert got.dtype == np.dtype(dtype)
        ref.assert_close(got, ref.state(encoding, x, n), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_batch(client: qdp.Client, encoding: str, dtype: str) -> None:
    rng = np.random.default_rng(7 + len(encoding))
    n, rows = 4, 6
    X = sample(encoding, n, rng, rows)
    with client.encode(X, encoding, n, dtype=dtype) as s:
        assert s.batch == rows and s.shape == (rows, 1 << n)
        ref.assert_close(s.numpy(), ref.batch(encoding, X, n), dtype)


@pytest.mark.parametrize("encoding", ["amplitude", "angle", "phase", "iqp"])
def test_float32_input(client: qdp.Client, encoding: str) -> None:
    x = sample(encoding, 4, np.random.default_rng(3)).astype(np.float32)
    with client.encode(x, encoding, 4) as s:
        ref.assert_close(s.numpy(), ref.state(encoding, x.astype(np.float64), 4), "complex64")


def test_list_input(client: qdp.Client) -> None:
    with client.encode([1, 2, 3, 4, 5, 6, 7, 8], "amplitude", 3) as s:
        ref.assert_close(s.numpy(), ref.amplitude(np.arange(1, 9), 3), "complex128")
    with client.encode([[0.1, 0.2], [0.3, 0.4]], "angle", 2) as s:
        ref.assert_close(s.numpy(), ref.batch("angle", [[0.1, 0.2], [0.3, 0.4]], 2), "complex128")
    with client.encode(5, "basis", 3) as s:
        assert s.shape == (8,)
        ref.assert_close(s.numpy(), ref.basis(5, 3), "complex128")
    with client.encode([1, 6], "basis", 3) as s:
        assert s.shape == (2, 8)
        ref.assert_close(s.numpy(), np.stack([ref.basis(1, 3), ref.basis(6, 3)]), "complex128")


def test_qubit_k_is_bit_k(client: qdp.Client) -> None:
    # Angle pi/2 on qubit 1 only: all weight on index 0b010.
    with client.encode([0.0, np.pi / 2, 0.0], "angle", 3) as s:
        got = s.numpy()
    assert abs(got[2] - 1) < 1e-12 and np.sum(np.abs(got) ** 2) == pytest.approx(1)


@pytest.mark.parametrize("policy,rows", [("even", 0), ("uneven", 0), ("batch", 4)])
def test_sharded_over_two_devices(client: qdp.Client, policy: str, rows: int) -> None:
    X = np.random.default_rng(11).uniform(-1, 1, size=(rows, 7) if rows else (7,))
    with client.encode(X, "angle", 7, policy=policy) as s:
        info = s.info
        assert len(info.shards) == 2 and {sh.device for sh in info.shards} == {"cpu:0", "cpu:1"}
        assert sum(sh.bytes for sh in info.shards) == info.bytes == max(rows, 1) * 128 * 16
        want = ref.batch("angle", X, 7) if rows else ref.angle(X, 7)
        ref.assert_close(s.numpy(), want, "complex128")


def test_info_says_what_the_shards_exchanged(client: qdp.Client) -> None:
    """Amplitude over two CPU devices reduces its norm on the host; iqp over two transforms its
    top bits on each shard and exchanges nothing; one device has nothing to exchange."""
    iqp = np.random.default_rng(12).uniform(-1, 1, size=6 + 15)
    cases = [(np.arange(1.0, 65.0), "amplitude", "even", "host"),
             (iqp, "iqp", "even", "none"), (iqp, "iqp", "single", "none")]
    for x, encoding, policy, want in cases:
        with client.encode(x, encoding, 6, policy=policy) as s:
            info = s.info
            assert (len(info.shards), info.collective) == (2 if policy == "even" else 1, want)
            assert info.encode_ms > 0
            if encoding == "iqp":
                ref.assert_close(s.numpy(), ref.iqp(x, 6), "complex128")


def test_devices_and_ttl(client: qdp.Client) -> None:
    with client.encode([0.3, 0.4], "phase", 2, devices=["cpu:1"], ttl=60, label="t") as s:
        info = s.info
        assert [sh.device for sh in info.shards] == ["cpu:1"]
        assert info.label == "t" and info.expires_unix_ms > 0


def test_npy_path(client: qdp.Client, tmp_path) -> None:
    X = np.random.default_rng(5).uniform(-1, 1, size=(3, 16))
    p = tmp_path / "batch.npy"
    np.save(p, X)
    with client.encode(p, "amplitude", 4) as s:
        assert s.batch == 3
        ref.assert_close(s.numpy(), ref.batch("amplitude", X, 4), "complex128")
    np.save(p, X[0].astype(np.float32))
    with client.encode(str(p), "amplitude", 4, dtype="complex64") as s:
        ref.assert_close(s.numpy(), ref.amplitude(X[0].astype(np.float32), 4), "complex64")


def test_npy_path_the_caller_cannot_read(client: qdp.Client, tmp_path) -> None:
    with pytest.raises(qdp.NotFound, match="no such file"):
        client.encode(tmp_path / "absent.npy", "amplitude", 4)


def test_fetch_into_a_given_array(client: qdp.Client) -> None:
    with client.encode(np.arange(1.0, 17.0), "amplitude", 4) as s:
        out = np.zeros(16, np.complex128)
        assert s.numpy(out=out) is out
        ref.assert_close(out, ref.amplitude(np.arange(1.0, 17.0), 4), "complex128")
        with pytest.raises(qdp.InvalidArgument, match="out must be"):
            s.numpy(out=np.zeros(15, np.complex128))


def test_fetch_of_many_chunks(client: qdp.Client) -> None:
    # 2^18 complex128 amplitudes are 4 MiB: several 1 MiB chunks, copied in place.
    X = np.random.default_rng(2).uniform(-1, 1, size=(4, 16))
    with client.encode(X, "angle", 16) as s:
        got = s.numpy()
    ref.assert_close(got, ref.batch("angle", X, 16), "complex128")


class TestTorch:
    """CPU tensors in and out; skipped without PyTorch."""

    @pytest.fixture(autouse=True)
    def _torch(self):
        self.torch = pytest.importorskip("torch")

    def test_cpu_tensor_input(self, client: qdp.Client) -> None:
        torch = self.torch
        t = torch.tensor([[0.1, 0.2, 0.3], [1.0, -0.5, 2.0]], dtype=torch.float64)
        with client.encode(t, "angle", 3) as s:
            ref.assert_close(s.numpy(), ref.batch("angle", t.numpy(), 3), "complex128")
        t32 = torch.arange(1, 9, dtype=torch.float32)
        with client.encode(t32, "amplitude", 3, dtype="complex64") as s:
            ref.assert_close(s.numpy(), ref.amplitude(np.arange(1, 9), 3), "complex64")

    def test_state_as_tensor(self, client: qdp.Client) -> None:
        torch = self.torch
        with client.encode([[0.5, 1.0], [1.5, 2.0]], "phase", 2, dtype="complex64") as s:
            t = s.torch()
        assert isinstance(t, torch.Tensor) and t.dtype == torch.complex64 and t.shape == (2, 4)
        ref.assert_close(t.numpy(), ref.batch("phase", [[0.5, 1.0], [1.5, 2.0]], 2), "complex64")
        with client.encode([1.0, 1.0], "amplitude", 1) as s:
            assert s.torch(device="cpu").dtype == torch.complex128
