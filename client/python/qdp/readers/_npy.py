"""``.npy`` files, memory-mapped: never read whole, rows read as they are asked."""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import numpy as np

from ..errors import InvalidArgument
from ._arrays import ArraySource, array_source
from ._base import Source


def open_npy(path: str, columns: Any, dtype: Optional[str],
             reopen: Tuple[Callable[..., Source], tuple, dict]) -> ArraySource:
    """The rows of the array a ``.npy`` file holds, mapped."""
    if columns is not None:
        raise InvalidArgument(f"columns= does not apply to {path}: a .npy holds one array",
                              field="columns")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        raise InvalidArgument(f"{path} cannot be memory-mapped ({e}): save a numeric "
                              "array with np.save", field="data") from None
    return array_source(arr, dtype, path, reopen)
