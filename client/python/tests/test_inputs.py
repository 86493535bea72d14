"""What encode takes, and what it refuses in its own words: paths (a missing one, a table file
read here, a file that is not .npy). Every refusal is a qdp.InvalidArgument (or the path's
NotFound) naming the field, and leaves nothing on the daemon (the fixture checks)."""

from __future__ import annotations

import numpy as np
import pytest

import qdp

import reference as ref


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
        ref.close(s.numpy(), ref.batch("angle", X, 4), "complex128")
    q = tmp_path / "indices.csv"
    q.write_text("3\n6\n")
    with client.encode(q, "basis", 3) as s:
        ref.close(s.numpy(), np.stack([ref.basis(3, 3), ref.basis(6, 3)]), "complex128")
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
        ref.close(s.numpy(), ref.batch("phase", X, 3), "complex128")


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
