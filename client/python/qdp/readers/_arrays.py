"""Arrays in memory (NumPy arrays, CPU tensors) and memory-mapped ones (``.npy``): blocks of
one row."""

from __future__ import annotations

import mmap
from typing import Any, Callable, Iterator, Optional, Tuple

import numpy as np

from .._values import source_rows
from ._base import Source, _call

STREAM_BYTES = 4 << 20  # iter_blocks() of an array: pieces of about this many bytes


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


def array_source(arr: np.ndarray, dtype: Optional[str], where: str,
                 reopen: Optional[Tuple[Callable[..., Source], tuple, dict]] = None) -> ArraySource:
    """The source of an array's rows (see qdp._values.source_rows; ``where`` names it in
    errors), opened again by ``reopen`` when pickled."""
    rows, out = source_rows(arr, dtype, where)
    return ArraySource(rows, out, reopen)
