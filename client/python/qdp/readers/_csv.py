"""CSV files, read whole (NumPy has no streaming CSV parser)."""

from __future__ import annotations

import csv
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ..errors import InvalidArgument
from ._arrays import ArraySource
from ._base import Source


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


def open_csv(path: str, columns: Any, null_policy: str, dtype: Optional[str],
             reopen: Tuple[Callable[..., Source], tuple, dict]) -> ArraySource:
    """The rows of a CSV file, read whole now."""
    arr = _read_csv(path, columns, null_policy, dtype)
    return ArraySource(arr, arr.dtype, reopen)
