"""Iterables of 2-D arrays or tensors, read only in order."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional, Tuple

import numpy as np

from .._values import is_tensor, source_rows, tensor_numpy
from ..errors import InvalidArgument
from ._base import Source


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


def _item_array(item: Any, i: int, dtype: Optional[str]) -> np.ndarray:
    arr = tensor_numpy(item, "data", "data") if is_tensor(item) else np.asarray(item)
    if arr.ndim != 2:
        raise InvalidArgument(f"item {i} of the iterable has shape {arr.shape}: yield 2-D "
                              "arrays (rows x features): x[None, :] for one row, x[:, None] "
                              "for rows of one value (a list of rows: pass np.asarray(rows))",
                              field="data")
    rows, out = source_rows(arr, dtype, f"item {i} of the iterable")
    return np.ascontiguousarray(rows, dtype=out)
