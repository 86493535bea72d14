"""The interface of every source of :mod:`qdp.readers`: :class:`Source`."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from ..errors import InvalidArgument, NotSupported, OutOfRange


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


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)
