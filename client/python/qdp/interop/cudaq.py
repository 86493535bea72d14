"""qdp states in CUDA-Q (``pip install cuda-quantum-cu12`` or ``cuda-quantum-cu13``).

**Qubit order.** CUDA-Q's qubit k is bit k of the index of its state vector in memory, as
qdp's is: ``numpy.array(st)`` and ``st.amplitude([b0, b1, ...])`` (index ``b0 + 2*b1 + ...``)
read it so, and its bit strings (``cudaq.sample``'s, ``st.amplitude("10")``) list qubit 0
first. So the same vector is the same state: **qdp qubit k is CUDA-Q qubit k** of
``cudaq.qvector(st)``, and :func:`state` passes the amplitudes unchanged. qdp's angle state of x
is the kernel ``ry(2 * x[k], q[k])`` for k = 0 .. n-1 on ``|0...0>``. One exception: ``st[i]``
reads index i with its bits reversed (qubit 0 as the top bit), so ``st[1]`` is the amplitude of
qubit n-1 set; use ``st.amplitude`` or ``numpy.array(st)`` to read qdp's index i. (Checked with
CUDA-Q 0.16 on its CPU target.)

**What is copied where.** On a GPU target (``nvidia``), :func:`state` hands CUDA-Q the state's
memory in place, through a view of the daemon's state (CUDA IPC) exposed as a 1-D
``__cuda_array_interface__``; ``cudaq.State.from_data`` reads that pointer and the state is
copied once, GPU memory to GPU memory, into memory CUDA-Q owns (the cuStateVec simulator of
CUDA-Q 0.16 copies device memory it is given into its own state, peer to peer from another
GPU). Where a CUDA-Q release keeps the pointer given instead of copying (the simulator state of
earlier releases wrapped device memory it was given), :func:`state` detects it and has CUDA-Q
make its own copy at once, by starting a kernel from the state (``cudaq.qvector(s)``) and taking
its state (``cudaq.get_state``): one device copy either way. The view's lease is held only until
that copy is done, so the returned ``cudaq.State`` never points into the daemon's memory and the
qdp state may be released.

A state of the CPU backend (or a NumPy array) goes through host memory: its amplitudes are
fetched (``State.numpy()``) and ``from_data`` copies them (to the GPU on a GPU target).

The precision must be the target's: complex128 states for ``cudaq.set_target("nvidia",
option="fp64")``, complex64 states for the default ``nvidia`` target (fp32); a mismatch is
refused before anything is copied.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument, NotSupported
from ._vector import DeviceVector, device_vector, host_vector

PIP = "pip install cuda-quantum-cu12 (or cuda-quantum-cu13 for CUDA 13)"

def _cudaq() -> Any:
    try:
        import cudaq
    except ImportError:
        raise NotSupported(f"qdp.interop.cudaq needs CUDA-Q: {PIP}") from None
    return cudaq


def _target_precision(cudaq: Any) -> str:
    """"complex64", "complex128", or "" when this CUDA-Q does not say."""
    try:
        p = str(cudaq.get_target().get_precision())
    except Exception:
        return ""
    return "complex64" if p.endswith("fp32") else "complex128" if p.endswith("fp64") else ""


def _check_precision(cudaq: Any, dtype: str) -> None:
    want = _target_precision(cudaq)
    if want and want != dtype:
        try:
            name = cudaq.get_target().name
        except Exception:
            name = "?"
        fix = ("cudaq.set_target('nvidia', option='fp64')" if dtype == "complex128"
               else "a target of fp32 (cudaq.set_target('nvidia'))")
        raise InvalidArgument(f"the state is {dtype} but CUDA-Q's target {name!r} simulates "
                              f"{want}: use {fix}, or encode with dtype={want!r}",
                              field="state")


def _data_pointer(st: Any) -> int:
    """The address of a cudaq.State's amplitudes, or -1 when this CUDA-Q does not say."""
    try:
        return int(st.getTensor().data())
    except Exception:
        return -1


def _owned_copy(cudaq: Any, st: Any) -> Any:
    """A state CUDA-Q owns with ``st``'s amplitudes: the state of a kernel that starts from it."""
    try:
        from ._cudaq_kernel import start_from

        return cudaq.get_state(start_from, st)
    except Exception as e:
        raise NotSupported(f"this CUDA-Q's State.from_data kept the memory it was given, and a "
                           f"kernel starting from it failed ({e}): pass memory you keep alive "
                           "yourself, e.g. t = s.torch().clone(); cudaq.State.from_data(t)",
                           field="state") from None


def state(s: Any) -> Any:
    """A ``cudaq.State`` with the amplitudes of ``s`` (qdp qubit k is CUDA-Q qubit k).

    Parameters
    ----------
    s : qdp.State, ShardView, CUDA array or numpy.ndarray
        One state of n qubits. A State on a GPU is read in place through a view (one device
        copy, its lease held only for the copy); a state sharded over several pieces is refused
        (NotSupported: ``s.gather("cuda:0")`` makes a one-piece copy to pass instead) and so is
        a batch of several samples (InvalidArgument: encode the sample alone). A ShardView, a
        torch CUDA tensor or a CuPy array (1-D, contiguous, complex64 or complex128) is read
        in place the same way and stays the caller's. A State of the CPU backend or a NumPy
        array goes through host memory.

    Returns
    -------
    cudaq.State
        Owned by CUDA-Q, independent of the qdp state. Start a kernel from it with
        ``q = cudaq.qvector(st)`` (an argument ``st: cudaq.State``).

    Raises
    ------
    NotSupported
        Without CUDA-Q here (the message has the pip line), for a sharded state, or when this
        CUDA-Q refuses GPU memory (a CPU target: set a GPU target, or pass ``s.numpy()``).
    InvalidArgument
        A batch, a dtype that is not the target's precision, an array that is not one
        contiguous complex vector of a power of two.
    """
    cudaq = _cudaq()
    dv = device_vector(s)
    if dv is None:
        x = host_vector(s)
        if x.dtype.name not in ("complex64", "complex128"):
            raise InvalidArgument(f"amplitudes of {x.dtype}: pass complex64 or complex128",
                                  field="state")
        _check_precision(cudaq, x.dtype.name)
        st = cudaq.State.from_data(x)
        if _data_pointer(st) in (-1, x.ctypes.data):
            st = _owned_copy(cudaq, st)  # it read x in place, which is ours
        return st
    try:
        return _from_device(cudaq, dv)
    finally:
        dv.close()


def _from_device(cudaq: Any, dv: DeviceVector) -> Any:
    _check_precision(cudaq, dv.dtype)
    try:
        st = cudaq.State.from_data(dv)
    except (RuntimeError, TypeError) as e:
        st = _from_cupy(cudaq, dv, e)
    if _data_pointer(st) in (-1, dv.ptr):
        st = _owned_copy(cudaq, st)
    dv.synchronize()  # the copy out of the view is done before its lease ends
    return st


def _from_cupy(cudaq: Any, dv: DeviceVector, first: BaseException) -> Any:
    """``from_data`` of a CuPy array over the same memory, for CUDA-Q releases whose
    ``from_data`` of device memory takes CuPy arrays only (it reads ``data.ptr``)."""
    why = f"CUDA-Q did not take GPU memory ({first})"
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        try:
            with cupy.cuda.Device(dv.ordinal or 0):
                return cudaq.State.from_data(cupy.asarray(dv))
        except (RuntimeError, TypeError) as e:
            why += f", nor a CuPy array over it ({e})"
    raise NotSupported(f"{why}: set a GPU target (cudaq.set_target('nvidia')), or pass the host "
                       "amplitudes (s.numpy())", field="state")
