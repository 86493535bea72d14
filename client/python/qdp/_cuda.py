"""GPU zero copy through CUDA IPC, with the CUDA runtime reached by ctypes (no CUDA package is
needed to import qdp; torch is imported only when a tensor is asked for).

Two directions:

- **Views of a state** (Describe with views): every shard's 64-byte IPC handle and byte offset
  under one lease; :class:`ShardView` opens it here and exposes ``__cuda_array_interface__``;
  closing the views (or collecting them) closes the handles and ends the lease (CloseView).
- **CUDA tensor input** (``Input.cuda_ipc``): the tensor's allocation is exported with
  ``cudaIpcGetMemHandle`` and named with its offset and the device's UUID.
- **CUDA tensor output** (``EncodeRequest.out``, ``encode(..., out=t)``): the same export of the
  caller's tensor, which the daemon writes the state into; nothing is kept on the daemon.

None runs on the CPU backend; all are exercised only on a GPU node.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from .errors import FailedPrecondition, InvalidArgument, NotSupported
from .records import NUMPY_DTYPES, Shard

if TYPE_CHECKING:
    from .state import State

_IPC_HANDLE_BYTES = 64
_LAZY_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
_POINTER_BUFFER_ID = 7  # CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation for the process
_POINTER_DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
_EXPORTS_KEPT = 64


class _IpcHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: 64 opaque bytes, passed by value to cudaIpcOpenMemHandle. Unsigned
    bytes, not c_char: a c_char array reads as a C string and would stop at the first zero byte."""

    _fields_ = [("reserved", ctypes.c_ubyte * _IPC_HANDLE_BYTES)]

    @classmethod
    def of(cls, handle: bytes) -> "_IpcHandle":
        if len(handle) != _IPC_HANDLE_BYTES:
            raise FailedPrecondition(f"a CUDA IPC handle is {_IPC_HANDLE_BYTES} bytes, this one "
                                     f"{len(handle)}: the daemon and this package disagree")
        h = cls()
        ctypes.memmove(h.reserved, handle, _IPC_HANDLE_BYTES)
        return h

    def raw(self) -> bytes:
        return bytes(bytearray(self.reserved))


class _Cuda:
    """The few CUDA runtime and driver calls used here."""

    def __init__(self) -> None:
        self.rt = self._load(["cudart"], ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"])
        self.drv = self._load(["cuda"], ["libcuda.so.1", "libcuda.so"])
        self.rt.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _IpcHandle,
                                                 ctypes.c_uint]
        self.rt.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(_IpcHandle), ctypes.c_void_p]
        self.rt.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        self.rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.check(self.drv.cuInit(0), "cuInit")
        self._uuids: Dict[int, str] = {}
        # (allocation base, buffer id) -> its IPC handle: a caching allocator hands the same
        # allocation again and again, and cudaIpcGetMemHandle costs tens of microseconds. The
        # buffer id tells a new allocation at a freed one's address from the old one.
        self._exports: Dict[Tuple[int, int], bytes] = {}
        self._exports_lock = threading.Lock()

    @staticmethod
    def _load(names: List[str], sonames: List[str]) -> ctypes.CDLL:
        cands = sonames + [p for p in (ctypes.util.find_library(n) for n in names) if p]
        for c in cands:
            try:
                return ctypes.CDLL(c)
            except OSError:
                continue
        raise NotSupported(f"no CUDA runtime here ({', '.join(sonames)}): GPU views need the "
                           "CUDA libraries of the driver")

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise FailedPrecondition(f"{what} failed with CUDA error {rc}")

    def device_of_uuid(self, uuid: str) -> int:
        """This process's ordinal of the GPU whose UUID the daemon reported."""
        n = ctypes.c_int()
        self.check(self.rt.cudaGetDeviceCount(ctypes.byref(n)), "cudaGetDeviceCount")
        for i in range(n.value):
            if self.uuid(i).lower() == uuid.lower():
                return i
        raise FailedPrecondition(f"GPU {uuid} is not visible to this process: check "
                                 "CUDA_VISIBLE_DEVICES")

    def uuid(self, ordinal: int) -> str:
        """The UUID of device ``ordinal`` as the daemon and nvidia-smi print it ("GPU-..."); an
        ordinal names one device for the life of the process, so it is asked once."""
        known = self._uuids.get(ordinal)
        if known is not None:
            return known
        dev = ctypes.c_int()
        self.check(self.drv.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        raw = ctypes.create_string_buffer(16)
        self.check(self.drv.cuDeviceGetUuid(raw, dev), "cuDeviceGetUuid")
        h = raw.raw.hex()
        self._uuids[ordinal] = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        return self._uuids[ordinal]

    @contextlib.contextmanager
    def on_device(self, ordinal: int) -> Iterator[None]:
        """Makes ``ordinal`` this thread's current device, and the one before current again
        after (torch and the caller's code rely on theirs)."""
        prev = ctypes.c_int()
        self.check(self.rt.cudaGetDevice(ctypes.byref(prev)), "cudaGetDevice")
        self.check(self.rt.cudaSetDevice(ordinal), "cudaSetDevice")
        try:
            yield
        finally:
            self.rt.cudaSetDevice(prev.value)

    def open_handle(self, ordinal: int, handle: bytes) -> int:
        with self.on_device(ordinal):
            ptr = ctypes.c_void_p()
            h = _IpcHandle.of(handle)
            self.check(self.rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), h, _LAZY_PEER_ACCESS),
                       "cudaIpcOpenMemHandle")
            return int(ptr.value or 0)

    def close_handle(self, ptr: int) -> None:
        self.rt.cudaIpcCloseMemHandle(ctypes.c_void_p(ptr))

    def export(self, ordinal: int, ptr: int) -> Tuple[bytes, int]:
        """The IPC handle of the allocation holding ``ptr`` (on device ``ordinal``), and ptr's
        offset in it."""
        base, size, buf = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_ulonglong()
        fn = getattr(self.drv, "cuMemGetAddressRange_v2", None) or self.drv.cuMemGetAddressRange
        self.check(fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
                   "cuMemGetAddressRange")
        self.check(self.drv.cuPointerGetAttribute(ctypes.byref(buf), _POINTER_BUFFER_ID,
                                                  ctypes.c_uint64(ptr)), "cuPointerGetAttribute")
        key = (base.value, buf.value)
        with self._exports_lock:
            raw = self._exports.get(key)
        if raw is None:
            h = _IpcHandle()
            with self.on_device(ordinal):
                self.check(self.rt.cudaIpcGetMemHandle(ctypes.byref(h), ctypes.c_void_p(ptr)),
                           "cudaIpcGetMemHandle")
            raw = h.raw()
            with self._exports_lock:
                if len(self._exports) >= _EXPORTS_KEPT:
                    self._exports.pop(next(iter(self._exports)))  # the oldest
                self._exports[key] = raw
        return raw, ptr - base.value


    def device_of_pointer(self, ptr: int) -> int:
        """This process's ordinal of the GPU whose memory ``ptr`` is."""
        ordinal = ctypes.c_int()
        self.check(self.drv.cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_DEVICE_ORDINAL,
                                                  ctypes.c_uint64(ptr)), "cuPointerGetAttribute")
        return ordinal.value

    def synchronize(self, stream: int) -> None:
        """Waits for CUDA stream ``stream`` (1: the legacy default stream, 2: per-thread)."""
        self.check(self.rt.cudaStreamSynchronize(ctypes.c_void_p(stream)),
                   "cudaStreamSynchronize")


_RUNTIME: Optional[_Cuda] = None


def runtime() -> _Cuda:
    """The CUDA runtime and driver, loaded (and cuInit run) once per process."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = _Cuda()
    return _RUNTIME


_cuda = runtime


class ShardView:
    """One shard of a state on a GPU, opened here through CUDA IPC.

    Attributes
    ----------
    shard : Shard
        Its layout (device, amplitude and sample ranges).
    ordinal : int
        This process's CUDA device ordinal of the shard's GPU.
    ptr : int
        Device address of the shard's first amplitude.
    shape : tuple of int
        ``(rows, count)``: samples by amplitudes.
    typestr : str
        ``"<c8"`` or ``"<c16"``.
    """

    def __init__(self, shard: Shard, ordinal: int, ptr: int, dtype: str,
                 lease: "_Lease") -> None:
        self.shard = shard
        self.ordinal = ordinal
        self.ptr = ptr
        self.shape = (shard.rows or 1, shard.count)
        self.typestr = NUMPY_DTYPES[dtype].str
        self._lease = lease  # closes the handles and the lease when the last view goes

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def close(self) -> None:
        """Ends the lease of every view opened with this one (idempotent)."""
        self._lease.close()

    def __enter__(self) -> "ShardView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Lease:
    """The handles opened for one Describe-with-views and its lease id."""

    def __init__(self, state: "State", lease_id: int, cuda: _Cuda) -> None:
        self.bases: List[int] = []
        client = state._client
        req = client.wire.CloseViewRequest(handle=state.handle, token=state.token,
                                           lease_id=lease_id)
        self._fin = weakref.finalize(self, _end_lease, cuda, self.bases, client, req)

    def close(self) -> None:
        self._fin()


def _end_lease(cuda: _Cuda, bases: List[int], client: Any, req: Any) -> None:
    for b in bases:
        try:
            cuda.close_handle(b)
        except BaseException:
            pass
    try:
        client.call("CloseView", req, timeout=10)
    except BaseException:  # from a finalizer: the daemon ends the lease when this process ends
        pass


def open_views(state: "State") -> List[ShardView]:
    """Opens every shard of ``state`` (Describe with views); see :meth:`State.shards`."""
    client = state._client
    if client.socket_path is None:
        raise NotSupported("GPU views need a daemon on this node (a unix: target)")
    req = client.wire.DescribeRequest(handle=state.handle, token=state.token, views=True,
                                      client_pid=os.getpid())
    try:
        info = client.call("Describe", req)
    except FailedPrecondition as e:
        raise NotSupported(f"this daemon has no views of its states ({e.message}); use "
                           "State.numpy() or State.torch()") from None
    if not info.shards or not info.shards[0].ipc_handle:
        raise NotSupported("the daemon answered without views; use State.numpy()")
    cuda = _cuda()
    lease = _Lease(state, info.shards[0].lease_id, cuda)
    opened: Dict[Tuple[bytes, int], int] = {}
    views = []
    try:
        for m in info.shards:
            ordinal = cuda.device_of_uuid(m.uuid)
            key = (bytes(m.ipc_handle), ordinal)
            if key not in opened:  # one open per allocation: CUDA refuses a second
                opened[key] = cuda.open_handle(ordinal, bytes(m.ipc_handle))
                lease.bases.append(opened[key])
            views.append(ShardView(Shard.from_proto(m), ordinal, opened[key] + m.ipc_offset,
                                   state.dtype, lease))
    except BaseException:
        lease.close()
        raise
    return views


def state_tensor(state: "State", device: Optional[str]) -> Any:
    """The whole state as one torch tensor: the single shard's view in place, or the shards
    copied device to device into one tensor on ``device`` (default: the first shard's GPU)."""
    import torch

    views = open_views(state)
    first = f"cuda:{views[0].ordinal}"
    target = torch.device(device) if device is not None else torch.device(first)
    if len(views) == 1 and target == torch.device(first):
        t = torch.as_tensor(views[0], device=first)  # keeps the view, hence the lease, alive
        return t.reshape(state.shape)
    dt = torch.complex64 if state.dtype == "complex64" else torch.complex128
    out = torch.empty((state.batch, 1 << state.qubits), dtype=dt, device=target)
    try:
        for v in views:
            s = v.shard
            src = torch.as_tensor(v, device=f"cuda:{v.ordinal}")
            out[s.row_first:s.row_first + (s.rows or 1), s.first:s.first + s.count].copy_(src)
        if target.type == "cuda":
            torch.cuda.synchronize(target)
    finally:
        views[0].close()
    return out.reshape(state.shape)


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
    cuda = _cuda()
    ordinal = t.device.index if t.device.index is not None else torch.cuda.current_device()
    handle, offset = cuda.export(ordinal, t.data_ptr())
    inp.dtype = 1 if t.dtype == torch.float32 else 2
    inp.rows, inp.cols = (1, t.shape[0]) if t.ndim == 1 else (t.shape[0], t.shape[1])
    inp.cuda_ipc.ipc_handle = handle
    inp.cuda_ipc.offset = offset
    inp.cuda_ipc.device_uuid = cuda.uuid(ordinal)
    return t


_OUT_DTYPES = {"<c8": "complex64", "<c16": "complex128"}


def _c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class CudaOutput:
    """Where ``encode(..., out=...)`` writes: a C-contiguous complex64 or complex128 CUDA
    tensor, or any object with ``__cuda_array_interface__``, described without a CUDA call.

    Attributes
    ----------
    obj : object
        What the caller passed, kept alive by this object until the Encode has answered.
    dtype : str
        "complex64" or "complex128".
    numel : int
        Its elements.
    ptr : int
        The device address of its first element.
    """

    def __init__(self, out: Any) -> None:
        self.obj = out
        self._torch = type(out).__module__.startswith("torch") and hasattr(out, "is_cuda")
        if self._torch:
            self._of_tensor(out)
        else:
            self._of_interface(out)

    def _of_tensor(self, t: Any) -> None:
        import torch

        if not t.is_cuda:
            raise NotSupported(f"out= takes a CUDA tensor, not one on {t.device}: encode, then "
                               "State.numpy() or .torch(device='cpu')", field="out")
        names = {torch.complex64: "complex64", torch.complex128: "complex128"}
        if t.dtype not in names:
            raise InvalidArgument(f"out is a {t.dtype} tensor: a state is complex64 or "
                                  "complex128", field="out")
        if not t.is_contiguous():
            raise InvalidArgument("out is not contiguous: the state is written row-major in "
                                  "place; pass a contiguous tensor (or slice)", field="out")
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
        self.dtype = _OUT_DTYPES.get(cai["typestr"], "")
        if not self.dtype:
            raise InvalidArgument(f"out has typestr {cai['typestr']!r}: a state is complex64 "
                                  "('<c8') or complex128 ('<c16')", field="out")
        itemsize = 8 if self.dtype == "complex64" else 16
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _c_strides(shape, itemsize):
            raise InvalidArgument(f"out has strides {tuple(strides)}, not C-contiguous ones: the "
                                  "state is written row-major in place", field="out")
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
        cuda = _cuda()
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
        req.out.bytes = self.numel * (8 if self.dtype == "complex64" else 16)
        req.out.device_uuid = cuda.uuid(ordinal)
