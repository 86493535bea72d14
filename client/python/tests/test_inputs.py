"""What encode takes, and what it refuses in its own words: paths (a missing one, a table file
read here, a file that is not .npy), qubits out of range, values that are not real numbers, and
tensors that require grad. Every refusal is a qdp.InvalidArgument (or the path's NotFound)
naming the field, and leaves nothing on the daemon (the fixture checks)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import qdp

import qdpref as ref


def csv_text(X: np.ndarray, header: bool = True) -> str:
    head = ",".join(f"x{j}" for j in range(X.shape[1])) + "\n" if header else ""
    return head + "".join(",".join(repr(float(v)) for v in row) + "\n" for row in X)


@pytest.mark.parametrize("name", ["absent.npy", "absent.csv", "absent"])
def test_a_missing_path_says_what_is_wrong_with_the_path(client: qdp.Client, tmp_path,
                                                        name: str) -> None:
    p = tmp_path / name
    with pytest.raises(qdp.NotFound) as e:
        client.encode(p, "amplitude", 4)
    text = str(e.value)
    assert e.value.field == "input.path", repr(e.value)
    assert f"{p}: no such file" in text and "Check the path" in text
    assert "released" not in text and "client.states()" not in text


def test_a_daemons_not_found_names_the_path_or_the_state() -> None:
    path = qdp.errors.error_for("NOT_FOUND", "'/d/x.npy': open failed: No such file",
                                field="path")
    assert "Check the path" in str(path) and "released" not in str(path)
    state = qdp.errors.error_for("NOT_FOUND", "no state 's1'", field="handle")
    assert "released, expired" in str(state)


def test_a_csv_path_is_read_as_qdp_readers_reads_it(client: qdp.Client, tmp_path) -> None:
    X = np.random.default_rng(21).uniform(-np.pi, np.pi, size=(5, 4))
    p = tmp_path / "train.csv"
    p.write_text(csv_text(X))
    with client.encode(p, "angle", 4) as s:
        assert s.shape == (5, 16)
        ref.assert_close(s.numpy(), ref.batch("angle", X, 4), "complex128")
    q = tmp_path / "indices.csv"
    q.write_text("3\n6\n")
    with client.encode(q, "basis", 3) as s:
        ref.assert_close(s.numpy(), np.stack([ref.basis(3, 3), ref.basis(6, 3)]), "complex128")
    p2 = tmp_path / "one.csv"
    p2.write_text(csv_text(X[:1], header=False))
    plan = client.plan(p2, "angle", 4)
    assert plan.feasible and plan.total_bytes == 16 * 16


def test_a_parquet_path_is_read_here_too(client: qdp.Client, tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    X = np.random.default_rng(22).uniform(-1, 1, size=(6, 3))
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({f"c{j}": X[:, j] for j in range(3)}), p, row_group_size=4)
    with client.encode(p, "phase", 3) as s:
        ref.assert_close(s.numpy(), ref.batch("phase", X, 3), "complex128")


def test_a_table_the_reader_refuses_says_how_to_read_it(client: qdp.Client, tmp_path) -> None:
    p = tmp_path / "gaps.csv"
    p.write_text("a,b\n1.0,\n2.0,3.0\n")
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode(p, "angle", 2)
    assert e.value.field == "input.path"
    assert "empty" in e.value.message and "qdp.readers.open_source(path, " in e.value.message


@pytest.mark.parametrize("name,content,says", [
    ("data.npy", b"a,b\n1,2\n3,4\n", "holds text"),
    ("data.txt", b"1 2 3\n4 5 6\n", "holds text"),
    ("data", "x,y\n0.5,\u00e9\n".encode(), "holds text"),
    ("blob.npy", bytes(range(40)), r"starts with b'\x00\x01"),
    ("empty.npy", b"", "is empty"),
])
def test_a_file_that_is_not_npy_is_refused_here(client: qdp.Client, tmp_path, name: str,
                                               content: bytes, says: str) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode(p, "amplitude", 2)
    msg = e.value.message
    assert e.value.field == "input.path", repr(e.value)
    assert str(p) in msg and says in msg and "not a .npy" in msg
    assert "qdp.readers.open_source" in msg and "*.csv" in msg


def test_a_directory_is_refused_as_a_path(client: qdp.Client, tmp_path) -> None:
    d = tmp_path / "dir.npy"
    d.mkdir()
    with pytest.raises(qdp.InvalidArgument, match="is a directory") as e:
        client.encode(d, "amplitude", 2)
    assert e.value.field == "input.path"


@pytest.mark.parametrize("qubits", [-3, 0, 61, 1 << 40])
def test_qubits_out_of_range_read_alike_here_and_from_the_daemon(client: qdp.Client,
                                                                qubits: int) -> None:
    """-3 and 1 << 40 cannot travel (qubits is a uint32) and 0 never fits: refused here; 61 is
    past every daemon's max_qubits: refused there. All in the same words."""
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode([1.0], "amplitude", qubits)
    assert e.value.field == "qubits"
    assert re.match(rf"qubits {qubits} is out of range: expected 1\.\.", e.value.message), \
        e.value.message
    with pytest.raises(qdp.InvalidArgument, match="must be an integer") as e:
        client.encode([1.0], "amplitude", 2.0)
    assert e.value.field == "qubits"


BAD_VALUES = [
    # (data, encoding, field, words of the message)
    ([[1.0, 2.0], [3.0]], "angle", "input.data", "input[1] has 1 value but input[0] has 2"),
    ([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0]]], "angle", "input.data",
     "input[1][1] has 1 value but input[1][0] has 2"),
    ([[1.0, 2.0], 3.0], "angle", "input.data", "input[1] is one value but input[0] has 2"),
    ([0.5, None], "angle", "input.data", "input[1] is None"),
    (None, "angle", "input.data", "the input is None"),
    (np.array([0.5, "a"], dtype=object), "angle", "input.data", "input[1] is the string 'a'"),
    (np.array([[0.5, 1.0], [{}, 2.0]], dtype=object), "angle", "input.data",
     "input[1][0] is a dict"),
    ({"x": 1.0}, "angle", "input.data", "a dict is not an input"),
    ([0.5, 1 + 2j], "angle", "input.dtype", "input[1] is (1+2j)"),
    (np.array([0.5, 1.0], dtype=np.complex128), "angle", "input.dtype", "pass x.real"),
    (["0.5", "1.0"], "angle", "input.dtype", "strings"),
    ([True, False], "angle", "input.dtype", "booleans"),
    (np.array([1, 0], dtype=bool), "basis", "input.dtype", "booleans"),
    (b"\x00" * 16, "amplitude", "input.data", "16 bytes, not values"),
    (np.array([1 << 63], dtype=np.uint64), "basis", "input.data",
     "input[0] = 9223372036854775808 is past int64"),
    (np.zeros(2, dtype="datetime64[s]"), "angle", "input.dtype", "not numbers"),
]


@pytest.mark.parametrize("data,encoding,field,words", BAD_VALUES)
def test_values_that_are_not_real_numbers_are_refused_by_name(client: qdp.Client, data,
                                                              encoding: str, field: str,
                                                              words: str) -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        client.encode(data, encoding, 2)
    assert e.value.field == field, repr(e.value)
    assert words in e.value.message, e.value.message


def test_what_numpy_would_convert_still_encodes(client: qdp.Client) -> None:
    x = [0.25, 1.5]
    for data in (np.array(x, dtype=object), np.array(x, dtype=np.float16), (0.25, 1.5),
                 [np.float32(0.25), 1.5]):
        with client.encode(data, "angle", 2) as s:
            ref.assert_close(s.numpy(), ref.angle(np.array(x), 2), "complex128")
    with client.encode(np.array([2, 3], dtype=np.uint64), "basis", 2) as s:
        ref.assert_close(s.numpy(), np.stack([ref.basis(2, 2), ref.basis(3, 2)]), "complex128")


class TestTensors:
    """Tensors that autograd follows are refused (a state carries no gradient); skipped
    without PyTorch, the CUDA case without a GPU."""

    @pytest.fixture(autouse=True)
    def _torch(self):
        self.torch = pytest.importorskip("torch")

    def _refused(self, client: qdp.Client, t) -> None:
        with pytest.raises(qdp.InvalidArgument) as e:
            client.encode(t, "angle", 3)
        assert e.value.field == "input.data"
        assert "requires grad" in e.value.message and "x.detach()" in e.value.message

    def test_a_cpu_tensor_that_requires_grad_is_refused(self, client: qdp.Client) -> None:
        torch = self.torch
        w = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64, requires_grad=True)
        self._refused(client, w)
        self._refused(client, w * 2)  # not a leaf, but autograd follows it too
        with client.encode(w.detach(), "angle", 3) as s:
            ref.assert_close(s.numpy(), ref.angle([0.1, 0.2, 0.3], 3), "complex128")

    def test_a_cuda_tensor_that_requires_grad_is_refused(self, client: qdp.Client) -> None:
        torch = self.torch
        if not torch.cuda.is_available():
            pytest.skip("torch sees no GPU here")
        self._refused(client, torch.ones(3, device="cuda", requires_grad=True))

    def test_tensors_of_other_dtypes(self, client: qdp.Client) -> None:
        torch = self.torch
        with client.encode(torch.tensor([0.5, 1.0], dtype=torch.bfloat16), "angle", 2) as s:
            ref.assert_close(s.numpy(), ref.angle([0.5, 1.0], 2), "complex128")
        with pytest.raises(qdp.InvalidArgument, match="booleans"):
            client.encode(torch.tensor([True, False]), "angle", 2)
        with pytest.raises(qdp.InvalidArgument, match="complex"):
            client.encode(torch.tensor([0.5, 1.0], dtype=torch.complex64), "angle", 2)
