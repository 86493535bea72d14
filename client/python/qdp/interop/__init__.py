"""Adapters from qdp states to other quantum software: :mod:`qdp.interop.pennylane` and
:mod:`qdp.interop.qiskit`. Each imports its library only when used."""
