"""What the adapters take: a qdp.State, a NumPy array or a torch tensor of amplitudes; and for
the device paths, one state in GPU memory (:func:`device_vector`)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..errors import InvalidArgument, NotSupported


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


_TYPESTRS = {"<c8": "complex64", "<c16": "complex128"}


class DeviceVector:
    """One state's amplitudes in GPU memory, contiguous: what the device paths of the adapters
    copy from. It is itself a 1-D ``__cuda_array_interface__`` (CUDA-Q reads that), and
    :meth:`close` ends the view's lease when the adapter opened it.

    Attributes
    ----------
    ptr : int
        Device address of amplitude 0.
    ordinal : int or None
        This process's CUDA device ordinal of that memory (None when the source did not say).
    dtype : str
        "complex64" or "complex128".
    size, qubits : int
        2**qubits amplitudes.
    """

    def __init__(self, ptr: int, ordinal: Optional[int], typestr: str, size: int,
                 keep: Any, owned_view: Any = None) -> None:
        self.ptr = ptr
        self.ordinal = ordinal
        self.typestr = typestr
        self.dtype = _TYPESTRS[typestr]
        self.size = size
        self.qubits = size.bit_length() - 1
        self._keep = keep  # the view or array whose memory this is
        self._owned = owned_view  # a view the adapter opened: closed by close()

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": (self.size,), "typestr": self.typestr, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def as_array(self) -> Any:
        """The vector as a torch tensor (else a CuPy array) over the same memory, for libraries
        that take DLPack; NotSupported when neither is importable."""
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            dev = "cuda" if self.ordinal is None else f"cuda:{self.ordinal}"
            return torch.as_tensor(self, device=dev)
        try:
            import cupy
        except ImportError:
            raise NotSupported("the device path hands the amplitudes over as a CUDA array, "
                               "which needs PyTorch or CuPy here: pip install torch (or "
                               "cupy-cuda12x), or take the host path") from None
        if self.ordinal is None:
            return cupy.asarray(self)
        with cupy.cuda.Device(self.ordinal):
            return cupy.asarray(self)

    def synchronize(self) -> None:
        """Waits for this process's work on the vector's device (a copy out of it that a
        library queued) before the memory may go."""
        from .. import _cuda

        if self.ordinal is not None:
            _cuda.runtime().synchronize_device(self.ordinal)

    def close(self) -> None:
        """Ends the lease of the view the adapter opened (none for a view or array passed in)."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None


def _check_size(size: int, field: str) -> None:
    n = size.bit_length() - 1
    if size < 1 or size != 1 << n:
        raise InvalidArgument(f"{size} amplitudes is not a power of two", field=field)


def device_vector(x: Any, field: str = "state") -> Optional[DeviceVector]:
    """``x`` as one vector in GPU memory, or None when its amplitudes are in host memory (a
    state of the CPU backend, a NumPy array, a CPU tensor).

    A qdp.State on a GPU is opened as a view here (its lease ends at :meth:`DeviceVector.close`);
    a :class:`~qdp._views.ShardView` (taken as the whole state: pass the State itself to have a
    sharded one refused) or a CUDA array (anything with ``__cuda_array_interface__``:
    a torch CUDA tensor, a CuPy array) is used as given. Refused: a batch of several samples and
    a state sharded over several pieces (InvalidArgument / NotSupported saying what to do), an
    array that is not contiguous, not complex64/complex128 or not a power of two long.
    """
    from .._views import ShardView
    from ..state import State

    if isinstance(x, State):
        gpu = [s for s in x._first_info.shards if s.device.startswith("cuda")]
        if not gpu:
            return None
        if x.batch != 1:
            raise InvalidArgument(f"state {x.handle} is a batch of {x.batch} samples and a "
                                  "simulator starts from one: encode the sample you want alone",
                                  field=field)
        if len(x._first_info.shards) != 1:
            raise NotSupported(f"state {x.handle} is sharded over {len(x._first_info.shards)} "
                               "pieces and a simulator's state is one vector on one GPU: "
                               "gather it first (s.gather('cuda:0') makes a one-piece copy) "
                               "or encode it with policy='single'", field=field)
        views = x.shards()
        v = views[0]
        return DeviceVector(v.ptr, v.ordinal, v.typestr, v.shape[1], v, owned_view=v)
    if isinstance(x, ShardView):
        rows, count = x.shape
        if rows != 1:
            raise InvalidArgument(f"the view holds {rows} samples and a simulator starts from "
                                  "one: encode the sample you want alone", field=field)
        if x.shard.first != 0:  # a view cannot tell the first piece from a whole state
            raise NotSupported("the view is one shard of a sharded state (it starts at "
                               f"amplitude {x.shard.first}): gather the state first "
                               "(s.gather('cuda:0')) and pass that State", field=field)
        _check_size(count, field)
        return DeviceVector(x.ptr, x.ordinal, x.typestr, count, x)
    try:
        cai = getattr(x, "__cuda_array_interface__", None)
    except RuntimeError as e:  # torch: a CUDA tensor that requires grad
        raise InvalidArgument(f"{e}: pass x.detach() (the simulator's copy carries no "
                              "gradient)", field=field) from None
    if cai is None:
        return None
    shape = tuple(int(d) for d in cai["shape"])
    typestr = cai["typestr"]
    if typestr not in _TYPESTRS:
        raise InvalidArgument(f"a CUDA array of {typestr}: pass complex64 or complex128 "
                              "amplitudes", field=field)
    if len(shape) == 2 and shape[0] == 1:
        shape = shape[1:]
    if len(shape) != 1:
        raise InvalidArgument(f"a CUDA array of shape {shape}: pass one state, 1-D",
                              field=field)
    strides = cai.get("strides")
    item = 8 if typestr == "<c8" else 16
    if strides is not None and shape[0] > 1 and int(strides[-1]) != item:
        raise InvalidArgument("a CUDA array that is not contiguous: pass x.contiguous() (or "
                              "cupy.ascontiguousarray(x))", field=field)
    _check_size(shape[0], field)
    ordinal = None
    dev = getattr(x, "device", None)
    if getattr(dev, "index", None) is not None:  # torch
        ordinal = int(dev.index)
    elif getattr(dev, "id", None) is not None:  # cupy
        ordinal = int(dev.id)
    return DeviceVector(int(cai["data"][0]), ordinal, typestr, shape[0], x)


def host_vector(x: Any, dtype: Any = None, field: str = "state") -> np.ndarray:
    """``x`` as one C-contiguous NumPy vector in host memory (a State fetched, a tensor copied to
    the host), of ``dtype`` when given; a batch of several samples refused."""
    from .._views import ShardView

    if isinstance(x, (DeviceVector, ShardView)) or (
            hasattr(x, "__cuda_array_interface__") and not hasattr(x, "detach")
            and not hasattr(x, "get")):
        raise InvalidArgument("GPU memory given for a host path: pass the qdp.State (it is "
                              "fetched) or a host array", field=field)
    x, _ = amplitudes(x)
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):
        x = x.get()  # CuPy
    x = np.asarray(x)
    if x.ndim == 2:
        if x.shape[0] != 1:
            raise InvalidArgument(f"a batch of {x.shape[0]} samples and a simulator starts "
                                  "from one: pass one sample", field=field)
        x = x[0]
    if dtype is not None and x.dtype != np.dtype(dtype):
        x = x.astype(dtype)
    return np.ascontiguousarray(x)
