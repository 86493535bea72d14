"""The CUDA-Q kernel that :mod:`qdp.interop.cudaq` runs to have CUDA-Q copy a state that it holds
by pointer into memory of its own: it starts from the state and does nothing else. Imported only
where CUDA-Q is; kept apart from ``cudaq.py``, whose postponed annotations (``from __future__
import annotations``) a kernel's parser would read as strings."""

import cudaq


@cudaq.kernel
def start_from(s: cudaq.State):
    q = cudaq.qvector(s)  # noqa: F841  (the allocation is the kernel's whole work)
