"""The values qdp reads, checked and converted in one place, for an encode, a feature map and
the sources of :mod:`qdp.readers`: lists, NumPy arrays and CPU tensors of real numbers become
NumPy arrays of the dtypes the daemon takes, and anything else is refused with
:class:`qdp.InvalidArgument` naming what is wrong and where, never with NumPy's or torch's own
exception or a silent conversion (booleans, complex values, strings, objects, ragged rows)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from .errors import InvalidArgument, NotSupported

_INT64_MAX = np.iinfo(np.int64).max
_TTL_MAX = (1 << 64) - 1  # EncodeRequest.ttl_seconds is a uint64


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch: none exists before it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def refuse_grad(t: Any) -> None:
    """Refuses a tensor that autograd follows: a state carries no gradient back to it."""
    if getattr(t, "requires_grad", False):
        raise InvalidArgument(
            "the input tensor requires grad, but an encoded state carries no gradient back to "
            "it (encodings are not differentiable): pass x.detach() if no gradient is wanted; "
            "where one is, compute the encoding in torch instead", field="input.data")


def tensor_numpy(t: Any, field: str, dtype_field: str) -> np.ndarray:
    """A CPU tensor's values as NumPy, detached: a view where NumPy has its dtype, float16 and
    bfloat16 widened to float64 (exact).

    Raises
    ------
    NotSupported
        A tensor that is not in CPU memory (``field``).
    InvalidArgument
        A dtype NumPy cannot read (``dtype_field``).
    """
    if t.device.type != "cpu":
        raise NotSupported(f"a tensor on {t.device}: these values are read from CPU memory; "
                           "pass tensor.cpu()", field=field)
    t = t.detach()
    if hasattr(t, "resolve_conj"):
        t = t.resolve_conj()
    if t.is_floating_point() and t.element_size() == 2:  # bfloat16 has no NumPy dtype
        t = t.double()
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as e:
        raise InvalidArgument(f"a tensor of {t.dtype} cannot be read as numbers ({e}): pass "
                              "float32 or float64 (basis indices as integers)",
                              field=dtype_field) from None


def real_array(data: Any, field: str = "input.data",
               dtype_field: str = "input.dtype") -> np.ndarray:
    """``data`` as a NumPy array of real numbers (of the dtype it has: floats, integers).

    An array of Python objects that are all real numbers (ints, floats) becomes float64.

    Raises
    ------
    InvalidArgument
        None, bytes, rows of different lengths (naming them), objects that are not numbers
        (``field``); strings, booleans, complex values, dates (``dtype_field``).
    """
    if data is None:
        raise InvalidArgument("the input is None: pass the values (a list, a NumPy array or a "
                              "tensor)", field=field)
    if isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"the input is {len(data)} bytes, not values: bytes are never "
                              "read as numbers; for raw little-endian values pass "
                              "np.frombuffer(b, np.float64) (or the dtype they have)",
                              field=field)
    if is_tensor(data):
        refuse_grad(data)
        arr = tensor_numpy(data, field, dtype_field)
    else:
        # NumPy 1.24 and later refuse ragged lists (ValueError); torch refuses a list of
        # tensors that require grad (RuntimeError).
        try:
            arr = np.asarray(data)
        except (ValueError, TypeError, RuntimeError) as e:
            raise InvalidArgument(_ragged(data) or "the input is not an array of numbers "
                                  f"({e})", field=field) from None
    kind = arr.dtype.kind
    if kind in "fiu":
        return arr
    if kind == "O":
        why = _ragged(data) or _objects(data, arr)
        if why:
            raise InvalidArgument(why, field=field)
        return arr.astype(np.float64)  # Python ints and floats, some past int64
    raise InvalidArgument(_dtype_message(arr), field=dtype_field)


def ttl_seconds(ttl: Any) -> int:
    """The wire's ``ttl_seconds`` of a ttl: 0 for None (the daemon's default_ttl), else the
    seconds rounded up, so that no state lives shorter than asked.

    Raises
    ------
    InvalidArgument
        A ttl that is not a number of seconds > 0 (0, negative, NaN, infinite, a bool, a
        string): field "ttl".
    """
    if ttl is None:
        return 0
    if isinstance(ttl, (bool, np.bool_)) or not isinstance(ttl, (int, float, np.integer,
                                                                 np.floating)):
        raise InvalidArgument(f"ttl must be a number of seconds > 0, not {ttl!r}: pass None "
                              "for the daemon's default_ttl", field="ttl")
    if (isinstance(ttl, (float, np.floating)) and not np.isfinite(ttl)) or ttl <= 0:
        raise InvalidArgument(f"ttl={ttl!r} is not a lifetime: pass seconds > 0, or None for "
                              "the daemon's default_ttl (State.release() frees a state at once)",
                              field="ttl")
    # Longer than the wire's uint64 means the same as its largest: the daemon caps either at
    # its max_ttl, and says so.
    return min(math.ceil(ttl), _TTL_MAX)


def basis_indices(arr: np.ndarray) -> np.ndarray:
    """Basis indices as int64 (the wire's dtype); unsigned values past int64 are refused, not
    wrapped."""
    # As uint64: a comparison with a Python int would go through float64, where 2^63 - 1 and
    # 2^63 are one value.
    past = arr.reshape(-1) > np.uint64(_INT64_MAX) if arr.dtype.kind == "u" else None
    if past is not None and past.any():
        i = int(np.argmax(past))
        raise InvalidArgument(f"basis index {_where(arr, i)} = {arr.reshape(-1)[i]} is past "
                              "int64: no state has so many qubits", field="input.data")
    return arr.astype("<i8", copy=False)


def value_dtype(arr: np.ndarray) -> np.dtype:
    """The dtype the real values of ``arr`` are read as: float32 and float64 as they are, any
    other real (integers, float16) as float64; little-endian, as the daemon takes them."""
    if arr.dtype.kind == "f" and arr.dtype.itemsize in (4, 8):
        return arr.dtype.newbyteorder("<")
    return np.dtype("<f8")


class EncodeInput:
    """An encode's input, resolved: ``kind`` "array" (``array`` in a dtype the wire carries,
    with the request's ``rows`` and ``cols``, and whether it is a ``batched`` one), "path" (an
    absolute ``path``) or "cuda" (a CUDA ``tensor``)."""

    def __init__(self, kind: str, array: Optional[np.ndarray] = None, rows: int = 0,
                 cols: int = 0, batched: bool = False, path: str = "",
                 tensor: Any = None) -> None:
        self.kind = kind
        self.array = array
        self.rows = rows
        self.cols = cols
        self.batched = batched
        self.path = path
        self.tensor = tensor


def encode_input(data: Any, encoding: str) -> EncodeInput:
    """What :meth:`qdp.Client.encode` was given, resolved: a path, a CUDA tensor, or values
    (one sample, 1-D, or a batch, 2-D; for basis one index per sample) as a C-contiguous array
    of float32 or float64, or int64 basis indices.

    Raises
    ------
    InvalidArgument
        No values, more than two dimensions, or values :func:`real_array` refuses.
    """
    if isinstance(data, (str, os.PathLike)):
        return EncodeInput("path", path=os.path.abspath(os.fspath(data)))
    if is_tensor(data) and data.is_cuda:
        refuse_grad(data)
        return EncodeInput("cuda", tensor=data)
    arr = real_array(data)  # a CPU tensor's grad is refused there
    if encoding == "basis" and arr.dtype.kind in "iu":
        arr = basis_indices(arr)
    else:
        arr = arr.astype(value_dtype(arr), copy=False)
    if arr.size == 0:
        raise InvalidArgument("the input has no values", field="input.data")
    if encoding == "basis":
        if arr.ndim == 0:
            return EncodeInput("array", arr.reshape(1), 1, 1, False)
        if arr.ndim == 1:  # one index per sample: a batch
            return EncodeInput("array", np.ascontiguousarray(arr), arr.shape[0], 1, True)
    if arr.ndim == 1:
        return EncodeInput("array", np.ascontiguousarray(arr), 1, arr.shape[0], False)
    if arr.ndim == 2:
        return EncodeInput("array", np.ascontiguousarray(arr), arr.shape[0], arr.shape[1], True)
    raise InvalidArgument(f"the input has {arr.ndim} dimensions: pass one sample (1-D) or a "
                          "batch of samples (2-D, one per row)", field="input.data")


def source_rows(arr: np.ndarray, dtype: Optional[str],
                where: str) -> Tuple[np.ndarray, np.dtype]:
    """The rows of a :mod:`qdp.readers` source: ``arr`` as (rows, features), 1-D as rows of one
    value, and the dtype they are read as: ``dtype`` when given, else :func:`value_dtype`.

    Raises
    ------
    InvalidArgument
        Values that are not numbers, floats for dtype "int64", other than 1 or 2 dimensions, or
        rows of no feature (``where`` names the input).
    """
    kind = arr.dtype.kind
    if kind not in "iuf":
        raise InvalidArgument(f"{where} is of dtype {arr.dtype}, not numbers: pass float32, "
                              "float64 or integers", field="data")
    if dtype == "int64" and kind == "f":
        raise InvalidArgument(f"dtype='int64' but {where} holds {arr.dtype}: integers only "
                              "(basis indices), or pass dtype='float32' or 'float64'",
                              field="dtype")
    out = np.dtype(dtype) if dtype is not None else value_dtype(arr)
    if arr.ndim == 1:
        return arr.reshape(-1, 1), out
    if arr.ndim != 2:
        raise InvalidArgument(f"{where} has shape {arr.shape}: pass 2-D (rows x features), or "
                              "1-D for rows of one value", field="data")
    if arr.shape[1] == 0:
        raise InvalidArgument(f"{where} has shape {arr.shape}: a row needs at least one "
                              "feature", field="data")
    return arr, out


def _shape(x: Any, where: str) -> Tuple[int, ...]:
    """The shape NumPy would give nested sequences ``x``; raises ValueError naming the first
    place where they stop being rectangular."""
    if isinstance(x, np.ndarray) or is_tensor(x):
        return tuple(x.shape)
    if not isinstance(x, Sequence) or isinstance(x, (str, bytes, bytearray)):
        return ()
    if len(x) == 0:
        return (0,)
    first = _shape(x[0], f"{where}[0]")
    for i in range(1, len(x)):
        s = _shape(x[i], f"{where}[{i}]")
        if s != first:
            raise ValueError(f"{where}[{i}] {_extent(s)} but {where}[0] {_extent(first)}")
    return (len(x),) + first


def _extent(shape: Tuple[int, ...]) -> str:
    if not shape:
        return "is one value"
    if len(shape) == 1:
        return f"has {shape[0]} value{'s' if shape[0] != 1 else ''}"
    return f"has shape {shape}"


def _ragged(data: Any) -> str:
    """The message for nested sequences of different lengths; "" when they are rectangular."""
    try:
        _shape(data, "input")
    except ValueError as e:
        return (f"the input's rows differ in length: {e}; every sample (row) needs the same "
                "number of values")
    return ""


def _where(arr: np.ndarray, flat: int) -> str:
    """The element of ``arr`` at flat index ``flat``, written as an index of the input."""
    return "input" + "".join(f"[{i}]" for i in np.unravel_index(flat, arr.shape))


def _elements(arr: np.ndarray) -> Iterator[Tuple[str, Any]]:
    for k, v in enumerate(arr.reshape(-1)):
        yield _where(arr, k), v


def _objects(data: Any, arr: np.ndarray) -> str:
    """The message for an array of Python objects naming the first that is not a real number;
    "" when every one is."""
    if arr.ndim == 0:
        return (f"a {type(data).__name__} is not an input: pass the values (a list, a NumPy "
                "array or a tensor)")
    for where, v in _elements(arr):
        if v is None:
            return f"{where} is None, not a number: every value must be a real number"
        if isinstance(v, (bool, np.bool_)):
            return (f"{where} is {v}, a boolean: pass numbers (1.0 and 0.0, or basis indices "
                    "1 and 0) if that is what is meant")
        if isinstance(v, (str, bytes)):
            return (f"{where} is the string {v!r}, not a number: convert the values first; a "
                    "CSV file is encoded from its path (ending in .csv)")
        if isinstance(v, (complex, np.complexfloating)):
            return (f"{where} is the complex value {v}: encodings take real values; pass the "
                    "real parts only if every imaginary part is 0")
        if not isinstance(v, (int, float, np.integer, np.floating)):
            return f"{where} is a {type(v).__name__}, not a number"
    return ""


def _dtype_message(arr: np.ndarray) -> str:
    kind = arr.dtype.kind
    if kind == "b":
        return ("the input holds booleans: pass numbers, x.astype(np.float64) for 1.0 and 0.0 "
                "(basis indices: x.astype(np.int64)) if that is what is meant")
    if kind in "US":
        first = arr.reshape(-1)[0] if arr.size else ""
        return (f"the input holds strings ({first!r} first), not numbers: convert the values "
                "first; a CSV file is encoded from its path (ending in .csv)")
    if kind == "c":
        imag = np.flatnonzero(arr.reshape(-1).imag)
        if imag.size == 0:
            return (f"the input is {arr.dtype} with every imaginary part 0: encodings take real "
                    "values; pass x.real")
        k = int(imag[0])
        return (f"the input holds complex values ({_where(arr, k)} is {arr.reshape(-1)[k]}): "
                "encodings take real values (amplitude too: it normalizes a real vector)")
    return f"input values of dtype {arr.dtype} are not numbers: pass float32 or float64 values"
