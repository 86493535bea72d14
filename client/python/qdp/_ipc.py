"""This process's CUDA memory named in a request, for the daemon to open through CUDA IPC: the
allocation is exported with ``cudaIpcGetMemHandle`` (qdp._cuda) and named with its offset and
the device's UUID.

- **CUDA tensor input** (``Input.cuda_ipc``): the daemon reads the tensor in place.
- **CUDA tensor output** (``EncodeRequest.out``, ``encode(..., out=t)``; ``KernelRequest.out``,
  ``kernel(a, out=t)``): the daemon writes the state, or the matrix, into the caller's tensor
  and keeps nothing.

Both run only on a GPU node; what ``out`` is checked for before anything is sent needs no GPU.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from . import _cuda
from ._values import is_tensor
from .errors import InvalidArgument, NotSupported


def fill_cuda_input(inp: Any, tensor: Any) -> Any:
    """Names a CUDA tensor in ``inp`` (Input.cuda_ipc) for the daemon to read in place.

    Returns the tensor the handle points into (a contiguous copy when ``tensor`` was not
    contiguous): the caller keeps it alive until the Encode has answered."""
    import torch

    if tensor.dtype not in (torch.float32, torch.float64):
        raise NotSupported(f"CUDA tensor input of dtype {tensor.dtype}: use float32 or float64")
    t = tensor.detach().contiguous()
    if t.ndim not in (1, 2):
        raise NotSupported(f"a CUDA tensor of {t.ndim} dimensions: pass 1-D or 2-D")
    torch.cuda.current_stream(t.device).synchronize()  # the daemon reads on its own streams
    cuda = _cuda.runtime()
    ordinal = t.device.index if t.device.index is not None else torch.cuda.current_device()
    handle, offset = cuda.export(ordinal, t.data_ptr())
    inp.dtype = 1 if t.dtype == torch.float32 else 2
    inp.rows, inp.cols = (1, t.shape[0]) if t.ndim == 1 else (t.shape[0], t.shape[1])
    inp.cuda_ipc.ipc_handle = handle
    inp.cuda_ipc.offset = offset
    inp.cuda_ipc.device_uuid = cuda.uuid(ordinal)
    return t


# What each kind of output may be: dtype name -> (typestr, itemsize).
STATE_DTYPES = {"complex64": ("<c8", 8), "complex128": ("<c16", 16)}
MATRIX_DTYPES = {"float32": ("<f4", 4), "float64": ("<f8", 8), **STATE_DTYPES}


def _c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class CudaOutput:
    """Where ``encode(..., out=...)`` (or ``kernel(..., out=...)``) writes: a C-contiguous CUDA
    tensor of one of ``dtypes``, or any object with ``__cuda_array_interface__``, described
    without a CUDA call.

    Attributes
    ----------
    obj : object
        What the caller passed, kept alive by this object until the call has answered.
    dtype : str
        One of ``dtypes``' names (by default "complex64" or "complex128": a state).
    numel : int
        Its elements.
    ptr : int
        The device address of its first element.
    """

    def __init__(self, out: Any, dtypes: Dict[str, Tuple[str, int]] = STATE_DTYPES,
                 what: str = "a state") -> None:
        self.obj = out
        self._dtypes, self._what = dtypes, what
        self._torch = is_tensor(out)
        if self._torch:
            self._of_tensor(out)
        else:
            self._of_interface(out)

    def _of_tensor(self, t: Any) -> None:
        import torch

        if not t.is_cuda:
            raise NotSupported(f"out= takes a CUDA tensor, not one on {t.device}: encode, then "
                               "State.numpy() or .torch(device='cpu')", field="out")
        names = {getattr(torch, k): k for k in self._dtypes}
        if t.dtype not in names:
            raise InvalidArgument(f"out is a {t.dtype} tensor: {self._what} is "
                                  f"{' or '.join(self._dtypes)}", field="out")
        if not t.is_contiguous():
            raise InvalidArgument(f"out is not contiguous: {self._what} is written row-major "
                                  "in place; pass a contiguous tensor (or slice)", field="out")
        if t.requires_grad:
            raise InvalidArgument("out requires grad: autograd cannot follow a write by the "
                                  "daemon; pass a tensor that does not", field="out")
        self.dtype, self.numel, self.ptr = names[t.dtype], t.numel(), t.data_ptr()

    def _of_interface(self, out: Any) -> None:
        cai = getattr(out, "__cuda_array_interface__", None)
        if cai is None:
            raise NotSupported(f"out= takes a CUDA tensor (or an object with "
                               f"__cuda_array_interface__), not {type(out).__name__}: encode, "
                               "then State.numpy()", field="out")
        shape = tuple(int(n) for n in cai["shape"])
        self.dtype = next((k for k, (ts, _) in self._dtypes.items() if ts == cai["typestr"]), "")
        if not self.dtype:
            kinds = " or ".join(f"{k} ({ts!r})" for k, (ts, _) in self._dtypes.items())
            raise InvalidArgument(f"out has typestr {cai['typestr']!r}: {self._what} is "
                                  f"{kinds}", field="out")
        itemsize = self._dtypes[self.dtype][1]
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _c_strides(shape, itemsize):
            raise InvalidArgument(f"out has strides {tuple(strides)}, not C-contiguous ones: "
                                  f"{self._what} is written row-major in place", field="out")
        if cai["data"][1]:
            raise InvalidArgument("out is read-only", field="out")
        self.numel, self.ptr = 1, int(cai["data"][0])
        for n in shape:
            self.numel *= n
        self._stream = cai.get("stream")

    def fill(self, req: Any, batch: int, qubits: int) -> None:
        """Names the memory in ``req.out`` for a state of ``batch`` x 2^``qubits`` amplitudes
        (batch 0: unknown here, the daemon checks the bytes), once the work queued on it is done
        (the daemon writes on its own streams)."""
        want = batch << qubits
        if batch and self.numel != want:
            raise InvalidArgument(f"out has {self.numel} elements; the state has {batch} x "
                                  f"2^{qubits} = {want} amplitudes: pass a tensor of shape "
                                  f"({batch}, {1 << qubits})", field="out")
        self.name(req)

    def fill_matrix(self, req: Any, dtype: str, rows: int, cols: int) -> None:
        """Names the memory in ``req.out`` for a ``rows`` x ``cols`` matrix of ``dtype``."""
        if self.dtype != dtype:
            raise InvalidArgument(f"out is {self.dtype}; the matrix is {dtype}: pass a {dtype} "
                                  "tensor", field="out")
        if self.numel != rows * cols:
            raise InvalidArgument(f"out has {self.numel} elements; the matrix has {rows} x "
                                  f"{cols}: pass a tensor of shape ({rows}, {cols})", field="out")
        self.name(req)

    def name(self, req: Any) -> None:
        """Fills ``req.out`` with this memory's handle, offset, bytes and GPU, once the work
        queued on it is done (the daemon writes on its own streams)."""
        cuda = _cuda.runtime()
        if self._torch:
            import torch

            ordinal = self.obj.get_device()
            torch.cuda.current_stream(self.obj.device).synchronize()
        else:
            ordinal = cuda.device_of_pointer(self.ptr)
            if self._stream is not None:
                cuda.synchronize(self._stream)
        handle, offset = cuda.export(ordinal, self.ptr)
        req.out.ipc_handle = handle
        req.out.offset = offset
        req.out.bytes = self.numel * self._dtypes[self.dtype][1]
        req.out.device_uuid = cuda.uuid(ordinal)
