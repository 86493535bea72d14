"""Parquet files (a block is a row group) and Arrow IPC files (a record batch), through
pyarrow: which columns make the features, how they convert, and how nulls are found."""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import Aborted, InvalidArgument, NotSupported
from ._base import Source
from ._blocks import _BlockSource

ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")


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
