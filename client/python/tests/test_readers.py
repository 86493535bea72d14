"""qdp.readers: every source kind read back against the NumPy values written here, reads and
takes across block boundaries, columns and list columns, nulls under each policy, and the bound
on blocks held in memory. No daemon is needed."""

from __future__ import annotations

import pathlib
import pickle
import sys
import weakref
from typing import Any, List

import numpy as np
import pytest

import qdp
from qdp.readers import Source, open_source

SIZES = [5, 17, 1, 9, 30, 2]  # uneven blocks: row groups, record batches
ROWS = sum(SIZES)


@pytest.fixture
def pa() -> Any:
    return pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install pyarrow)")


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is not installed")


def features(rows: int = ROWS, cols: int = 3, dtype: Any = np.float64) -> np.ndarray:
    return np.random.default_rng(rows * 31 + cols).uniform(-1, 1, (rows, cols)).astype(dtype)


def table(pa: Any, X: np.ndarray, kind: str = "columns") -> Any:
    if kind == "columns":
        return pa.table({f"x{j}": X[:, j] for j in range(X.shape[1])})
    values = pa.array(X.reshape(-1))
    if kind == "fixed":
        col = pa.FixedSizeListArray.from_arrays(values, X.shape[1])
    else:
        col = pa.ListArray.from_arrays(pa.array(np.arange(0, X.size + 1, X.shape[1],
                                                          dtype=np.int32)), values)
    return pa.table({"x": col})


def write_parquet(pa: Any, path: pathlib.Path, t: Any, sizes: List[int] = SIZES,
                  **kwargs: Any) -> pathlib.Path:
    import pyarrow.parquet as pq
    with pq.ParquetWriter(str(path), t.schema, **kwargs) as w:
        start = 0
        for n in sizes:
            w.write_table(t.slice(start, n))
            start += n
    assert pq.ParquetFile(str(path)).metadata.num_row_groups == len(sizes)
    return path


def write_ipc(pa: Any, path: pathlib.Path, t: Any, sizes: List[int] = SIZES) -> pathlib.Path:
    import pyarrow.ipc
    with pa.OSFile(str(path), "wb") as f, pyarrow.ipc.new_file(f, t.schema) as w:
        start = 0
        for n in sizes:
            for batch in t.slice(start, n).to_batches():
                w.write_batch(batch)
            start += n
    return path


def check_random_access(src: Source, X: np.ndarray) -> None:
    """read() of spans that start, end and cross at every block boundary; take() in any order."""
    assert src.rows == len(X) and src.features == X.shape[1]
    whole = src.read(0, src.rows)
    assert whole.flags.c_contiguous and whole.dtype == src.dtype
    np.testing.assert_array_equal(whole, X)
    starts = src.block_starts if src.block_starts is not None else np.arange(len(X) + 1)
    edges = sorted({0, len(X), *(int(s) + d for s in starts for d in (-1, 0, 1)
                                if 0 <= int(s) + d <= len(X))})
    for a in edges:
        for b in edges:
            if a <= b:
                np.testing.assert_array_equal(src.read(a, b), X[a:b])
    rng = np.random.default_rng(1)
    idx = np.concatenate([rng.permutation(len(X)), rng.integers(0, len(X), 7)])
    got = src.take(idx)
    assert got.flags.c_contiguous and got.shape == (len(idx), X.shape[1])
    np.testing.assert_array_equal(got, X[idx])
    np.testing.assert_array_equal(src.take([]), X[:0])
    np.testing.assert_array_equal(np.concatenate(list(src.iter_blocks())), X)
    np.testing.assert_array_equal(np.concatenate(list(src.iter_blocks(rows=4))), X)
    assert all(len(b) <= 4 for b in src.iter_blocks(rows=4))


# --- arrays, tensors, .npy, .pt, .csv, iterables ------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_array(dtype: Any) -> None:
    X = features(dtype=dtype)
    src = open_source(X)
    assert src.dtype == dtype and src.block_rows == 1 and src.block_starts is None
    check_random_access(src, X)
    assert src.block_of(5) == 5
    out = src.read(0, 2)
    out[:] = 7  # the caller's own copy
    assert X[0, 0] != 7


def test_numpy_conversions() -> None:
    idx = np.arange(10, dtype=np.int32)
    src = open_source(idx)  # 1-D: rows of one value; integers become float64
    assert (src.rows, src.features, src.dtype) == (10, 1, np.float64)
    np.testing.assert_array_equal(src.read(0, 10)[:, 0], idx)
    basis = open_source(idx, dtype="int64")
    assert basis.dtype == np.int64 and basis.take([3, 1]).tolist() == [[3], [1]]
    half = open_source(np.ones((4, 2), np.float16))
    assert half.dtype == np.float64
    assert open_source(np.ones((4, 2), np.float64), dtype="float32").read(0, 4).dtype == np.float32
    X = np.asfortranarray(features())
    np.testing.assert_array_equal(open_source(X).read(3, 9), X[3:9])


def test_npy_is_memory_mapped(tmp_path: pathlib.Path) -> None:
    X = features()
    np.save(tmp_path / "x.npy", X)
    src = open_source(tmp_path / "x.npy")
    assert isinstance(src._array, np.memmap)  # pages read as rows are asked, never the whole
    check_random_access(src, X)
    again = pickle.loads(pickle.dumps(src))  # opened again by its path, not pickled whole
    assert len(pickle.dumps(src)) < X.nbytes and isinstance(again._array, np.memmap)
    np.testing.assert_array_equal(again.take([4, 0]), X[[4, 0]])
    np.save(tmp_path / "i.npy", np.arange(6, dtype=np.int64))
    assert open_source(str(tmp_path / "i.npy"), dtype="int64").read(2, 4).tolist() == [[2], [3]]


def test_in_memory_offers_only_an_array_held_as_is(tmp_path: pathlib.Path) -> None:
    """A loader may DMA straight from in_memory(): only a writable C-contiguous array of the
    source's dtype in this process's memory qualifies."""
    X = features()
    assert open_source(X).in_memory() is X
    assert open_source(X.astype(np.float32)).in_memory().dtype == np.float32
    assert open_source(X.astype(np.float32), dtype="float64").in_memory() is None  # converted
    ro = X.copy()
    ro.setflags(write=False)
    assert open_source(ro).in_memory() is None
    np.save(tmp_path / "x.npy", X)
    assert open_source(tmp_path / "x.npy").in_memory() is None  # a memory map of the file
    assert open_source(iter([X])).in_memory() is None


def test_torch_tensor_is_viewed(torch: Any) -> None:
    X = features(dtype=np.float32)
    t = torch.from_numpy(X.copy())
    src = open_source(t)
    assert src.dtype == np.float32
    check_random_access(src, X)
    t[0, 0] = 42.0  # a view of the tensor's memory, not a copy
    assert src.read(0, 1)[0, 0] == 42.0
    assert open_source(torch.ones(3, 2, dtype=torch.bfloat16)).dtype == np.float64
    w = torch.ones(3, 2, requires_grad=True)
    assert open_source(w).read(0, 3).shape == (3, 2)


def test_pt_files(tmp_path: pathlib.Path, torch: Any) -> None:
    X = features()
    torch.save(torch.from_numpy(X), tmp_path / "t.pt")
    check_random_access(open_source(tmp_path / "t.pt"), X)
    torch.save({"x": torch.from_numpy(X), "note": "a string"}, tmp_path / "one.pt")
    check_random_access(open_source(tmp_path / "one.pt"), X)
    torch.save({"x": torch.from_numpy(X), "y": torch.zeros(ROWS)}, tmp_path / "two.pt")
    with pytest.raises(qdp.InvalidArgument, match=r"columns=\[key\]") as e:
        open_source(tmp_path / "two.pt")
    assert e.value.field == "columns"
    np.testing.assert_array_equal(open_source(tmp_path / "two.pt", columns=["y"]).read(0, 3),
                                  np.zeros((3, 1)))
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(qdp.InvalidArgument, match="save a tensor"):
        open_source(tmp_path / "list.pt")


def test_csv(tmp_path: pathlib.Path) -> None:
    X = features(rows=12)
    path = tmp_path / "h.csv"
    lines = ["a,label,b,c"] + [f"{r[0]!r},name{i},{r[1]!r},{r[2]!r}" for i, r in enumerate(X)]
    path.write_text("\n".join(lines) + "\n")
    src = open_source(path)  # the string column is left out by default
    check_random_access(src, X)
    np.testing.assert_array_equal(open_source(path, columns=["c", "a"]).read(0, 12),
                                  X[:, [2, 0]])
    with pytest.raises(qdp.InvalidArgument, match=r"row 0 \(line 2\), column 'label'"):
        open_source(path, columns=["a", "label"])
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(",".join(repr(v) for v in r) for r in X) + "\n")
    check_random_access(open_source(bare), X)
    with pytest.raises(qdp.InvalidArgument, match="names columns of a header; .* has none"):
        open_source(bare, columns=["a"])
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("1,2\n3,4\n5\n")
    with pytest.raises(qdp.InvalidArgument, match=r"row 2 \(line 3\).* 1 fields"):
        open_source(ragged)


def test_csv_nulls(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "n.csv"
    path.write_text("a,b\n1,2\n3,\n5,6\n,8\n")
    with pytest.raises(qdp.InvalidArgument, match=r"row 1 \(line 3\), column 'b'.* is empty"):
        open_source(path)
    assert open_source(path, null_policy="zero").read(0, 4).tolist() == \
        [[1, 2], [3, 0], [5, 6], [0, 8]]
    skip = open_source(path, null_policy="skip")
    assert skip.rows == 2 and skip.read(0, 2).tolist() == [[1, 2], [5, 6]]


def test_iterable_of_arrays() -> None:
    parts = [features(rows=n, cols=2) for n in SIZES]
    X = np.concatenate(parts)
    src = open_source(parts)  # a list: read again on every pass
    assert src.rows is None and not src.random_access and src.features == 2
    for _ in range(2):
        np.testing.assert_array_equal(np.concatenate(list(src)), X)
    with pytest.raises(qdp.NotSupported, match="shuffle needs a source with random access"):
        src.take([0])
    with pytest.raises(qdp.NotSupported, match="random access"):
        src.read(0, 1)
    with pytest.raises(TypeError):
        len(src)
    gen = open_source(p for p in parts)  # an iterator: one pass
    np.testing.assert_array_equal(np.concatenate(list(gen.iter_blocks())), X)
    with pytest.raises(qdp.InvalidArgument, match="read to its end"):
        list(gen.iter_blocks())
    mixed = open_source(iter([np.ones((2, 2), np.float32), np.ones((3, 2), np.float64)]))
    assert [b.dtype for b in mixed] == [np.float32, np.float32]
    with pytest.raises(qdp.InvalidArgument, match=r"item 1 \(from row 2\) has 3 features"):
        list(open_source([np.ones((2, 2)), np.ones((1, 3))]))
    with pytest.raises(qdp.InvalidArgument, match=r"yield 2-D arrays"):
        open_source([np.ones(4)])
    with pytest.raises(qdp.InvalidArgument, match="no arrays"):
        open_source([])


def test_iterable_of_tensors(torch: Any) -> None:
    parts = [torch.ones(2, 3), torch.zeros(1, 3)]
    assert np.concatenate(list(open_source(parts))).tolist() == [[1] * 3, [1] * 3, [0] * 3]


# --- Parquet and Arrow IPC ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["columns", "list", "fixed"])
def test_parquet_row_groups(tmp_path: pathlib.Path, pa: Any, kind: str) -> None:
    X = features()
    src = open_source(write_parquet(pa, tmp_path / "x.parquet", table(pa, X, kind)))
    assert src.blocks == len(SIZES) and src.block_rows == max(SIZES)
    assert src.block_starts.tolist() == np.concatenate([[0], np.cumsum(SIZES)]).tolist()
    assert src.block_of(np.array([0, 4, 5, 21, 22, 23])).tolist() == [0, 0, 1, 1, 2, 3]
    assert src.dtype == np.float64
    check_random_access(src, X)


@pytest.mark.parametrize("kind", ["columns", "list", "fixed"])
@pytest.mark.parametrize("suffix", [".arrow", ".ipc"])
def test_arrow_ipc_record_batches(tmp_path: pathlib.Path, pa: Any, kind: str,
                                  suffix: str) -> None:
    X = features(dtype=np.float32)
    src = open_source(write_ipc(pa, tmp_path / f"x{suffix}", table(pa, X, kind)))
    assert src.blocks == len(SIZES) and src.dtype == np.float32
    check_random_access(src, X)


def test_feather(tmp_path: pathlib.Path, pa: Any) -> None:
    import pyarrow.feather
    X = features()
    pyarrow.feather.write_feather(table(pa, X), str(tmp_path / "x.feather"), chunksize=8)
    src = open_source(tmp_path / "x.feather")
    assert src.blocks == -(-ROWS // 8)
    check_random_access(src, X)


def test_default_and_named_columns(tmp_path: pathlib.Path, pa: Any) -> None:
    X = features()
    t = table(pa, X).append_column("name", pa.array([f"r{i}" for i in range(ROWS)]))
    path = write_parquet(pa, tmp_path / "s.parquet", t)
    src = open_source(path)  # every numeric column, in schema order; the strings left out
    assert src.columns == ["x0", "x1", "x2"]
    check_random_access(src, X)
    np.testing.assert_array_equal(open_source(path, columns=["x2", "x0"]).read(0, ROWS),
                                  X[:, [2, 0]])
    with pytest.raises(qdp.InvalidArgument, match="'name' .* is string, not numbers"):
        open_source(path, columns=["x0", "name"])
    with pytest.raises(qdp.InvalidArgument, match="has no column 'nope'; its columns: x0"):
        open_source(path, columns=["nope"])
    with pytest.raises(qdp.InvalidArgument, match=r"columns=\['x0'\]"):
        open_source(path, columns="x0")
    both = table(pa, X, "list").append_column("y", pa.array(np.arange(ROWS)))
    lpath = write_parquet(pa, tmp_path / "l.parquet", both)
    with pytest.raises(qdp.InvalidArgument, match=r"list column 'x': pass columns=\['x'\]"):
        open_source(lpath)
    check_random_access(open_source(lpath, columns=["x"]), X)
    with pytest.raises(qdp.InvalidArgument, match="mixes a list column"):
        open_source(lpath, columns=["x", "y"])


def test_column_types(tmp_path: pathlib.Path, pa: Any) -> None:
    n = 6
    t = pa.table({"f32": pa.array(np.ones(n, np.float32)), "f64": pa.array(np.ones(n)),
                  "i": pa.array(np.arange(n, dtype=np.int16)),
                  "h": pa.array(np.ones(n, np.float16))})
    path = write_parquet(pa, tmp_path / "t.parquet", t, [n])
    with pytest.raises(qdp.InvalidArgument, match="mix float32 .* dtype='float64'"):
        open_source(path)
    assert open_source(path, dtype="float64").read(0, n)[:, 2].tolist() == list(range(n))
    assert open_source(path, columns=["i", "h"]).dtype == np.float64
    assert open_source(path, columns=["f32"]).dtype == np.float32
    ints = open_source(path, columns=["i"], dtype="int64")
    assert ints.dtype == np.int64 and ints.read(0, n)[:, 0].tolist() == list(range(n))
    with pytest.raises(qdp.InvalidArgument, match="dtype='int64' but column 'f64'"):
        open_source(path, columns=["i", "f64"], dtype="int64")
    nested = pa.table({"x": pa.array([[[1.0]], [[2.0]]])})
    with pytest.raises(qdp.InvalidArgument, match="must hold numbers"):
        open_source(write_parquet(pa, tmp_path / "n.parquet", nested, [2]))


def test_ragged_list_column(tmp_path: pathlib.Path, pa: Any) -> None:
    rows = [[1.0, 2.0]] * 9 + [[1.0, 2.0, 3.0]] + [[1.0, 2.0]] * 3
    path = write_parquet(pa, tmp_path / "r.parquet", pa.table({"x": pa.array(rows)}), [4, 4, 5])
    src = open_source(path)
    assert src.features == 2
    np.testing.assert_array_equal(src.read(0, 8), np.tile([1.0, 2.0], (8, 1)))
    with pytest.raises(qdp.InvalidArgument, match="row 9 of column 'x' .* has 3 values"):
        src.read(0, 13)


# --- nulls ---------------------------------------------------------------------------------------

def null_table(pa: Any, X: np.ndarray, kind: str) -> Any:
    """X with nulls at rows 7 and 25 (row groups 1 and 3 of SIZES) and a null list at 40."""
    if kind == "columns":
        cols = {f"x{j}": X[:, j].tolist() for j in range(X.shape[1])}
        cols["x2"][7] = None
        cols["x1"][25] = None
        cols["x0"][40] = cols["x2"][40] = None
        return pa.table(cols)
    rows: List[Any] = X.tolist()
    rows[7][2] = None
    rows[25][1] = None
    rows[40] = None
    typ = pa.list_(pa.float64(), X.shape[1]) if kind == "fixed" else pa.list_(pa.float64())
    return pa.table({"x": pa.array(rows, typ)})


def reads_null_fixed_lists(pa: Any, path: pathlib.Path) -> bool:
    """Whether this pyarrow reads back the null rows of a fixed-size list column of Parquet."""
    import pyarrow.parquet as pq
    try:
        pq.read_table(str(path))
    except pa.ArrowInvalid:
        return False
    return True


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("kind", ["columns", "list", "fixed"])
def test_null_policies(tmp_path: pathlib.Path, pa: Any, fmt: str, kind: str) -> None:
    X = features()
    t = null_table(pa, X, kind)
    write = write_parquet if fmt == "parquet" else write_ipc
    path = write(pa, tmp_path / f"n.{fmt}", t)
    column = "x2" if kind == "columns" else "x"
    if fmt == "parquet" and kind == "fixed" and not reads_null_fixed_lists(pa, path):
        with pytest.raises(qdp.InvalidArgument, match="cannot read null rows of a fixed-size"):
            open_source(path, null_policy="zero").read(0, ROWS)
        return
    # The metadata says row group 1 has a null: refused at open, naming the file's row.
    with pytest.raises(qdp.InvalidArgument, match=f"row 7, column '{column}' .* is null") as e:
        open_source(path)
    assert e.value.field == "data"
    zero = open_source(path, null_policy="zero")
    Z = X.copy()
    Z[7, 2] = Z[25, 1] = 0
    Z[40, [0, 2] if kind == "columns" else slice(None)] = 0
    check_random_access(zero, Z)
    skip = open_source(path, null_policy="skip")
    assert "after a scan" in repr(skip)
    keep = np.setdiff1d(np.arange(ROWS), [7, 25, 40])
    assert skip.rows == ROWS - 3
    assert np.diff(skip.block_starts).tolist() == [5, 16, 1, 8, 29, 2]
    check_random_access(skip, X[keep])


def test_null_found_on_read_without_statistics(tmp_path: pathlib.Path, pa: Any) -> None:
    X = features()
    path = write_parquet(pa, tmp_path / "n.parquet", null_table(pa, X, "columns"),
                         write_statistics=False)
    src = open_source(path)  # no statistics: nothing says there are nulls before a read
    np.testing.assert_array_equal(src.read(0, 5), X[:5])
    with pytest.raises(qdp.InvalidArgument, match="row 25, column 'x1'"):
        src.take([3, 26, 25])
    skip = open_source(path, null_policy="skip")
    assert skip.rows == ROWS - 3  # counted by reading each row group
    np.testing.assert_array_equal(skip.read(0, skip.rows),
                                  X[np.setdiff1d(np.arange(ROWS), [7, 25, 40])])


# --- bounded memory ------------------------------------------------------------------------------

class Loads:
    """Records the blocks a source converts and how many of them are alive at once."""

    def __init__(self, src: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loaded: List[int] = []
        self.alive = 0
        self.most = 0
        load = src._load_block

        def counted(k: int) -> np.ndarray:
            arr = load(k)
            self.loaded.append(k)
            self.alive += 1
            self.most = max(self.most, self.alive)
            weakref.finalize(arr, self._gone)
            return arr

        monkeypatch.setattr(src, "_load_block", counted)

    def _gone(self) -> None:
        self.alive -= 1


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_reads_hold_a_bounded_number_of_blocks(tmp_path: pathlib.Path, pa: Any, fmt: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = [10] * 20
    X = features(rows=200, cols=4)
    write = write_parquet if fmt == "parquet" else write_ipc
    src = open_source(write(pa, tmp_path / f"b.{fmt}", table(pa, X), sizes))
    loads = Loads(src, monkeypatch)
    np.testing.assert_array_equal(src.read(73, 77), X[73:77])
    assert loads.loaded == [7]  # block 7 alone is read
    np.testing.assert_array_equal(src.read(75, 79), X[75:79])
    assert loads.loaded == [7]  # and kept
    np.testing.assert_array_equal(src.read(0, 200), X)
    idx = np.random.default_rng(3).permutation(200)
    np.testing.assert_array_equal(src.take(idx), X[idx])
    assert sorted(loads.loaded[-20:]) == list(range(20))  # each block once per take
    for a in range(0, 200, 7):
        src.read(a, min(a + 7, 200))
    assert loads.most <= 2 and len(src.cached_blocks) <= 2
    for block in src.iter_blocks():
        assert len(src.cached_blocks) <= 2
    del block
    assert loads.most <= 4  # the cache's two, the one the loop holds and the next one
    one = open_source(write(pa, tmp_path / f"c.{fmt}", table(pa, X), sizes), cache_blocks=1)
    loads = Loads(one, monkeypatch)
    one.take(idx)
    one.read(0, 200)
    assert loads.most == 1


def test_pickled_file_source_opens_again(tmp_path: pathlib.Path, pa: Any) -> None:
    X = features()
    src = open_source(write_parquet(pa, tmp_path / "p.parquet", table(pa, X)), columns=["x1"])
    again = pickle.loads(pickle.dumps(src))
    assert again.columns == ["x1"] and again.rows == ROWS
    np.testing.assert_array_equal(again.take([30, 2]), X[[30, 2]][:, [1]])


# --- bad inputs ----------------------------------------------------------------------------------

def test_bad_inputs(tmp_path: pathlib.Path) -> None:
    X = features()
    with pytest.raises(qdp.InvalidArgument, match="null_policy='drop'") as e:
        open_source(X, null_policy="drop")
    assert e.value.field == "null_policy"
    with pytest.raises(qdp.InvalidArgument, match="dtype='complex64'"):
        open_source(X, dtype="complex64")
    with pytest.raises(qdp.InvalidArgument, match=r"shape \(2, 3, 4\)"):
        open_source(np.ones((2, 3, 4)))
    with pytest.raises(qdp.InvalidArgument, match="not numbers"):
        open_source(np.ones((2, 3), dtype=bool))
    with pytest.raises(qdp.InvalidArgument, match="dtype='int64' but the array"):
        open_source(X, dtype="int64")
    with pytest.raises(qdp.InvalidArgument, match="select an array's columns"):
        open_source(X, columns=["a"])
    with pytest.raises(qdp.InvalidArgument, match="ending in .txt"):
        open_source(tmp_path / "x.txt")
    with pytest.raises(FileNotFoundError):
        open_source(tmp_path / "missing.parquet")
    with pytest.raises(qdp.InvalidArgument, match="not a source"):
        open_source(3)
    src = open_source(X)
    assert open_source(src) is src
    with pytest.raises(qdp.OutOfRange, match=f"pass 0 <= start <= stop <= {ROWS}"):
        src.read(0, ROWS + 1)
    with pytest.raises(qdp.OutOfRange, match="row index -1"):
        src.take([0, -1])
    with pytest.raises(qdp.InvalidArgument, match="1-D array of integer"):
        src.take([[0]])
    with pytest.raises(qdp.InvalidArgument, match="1-D array of integer"):
        src.take([0.5])
    np.save(tmp_path / "o.npy", np.array([object()]), allow_pickle=True)
    with pytest.raises(qdp.InvalidArgument, match="cannot be memory-mapped"):
        open_source(tmp_path / "o.npy")


def test_not_an_arrow_file(tmp_path: pathlib.Path, pa: Any) -> None:
    import pyarrow.ipc
    t = table(pa, features())
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as f, pyarrow.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    with pytest.raises(qdp.InvalidArgument, match="pyarrow.ipc.new_file"):
        open_source(tmp_path / "s.arrow")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(qdp.InvalidArgument, match="is not a Parquet file"):
        open_source(tmp_path / "junk.parquet")


def test_missing_pyarrow_says_what_to_install(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    (tmp_path / "x.feather").write_bytes(b"ARROW1")
    with pytest.raises(qdp.NotSupported, match="pip install pyarrow"):
        open_source(tmp_path / "x.feather")
    with pytest.raises(qdp.NotSupported, match="pip install pyarrow"):
        open_source(tmp_path / "x.parquet")


@pytest.mark.parametrize("kind", ["memory", "float32-converted", "npy"])
def test_read_and_take_into_a_callers_array(tmp_path: pathlib.Path, kind: str) -> None:
    X = np.random.default_rng(12).uniform(size=(40, 3))
    if kind == "memory":
        src = open_source(X)
    elif kind == "float32-converted":
        src = open_source(X, dtype="float32")
    else:
        np.save(tmp_path / "x.npy", X)
        src = open_source(str(tmp_path / "x.npy"))
    idx = np.array([39, 0, 7, 7, 21])
    for want, call in ((src.read(5, 17), lambda out: src.read(5, 17, out=out)),
                       (src.take(idx), lambda out: src.take(idx, out=out))):
        out = np.full(want.shape, -1.0, dtype=src.dtype)
        assert call(out) is out
        assert np.array_equal(out, want)
    with pytest.raises(qdp.InvalidArgument) as e:
        src.read(0, 4, out=np.empty((3, 3), dtype=src.dtype))
    assert e.value.field == "out"
    with pytest.raises(qdp.InvalidArgument):
        src.take(idx, out=np.empty((5, 3), dtype=np.int64))
