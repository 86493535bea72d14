"""How a state's amplitudes come into this process: written by the daemon straight into a
writable shared-memory region (FetchInto) on its node, else streamed (Fetch)."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, Tuple

import numpy as np

from ._connection import Connection
from ._region import Region, RegionPool
from .errors import Error, error_for
from .records import NUMPY_DTYPES, dtype_name


#: A computation's values (Client.kernel, State.probabilities) up to this size come back in its
#: reply; larger ones are written by the daemon into shared memory that becomes the array.
REPLY_VALUES_BYTES = 4 << 20


class Fetcher:
    """The fetches of one client, and the writable regions it keeps for them.

    Parameters
    ----------
    conn : Connection
        The client's connection.
    region_cache_bytes : int
        Bytes of regions kept registered between fetches (see :class:`qdp.Client`).

    Notes
    -----
    Its regions are unregistered by :meth:`close`, or when it is collected (the client and every
    state that fetches through it are gone).
    """

    def __init__(self, conn: Connection, region_cache_bytes: int) -> None:
        self._conn = conn
        self._pool = RegionPool(region_cache_bytes)
        self._close_pool = weakref.finalize(self, self._pool.close)

    def close(self) -> None:
        """Unregisters the regions kept (arrays over them stay valid). Idempotent."""
        self._close_pool()

    def fetch(self, ref: Any, count: int, dtype: np.dtype) -> np.ndarray:
        """Amplitudes [0, count) of state ``ref``, as a 1-D array of ``dtype``: over the mapping
        of the region FetchInto wrote them into (no copy at all), or streamed into a fresh
        array where no region is to be had (over TCP, or max_regions reached)."""
        flat = self.into_region(count * dtype.itemsize, (count,), dtype,
                                lambda region: self._write_into(region, ref, count, dtype))
        if flat is None:
            flat = np.empty(count, dtype)
            self.stream(ref, flat, 0)
        return flat

    def stream(self, ref: Any, out: np.ndarray, offset: int) -> None:
        """Streams amplitudes [offset, offset + out.size) into out (1-D, the state's dtype)."""
        req = self._conn.wire.FetchRequest(offset=offset, count=out.size)
        req.state.CopyFrom(ref)
        dst = out.view(np.uint8)
        es = out.itemsize
        for ch in self._conn.stream("Fetch", req):
            start = (ch.offset - offset) * es
            n = len(ch.data)
            if start < 0 or start + n > dst.size:
                raise error_for("DATA_LOSS", f"Fetch sent amplitudes [{ch.offset}, "
                                f"+{n // es}) outside the range asked for")
            dst[start:start + n] = np.frombuffer(ch.data, np.uint8)

    def computed(self, method: str, request: Any, shape: Tuple[int, int],
                 dtype: np.dtype) -> np.ndarray:
        """The values a computation on resident states answers (Kernel, Measure: a reply with
        rows, cols, dtype, bytes and values) as an array of ``shape``: in the reply up to
        REPLY_VALUES_BYTES, else written by the daemon into a writable region that becomes the
        array (in the reply again where no region is to be had).

        Raises
        ------
        Internal
            The daemon answered another shape, dtype or size than asked.
        Error
            The call's failure, as its status's subclass.
        """
        nbytes = shape[0] * shape[1] * dtype.itemsize

        def check(rep: Any, in_reply: bool) -> None:
            got = NUMPY_DTYPES.get(dtype_name(rep.dtype)) if rep.dtype else None
            if (rep.rows, rep.cols) != shape or got != dtype or rep.bytes != nbytes or \
                    (in_reply and len(rep.values) != nbytes):
                raise error_for("INTERNAL", f"the daemon answered {method} with a {rep.rows} x "
                                f"{rep.cols} {dtype_name(rep.dtype)} array ({rep.bytes} B, "
                                f"{len(rep.values)} in the reply) for a {shape[0]} x {shape[1]} "
                                f"{dtype} one")

        def into(region: Region) -> None:
            request.region.handle, request.region.token = region.handle, region.token
            check(self._conn.call(method, request), False)

        if nbytes > REPLY_VALUES_BYTES:
            out = self.into_region(max(nbytes, 1), shape, dtype, into)
            if out is not None:
                return out
            request.ClearField("region")
        rep = self._conn.call(method, request)
        check(rep, True)
        return np.frombuffer(rep.values, dtype).reshape(shape).copy()

    def into_region(self, nbytes: int, shape: Tuple[int, ...], dtype: np.dtype,
                    write: Callable[[Region], None]) -> Optional[np.ndarray]:
        """What ``write(region)`` has the daemon write at the start of a writable region
        (FetchInto, Kernel), returned as an array of ``shape`` and ``dtype`` over its mapping.

        The region is one kept from an earlier call when one fits and no array over it is
        alive, else a fresh one, kept afterwards when ``region_cache_bytes`` allows (else
        unregistered at once: the mapping outlives it). A kept region the daemon refuses (it
        restarted, or the region was unregistered elsewhere: an error of field "region") is
        dropped and the call retried in a fresh one. None over TCP, or when no region can be
        registered now; the caller then asks for the values another way.
        """
        conn, pool = self._conn, self._pool
        if conn.socket_path is None:
            return None
        region = pool.take(nbytes)
        if region is not None:
            try:
                write(region)
            except Error as e:
                if e.field != "region":
                    pool.give(region)
                    raise
                pool.forget(region)  # the region's fault, not the call's: a fresh one decides
            except BaseException:
                pool.give(region)
                raise
            else:
                return pool.lend(region, shape, dtype)
        try:
            region = Region(nbytes, conn.register_region, conn.unregister_quietly, writable=True)
        except Error:
            return None  # no region to be had now (max_regions, memory)
        pool.add(region)
        try:
            write(region)
        except BaseException:
            pool.give(region)
            raise
        return pool.lend(region, shape, dtype)

    def _write_into(self, region: Region, ref: Any, count: int, dtype: np.dtype) -> None:
        """Has the daemon write amplitudes [0, count) of state ``ref`` at the start of
        ``region`` (FetchInto, as many calls as it takes).

        Raises
        ------
        DataLoss
            The daemon wrote other than asked (no amplitudes, too many, another dtype).
        Error
            The call's failure, as its status's subclass.
        """
        done = 0
        while done < count:
            req = self._conn.wire.FetchIntoRequest(offset=done, count=count - done,
                                                   region_offset=done * dtype.itemsize)
            req.state.CopyFrom(ref)
            req.region.handle, req.region.token = region.handle, region.token
            rep = self._conn.call("FetchInto", req)
            if rep.count == 0 or rep.count > count - done:
                raise error_for("DATA_LOSS", f"FetchInto wrote {rep.count} amplitudes of "
                                f"the {count - done} asked for")
            if rep.dtype and NUMPY_DTYPES[dtype_name(rep.dtype)] != dtype:
                raise error_for("DATA_LOSS", f"FetchInto wrote {dtype_name(rep.dtype)} "
                                f"for a {dtype} state")
            done += rep.count
