"""The CUDA runtime and driver, reached by ctypes: the few calls qdp's GPU paths make and the
errors they raise, nothing more (no CUDA package is needed to import qdp).

Loaded (and cuInit run) once per process, at the first :func:`runtime`: mapping the daemon's
allocation from a file descriptor it handed over (virtual memory management) or another
process's from its IPC handle, exporting one of this process's, the device of a UUID or of a
pointer, a device's UUID, and synchronizing a stream. What the handles name and who
closes them is the callers' business (qdp._views, qdp._ipc).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading
from typing import Dict, Iterator, List, Optional, Tuple

from .errors import FailedPrecondition, NotSupported

_IPC_HANDLE_BYTES = 64
_LAZY_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
_POINTER_BUFFER_ID = 7  # CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation for the process
_POINTER_DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
_EXPORTS_KEPT = 64
_HANDLE_TYPE_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_ACCESS_READWRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_RANGES_KEPT = 16  # address ranges kept for the next views (cuMemAddressReserve: ~0.6 ms)


class _AccessDesc(ctypes.Structure):
    """CUmemAccessDesc: a location (type, id) and its access flags."""

    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int), ("flags", ctypes.c_int)]


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
        # Address ranges of unmapped views, by size, for the next view of that size: reserving
        # one costs more than mapping into it.
        self._ranges: Dict[int, List[int]] = {}
        self._nranges = 0

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

    def map_fd(self, ordinal: int, fd: int, size: int) -> Tuple[int, int]:
        """Maps the allocation of POSIX file descriptor ``fd`` (``size`` bytes, whole) for
        device ``ordinal``; returns its address and allocation handle, for :meth:`unmap_fd`.
        The descriptor stays the caller's."""
        d = self.drv
        h, ptr = ctypes.c_ulonglong(), ctypes.c_uint64()
        self.check(d.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd),
                                                    _HANDLE_TYPE_POSIX_FD),
                   "cuMemImportFromShareableHandle")
        with self._exports_lock:
            kept = self._ranges.get(size)
            if kept:
                ptr.value = kept.pop()
                self._nranges -= 1
        try:
            if not ptr.value:
                self.check(d.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size),
                                                 ctypes.c_size_t(0), ctypes.c_uint64(0),
                                                 ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        except FailedPrecondition:
            d.cuMemRelease(h)
            raise
        try:
            self.check(d.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), h,
                                  ctypes.c_ulonglong(0)), "cuMemMap")
        except FailedPrecondition:
            d.cuMemAddressFree(ptr, ctypes.c_size_t(size))
            d.cuMemRelease(h)
            raise
        try:
            access = _AccessDesc(_LOCATION_DEVICE, ordinal, _ACCESS_READWRITE)
            self.check(d.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access),
                                        ctypes.c_size_t(1)), "cuMemSetAccess")
        except FailedPrecondition:
            self.unmap_fd(ptr.value, size, h.value)
            raise
        return ptr.value, h.value

    def unmap_fd(self, ptr: int, size: int, handle: int) -> None:
        """Undoes :meth:`map_fd`; the memory is freed once no process maps it. The address range
        is kept for the next view of its size (up to a few ranges)."""
        d = self.drv
        unmapped = d.cuMemUnmap(ctypes.c_uint64(ptr), ctypes.c_size_t(size)) == 0
        d.cuMemRelease(ctypes.c_ulonglong(handle))
        with self._exports_lock:
            keep = unmapped and self._nranges < _RANGES_KEPT
            if keep:
                self._ranges.setdefault(size, []).append(ptr)
                self._nranges += 1
        if not keep:
            d.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(size))

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

    def synchronize_device(self, ordinal: int) -> None:
        """Waits for all work of this process on device ``ordinal``."""
        with self.on_device(ordinal):
            self.check(self.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

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
