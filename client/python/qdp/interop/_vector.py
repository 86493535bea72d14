"""What the adapters take: a qdp.State, a NumPy array or a torch tensor of amplitudes."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from ..errors import InvalidArgument


def amplitudes(x: Any) -> Tuple[Any, int]:
    """``x`` as amplitudes (a State is fetched; a torch tensor is kept as it is, for autograd)
    and its qubit count, checking that the last axis is a power of two."""
    from ..state import State

    if isinstance(x, State):
        x = x.numpy()
    if not hasattr(x, "shape"):
        x = np.asarray(x)
    if len(x.shape) not in (1, 2):
        raise InvalidArgument(f"amplitudes of {len(x.shape)} dimensions: pass one state (1-D) "
                              "or a batch (2-D, one per row)", field="state")
    dim = int(x.shape[-1])
    n = dim.bit_length() - 1
    if dim < 1 or dim != 1 << n:
        raise InvalidArgument(f"{dim} amplitudes is not a power of two", field="state")
    return x, n
