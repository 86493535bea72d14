"""Shared-memory regions a client owns: a memfd it creates, maps, hands over and registers once
(RegisterRegion), so that every later Encode reads the bytes in place (SharedMemory.region); and
the pool of writable ones that fetches (FetchInto) reuse."""

from __future__ import annotations

import fcntl
import functools
import mmap
import os
import threading
import weakref
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .errors import NotSupported, ResourceExhausted
from .records import format_bytes

_PAGE = mmap.PAGESIZE
#: A copy at least this large is cut into COPY_THREADS page-aligned parts copied at once: one
#: thread moved 32 MiB into shared memory in 3.0-3.8 ms on an H200 node, eight in 0.95 ms
#: (docs/performance.md, "From Python").
PARALLEL_COPY_BYTES = 8 << 20
COPY_THREADS = max(1, min(8, os.cpu_count() or 1))


def copier() -> ThreadPoolExecutor:
    """A pool for :func:`copy_into`, owned (and shut down) by the caller."""
    return ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="qdp-copy")


def copy_into(dst: np.ndarray, src: np.ndarray, pool: Optional[Executor] = None) -> None:
    """Copies ``src`` into ``dst`` (both C-contiguous, the same bytes); with ``pool`` and at
    least PARALLEL_COPY_BYTES, in COPY_THREADS parts at once (NumPy releases the GIL while it
    copies). Every part has ended when it returns, also after a failure."""
    n = src.nbytes
    if pool is None or n < PARALLEL_COPY_BYTES or COPY_THREADS == 1:
        np.copyto(dst, src)
        return
    d = dst.reshape(-1).view(np.uint8)
    s = src.reshape(-1).view(np.uint8)
    step = -(-n // COPY_THREADS // _PAGE) * _PAGE
    run_all(pool, [functools.partial(np.copyto, d[a:a + step], s[a:a + step])
                   for a in range(0, n, step)])


def run_all(pool: Executor, calls: List[Callable[[], object]]) -> None:
    """Runs the calls at once on ``pool`` and waits for every one; the first failure is raised
    only when all have ended, so that none is left writing."""
    futures = [pool.submit(c) for c in calls]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e

#: At most this many fetch regions of one client stay registered (lent or idle): the daemon's
#: max_regions (64 by default) is shared by every client on the node, each identity may hold
#: max_client_regions of them (16 by default), and a caller that holds many small arrays must not
#: spend them on its cache.
POOL_REGIONS = 4


def _no_room(size: int, what: str, e: BaseException) -> ResourceExhausted:
    """The refusal of a region this process cannot make, with its size for people."""
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return ResourceExhausted(f"cannot {what} a {format_bytes(size)} shared-memory region in "
                             f"this process: {reason}",
                             hint="Ask for less at once (a smaller array or batch), or free "
                                  "memory on this node.")


#: The seals every region gets once sized: its size is final, so the daemon never has to watch it
#: for a cut (a cut grown back would leave it the same size and new pages: zeros, or, page-locked
#: on a GPU, the old ones).
SIZE_SEALS = getattr(fcntl, "F_SEAL_SHRINK", 0) | getattr(fcntl, "F_SEAL_GROW", 0)


def _write_all(fd: int, data: memoryview) -> None:
    """Writes all of ``data`` at the start of ``fd`` (write(2) may write less than asked)."""
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:done + (1 << 30)], done)


def _create_memfd(size: int, contents: Optional[memoryview] = None) -> int:
    """A memfd of ``size`` bytes sealed against shrinking and growing (where the kernel can); with
    ``contents``, those bytes written at its start and then sealed against writing as well, for
    good (F_SEAL_WRITE: no process can change them again, this one included)."""
    flags = os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0)
    try:
        fd = os.memfd_create("qdp-region", flags)
    except OSError as e:
        raise _no_room(size, "create", e) from None
    try:
        try:
            os.ftruncate(fd, size)
            if contents is not None:
                _write_all(fd, contents)
        except (OSError, OverflowError) as e:
            raise _no_room(size, "size", e) from None
        seals = SIZE_SEALS
        if contents is not None:
            seals |= getattr(fcntl, "F_SEAL_WRITE", 0)
        if seals and hasattr(fcntl, "F_ADD_SEALS"):
            try:
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            except OSError as e:
                if contents is not None:  # the promise is the point: never made silently
                    raise NotSupported(f"cannot seal a shared-memory region against writing "
                                       f"here: {e.strerror or e}") from None
                # a region that may shrink is still a region: the daemon checks its reads
        elif contents is not None:
            raise NotSupported("this Python has no memfd seals (fcntl.F_ADD_SEALS)")
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
    contents : memoryview, optional
        Bytes to hold for good: written first, then sealed against writing (F_SEAL_WRITE) and
        mapped read-only here; the region is *frozen*: nothing can change its bytes any more.

    Notes
    -----
    The mapping lives as long as any NumPy array made from :meth:`array` does; :meth:`close`
    unregisters it and closes the descriptor, and never invalidates such arrays.
    """

    def __init__(self, size: int, register: Callable[[int, bool], "tuple[str, str]"],
                 unregister: Callable[[str, str], None], writable: bool = False,
                 contents: Optional[memoryview] = None) -> None:
        self.size = max(_PAGE, -(-size // _PAGE) * _PAGE)
        self.writable = writable
        self.frozen = contents is not None
        self._unregister = unregister
        self.handle = ""
        self.token = ""
        fd = _create_memfd(self.size, contents)
        try:
            try:
                prot = mmap.PROT_READ if self.frozen else mmap.PROT_READ | mmap.PROT_WRITE
                self.map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, prot)
            except (OSError, OverflowError) as e:
                raise _no_room(self.size, "map", e) from None
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

    def write(self, arr: np.ndarray, pool: Optional[Executor] = None) -> None:
        """Copies ``arr`` (C order) to the region's start (in parts on ``pool``: copy_into)."""
        n = arr.nbytes
        copy_into(self._bytes[:n], np.ascontiguousarray(arr).reshape(-1).view(np.uint8), pool)

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


class _Lent:
    """The base object of the arrays of one fetch into a kept region.

    NumPy builds the array from :attr:`__array_interface__` and holds this object as its base;
    every slice and view holds the array, so this object is collected only when the last of them
    is, and its finalizer (set by :meth:`RegionPool.lend`) gives the region back then.
    """

    def __init__(self, region: Region, shape: Tuple[int, ...], dtype: np.dtype) -> None:
        self.__array_interface__ = {"data": (region.address, False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}
        self.map = region.map  # the memory itself, whatever becomes of the region


class RegionPool:
    """Writable regions a client keeps registered between fetches (FetchInto), so that a fetch of
    a size fetched before neither registers a region (the daemon pins its pages: the slow part)
    nor unregisters one.

    Parameters
    ----------
    limit : int
        Bytes of regions it may keep registered, lent or idle; 0 keeps none.

    Notes
    -----
    A region given to it (:meth:`add`) is *kept* when ``limit`` and :data:`POOL_REGIONS` allow,
    else *passing*: unregistered as soon as its fetch is done, as without a pool. A kept region
    is lent to the arrays of one fetch at a time or idle; only an idle region is taken
    (:meth:`take`), and a region becomes idle again only when the last array over it is
    collected, so the daemon never writes into memory that a live array shows. Every method may
    be called from any thread.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # Reentrant: the garbage collector may run a finalizer (give) in this thread at any
        # allocation, also while the lock is held.
        self._lock = threading.RLock()
        self._open: Dict[int, Region] = {}  # every region given and not closed yet
        self._kept: Dict[int, Region] = {}  # those that stay registered between fetches
        self._idle: List[Region] = []  # kept and free, least recently used first
        self._kept_bytes = 0
        self._closed = False

    def take(self, nbytes: int) -> Optional[Region]:
        """An idle region for a fetch of ``nbytes``, now taken from the pool.

        Returns
        -------
        Region or None
            The smallest idle region of at least ``nbytes`` and at most twice that plus a page
            (a small fetch must not tie up a large region); None when there is none.
        """
        with self._lock:
            fits = [r for r in self._idle if nbytes <= r.size <= 2 * nbytes + _PAGE]
            if not fits:
                return None
            region = min(fits, key=lambda r: r.size)
            self._idle.remove(region)
            return region

    def add(self, region: Region) -> None:
        """Takes in a fresh region for its first fetch: kept when the bounds allow it once idle
        regions are unregistered (least recently used first), else passing."""
        evicted: List[Region] = []
        with self._lock:
            self._open[id(region)] = region
            lent = len(self._kept) - len(self._idle)
            lent_bytes = self._kept_bytes - sum(r.size for r in self._idle)
            # Only idle regions can make room: when lent ones leave none, evict nothing.
            if not self._closed and lent < POOL_REGIONS and lent_bytes + region.size <= self.limit:
                while (len(self._kept) >= POOL_REGIONS
                       or self._kept_bytes + region.size > self.limit):
                    evicted.append(self._idle[0])
                    self._unkeep(self._idle[0])
                self._kept[id(region)] = region
                self._kept_bytes += region.size
        for r in evicted:
            self._close(r)

    def lend(self, region: Region, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The array of ``shape`` and ``dtype`` at the start of a region a fetch has filled.

        Returns
        -------
        numpy.ndarray
            Writable, over the region's mapping (no copy). For a kept region its base is a
            :class:`_Lent` that gives the region back when collected; a passing region is
            unregistered now (the mapping stays with the array).
        """
        with self._lock:
            kept = id(region) in self._kept
        if not kept:
            arr = region.array(shape, dtype)
            self._close(region)
            return arr
        lent = _Lent(region, shape, dtype)
        # Not at exit: the client's own finalizer unregisters every region then, and a region
        # must not turn idle while its arrays still exist.
        weakref.finalize(lent, self.give, region).atexit = False
        return np.asarray(lent)

    def give(self, region: Region) -> None:
        """Takes back a region whose fetch failed or whose arrays are gone: idle again when kept,
        else unregistered."""
        with self._lock:
            if id(region) in self._kept:
                self._idle.append(region)
                return
        self._close(region)

    def forget(self, region: Region) -> None:
        """Unregisters a region the daemon refused or cannot write, and keeps it no more."""
        with self._lock:
            self._unkeep(region)
        self._close(region)

    def close(self) -> None:
        """Unregisters every region it holds, lent or idle (arrays over them stay valid); a
        region given later passes. Idempotent."""
        with self._lock:
            self._closed = True
            regions = list(self._open.values())
            self._open.clear()
            self._kept.clear()
            self._idle.clear()
            self._kept_bytes = 0
        for r in regions:
            r.close()

    def _unkeep(self, region: Region) -> None:
        """Under the lock: the region is no longer kept (nor idle)."""
        if self._kept.pop(id(region), None) is not None:
            self._kept_bytes -= region.size
            if region in self._idle:
                self._idle.remove(region)

    def _close(self, region: Region) -> None:
        with self._lock:
            self._open.pop(id(region), None)
        region.close()  # outside the lock: UnregisterRegion is a call to the daemon
