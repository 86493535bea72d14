"""Sources of feature rows for a data loader: arrays, tensors and files read block by block.

:func:`open_source` turns what a user has (a NumPy array, a CPU torch tensor, a path to a
``.npy``, ``.parquet``, ``.arrow`` / ``.feather`` / ``.ipc``, ``.pt`` or ``.csv`` file, or an
iterable of arrays) into a :class:`Source`: ``rows`` of ``features`` values each, of one
``dtype``, read as C-contiguous ``(rows, features)`` NumPy arrays::

    src = qdp.readers.open_source("train.parquet", columns=["x0", "x1", "x2"])
    X = src.read(0, 1024)                  # (1024, 3) float64
    Y = src.take([7, 3, 1_000_000])        # rows in the order asked
    for block in src.iter_blocks():        # sequential, one row group at a time
        ...

Files are read block by block: a Parquet row group, an Arrow record batch, a page of a
memory-mapped ``.npy``. :meth:`Source.read` and :meth:`Source.take` read only the blocks that
hold the rows asked and keep at most ``cache_blocks`` (2) of them, so a file larger than memory
streams with bounded resident memory. ``.csv`` files are read whole at open (NumPy has no
streaming CSV parser); ``.pt`` files are memory-mapped where torch can (``torch.load(mmap=True)``,
torch 2.1 and later), else read whole.

Decoding a Parquet or Arrow block is the costly part, and pyarrow does it for one block on
about one core, so these files decode up to ``readahead`` blocks ahead on threads of their own
(by default as many as hold 1 GiB of decoded rows, 1 to ``min(8, CPUs)``): when a read asks
block k, blocks k+1, k+2, ... start, and :meth:`Source.will_need` starts the blocks a caller
knows it reads next (a shuffled epoch's).
Reads from several threads decode their blocks side by side. The bound on memory: a file
source holds at most ``cache_blocks + readahead`` decoded blocks, plus the one each reading
thread is converting or waiting for; blocks decoded ahead and never read are dropped, oldest
first, to make room. ``readahead=0`` decodes on the reading thread only, as asked, one read at a
time. An error in a block decoded ahead (a null under ``null_policy="error"``) is raised by the
read that asks that block, as without readahead.

Features of a table (Parquet, Arrow, CSV with a header) come from ``columns=[...]``, naming N
numeric columns stacked as N features, or one list (or fixed-size list) column of numbers whose
every row holds the same number of values. By default: the only column of a one-column table,
else every numeric column in schema order (columns of other types, such as strings, are left
out; a list column among several must be named).

Nulls (Arrow and Parquet nulls, empty CSV fields; NumPy arrays and tensors have none, and NaN is
a value, not a null) follow ``null_policy``: ``"error"`` raises :class:`qdp.InvalidArgument`
naming the first null's row (its index among all rows of the file) and column, ``"zero"``
reads them as 0, ``"skip"`` drops the rows that hold any. Under ``"skip"`` the rows that are
left are known only after a scan: done once, when ``rows`` or a read first needs it, from the
null counts of the file's metadata (Parquet statistics, Arrow batch headers) where they say a
block has none, and by reading (decoding) the other blocks.

pyarrow (Parquet, Arrow) and torch (tensors, ``.pt``) are imported only when used; without them
those inputs raise :class:`qdp.NotSupported` saying what to install.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

import numpy as np

from .._values import is_tensor, tensor_numpy
from ..errors import InvalidArgument
from ._arrays import STREAM_BYTES, ArraySource, array_source
from ._arrow import ARROW_SUFFIXES, ArrowSource, ParquetSource
from ._base import Source
from ._blocks import READAHEAD_BYTES, _readahead_arg
from ._csv import open_csv
from ._iterables import IterableSource
from ._npy import open_npy
from ._pt import open_pt

NULL_POLICIES = ("error", "zero", "skip")
DTYPES = ("float32", "float64", "int64")
SUFFIXES = (".npy", ".parquet", *ARROW_SUFFIXES, ".pt", ".csv")

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["open_source", "Source", "ArraySource", "IterableSource", "ParquetSource",
           "ArrowSource", "NULL_POLICIES", "DTYPES", "SUFFIXES", "ARROW_SUFFIXES",
           "STREAM_BYTES", "READAHEAD_BYTES", "PathLike"]


def open_source(data: Any, *, columns: Optional[Sequence[str]] = None,
                null_policy: str = "error", dtype: Optional[str] = None,
                cache_blocks: int = 2, readahead: Optional[int] = None) -> Source:
    """A :class:`Source` of feature rows from an array, a tensor, a file or an iterable.

    Parameters
    ----------
    data : numpy.ndarray, torch.Tensor, str, os.PathLike or iterable
        - a NumPy array: 2-D is rows x features; 1-D is rows of one value (basis indices).
        - a CPU torch tensor: the same, viewed in place (``tensor.numpy()``).
        - a path to ``.npy`` (memory-mapped, never read whole), ``.parquet`` (row groups read
          on demand), ``.arrow`` / ``.feather`` / ``.ipc`` (an Arrow IPC file, memory-mapped,
          record batches read on demand), ``.pt`` (``torch.load`` of a tensor, or of a dict of
          one tensor or of several with ``columns=[key]``) or ``.csv`` (read whole at open;
          a first row that is not all numbers is its header).
        - any other iterable of 2-D arrays or tensors (rows x features): read only in order.
    columns : list of str, optional
        For a table (Parquet, Arrow, CSV with a header): N numeric columns, stacked as N
        features, or one list column of numbers. Default: the only column of a one-column
        table, else every numeric column in schema order. For a ``.pt`` dict: ``[key]``.
    null_policy : {"error", "zero", "skip"}
        What a null does: raise :class:`qdp.InvalidArgument` naming its row and column, read
        as 0, or drop its row (then ``rows`` costs a scan: see the module's help).
    dtype : {"float32", "float64", "int64"}, optional
        Convert to this. Default: float32 or float64 as the data is; float16 and integers
        become float64; "int64" (basis indices) takes integers only.
    cache_blocks : int
        Blocks of a Parquet or Arrow file kept after a read (2).
    readahead : int, optional
        Blocks of a Parquet or Arrow file that may be decoding or decoded ahead at once,
        beyond the cache, on as many threads (named "qdp-readahead"): after a read of block k,
        the blocks after it, and those of :meth:`Source.will_need`. Default: as many blocks as
        hold 1 GiB of decoded rows (``READAHEAD_BYTES``), at least 1 and at most
        ``min(8, CPUs)``; 0 decodes only the block a read asks, on the reading thread, one
        read at a time, with no threads. A file source holds at most ``cache_blocks +
        readahead`` decoded blocks, plus the one each reading thread is converting or waiting
        for.

    Returns
    -------
    Source

    Raises
    ------
    qdp.InvalidArgument
        An input of no supported kind, shape or type, a column missing or not numeric, rows of
        lists of different lengths, a null under ``null_policy="error"``, a ``readahead`` that
        is not a whole number >= 0.
    qdp.NotSupported
        pyarrow or torch is missing for the input, or a tensor is not on the CPU.
    """
    if null_policy not in NULL_POLICIES:
        raise InvalidArgument(f"null_policy={null_policy!r}: pass one of {NULL_POLICIES}",
                              field="null_policy")
    if readahead is not None:
        _readahead_arg(readahead, 0)  # refused whatever the data, as the others are
    if isinstance(data, Source) and columns is None and dtype is None:
        return data
    if dtype is not None:
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            pass
        if dtype not in DTYPES:
            raise InvalidArgument(f"dtype={dtype!r}: pass one of {DTYPES}", field="dtype")
    if isinstance(data, (str, os.PathLike)):
        return _open_path(os.fspath(data), columns, null_policy, dtype, cache_blocks,
                          readahead)
    if isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument("bytes are not a source: pass an array, a tensor, a path or an "
                              "iterable of arrays", field="data")
    if columns is not None:
        raise InvalidArgument("columns= names columns of a table (Parquet, Arrow, CSV with a "
                              "header) or a key of a .pt dict: select an array's columns "
                              "yourself (x[:, [0, 2]])", field="columns")
    if isinstance(data, np.ndarray):
        return array_source(data, dtype, "the array")
    if is_tensor(data):
        return array_source(tensor_numpy(data, "data", "data"), dtype, "the tensor")
    if hasattr(data, "__array__"):  # a pandas DataFrame, an xarray, ...
        return array_source(np.asarray(data), dtype, f"the {type(data).__name__}")
    if hasattr(data, "__iter__"):
        return IterableSource(data, dtype)
    raise InvalidArgument(f"a {type(data).__name__} is not a source: pass a NumPy array, a "
                          "CPU torch tensor, a path or an iterable of arrays", field="data")


def _open_path(path: str, columns: Any, null_policy: str, dtype: Optional[str],
               cache_blocks: int, readahead: Optional[int]) -> Source:
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise InvalidArgument(f"{path}: files ending in {suffix or '(nothing)'} are not read; "
                              f"use one of {', '.join(SUFFIXES)}", field="data")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    reopen = (open_source, (path,), dict(columns=columns, null_policy=null_policy,
                                         dtype=dtype, cache_blocks=cache_blocks,
                                         readahead=readahead))
    if suffix == ".parquet":
        return ParquetSource(path, columns, null_policy, dtype, cache_blocks, reopen, readahead)
    if suffix in ARROW_SUFFIXES:
        return ArrowSource(path, columns, null_policy, dtype, cache_blocks, reopen, readahead)
    if suffix == ".csv":
        return open_csv(path, columns, null_policy, dtype, reopen)
    if suffix == ".npy":
        return open_npy(path, columns, dtype, reopen)
    return open_pt(path, columns, dtype, reopen)
