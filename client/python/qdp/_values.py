"""The values an encode (or a feature map) takes, checked here: lists, NumPy arrays and CPU
tensors of real numbers become a NumPy array, and anything else is refused with
:class:`qdp.InvalidArgument` naming what is wrong and where, never with NumPy's or torch's own
exception or a silent conversion (booleans, complex values, strings, objects, ragged rows)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Iterator, Tuple

import numpy as np

from .errors import InvalidArgument

_INT64_MAX = np.iinfo(np.int64).max
_TTL_MAX = (1 << 64) - 1  # EncodeRequest.ttl_seconds is a uint64


def is_torch_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "is_cuda") and hasattr(x, "numpy")


def refuse_grad(t: Any) -> None:
    """Refuses a tensor that autograd follows: a state carries no gradient back to it."""
    if getattr(t, "requires_grad", False):
        raise InvalidArgument(
            "the input tensor requires grad, but an encoded state carries no gradient back to "
            "it (encodings are not differentiable): pass x.detach() if no gradient is wanted; "
            "where one is, compute the encoding in torch instead", field="input.data")


def tensor_values(t: Any) -> np.ndarray:
    """A CPU tensor's values as NumPy: a view where NumPy has its dtype, float16 and bfloat16
    widened to float64 (exact)."""
    refuse_grad(t)
    t = t.detach()
    if hasattr(t, "resolve_conj"):
        t = t.resolve_conj()
    if t.is_floating_point() and t.element_size() == 2:  # bfloat16 has no NumPy dtype
        t = t.double()
    try:
        return t.contiguous().numpy()
    except (TypeError, RuntimeError) as e:
        raise InvalidArgument(f"a tensor of {t.dtype} cannot be read as numbers ({e}): pass "
                              "float32 or float64 (basis indices as integers)",
                              field="input.dtype") from None


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
    if is_torch_tensor(data):
        arr = tensor_values(data)
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


def _shape(x: Any, where: str) -> Tuple[int, ...]:
    """The shape NumPy would give nested sequences ``x``; raises ValueError naming the first
    place where they stop being rectangular."""
    if isinstance(x, np.ndarray) or is_torch_tensor(x):
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
