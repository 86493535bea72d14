"""qdp states in Qiskit. Both are little-endian (qubit k is bit k of the index), so a qdp state
is a ``qiskit.quantum_info.Statevector`` of the same amplitudes: qdp qubit k is Qiskit qubit k.

The encodings as Qiskit circuits (each giving exactly qdp's state; checked in the tests):
amplitude ``initialize(x / |x|)``; angle ``ry(2 * x[k], k)``; basis ``x`` on the set bits of i;
phase ``h`` on every qubit then ``p(x[k], k)``; iqp-z ``h``, ``p(d[k], k)``, ``h``; iqp as iqp-z
with ``cp(d[p], i, j)`` after the phase gates for the pairs (0,1), (0,2), ..., (1,2), ...

**Qiskit Aer** (:func:`aer_circuit`; ``pip install qiskit-aer``, or ``qiskit-aer-gpu`` for
``AerSimulator(device="GPU")``). Aer starts a simulation from given amplitudes only through an
instruction of the circuit, whose data is host memory: ``set_statevector``
(``qiskit_aer.library.SetStatevector``), which sets the simulator's state directly, unlike
``initialize``, which the transpiler turns into gates. So the path is: the amplitudes fetched to
the host (``State.numpy()``, one copy from the daemon's memory), then, at ``run``, Aer's own
copy of the instruction's data and its upload to the GPU for ``device="GPU"``. The order is the
same little-endian one: qdp qubit k is Aer qubit k.

Aer's intake of that instruction's data is slow (0.15-0.27 GB/s on a 2-vCPU VM, where the same
run without it takes under a millisecond). :func:`aer_state` takes the cheaper road Aer has:
its ``AerState`` (``qiskit_aer.quantum_info.states.aer_state``, the C++ state that
``AerStatevector`` drives), whose ``initialize`` copies the fetched array into the simulator's
state with one copy (host to GPU for ``device="GPU"``), and which then takes gates
(``apply_h``, ``apply_unitary``, ...) and gives probabilities and samples where it is.
"""

from __future__ import annotations

from typing import Any, List, Optional, Union

import numpy as np

from ..errors import InvalidArgument, NotSupported
from ._vector import amplitudes, host_vector


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


def aer_circuit(state: Any, circuit: Optional[Any] = None) -> Any:
    """A circuit for Qiskit Aer that starts from ``state`` (qdp qubit k is qubit k), then runs
    ``circuit``.

    Parameters
    ----------
    state : qdp.State, numpy.ndarray or torch.Tensor
        One state of n qubits (a batch of several samples is refused): a State is fetched to
        the host (``State.numpy()``), a tensor copied there. complex64 amplitudes are widened
        to complex128 (Qiskit's Statevector holds complex128).
    circuit : qiskit.QuantumCircuit, optional
        n qubits (and any classical bits) of gates, measurements and Aer save instructions,
        appended after the state is set.

    Returns
    -------
    qiskit.QuantumCircuit
        A ``set_statevector`` instruction on all n qubits, then ``circuit``; run it with
        ``AerSimulator(method="statevector")`` (``device="GPU"`` with qiskit-aer-gpu), which
        copies the instruction's host data into its state when the run starts.

    Raises
    ------
    NotSupported
        Without Qiskit Aer here (the message has the pip line).
    InvalidArgument
        A batch, amplitudes that are not a power of two long, or a circuit of another qubit
        count.
    """
    try:
        from qiskit import QuantumCircuit
        from qiskit_aer.library import SetStatevector
    except ImportError:
        raise NotSupported("qdp.interop.qiskit.aer_circuit needs Qiskit Aer: pip install "
                           "qiskit-aer (qiskit-aer-gpu for device='GPU')") from None
    x = host_vector(state, np.complex128)
    n = x.shape[0].bit_length() - 1
    if circuit is not None and circuit.num_qubits != n:
        raise InvalidArgument(f"circuit has {circuit.num_qubits} qubits and the state {n}",
                              field="circuit")
    qc = QuantumCircuit(n) if circuit is None else circuit.copy_empty_like()
    qc.append(SetStatevector(x), qc.qubits)
    if circuit is not None:
        qc.compose(circuit, inplace=True)
    return qc


def aer_state(state: Any, **configs: Any) -> Any:
    """Qiskit Aer's own state (``AerState``) holding ``state`` (qdp qubit k is qubit k).

    Parameters
    ----------
    state : qdp.State, numpy.ndarray or torch.Tensor
        One state of n qubits (a batch is refused): a State is fetched to the host
        (``State.numpy()``), a tensor copied there; complex64 amplitudes are widened to
        complex128 (Aer's default double precision).
    **configs
        AerSimulator options for the state, e.g. ``device="GPU"`` (with qiskit-aer-gpu);
        ``method`` is "statevector".

    Returns
    -------
    qiskit_aer.quantum_info.states.aer_state.AerState
        Initialized with a copy of the amplitudes (host to GPU for ``device="GPU"``); apply
        gates with its ``apply_*`` methods, read it with ``probabilities``, ``sample_counts``
        or ``move_to_ndarray``. Free it with ``move_to_ndarray()`` (which moves the amplitudes
        to the host: Aer's way to end a state it allocated) then ``close()``; qiskit-aer 0.18's
        ``close()`` alone refuses a state not yet moved.

    Raises
    ------
    NotSupported
        Without Qiskit Aer here (the message has the pip line).
    InvalidArgument
        A batch, amplitudes that are not a power of two long, a method other than
        statevector.
    """
    try:
        from qiskit_aer.quantum_info.states.aer_state import AerState
    except ImportError:
        raise NotSupported("qdp.interop.qiskit.aer_state needs Qiskit Aer: pip install "
                           "qiskit-aer (qiskit-aer-gpu for device='GPU')") from None
    method = configs.pop("method", "statevector")
    if method != "statevector":
        raise InvalidArgument(f"method={method!r}: aer_state sets a state vector; use "
                              "method='statevector'", field="method")
    x = host_vector(state, np.complex128)
    n = x.shape[0].bit_length() - 1
    st = AerState(method="statevector", **configs)
    st.allocate_qubits(n)
    st.initialize(data=x, copy=True)
    return st
