"""qdp states in Qiskit. Both are little-endian (qubit k is bit k of the index), so a qdp state
is a ``qiskit.quantum_info.Statevector`` of the same amplitudes: qdp qubit k is Qiskit qubit k.

The encodings as Qiskit circuits (each giving exactly qdp's state; checked in the tests):
amplitude ``initialize(x / |x|)``; angle ``ry(2 * x[k], k)``; basis ``x`` on the set bits of i;
phase ``h`` on every qubit then ``p(x[k], k)``; iqp-z ``h``, ``p(d[k], k)``, ``h``; iqp as iqp-z
with ``cp(d[p], i, j)`` after the phase gates for the pairs (0,1), (0,2), ..., (1,2), ...
"""

from __future__ import annotations

from typing import Any, List, Union

import numpy as np

from ..errors import NotSupported
from ._vector import amplitudes


def statevector(state: Any) -> Union[Any, List[Any]]:
    """``state`` as a ``qiskit.quantum_info.Statevector`` (a list of them for a batch).

    Parameters
    ----------
    state : qdp.State, numpy.ndarray or torch.Tensor
        One state (2**n amplitudes) or a batch (one per row); a State is fetched, a tensor
        copied to the host.

    Returns
    -------
    qiskit.quantum_info.Statevector, or a list of them
    """
    try:
        from qiskit.quantum_info import Statevector
    except ImportError:
        raise NotSupported("qdp.interop.qiskit needs Qiskit: pip install qiskit") from None
    x, _ = amplitudes(state)
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.ndim == 2:
        return [Statevector(row) for row in x]
    return Statevector(x)
