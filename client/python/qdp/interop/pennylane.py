"""qdp states in PennyLane.

qdp's qubit k is bit k of the amplitude index; PennyLane's wire 0 is the most significant bit of
its state's index. So the same vector means the same state when **qdp qubit k is wire n-1-k**
(of ``wires``, PennyLane's order): :func:`state_prep` passes the amplitudes unchanged.

To have qdp qubit k on PennyLane wire k instead, give the wires reversed::

    qml.StatePrep(psi, wires=range(n)[::-1])    # or state_prep(s, wires=range(n)[::-1])

``wires[0]``, the most significant bit (qdp qubit n-1), is then wire n-1, and so on down to qdp
qubit 0 on wire 0. qdp's angle state of x then equals the circuit ``qml.RY(2 * x[k], wires=k)``
for k = 0 .. n-1 on ``|0...0>``.

The encodings as PennyLane circuits on ``wires = range(n)`` (q(k) = n-1-k, the wire of qdp qubit
k), each giving exactly qdp's state (checked against ``default.qubit`` in the tests):

==========  =====================================================================================
amplitude   ``AmplitudeEmbedding(x, wires, normalize=True, pad_with=0.0)``
angle       ``AngleEmbedding(2 * x, wires=wires[::-1], rotation="Y")`` (note 2x: qdp's angle
            state is cos x / sin x)
basis       ``BasisEmbedding(i, wires)``
phase       ``Hadamard`` on every wire, then ``PhaseShift(x[k], wires=q(k))``
iqp-z       ``Hadamard`` on every wire, ``PhaseShift(d[k], wires=q(k))``, ``Hadamard`` on every
            wire
iqp         as iqp-z, with ``ControlledPhaseShift(d[p], wires=[q(i), q(j)])`` after the phase
            shifts, for the pairs (0,1), (0,2), ..., (0,n-1), (1,2), ..., p counting from n
==========  =====================================================================================

PennyLane's own ``IQPEmbedding`` uses RZ and MultiRZ gates: a different state (phases and a
different pair term), not qdp's iqp.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..errors import InvalidArgument, NotSupported
from ._vector import amplitudes


def _qml() -> Any:
    try:
        import pennylane as qml
    except ImportError:
        raise NotSupported("qdp.interop.pennylane needs PennyLane: pip install pennylane") \
            from None
    return qml


def state_prep(state: Any, wires: Optional[Sequence[Any]] = None) -> Any:
    """A ``qml.StatePrep`` that prepares ``state`` (qdp qubit k on ``wires[n-1-k]``).

    Parameters
    ----------
    state : qdp.State, numpy.ndarray or torch.Tensor
        One state (2**n amplitudes) or a batch (one per row: PennyLane broadcasts over it). A
        State is fetched; a torch tensor is passed as it is (gradients flow through it).
    wires : sequence, optional
        The n wires, in PennyLane's order (wires[0] most significant); ``range(n)`` by default,
        which puts qdp qubit k on wire n-1-k. ``range(n)[::-1]`` puts qdp qubit k on wire k.

    Returns
    -------
    pennylane.StatePrep
    """
    qml = _qml()
    x, n = amplitudes(state)
    wires = list(range(n)) if wires is None else list(wires)
    if len(wires) != n:
        raise InvalidArgument(f"{len(wires)} wires for a state of {n} qubits", field="wires")
    return qml.StatePrep(x, wires=wires)
