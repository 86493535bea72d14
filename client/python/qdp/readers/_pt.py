"""``.pt`` files: a tensor, or one tensor of a dict, saved with torch.save."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .._values import tensor_numpy
from ..errors import InvalidArgument, NotSupported
from ._arrays import ArraySource, array_source
from ._base import Source


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise NotSupported(f"reading .pt files needs torch ({e}): pip install torch") from None
    return torch


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
    return tensor_numpy(obj, "data", "data")


def open_pt(path: str, columns: Any, dtype: Optional[str],
            reopen: Tuple[Callable[..., Source], tuple, dict]) -> ArraySource:
    """The rows of the tensor a ``.pt`` file holds (``columns=[key]`` of a dict)."""
    return array_source(_load_pt(path, columns), dtype, path, reopen)
