"""qdp.readers: every source kind but Parquet and Arrow (test_readers_arrow.py) read back
against the NumPy values written here (arrays, tensors, .npy, .pt, CSV, iterables), reads and
takes into a caller's array, the public names, and bad inputs. No daemon is needed."""

from __future__ import annotations

import pathlib
import pickle
from typing import Any

import numpy as np
import pytest

import qdp
import qdp.readers
from qdp.readers import open_source

from sources import ROWS, SIZES, check_random_access, features


def test_the_public_names_are_importable() -> None:
    for name in ("open_source", "Source", "ArraySource", "IterableSource", "ParquetSource",
                 "ArrowSource", "NULL_POLICIES", "DTYPES", "SUFFIXES", "ARROW_SUFFIXES",
                 "STREAM_BYTES", "READAHEAD_BYTES", "PathLike"):
        assert hasattr(qdp.readers, name), name
    assert issubclass(qdp.readers.ArrowSource, qdp.readers.Source)
    assert qdp.readers.SUFFIXES == (".npy", ".parquet", ".arrow", ".feather", ".ipc", ".pt",
                                    ".csv")


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
    # repr(float): NumPy 2 writes a scalar's repr as "np.float64(...)"
    lines = ["a,label,b,c"] + [f"{float(r[0])!r},name{i},{float(r[1])!r},{float(r[2])!r}"
                               for i, r in enumerate(X)]
    path.write_text("\n".join(lines) + "\n")
    src = open_source(path)  # the string column is left out by default
    check_random_access(src, X)
    np.testing.assert_array_equal(open_source(path, columns=["c", "a"]).read(0, 12),
                                  X[:, [2, 0]])
    with pytest.raises(qdp.InvalidArgument, match=r"row 0 \(line 2\), column 'label'"):
        open_source(path, columns=["a", "label"])
    bare = tmp_path / "bare.csv"
    bare.write_text("\n".join(",".join(repr(float(v)) for v in r) for r in X) + "\n")
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


# --- bad inputs ----------------------------------------------------------------------------------

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
