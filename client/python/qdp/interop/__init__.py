"""Adapters from qdp states to other quantum software: :mod:`qdp.interop.pennylane`
(``qml.StatePrep``, and Lightning devices' own state vectors), :mod:`qdp.interop.qiskit`
(``Statevector``, and circuits and states for Qiskit Aer) and :mod:`qdp.interop.cudaq`
(``cudaq.State``, a device copy). Each imports its library only when used; each module's
docstring says what is copied where and how its qubits map to qdp's."""
