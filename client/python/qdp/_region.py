"""Shared-memory regions a client owns: a memfd it creates, maps, hands over and registers once
(RegisterRegion), so that every later Encode reads the bytes in place (SharedMemory.region)."""

from __future__ import annotations

import fcntl
import mmap
import os
from typing import Callable, Optional

import numpy as np

_PAGE = mmap.PAGESIZE


def _create_memfd(size: int) -> int:
    flags = os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0)
    fd = os.memfd_create("qdp-region", flags)
    try:
        os.ftruncate(fd, size)
        seals = getattr(fcntl, "F_SEAL_SHRINK", 0) | getattr(fcntl, "F_SEAL_GROW", 0)
        if seals and hasattr(fcntl, "F_ADD_SEALS"):
            try:
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            except OSError:
                pass  # a region that may shrink is still a region; the daemon checks reads
    except BaseException:
        os.close(fd)
        raise
    return fd


class Region:
    """A memfd of ``size`` bytes, mapped here and registered with the daemon.

    Parameters
    ----------
    size : int
        Bytes (rounded up to a page).
    register : callable
        ``register(fd, writable) -> (handle, token)``: hands the descriptor over and registers it.
    unregister : callable
        ``unregister(handle, token)``: forgets it on the daemon's side.
    writable : bool
        Register it for the daemon to write (FetchInto); needs the daemon's support.

    Notes
    -----
    The mapping lives as long as any NumPy array made from :meth:`array` does; :meth:`close`
    unregisters it and closes the descriptor, and never invalidates such arrays.
    """

    def __init__(self, size: int, register: Callable[[int, bool], "tuple[str, str]"],
                 unregister: Callable[[str, str], None], writable: bool = False) -> None:
        self.size = max(_PAGE, -(-size // _PAGE) * _PAGE)
        self.writable = writable
        self._unregister = unregister
        self.handle = ""
        self.token = ""
        fd = _create_memfd(self.size)
        try:
            self.map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.handle, self.token = register(fd, writable)
        finally:
            os.close(fd)  # the mapping and the daemon's copy keep the memory
        self._bytes = np.frombuffer(self.map, dtype=np.uint8)
        self.address = int(self._bytes.ctypes.data)

    def array(self, shape: "tuple[int, ...]", dtype: np.dtype, offset: int = 0) -> np.ndarray:
        """A C-ordered array of ``shape`` and ``dtype`` over the region's bytes from ``offset``."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        return np.frombuffer(self.map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def offset_of(self, arr: np.ndarray) -> Optional[int]:
        """The byte offset of ``arr``'s data in this region, or None when it does not lie in it
        (or is not C-contiguous)."""
        if not arr.flags.c_contiguous or self.handle == "":
            return None
        start = int(arr.ctypes.data) if arr.size else -1
        if start < self.address or start + arr.nbytes > self.address + self.size:
            return None
        return start - self.address

    def write(self, arr: np.ndarray) -> None:
        """Copies ``arr`` (C order) to the region's start."""
        n = arr.nbytes
        dst = self._bytes[:n]
        np.copyto(dst, np.ascontiguousarray(arr).reshape(-1).view(np.uint8))

    def detach(self) -> mmap.mmap:
        """Gives up this object's references to the mapping and returns it, so that the mapping
        lives exactly as long as the arrays over it (see Client.empty)."""
        m = self.map
        self.map = None  # type: ignore[assignment]
        self._bytes = None  # type: ignore[assignment]
        return m

    def close(self) -> None:
        """Unregisters the region (once); arrays over its mapping stay valid."""
        handle, token = self.handle, self.token
        self.handle = self.token = ""
        if handle:
            self._unregister(handle, token)
