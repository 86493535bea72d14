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

**Onto a Lightning device without the host** (:func:`lightning_state`, :func:`lightning_run`).
``qml.StatePrep`` on ``lightning.gpu`` always goes through host memory: the amplitudes become a
NumPy array and are copied host to device (``syncH2D``) into the buffer the device allocates for
itself. :func:`lightning_state` loads a qdp state into that buffer directly, through the state
vector's ``updateData`` binding: from pennylane-lightning 0.43 (nanobind bindings) it takes an
array by DLPack with no constraint on its device and copies with ``cudaMemcpyDefault``, so a
CUDA tensor over the state is **one copy GPU memory to GPU memory** (path "device"; a binding
that refuses GPU memory raises NotSupported saying to take the host path; this path runs only
on a GPU, in ``bench/bridge_bench.py``); otherwise the state is fetched to the host
(``State.numpy()``) and copied host to device (path "host", the same copies StatePrep makes).
:func:`lightning_run` then applies a tape's gates to that state and measures
(``dev.simulate``), since a QNode's execution resets the device's state first. The same
functions work on ``lightning.qubit`` (host path: one copy into its buffer), which is how they
are tested without a GPU. These use the Lightning state-vector object and ``simulate`` of the
device (public methods of its classes, not of PennyLane's device API), from
pennylane-lightning 0.43: checked with 0.45.

The wire order is PennyLane's: qdp qubit k is device wire n-1-k, as for :func:`state_prep`.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..errors import InvalidArgument, NotSupported
from ._vector import amplitudes, device_vector, host_vector

LIGHTNING = ("lightning.qubit", "lightning.gpu", "lightning.kokkos")


def _qml() -> Any:
    try:
        import pennylane as qml
    except ImportError:
        raise NotSupported("qdp.interop.pennylane needs PennyLane: pip install pennylane "
                           "(and pennylane-lightning-gpu for lightning.gpu)") from None
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


def _lightning(dev: Any) -> None:
    """Refuses a device that is not a Lightning state-vector device of fixed integer wires."""
    name = getattr(dev, "name", None)
    if name not in LIGHTNING or not hasattr(dev, "simulate") or \
            not hasattr(dev, "dynamic_wires_from_circuit"):
        raise InvalidArgument(f"dev is {name or type(dev).__name__}, not a Lightning device: "
                              "pass qml.device('lightning.gpu', wires=n) (or lightning.qubit) "
                              "of pennylane-lightning 0.43 or later", field="dev")
    wires = getattr(dev, "wires", None)
    if wires is None or list(wires) != list(range(len(wires))):
        raise InvalidArgument(f"dev has wires {wires!r}: make it with wires=n (the integers "
                              "0..n-1; a Lightning state vector is allocated for fixed wires)",
                              field="dev")


def lightning_state(dev: Any, state: Any, *, path: str = "auto") -> Any:
    """Loads ``state`` into a Lightning device's own state vector (qdp qubit k on wire n-1-k).

    Parameters
    ----------
    dev : pennylane device
        ``qml.device("lightning.gpu", wires=n)`` (or ``lightning.qubit``), n the state's qubits.
        For the device path its ``c_dtype`` must be the state's dtype (``c_dtype=np.complex64``
        for a complex64 state); the host path converts.
    state : qdp.State, ShardView, CUDA array, numpy.ndarray or torch.Tensor
        One state of n qubits (a batch of several samples, and a state sharded over several
        pieces on the device path, are refused saying what to do).
    path : {"auto", "device", "host"}
        "device": the state's GPU memory is handed to the state vector's ``updateData`` as a
        CUDA array (via torch, else CuPy), which copies it GPU to GPU into the device's buffer;
        lightning.gpu of pennylane-lightning 0.43 or later; the view's lease is held until the
        copy is done. "host": the amplitudes are fetched to the host (``State.numpy()``; a
        tensor copied) and copied from there into the buffer. "auto" (default): "device" for a
        state on a GPU going to lightning.gpu of the same dtype with torch or CuPy here, else
        "host"; it never switches after trying.

    Returns
    -------
    Lightning state vector
        ``dev``'s own (the object ``dev.simulate`` takes): ``.state`` copies it to the host.
        Run gates and measurements from it with :func:`lightning_run`; executing a QNode on
        ``dev`` resets it.

    Raises
    ------
    NotSupported
        Without PennyLane here (the message has the pip line); with path "device" for a
        state in host memory, or when this lightning.gpu's ``updateData`` refuses GPU memory
        (before 0.43: use path="host").
    InvalidArgument
        Not a Lightning device, wires that are not 0..n-1, another qubit count, a dtype that is
        not the device's on the device path, an unknown path.
    """
    _qml()
    if path not in ("auto", "device", "host"):
        raise InvalidArgument(f"path={path!r}: 'auto', 'device' or 'host'", field="path")
    _lightning(dev)
    n = len(dev.wires)
    want = np.dtype(dev.c_dtype)
    dv = None
    if path == "device" or (path == "auto" and dev.name == "lightning.gpu"):
        dv = device_vector(state)
        if dv is None and path == "device":
            raise NotSupported("path='device': the state is in host memory (the CPU backend, "
                               "or a host array): use path='host'", field="state")
    try:
        if dv is not None:
            if dv.qubits != n:
                raise InvalidArgument(f"a state of {dv.qubits} qubits for a device of {n} "
                                      "wires", field="state")
            go = dev.name == "lightning.gpu" and dv.dtype == want.name
            if path == "device" and not go:
                why = (f"dev is {dev.name}, whose state is in host memory"
                       if dev.name != "lightning.gpu" else
                       f"the state is {dv.dtype} and the device {want.name}: make it with "
                       f"c_dtype=np.{dv.dtype}")
                raise InvalidArgument(f"path='device': {why}; or use path='host'",
                                      field="dev")
            arr = None
            if go:
                try:
                    arr = dv.as_array()
                except NotSupported:
                    if path == "device":
                        raise
            if arr is not None:
                sv = _loaded_sv(dev)
                try:
                    sv.state_vector.updateData(arr)
                except (TypeError, ValueError) as e:
                    raise NotSupported(f"this lightning.gpu's updateData does not take GPU "
                                       f"memory ({e}): pennylane-lightning-gpu 0.43 or later "
                                       "takes it; or use path='host'", field="state") from None
                dv.synchronize()
                return sv
    finally:
        if dv is not None:
            dv.close()
    x = host_vector(state, want)
    if x.shape[0] != 1 << n:
        raise InvalidArgument(f"a state of {x.shape[0].bit_length() - 1} qubits for a device "
                              f"of {n} wires", field="state")
    sv = _loaded_sv(dev)
    sv.state_vector.updateData(x)
    return sv


def _loaded_sv(dev: Any) -> Any:
    """``dev``'s state vector, allocated now if the device has not yet done it (not reset: every
    amplitude is written next)."""
    from pennylane.tape import QuantumScript

    sv = dev._statevector
    if sv is None or sv.num_wires != len(dev.wires):
        dev.dynamic_wires_from_circuit(QuantumScript())  # allocates it
        sv = dev._statevector
    if not hasattr(sv.state_vector, "updateData"):
        raise NotSupported(f"this {dev.name}'s state vector has no updateData (its bindings "
                           "before pennylane-lightning 0.43): upgrade pennylane-lightning (and "
                           "pennylane-lightning-gpu), or use qdp.interop.pennylane.state_prep",
                           field="dev")
    return sv


def lightning_run(dev: Any, tape: Any, sv: Any = None) -> Any:
    """Applies ``tape``'s operations to the state :func:`lightning_state` loaded into ``dev``
    and returns its measurements (``dev.simulate``, which does not reset the state).

    Parameters
    ----------
    dev : pennylane device
        The Lightning device given to :func:`lightning_state`.
    tape : pennylane.tape.QuantumScript
        Operations Lightning applies natively (they are not decomposed here) on wires of
        ``dev``, then measurements; qdp qubit k is wire n-1-k.
    sv : Lightning state vector, optional
        What :func:`lightning_state` returned; ``dev``'s own by default.

    Returns
    -------
    The measurements' results, as ``dev.simulate`` gives them (one value for one measurement,
    a tuple for several). The state is left as the tape's gates made it.
    """
    _qml()
    _lightning(dev)
    sv = dev._statevector if sv is None else sv
    if sv is None:
        raise InvalidArgument("dev holds no state yet: load one with lightning_state(dev, s)",
                              field="sv")
    extra = [w for w in tape.wires if w not in dev.wires]
    if extra:
        raise InvalidArgument(f"the tape acts on wires {extra} that dev does not have",
                              field="tape")
    return dev.simulate(tape, sv)
