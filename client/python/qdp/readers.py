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
(by default as many as hold 1 GiB of decoded rows, 1 to ``min(8, CPUs)``): when a read asks block k, blocks k+1, k+2, ... start, and
:meth:`Source.will_need` starts the blocks a caller knows it reads next (a shuffled epoch's).
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

import collections
import concurrent.futures
import contextlib
import csv
import inspect
import mmap
import operator
import os
import threading
import weakref
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from .errors import Aborted, InvalidArgument, NotSupported, OutOfRange

NULL_POLICIES = ("error", "zero", "skip")
DTYPES = ("float32", "float64", "int64")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
SUFFIXES = (".npy", ".parquet", *ARROW_SUFFIXES, ".pt", ".csv")
STREAM_BYTES = 4 << 20  # iter_blocks() of an array: pieces of about this many bytes

PathLike = Union[str, "os.PathLike[str]"]


def _import_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        raise NotSupported(f"reading Parquet and Arrow files needs pyarrow ({e}): "
                           "pip install pyarrow") from None
    return pyarrow


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise NotSupported(f"reading .pt files needs torch ({e}): pip install torch") from None
    return torch


def _is_tensor(data: Any) -> bool:
    return type(data).__module__.split(".")[0] == "torch" and hasattr(data, "numpy")


class Source:
    """Rows of features, read as C-contiguous ``(rows, features)`` NumPy arrays.

    Made by :func:`open_source`. A source with random access (every kind but an iterable)
    answers :meth:`read` and :meth:`take`; every source streams with :meth:`iter_blocks`.

    Attributes
    ----------
    features : int
        Values per row.
    dtype : numpy.dtype
        float32 or float64 (int64 when asked, for basis indices).
    block_rows : int
        The natural unit of random access: rows of the largest block (a Parquet row group, an
        Arrow record batch; 1 for arrays in memory or memory-mapped, whose rows are read one by
        one as cheaply as together; an iterable's first item). Under ``null_policy="skip"`` it
        counts rows before any are dropped: an upper bound.
    random_access : bool
        Whether :meth:`read` and :meth:`take` work (False for an iterable).
    """

    features: int
    dtype: np.dtype
    block_rows: int
    random_access = True

    def __init__(self, features: int, dtype: np.dtype, block_rows: int) -> None:
        self.features = features
        self.dtype = np.dtype(dtype)
        self.block_rows = block_rows

    def __repr__(self) -> str:
        return (f"<qdp.readers.{type(self).__name__} rows={self.rows} features={self.features} "
                f"{self.dtype} block_rows={self.block_rows}>")

    @property
    def rows(self) -> Optional[int]:
        """Rows in all (None for an iterable, whose end is not known)."""
        raise NotImplementedError

    @property
    def block_starts(self) -> Optional[np.ndarray]:
        """The first row of each block and, last, ``rows`` (int64, blocks + 1 entries).

        None where every block is ``block_rows`` rows (arrays: blocks of one row) or the blocks
        are not known (an iterable).
        """
        return None

    def __len__(self) -> int:
        rows = self.rows
        if rows is None:
            raise TypeError("an iterable source has no length until it has been read")
        return rows

    def block_of(self, rows: Any) -> Any:
        """The block of each row index: an int for an int, an int64 array for an array."""
        self._need_random_access("block_of()")
        starts = self.block_starts
        if starts is None:
            return np.asarray(rows, dtype=np.int64) if np.ndim(rows) else int(rows)
        k = np.searchsorted(starts, rows, side="right") - 1
        return k if np.ndim(rows) else int(k)

    def read(self, start: int, stop: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Rows ``start`` to ``stop`` (excluded), reading only the blocks that hold them.

        Parameters
        ----------
        start, stop : int
            0 <= start <= stop <= rows.
        out : numpy.ndarray, optional
            ``(stop - start, features)`` of ``dtype`` to fill (a loader's shared-memory slot):
            an array source copies its rows there once, with no array in between.

        Returns
        -------
        numpy.ndarray
            C-contiguous ``(stop - start, features)`` of ``dtype``, owned by the caller
            (``out`` when given).

        Raises
        ------
        qdp.OutOfRange
            A bound outside [0, rows].
        qdp.NotSupported
            An iterable source.
        """
        self._need_random_access("read(start, stop)")
        rows = int(self.rows or 0)
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= rows:
            raise OutOfRange(f"read({start}, {stop}) of a source of {rows} rows: "
                             f"pass 0 <= start <= stop <= {rows}", field="start")
        if out is None:
            return self._read(start, stop)
        self._check_out(out, stop - start)
        self._read_into(start, stop, out)
        return out

    def take(self, indices: Any, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The rows of ``indices``, in that order (repeats allowed); into ``out`` when given
        (as :meth:`read`).

        Rows are gathered block by block (indices sorted by block), so each block is read once
        per call; the result follows the order asked.

        Parameters
        ----------
        indices : array_like of int
            Row indices in [0, rows), 1-D.

        Returns
        -------
        numpy.ndarray
            C-contiguous ``(len(indices), features)`` of ``dtype``.

        Raises
        ------
        qdp.OutOfRange
            An index outside [0, rows).
        qdp.NotSupported
            An iterable source: a shuffle needs random access.
        """
        self._need_random_access("shuffle")
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise InvalidArgument(f"take() takes a 1-D array of integer row indices, not "
                                  f"{idx.ndim}-D {idx.dtype}", field="indices")
        idx = idx.astype(np.int64, copy=False)
        rows = int(self.rows or 0)
        if idx.size and (idx.min() < 0 or idx.max() >= rows):
            bad = int(idx[(idx < 0) | (idx >= rows)][0])
            raise OutOfRange(f"row index {bad} of a source of {rows} rows: pass indices in "
                             f"[0, {rows})", field="indices")
        if out is None:
            return self._take(idx)
        self._check_out(out, len(idx))
        self._take_into(idx, out)
        return out

    def _check_out(self, out: np.ndarray, rows: int) -> None:
        if out.shape != (rows, self.features) or out.dtype != self.dtype:
            raise InvalidArgument(f"out must be ({rows}, {self.features}) {self.dtype}, not "
                                  f"{out.shape} {out.dtype}", field="out")

    def _read_into(self, start: int, stop: int, out: np.ndarray) -> None:
        np.copyto(out, self._read(start, stop))

    def _take_into(self, idx: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, self._take(idx))

    def in_memory(self) -> Optional[np.ndarray]:
        """The rows as one writable C-contiguous array of ``dtype`` in this process's memory,
        when the source holds them so (an array, not a memory map): a loader may then copy
        from it directly. None otherwise."""
        return None

    def iter_blocks(self, rows: Optional[int] = None) -> Iterator[np.ndarray]:
        """The rows in order, as arrays that do not cross a block boundary.

        Parameters
        ----------
        rows : int, optional
            At most this many rows an array. Default: a block whole for files and iterables;
            pieces of about 4 MiB for arrays.

        Yields
        ------
        numpy.ndarray
            C-contiguous ``(n, features)`` of ``dtype``, owned by the caller.
        """
        if rows is not None and int(rows) < 1:
            raise InvalidArgument(f"iter_blocks(rows={rows}): pass a positive row count",
                                  field="rows")
        for block in self._iter_blocks():
            if rows is None or len(block) <= rows:
                yield block
            else:
                for i in range(0, len(block), int(rows)):
                    yield np.ascontiguousarray(block[i:i + int(rows)])

    def __iter__(self) -> Iterator[np.ndarray]:
        return self.iter_blocks()

    def will_need(self, blocks: Iterable[int]) -> None:
        """A hint: ``blocks`` (numbers as of :meth:`block_of`) are read next, most urgent first.

        A Parquet or Arrow file starts decoding them ahead, up to its ``readahead``; other
        sources (arrays, iterables) have nothing to prepare and ignore it.
        """

    def close(self) -> None:
        """Lets go of the file (and the cached blocks); reads after it fail."""

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _need_random_access(self, what: str) -> None:
        if not self.random_access:
            raise NotSupported(f"{what} needs a source with random access: an iterable is read "
                               "only in order (iter_blocks); pass an array, a tensor or a file, "
                               "or read in order (shuffle=False)")

    def _read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def _take(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        raise NotImplementedError


class ArraySource(Source):
    """A NumPy array (in memory, or memory-mapped from a ``.npy``): blocks of one row.

    Rows are converted to ``dtype`` as they are read, so a memory-mapped file is never read
    whole.
    """

    def __init__(self, array: np.ndarray, dtype: np.dtype,
                 reopen: Optional[Tuple[Callable[..., Source], tuple, dict]] = None) -> None:
        super().__init__(array.shape[1], dtype, 1)
        self._array = array
        self._reopen = reopen

    def __reduce__(self) -> Any:
        # A memory-mapped file is opened again by its path rather than pickled whole.
        if self._reopen is not None:
            fn, args, kwargs = self._reopen
            return (_call, (fn, args, kwargs))
        return (ArraySource, (self._array, self.dtype))

    @property
    def rows(self) -> int:
        return self._array.shape[0]

    def in_memory(self) -> Optional[np.ndarray]:
        a = self._array
        if isinstance(a, np.memmap) or isinstance(a.base, mmap.mmap) or a.dtype != self.dtype \
                or not a.flags.c_contiguous or not a.flags.writeable:
            return None
        return a

    def _read(self, start: int, stop: int) -> np.ndarray:
        return np.array(self._array[start:stop], dtype=self.dtype, order="C", copy=True)

    def _take(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self.features), dtype=self.dtype)
        self._take_into(idx, out)
        return out

    def _read_into(self, start: int, stop: int, out: np.ndarray) -> None:
        np.copyto(out, self._array[start:stop], casting="unsafe")

    def _take_into(self, idx: np.ndarray, out: np.ndarray) -> None:
        if not isinstance(self._array, np.memmap) and self._array.dtype == self.dtype:
            np.take(self._array, idx, axis=0, out=out)  # one gather, nothing in between
            return
        order = np.argsort(idx, kind="stable")
        out[order] = self._array[idx[order]]  # in file order: a memory map reads pages in turn

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        step = max(1, STREAM_BYTES // max(1, self.features * self.dtype.itemsize))
        for i in range(0, self.rows, step):
            yield self._read(i, min(i + step, self.rows))

    def close(self) -> None:
        self._array = np.empty((0, self.features), dtype=self.dtype)


class IterableSource(Source):
    """An iterable of 2-D arrays (or tensors), read only in order; ``rows`` is None.

    An iterator (a generator) is read once; a re-iterable (a list, an object whose
    ``__iter__`` makes a new iterator) once per :meth:`iter_blocks`. Items after the first are
    converted to its dtype and must have its features.
    """

    random_access = False

    def __init__(self, items: Iterable[Any], dtype: Optional[str]) -> None:
        self._items = items
        self._once = iter(items) is items
        self._used = False
        self._asked = dtype
        it = iter(items)
        try:
            first = next(it)
        except StopIteration:
            raise InvalidArgument("the iterable yielded no arrays: a source needs at least one "
                                  "row to know its features", field="data") from None
        first_arr = _item_array(first, 0, dtype)
        self._first: Optional[Tuple[np.ndarray, Iterator[Any]]] = (first_arr, it)
        super().__init__(first_arr.shape[1], first_arr.dtype, first_arr.shape[0])

    @property
    def rows(self) -> None:
        return None

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        if self._first is not None:
            first, it = self._first
            self._first = None
        else:
            if self._once:
                raise InvalidArgument("the iterator was read to its end already: for several "
                                      "passes give a re-iterable (a list, or an object whose "
                                      "__iter__ makes a new iterator)", field="data")
            it = iter(self._items)
            first = _item_array(next(it), 0, self._asked)
        row = 0
        for i, item in enumerate(_chain(first, it)):
            arr = item if i == 0 else _item_array(item, i, self._asked)
            if arr.shape[1] != self.features:
                raise InvalidArgument(f"item {i} (from row {row}) has {arr.shape[1]} features "
                                      f"a row, item 0 has {self.features}: every item needs "
                                      "the same", field="data")
            if arr.dtype != self.dtype:
                arr = arr.astype(self.dtype, casting="same_kind")
            row += len(arr)
            yield np.ascontiguousarray(arr)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


class _Pending:
    """A block asked for and not in the cache yet: the future its readers wait on."""

    __slots__ = ("future", "shared")

    def __init__(self, future: "concurrent.futures.Future[np.ndarray]") -> None:
        self.future = future
        self.shared = False  # a second reader waits on it too: the array is not one's own


class _BlockSource(Source):
    """A file read block by block through ``_load_block``, with a cache of ``cache_blocks`` and
    up to ``readahead`` blocks decoded ahead on a pool of threads.

    A block is in at most one of: the cache (LRU), ``_ahead`` (started before it was asked:
    by a read, for the blocks after the one it asked, or by :meth:`will_need`; oldest first)
    and ``_loading`` (asked by a reader, decoding or awaited). The lock guards these dicts
    only; no decode and no wait runs under it, so readers of different blocks go on side by
    side. With ``readahead=0`` the lock is held through each decode, on ``_main_handle()``, and
    no thread is started.
    """

    def __init__(self, features: int, dtype: np.dtype, block_sizes: np.ndarray,
                 null_policy: str, cache_blocks: int,
                 reopen: Tuple[Callable[..., Source], tuple, dict],
                 readahead: Optional[int] = None) -> None:
        super().__init__(features, dtype, int(block_sizes.max()) if len(block_sizes) else 0)
        self._sizes = block_sizes.astype(np.int64)  # rows of each block in the file
        self._null_policy = null_policy
        self._cache_blocks = max(0, int(cache_blocks))
        self._readahead = _readahead_arg(readahead, self.block_rows * features * dtype.itemsize)
        self._cache: "collections.OrderedDict[int, np.ndarray]" = collections.OrderedDict()
        self._lock = threading.RLock()
        self._starts: Optional[np.ndarray] = None
        self._reopen = reopen
        self._file_starts = np.concatenate([[0], np.cumsum(self._sizes)]).astype(np.int64)
        if null_policy != "skip":
            self._starts = self._file_starts
        self._closed = False
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # block -> (its decode, whether will_need asked for it rather than a read guessing)
        self._ahead: collections.OrderedDict[
            int, Tuple[concurrent.futures.Future[np.ndarray], bool]] = collections.OrderedDict()
        self._loading: Dict[int, _Pending] = {}
        self._handles_lock = threading.Lock()
        self._free_handles: List[Any] = []  # file handles of decodes that ended, for the next
        if self._readahead:
            _THREADED.add(self)

    def __reduce__(self) -> Any:
        fn, args, kwargs = self._reopen
        return (_call, (fn, args, kwargs))

    def __repr__(self) -> str:
        rows = self.rows if self._starts is not None else "(after a scan)"
        return (f"<qdp.readers.{type(self).__name__} rows={rows} blocks={self.blocks} "
                f"features={self.features} {self.dtype} block_rows={self.block_rows}>")

    @property
    def blocks(self) -> int:
        """Blocks in the file."""
        return len(self._sizes)

    @property
    def readahead(self) -> int:
        """Blocks that may be decoding or decoded ahead at once, beyond the cache (0: none)."""
        return self._readahead

    @property
    def rows(self) -> int:
        return int(self.block_starts[-1])

    @property
    def block_starts(self) -> np.ndarray:
        if self._starts is None:
            with self._lock:
                if self._starts is None:
                    scan = [k for k in range(self.blocks) if self._maybe_nulls(k) is not False]
                    dropped = dict(zip(scan, self._decode_each(self._null_count, scan)))
                    kept = [self._sizes[k] - dropped.get(k, 0) for k in range(self.blocks)]
                    self._starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
        return self._starts

    @property
    def cached_blocks(self) -> Tuple[int, ...]:
        """The blocks held now, least recently used first."""
        with self._lock:
            return tuple(self._cache)

    @property
    def ahead_blocks(self) -> Tuple[int, ...]:
        """The blocks decoding or decoded ahead of being asked, oldest first (at most
        ``readahead``)."""
        with self._lock:
            return tuple(self._ahead)

    def block(self, k: int) -> np.ndarray:
        """Block ``k`` whole, as rows after ``null_policy`` (through the cache; do not modify)."""
        if not 0 <= k < self.blocks:
            raise OutOfRange(f"block {k} of {self.blocks}", field="block")
        return self._get(k, own=False)

    def will_need(self, blocks: Iterable[int]) -> None:
        """Starts decoding ``blocks``, in the order given, so that reads of them find them
        decoded: the blocks of the batches to come where they are not simply the next ones
        (a shuffled epoch).

        Blocks cached or started already are passed over; as many start as ``readahead``
        allows. To make room, blocks decoded ahead and not asked since, oldest first, are
        dropped (never one of ``blocks``, never one still decoding). A no-op with
        ``readahead=0``.

        Parameters
        ----------
        blocks : iterable of int
            Block numbers in [0, blocks), most urgent first.

        Raises
        ------
        qdp.OutOfRange
            A block outside [0, blocks).
        """
        try:
            ks = [operator.index(k) for k in blocks]
        except TypeError:
            raise InvalidArgument("will_need() takes an iterable of integer block numbers",
                                  field="blocks") from None
        bad = [k for k in ks if not 0 <= k < self.blocks]
        if bad:
            raise OutOfRange(f"block {bad[0]} of a source of {self.blocks} blocks: pass "
                             f"blocks in [0, {self.blocks})", field="blocks")
        with self._lock:
            self._start(ks, hinted=True)

    def _get(self, k: int, own: bool) -> np.ndarray:
        """Block ``k``: the cached array (do not modify), or with ``own`` one of the caller's
        own, not kept in the cache (iter_blocks: a stream would only push out what reads use)."""
        if not self._readahead:
            with self._lock:
                cached = self._cache.get(k)
                if own:
                    return cached.copy() if cached is not None else self._load_block(k)
                if cached is not None:
                    self._cache.move_to_end(k)
                    return cached
                while self._cache and len(self._cache) >= self._cache_blocks:
                    self._cache.popitem(last=False)  # before the load: at most cache_blocks
                arr = self._load_block(k)
                if self._cache_blocks:
                    self._cache[k] = arr
                return arr
        while True:
            with self._lock:
                cached = self._cache.get(k)
                if cached is not None:
                    self._cache.move_to_end(k)
                    return cached.copy() if own else cached
                pending = self._loading.get(k)
                decode_here = False
                if pending is not None:
                    pending.shared = True
                else:
                    started, hinted = self._ahead.pop(k, (None, False))
                    decode_here = started is None
                    pending = _Pending(started or concurrent.futures.Future())
                    self._loading[k] = pending
                    if not hinted:  # a miss, or a guess that came true: the next blocks too
                        self._start(range(k + 1, min(k + 1 + self._readahead, self.blocks)),
                                    hinted=False)
            if decode_here:
                try:
                    pending.future.set_result(self._load_block(k))
                except BaseException as e:  # to every reader of the block, as to this one
                    pending.future.set_exception(e)
            try:
                arr = pending.future.result()
            except concurrent.futures.CancelledError:
                self._unload(k, pending)  # cancelled by close() before it began: read it here
                continue
            except BaseException:
                self._unload(k, pending)  # the next reader of the block decodes it again
                raise
            with self._lock:
                if self._loading.get(k) is pending:
                    del self._loading[k]
                if own and not pending.shared:
                    return arr
                if self._cache_blocks and not self._closed and k not in self._cache:
                    while len(self._cache) >= self._cache_blocks:
                        self._cache.popitem(last=False)
                    self._cache[k] = arr
            return arr.copy() if own else arr

    def _unload(self, k: int, pending: _Pending) -> None:
        with self._lock:
            if self._loading.get(k) is pending:
                del self._loading[k]

    def _start(self, ks: Iterable[int], hinted: bool, keep: Iterable[int] = ()) -> None:
        """Under the lock: submits the decodes of blocks ``ks`` in order, up to the bound.

        Room is made by dropping the oldest block ahead that is decoded or not begun, is not
        one of ``ks`` or ``keep`` and, for a read's guess (``hinted`` False), was a guess too.
        """
        if self._closed or not self._readahead:
            return
        ks = list(ks)
        named = set(ks).union(keep)
        for k in ks:
            if k in self._ahead:
                if hinted:
                    self._ahead[k] = (self._ahead[k][0], True)
                continue
            if k in self._cache or k in self._loading:
                continue
            if len(self._ahead) >= self._readahead and not self._drop_one(named, hinted):
                return
            self._ahead[k] = (self._executor().submit(self._load_block, k), hinted)

    def _drop_one(self, keep: set, hinted: bool) -> bool:
        for j, (fut, was_hinted) in self._ahead.items():
            if j in keep or (was_hinted and not hinted):
                continue
            if fut.done() or fut.cancel():  # one still decoding would stay in memory
                del self._ahead[j]
                return True
        return False

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._readahead, thread_name_prefix="qdp-readahead")
        return self._pool

    def _decode_each(self, fn: Callable[[int], Any], ks: List[int]) -> Iterable[Any]:
        """``fn`` of each of ``ks``, on the pool where there is one (``readahead`` at once)."""
        if self._readahead and not self._closed and len(ks) > 1:
            return self._executor().map(fn, ks)
        return map(fn, ks)

    def _null_count(self, k: int) -> int:
        return int(self._null_rows(k).sum())

    def _read(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self.features), dtype=self.dtype)
        if stop == start:
            return out
        starts = self.block_starts
        k = self.block_of(start)
        while k < self.blocks and starts[k] < stop:
            lo, hi = max(start, starts[k]), min(stop, starts[k + 1])
            if hi > lo:
                block = self.block(k)
                out[lo - start:hi - start] = block[lo - starts[k]:hi - starts[k]]
                del block
            k += 1
        return out

    def _take(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self.features), dtype=self.dtype)
        if not len(idx):
            return out
        starts = self.block_starts
        blk = self.block_of(idx)
        order = np.argsort(blk, kind="stable")
        sorted_blk = blk[order]
        cuts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_blk)) + 1, [len(idx)]])
        needed = [int(k) for k in sorted_blk[cuts[:-1]]]
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            k = needed[i]
            if self._readahead:  # the blocks after this one are known: not a guess
                with self._lock:
                    self._start(needed[i + 1:i + 1 + self._readahead], hinted=True, keep=(k,))
            pos = order[a:b]
            block = self.block(k)
            out[pos] = block[idx[pos] - starts[k]]
            del block
        return out

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        for k in range(self.blocks):
            yield self._get(k, own=True)

    def close(self) -> None:
        """Lets go of the file and the blocks held: decodes under way are waited for, those
        not begun are cancelled. Reads after it fail."""
        with self._lock:
            self._closed = True
            self._cache.clear()
            ahead = [fut for fut, _ in self._ahead.values()]
            self._ahead.clear()
            pool, self._pool = self._pool, None
        for fut in ahead:
            fut.cancel()
        if pool is not None:
            # Decodes under way end (a reader waiting on one gets it); those not begun are
            # cancelled, and their readers read through the closed file, failing as after close.
            pool.shutdown(wait=True, cancel_futures=True)
        with self._handles_lock:
            free, self._free_handles = self._free_handles, []
        for h in free:
            self._close_handle(h)
        with self._lock:
            self._close()

    def _after_fork(self) -> None:
        """In a forked child: the parent's threads are not there, nor is what they were doing."""
        self._lock = threading.RLock()
        self._handles_lock = threading.Lock()
        self._pool = None
        self._ahead = collections.OrderedDict()
        self._loading = {}
        self._free_handles = []  # dropped with the parent's threads: this process opens its own

    @contextlib.contextmanager
    def _handle(self) -> Iterator[Any]:
        """A file handle for one decode: pyarrow's readers are not shared between threads, so
        each decode running takes one of its own (kept for later decodes) while there are
        threads; the main one under the lock with ``readahead=0``, and after close (so reads
        fail as they did)."""
        if not self._readahead:
            yield self._main_handle()  # the caller holds the lock
            return
        if self._closed:
            # No decode waits on the pool under the lock once closed (the scan of
            # block_starts runs on this thread then), so a pool thread may take it too.
            with self._lock:
                yield self._main_handle()
            return
        with self._handles_lock:
            h = self._free_handles.pop() if self._free_handles else None
        if h is None:
            h = self._open_handle()
        try:
            yield h
        finally:
            with self._handles_lock:
                keep = not self._closed
                if keep:
                    self._free_handles.append(h)
            if not keep:
                self._close_handle(h)

    # A file kind gives these.
    def _load_block(self, k: int) -> np.ndarray:
        """Block ``k`` converted: a fresh C-contiguous (n, features) array, nulls handled."""
        raise NotImplementedError

    def _maybe_nulls(self, k: int) -> Optional[bool]:
        """False when the metadata says block ``k`` has no nulls; True or None (not known)."""
        return None

    def _null_rows(self, k: int) -> np.ndarray:
        """A bool per row of block ``k`` of the file: whether it holds a null."""
        raise NotImplementedError

    def _main_handle(self) -> Any:
        """The handle opened with the source, which also answers for its metadata."""
        raise NotImplementedError

    def _open_handle(self) -> Any:
        """Another handle on the same file, for a decode thread."""
        raise NotImplementedError

    def _close_handle(self, h: Any) -> None:
        """Lets go of a handle of ``_open_handle``."""
        raise NotImplementedError

    def _close(self) -> None:
        pass


_THREADED: "weakref.WeakSet[_BlockSource]" = weakref.WeakSet()  # sources that start threads


def _forget_threads_after_fork() -> None:
    for src in list(_THREADED):
        src._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads_after_fork)


#: Decoded rows that blocks ahead may hold by default (``readahead=None``).
READAHEAD_BYTES = 1 << 30


def _readahead_arg(readahead: Any, block_bytes: int) -> int:
    """``readahead`` checked; None as the default: the blocks of ``block_bytes`` that fit in
    READAHEAD_BYTES, 1 to min(8, CPUs) (beyond about 8 decodes pyarrow gains little)."""
    if readahead is None:
        return max(1, min(8, os.cpu_count() or 1, READAHEAD_BYTES // max(1, block_bytes)))
    if isinstance(readahead, bool) or not isinstance(readahead, (int, np.integer)) or \
            readahead < 0:
        raise InvalidArgument(f"readahead={readahead!r}: pass a whole number of blocks >= 0 "
                              "(0 decodes on the reading thread only, with no threads)",
                              field="readahead")
    return int(readahead)


class _Features:
    """Which columns of an Arrow schema make the features, and how they are converted."""

    def __init__(self, pa: Any, schema: Any, columns: Optional[Sequence[str]],
                 dtype: Optional[str], where: str) -> None:
        names = list(schema.names)
        described = ", ".join(f"{f.name} ({f.type})" for f in schema)
        if columns is not None:
            if isinstance(columns, str):
                raise InvalidArgument(f"columns={columns!r}: pass a list of column names, "
                                      f"columns=[{columns!r}]", field="columns")
            columns = list(columns)
            if not columns:
                raise InvalidArgument("columns=[]: name at least one column", field="columns")
            missing = [c for c in columns if c not in names]
            if missing:
                raise InvalidArgument(f"{where} has no column {missing[0]!r}; its columns: "
                                      f"{described}", field="columns")
            if len(set(columns)) != len(columns):
                raise InvalidArgument(f"columns={columns}: a column is named twice",
                                      field="columns")
        elif len(names) == 1:
            columns = names
        else:
            lists = [f.name for f in schema if _is_list(pa, f.type)]
            columns = [f.name for f in schema if _numeric(pa, f.type)]
            if lists:
                raise InvalidArgument(f"{where} has several columns, among them the list "
                                      f"column {lists[0]!r}: pass columns=[{lists[0]!r}] for "
                                      "it, or columns=[...] naming numeric columns; its "
                                      f"columns: {described}", field="columns")
            if not columns:
                raise InvalidArgument(f"{where} has no numeric column; its columns: "
                                      f"{described}: pass columns=[...]", field="columns")
        fields = [schema.field(c) for c in columns]
        bad = [f for f in fields if not (_numeric(pa, f.type) or _is_list(pa, f.type))]
        if bad:
            raise InvalidArgument(f"column {bad[0].name!r} of {where} is {bad[0].type}, not "
                                  "numbers: name numeric columns or one list column of numbers",
                                  field="columns")
        is_list = [_is_list(pa, f.type) for f in fields]
        if any(is_list) and len(fields) > 1:
            raise InvalidArgument(f"columns={columns} mixes a list column with others: name "
                                  "one list column, or numeric columns only", field="columns")
        self.columns: List[str] = columns
        self.list = is_list[0]
        types = [f.type.value_type for f in fields] if self.list else [f.type for f in fields]
        if self.list and not _numeric(pa, types[0]):
            raise InvalidArgument(f"column {columns[0]!r} of {where} is {fields[0].type}: a "
                                  "list column must hold numbers", field="columns")
        self.size: Optional[int] = (fields[0].type.list_size
                                    if self.list and pa.types.is_fixed_size_list(fields[0].type)
                                    else None if self.list else len(fields))
        self.dtype = _arrow_dtype(pa, columns, types, dtype, where)


def _is_list(pa: Any, t: Any) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _numeric(pa: Any, t: Any) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _arrow_dtype(pa: Any, columns: List[str], types: List[Any], dtype: Optional[str],
                 where: str) -> np.dtype:
    if dtype == "int64":
        floats = [c for c, t in zip(columns, types) if pa.types.is_floating(t)]
        if floats:
            raise InvalidArgument(f"dtype='int64' but column {floats[0]!r} of {where} holds "
                                  "floating-point numbers: pass dtype='float32' or 'float64'",
                                  field="dtype")
        return np.dtype(np.int64)
    if dtype is not None:
        return np.dtype(dtype)
    wanted = {c: np.float32 if pa.types.is_float32(t) else np.float64
              for c, t in zip(columns, types)}
    if len(set(wanted.values())) > 1:
        f32 = [c for c, d in wanted.items() if d is np.float32]
        other = [c for c, d in wanted.items() if d is not np.float32]
        raise InvalidArgument(f"columns of {where} mix float32 ({f32[0]!r}) with other types "
                              f"({other[0]!r}, {types[columns.index(other[0])]}): pass "
                              "dtype='float32' or dtype='float64' to convert them all",
                              field="columns")
    return np.dtype(next(iter(wanted.values())))


def _column(data: Any, name: str) -> Any:
    col = data.column(name)
    return col.combine_chunks() if hasattr(col, "combine_chunks") else col


def _values(pa: Any, arr: Any, dtype: np.dtype) -> np.ndarray:
    """A flat Arrow array of numbers as a fresh NumPy array of ``dtype``, nulls as 0."""
    if arr.null_count:
        arr = arr.fill_null(0)
    return np.array(arr.to_numpy(zero_copy_only=False), dtype=dtype, copy=True)


def _nulls(arr: Any) -> Optional[np.ndarray]:
    if not arr.null_count:
        return None
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _convert(pa: Any, data: Any, feat: _Features, policy: str, row0: int, where: str,
             want: Optional[int]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """An Arrow table or record batch's features: (n, F) values (nulls as 0), null-row mask.

    ``row0`` is the global index of its first row, named in errors; ``want`` the features of a
    list column once known (else taken from its first row that is not null).
    """
    n = data.num_rows
    if not feat.list:
        out = np.empty((n, len(feat.columns)), dtype=feat.dtype)
        mask: Optional[np.ndarray] = None
        first: Optional[Tuple[int, str]] = None
        for j, name in enumerate(feat.columns):
            arr = _column(data, name)
            out[:, j] = _values(pa, arr, feat.dtype)
            m = _nulls(arr)
            if m is not None:
                i = int(np.argmax(m))
                if first is None or i < first[0]:
                    first = (i, name)
                mask = m if mask is None else mask | m
        if first is not None and policy == "error":
            _null_error(row0 + first[0], first[1], where)
        return out, mask
    name = feat.columns[0]
    arr = _column(data, name)
    row_null = _nulls(arr)
    size = feat.size or want
    if feat.size is None:
        lengths = pa.compute.list_value_length(arr).to_numpy(zero_copy_only=False)
        valid = ~row_null if row_null is not None else np.ones(n, dtype=bool)
        if size is None and valid.any():
            size = int(lengths[np.argmax(valid)])
        bad = np.flatnonzero(valid & (np.nan_to_num(lengths, nan=-1) != (size or 0)))
        if bad.size:
            i = int(bad[0])
            raise InvalidArgument(f"row {row0 + i} of column {name!r} of {where} has "
                                  f"{int(lengths[i])} values, earlier rows {size}: every row's "
                                  "list needs the same number of values", field="columns")
    if size is None:  # every row null, features not known yet: checked by the caller
        size = 0
    flat = arr.flatten()  # the values of rows that are not null
    elem_null = _nulls(flat)
    vals = _values(pa, flat, feat.dtype).reshape(-1, size) if size else None
    if row_null is None and elem_null is None and vals is not None:
        return vals, None  # the common case: one copy out of Arrow, no zeroing, no second copy
    out = np.zeros((n, size), dtype=feat.dtype)
    if row_null is None:
        if vals is not None:
            out[:] = vals
        mask = None
    else:
        if vals is not None:
            out[~row_null] = vals
        mask = row_null.copy()
    if elem_null is not None:
        per_row = elem_null.reshape(-1, size).any(axis=1)
        if mask is None:
            mask = per_row
        else:
            assert row_null is not None  # a mask before this one is of null rows
            mask[~row_null] |= per_row
    if mask is not None and policy == "error":
        _null_error(row0 + int(np.argmax(mask)), name, where)
    return out, mask


def _null_error(row: int, column: str, where: str) -> None:
    raise InvalidArgument(f"row {row}, column {column!r} of {where} is null: fill it, or pass "
                          "null_policy='zero' (read as 0) or 'skip' (drop the row)",
                          field="data")


class _ArrowFileSource(_BlockSource):
    """Parquet (row groups) and Arrow IPC files (record batches) through pyarrow."""

    def __init__(self, pa: Any, path: str, feat: _Features, sizes: np.ndarray,
                 null_policy: str, cache_blocks: int,
                 reopen: Tuple[Callable[..., Source], tuple, dict],
                 readahead: Optional[int]) -> None:
        self._pa = pa
        self._path = path
        self._feat = feat
        self._identity = _identity(os.stat(path))  # decode threads open the path again
        features = self._feat.size
        if features is None:
            features = self._first_list_size(len(sizes))
        if features == 0:
            raise InvalidArgument(f"column {self._feat.columns[0]!r} of {path} has lists of "
                                  "no values: a row needs at least one feature", field="columns")
        super().__init__(features, self._feat.dtype, sizes, null_policy, cache_blocks, reopen,
                         readahead)
        if null_policy == "error":  # fail at open where the metadata says there are nulls
            for k in range(self.blocks):
                if self._maybe_nulls(k):
                    self._load_block(k)

    @property
    def columns(self) -> List[str]:
        """The columns read as features."""
        return list(self._feat.columns)

    def _first_list_size(self, blocks: int) -> int:
        pc = self._pa.compute
        for k in range(blocks):
            arr = _column(self._read_arrow(k, self._main_handle()), self._feat.columns[0])
            lengths = pc.list_value_length(arr).drop_null()
            if len(lengths):
                return int(lengths[0].as_py())
        raise InvalidArgument(f"column {self._feat.columns[0]!r} of {self._path} has no row "
                              "that is not null: its features are not known", field="columns")

    def _load_block(self, k: int) -> np.ndarray:
        with self._handle() as h:  # through the conversion: the data may be the handle's map
            out, mask = _convert(self._pa, self._read_arrow(k, h), self._feat,
                                 self._null_policy, int(self._file_starts[k]), self._path,
                                 self.features)
        if mask is not None and self._null_policy == "skip":
            out = out[~mask]
        return np.ascontiguousarray(out)

    def _null_rows(self, k: int) -> np.ndarray:
        with self._handle() as h:
            _, mask = _convert(self._pa, self._read_arrow(k, h), self._feat, "zero",
                               int(self._file_starts[k]), self._path, self.features)
        return mask if mask is not None else np.zeros(int(self._sizes[k]), dtype=bool)

    def _check_same_file(self, fd: int) -> None:
        """Refuses a file at the path that is not the one opened (replaced or rewritten): its
        blocks are not those of the metadata read at open."""
        if _identity(os.fstat(fd)) != self._identity:
            raise Aborted(f"{self._path} changed since the source was opened (another file "
                          "now has its name, or it was rewritten): open the source again to "
                          "read the new file", field="data")

    def _read_arrow(self, k: int, h: Any) -> Any:
        """Block ``k`` of the file through handle ``h``: its feature columns, as Arrow data."""
        raise NotImplementedError


def _identity(st: os.stat_result) -> Tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ParquetSource(_ArrowFileSource):
    """A Parquet file: a block is a row group, read (decoded) when a row of it is asked."""

    def __init__(self, path: str, columns: Any, null_policy: str, dtype: Optional[str],
                 cache_blocks: int, reopen: Tuple[Callable[..., Source], tuple, dict],
                 readahead: Optional[int] = None) -> None:
        pa = _import_pyarrow()
        try:
            self._file = pa.parquet.ParquetFile(path)
        except pa.ArrowInvalid as e:
            raise InvalidArgument(f"{path} is not a Parquet file: {e}", field="data") from None
        meta = self._file.metadata
        sizes = np.array([meta.row_group(k).num_rows for k in range(meta.num_row_groups)],
                         dtype=np.int64)
        feat = _Features(pa, self._file.schema_arrow, columns, dtype, path)
        super().__init__(pa, path, feat, sizes, null_policy, cache_blocks, reopen, readahead)

    def _read_arrow(self, k: int, h: Any) -> Any:
        try:
            return h.read_row_group(k, columns=self._feat.columns)
        except self._pa.ArrowInvalid as e:
            hint = ""
            if self._feat.list and self._feat.size is not None:
                hint = ("; pyarrow before 26 cannot read null rows of a fixed-size list column "
                        "from Parquet: write the column as a plain list, fill its nulls, or "
                        "use a newer pyarrow")
            raise InvalidArgument(f"row group {k} of {self._path} cannot be read with pyarrow "
                                  f"{self._pa.__version__}: {e}{hint}", field="data") from None

    def _maybe_nulls(self, k: int) -> Optional[bool]:
        # Statistics of the leaf columns (a list column's values: "x.list.element"); their
        # null counts include null lists.
        rg = self._file.metadata.row_group(k)
        total = 0
        for j in range(rg.num_columns):
            col = rg.column(j)
            path = col.path_in_schema
            if not any(path == c or path.startswith(c + ".") for c in self._feat.columns):
                continue
            stats = col.statistics
            if stats is None or not stats.has_null_count:
                return None
            total += stats.null_count
        return total > 0

    def _main_handle(self) -> Any:
        return self._file

    def _open_handle(self) -> Any:
        f = self._pa.OSFile(self._path, "r")
        try:
            self._check_same_file(f.fileno())
            # The footer parsed at open serves again: only the row groups are read.
            return self._pa.parquet.ParquetFile(f, metadata=self._file.metadata)
        except BaseException:
            f.close()
            raise

    def _close_handle(self, h: Any) -> None:
        h.close(force=True)  # and the file under it, which it was given and so does not own

    def _close(self) -> None:
        close = getattr(self._file, "close", None)  # pyarrow 8 and later
        if close is not None:
            close()


class ArrowSource(_ArrowFileSource):
    """An Arrow IPC file (``.arrow``, ``.feather`` v2, ``.ipc``), memory-mapped: a block is a
    record batch, its pages read when a row of it is asked.

    Opening reads each batch's header (its rows and null counts); for a compressed file that
    decompresses each batch once, one at a time.
    """

    def __init__(self, path: str, columns: Any, null_policy: str, dtype: Optional[str],
                 cache_blocks: int, reopen: Tuple[Callable[..., Source], tuple, dict],
                 readahead: Optional[int] = None) -> None:
        pa = _import_pyarrow()
        self._map = pa.memory_map(path, "r")
        try:
            self._reader = pa.ipc.open_file(self._map)
        except pa.ArrowInvalid as e:
            self._map.close()
            raise InvalidArgument(
                f"{path} is not an Arrow IPC file ({e}): an IPC stream, or a Feather v1 file, "
                "has no random access; write it with pyarrow.ipc.new_file or "
                "pyarrow.feather.write_feather(..., version=2)", field="data") from None
        try:
            feat = _Features(pa, self._reader.schema, columns, dtype, path)
        except InvalidArgument:
            self._map.close()
            raise
        sizes, self._batch_nulls = [], []
        for k in range(self._reader.num_record_batches):
            batch = self._reader.get_batch(k)
            sizes.append(batch.num_rows)
            count = 0
            for name in feat.columns:
                arr = batch.column(name)
                count += arr.null_count
                if _is_list(pa, arr.type):
                    count += arr.flatten().null_count
            self._batch_nulls.append(count > 0)
            del batch
        super().__init__(pa, path, feat, np.array(sizes, dtype=np.int64), null_policy,
                         cache_blocks, reopen, readahead)

    def _maybe_nulls(self, k: int) -> Optional[bool]:
        return self._batch_nulls[k]

    def _read_arrow(self, k: int, h: Any) -> Any:
        _, reader = h
        return reader.get_batch(k).select(self._feat.columns)

    # A handle is a memory map and an IPC reader of it. The C++ file reader keeps state of its
    # own between batches (the dictionaries read, its counters) and is not documented as safe
    # to share between threads, so each decode thread maps the file on its own.
    def _main_handle(self) -> Any:
        return self._map, self._reader

    def _open_handle(self) -> Any:
        m = self._pa.memory_map(self._path, "r")
        try:
            self._check_same_file(m.fileno())
            return m, self._pa.ipc.open_file(m)
        except BaseException:
            m.close()
            raise

    def _close_handle(self, h: Any) -> None:
        h[0].close()

    def _close(self) -> None:
        self._map.close()


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
        ``min(8, CPUs)``; 0 decodes only the block a read asks, on the reading thread, one read at a time, with
        no threads. A file source holds at most ``cache_blocks + readahead`` decoded blocks,
        plus the one each reading thread is converting or waiting for.

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
        return ArraySource(_as_rows(data, dtype, "the array"), _out_dtype(data, dtype))
    if _is_tensor(data):
        arr = _tensor_numpy(data)
        return ArraySource(_as_rows(arr, dtype, "the tensor"), _out_dtype(arr, dtype))
    if hasattr(data, "__array__"):  # a pandas DataFrame, an xarray, ...
        arr = np.asarray(data)
        return ArraySource(_as_rows(arr, dtype, f"the {type(data).__name__}"),
                           _out_dtype(arr, dtype))
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
        arr = _read_csv(path, columns, null_policy, dtype)
        return ArraySource(arr, arr.dtype, reopen)
    if columns is not None and suffix == ".npy":
        raise InvalidArgument(f"columns= does not apply to {path}: a .npy holds one array",
                              field="columns")
    if suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as e:
            raise InvalidArgument(f"{path} cannot be memory-mapped ({e}): save a numeric "
                                  "array with np.save", field="data") from None
        return ArraySource(_as_rows(arr, dtype, path), _out_dtype(arr, dtype), reopen)
    arr = _load_pt(path, columns)
    return ArraySource(_as_rows(arr, dtype, path), _out_dtype(arr, dtype), reopen)


def _out_dtype(arr: np.ndarray, dtype: Optional[str]) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    if arr.dtype in (np.float32, np.float64):
        return arr.dtype
    return np.dtype(np.float64)


def _as_rows(arr: np.ndarray, dtype: Optional[str], where: str) -> np.ndarray:
    kind = arr.dtype.kind
    if kind not in "iuf":
        raise InvalidArgument(f"{where} is of dtype {arr.dtype}, not numbers: pass float32, "
                              "float64 or integers", field="data")
    if dtype == "int64" and kind == "f":
        raise InvalidArgument(f"dtype='int64' but {where} holds {arr.dtype}: integers only "
                              "(basis indices), or pass dtype='float32' or 'float64'",
                              field="dtype")
    if arr.ndim == 1:
        return arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise InvalidArgument(f"{where} has shape {arr.shape}: pass 2-D (rows x features), or "
                              "1-D for rows of one value", field="data")
    if arr.shape[1] == 0:
        raise InvalidArgument(f"{where} has shape {arr.shape}: a row needs at least one "
                              "feature", field="data")
    return arr


def _tensor_numpy(t: Any) -> np.ndarray:
    if t.device.type != "cpu":
        raise NotSupported(f"a tensor on {t.device}: a source reads CPU memory; pass "
                           "tensor.cpu()", field="data")
    t = t.detach()
    if t.is_floating_point() and t.element_size() == 2:  # float16, bfloat16: no NumPy view
        t = t.double()
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as e:
        raise InvalidArgument(f"a tensor of {t.dtype} ({e}): pass float32, float64 or "
                              "integers", field="data") from None


def _item_array(item: Any, i: int, dtype: Optional[str]) -> np.ndarray:
    arr = _tensor_numpy(item) if _is_tensor(item) else np.asarray(item)
    if arr.ndim != 2:
        raise InvalidArgument(f"item {i} of the iterable has shape {arr.shape}: yield 2-D "
                              "arrays (rows x features): x[None, :] for one row, x[:, None] "
                              "for rows of one value (a list of rows: pass np.asarray(rows))",
                              field="data")
    arr = _as_rows(arr, dtype, f"item {i} of the iterable")
    return np.ascontiguousarray(arr, dtype=_out_dtype(arr, dtype))


def _load_pt(path: str, columns: Any) -> np.ndarray:
    torch = _import_torch()
    kwargs: Dict[str, Any] = {"map_location": "cpu"}
    params = inspect.signature(torch.load).parameters
    if "weights_only" in params:
        kwargs["weights_only"] = True  # tensors and containers, no code run from the file
    if "mmap" in params:
        kwargs["mmap"] = True
    try:
        obj = torch.load(path, **kwargs)
    except RuntimeError:
        kwargs.pop("mmap", None)  # a file of the legacy (not zip) format cannot be mapped
        obj = torch.load(path, **kwargs)
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if columns is not None:
            cols = [columns] if isinstance(columns, str) else list(columns)
            if len(cols) != 1 or cols[0] not in tensors:
                raise InvalidArgument(f"columns={columns!r}: {path} holds tensors "
                                      f"{sorted(map(str, tensors))}; name one, "
                                      "columns=[key]", field="columns")
            obj = tensors[cols[0]]
        elif len(tensors) == 1:
            obj = next(iter(tensors.values()))
        else:
            raise InvalidArgument(f"{path} holds a dict of {len(tensors)} tensors "
                                  f"{sorted(map(str, tensors))}: pick one with columns=[key]",
                                  field="columns")
    elif columns is not None:
        raise InvalidArgument(f"columns= picks a key of a .pt dict; {path} holds a "
                              f"{type(obj).__name__}", field="columns")
    if not isinstance(obj, torch.Tensor):
        raise InvalidArgument(f"{path} holds a {type(obj).__name__}: save a tensor, or a dict "
                              "of tensors, with torch.save", field="data")
    return _tensor_numpy(obj)


def _read_csv(path: str, columns: Any, null_policy: str, dtype: Optional[str]) -> np.ndarray:
    """A CSV file read whole: its numeric columns as (rows, features), nulls per the policy."""
    with open(path, newline="") as f:
        lines = [r for r in csv.reader(f) if r]
    if not lines:
        raise InvalidArgument(f"{path} is empty", field="data")
    header: Optional[List[str]] = None
    if any(s.strip() and not _is_number(s) for s in lines[0]):
        header = [s.strip() for s in lines[0]]
        lines = lines[1:]
    width = len(header) if header is not None else len(lines[0]) if lines else 0
    skip = 1 if header is not None else 0
    for i, r in enumerate(lines):
        if len(r) != width:
            raise InvalidArgument(f"row {i} (line {i + 1 + skip}) of {path} has {len(r)} "
                                  f"fields, {'the header' if header else 'row 0'} {width}",
                                  field="data")
    table = np.array(lines, dtype=str).reshape(len(lines), width)
    table = np.char.strip(table)
    names = header if header is not None else [str(j) for j in range(width)]
    if columns is not None:
        if header is None:
            raise InvalidArgument(f"columns= names columns of a header; {path} has none: "
                                  "give it a header row, or leave columns out", field="columns")
        cols = [columns] if isinstance(columns, str) else list(columns)
        missing = [c for c in cols if c not in names]
        if missing:
            raise InvalidArgument(f"{path} has no column {missing[0]!r}; its columns: "
                                  f"{', '.join(names)}", field="columns")
        picked = [names.index(c) for c in cols]
    else:
        picked = list(range(width))
    null = table == ""
    values = np.where(null, "0", table)
    out_dtype = np.dtype(dtype or "float64")
    out = np.empty((len(lines), len(picked)), dtype=out_dtype)
    kept = []
    for j, c in enumerate(picked):
        try:
            out[:, j] = values[:, c].astype(np.float64 if out_dtype.kind == "f" else np.int64)
        except ValueError:
            bad = next(i for i, s in enumerate(values[:, c]) if not _is_number(s, out_dtype))
            if columns is None and header is not None:
                continue  # by default a column that is not numbers is left out
            raise InvalidArgument(f"row {bad} (line {bad + 1 + skip}), column {names[c]!r} of "
                                  f"{path} is {values[bad, c]!r}, not a number",
                                  field="columns") from None
        kept.append(j)
    if not kept:
        raise InvalidArgument(f"{path} has no numeric column; its columns: {', '.join(names)}",
                              field="columns")
    out = np.ascontiguousarray(out[:, kept])
    mask = null[:, [picked[j] for j in kept]]
    if mask.any():
        if null_policy == "error":
            i, j = np.argwhere(mask)[0]
            raise InvalidArgument(f"row {i} (line {i + 1 + skip}), column "
                                  f"{names[picked[kept[j]]]!r} of {path} is empty: fill it, or "
                                  "pass null_policy='zero' (read as 0) or 'skip' (drop the row)",
                                  field="data")
        if null_policy == "skip":
            out = np.ascontiguousarray(out[~mask.any(axis=1)])
    return out


def _is_number(s: str, dtype: np.dtype = np.dtype(np.float64)) -> bool:
    try:
        (float if dtype.kind == "f" else int)(s)
    except ValueError:
        return False
    return True
