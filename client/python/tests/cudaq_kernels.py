"""CUDA-Q kernels for test_interop.py, in a module without postponed annotations (CUDA-Q parses a
kernel's source and its annotations). Imported only where CUDA-Q is."""

import cudaq


@cudaq.kernel
def angle(x: list[float]):
    q = cudaq.qvector(len(x))
    for k in range(len(x)):
        ry(2 * x[k], q[k])  # noqa: F821  (a CUDA-Q gate, known inside kernels)


@cudaq.kernel
def x_on_qubit_0(s: cudaq.State):
    q = cudaq.qvector(s)
    x(q[0])  # noqa: F821
