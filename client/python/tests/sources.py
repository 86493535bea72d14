"""What the tests of qdp.readers write and check: features, Arrow tables of them in each
layout, Parquet and Arrow IPC files of uneven blocks, and the reads every source must answer."""

from __future__ import annotations

import pathlib
from typing import Any, List

import numpy as np

from qdp.readers import Source

SIZES = [5, 17, 1, 9, 30, 2]  # uneven blocks: row groups, record batches
ROWS = sum(SIZES)


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
