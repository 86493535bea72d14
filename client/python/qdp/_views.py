"""Zero-copy views of a state on GPUs, and the leases that hold them.

Describe with views (and descriptors) gives every shard under one lease, as a ticket for a file
descriptor of its allocation, which :func:`open_views` takes on the daemon's socket and maps
here (CUDA virtual memory management: this works across PID namespaces), or from a legacy
daemon as a 64-byte CUDA IPC handle; and the shard's byte offset. Each :class:`ShardView`
exposes ``__cuda_array_interface__``. The lease ends, and the mappings go, when the views are
closed or the last of them (and every tensor over them) is collected: then CloseView, through
the connection, which the lease keeps open until then. None of it runs on the CPU backend; it
is exercised only on a GPU node.
"""

from __future__ import annotations

import functools
import os
import weakref
from typing import Any, Dict, List, Optional, Tuple

from . import _cuda, _handoff
from ._connection import Connection
from .errors import FailedPrecondition, NotSupported
from .records import NUMPY_DTYPES, Shard


class ShardView:
    """One shard of a state on a GPU, mapped here (a descriptor the daemon handed over, or a CUDA
    IPC handle of a legacy daemon).

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
    writable : bool
        Opened under the state's write lease (:meth:`qdp.State.shards`).
    """

    def __init__(self, shard: Shard, ordinal: int, ptr: int, dtype: str,
                 lease: "_Lease") -> None:
        self.shard = shard
        self.ordinal = ordinal
        self.ptr = ptr
        self.shape = (shard.rows or 1, shard.count)
        self.typestr = NUMPY_DTYPES[dtype].str
        self.writable = lease.writable
        self._lease = lease  # closes the handles and the lease when the last view goes

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        # Never marked read-only, even for read views: torch refuses such arrays outright.
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def close(self) -> None:
        """Ends the lease of every view opened with this one (idempotent). Writable views'
        devices are synchronized first, so that the daemon's next read sees what was written
        through them on any stream of this process."""
        self._lease.close()

    def __enter__(self) -> "ShardView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Lease:
    """The handles opened for one Describe-with-views and its lease id."""

    def __init__(self, conn: Connection, handle: str, token: str, lease_id: int,
                 cuda: "_cuda._Cuda", writable: bool) -> None:
        self.bases: List[int] = []  # IPC handles opened
        self.maps: List[Tuple[int, int, int]] = []  # descriptors mapped: (address, size, handle)
        self.ordinals: List[int] = []  # writable: the devices synchronized before the end
        self.writable = writable
        req = conn.wire.CloseViewRequest(handle=handle, token=token, lease_id=lease_id)
        self._end = functools.partial(_end_lease, cuda, self.bases, self.maps, self.ordinals,
                                      conn, req)
        # Collected (the last tensor over a view gone): ended on the connection's own thread.
        self._fin = weakref.finalize(self, conn.later, self._end)

    def close(self) -> None:
        if self._fin.detach() is not None:
            self._end()


def _end_lease(cuda: "_cuda._Cuda", bases: List[int], maps: List[Tuple[int, int, int]],
               ordinals: List[int], conn: Connection, req: Any) -> None:
    for d in ordinals:
        try:
            cuda.synchronize_device(d)
        except BaseException:  # a failed device: its writes are lost either way; end the lease
            pass
    for b in bases:
        try:
            cuda.close_handle(b)
        except BaseException:
            pass
    for ptr, size, h in maps:
        try:
            cuda.unmap_fd(ptr, size, h)
        except BaseException:
            pass
    try:
        conn.call("CloseView", req, timeout=10)
    except BaseException:  # from a finalizer: the daemon ends the lease when this process ends
        pass


def open_views(conn: Connection, handle: str, token: str, dtype: str,
               writable: bool = False) -> List[ShardView]:
    """Opens every shard of state ``handle`` (Describe with views) under one lease, the
    state's write lease when ``writable``; see :meth:`qdp.State.shards`."""
    if conn.socket_path is None:
        raise NotSupported("GPU views need a daemon on this node (a unix: target)")
    # client_pid 0: the daemon names this process by the connection's pidfd, which holds across
    # PID namespaces, where this process's own pid means nothing to it.
    req = conn.wire.DescribeRequest(handle=handle, token=token, views=True, writable=writable,
                                    descriptors=True)
    try:
        info = conn.call("Describe", req)
    except FailedPrecondition as e:
        if e.field == "handle":  # leases of this state in the way: the daemon's words say whose
            raise
        raise NotSupported(f"this daemon has no views of its states ({e.message}); use "
                           "State.numpy() or State.torch()") from None
    if not info.shards or not (info.shards[0].ipc_handle or info.shards[0].view_ticket):
        raise NotSupported("the daemon answered without views; use State.numpy()")
    cuda = _cuda.runtime()
    lease = _Lease(conn, handle, token, info.shards[0].lease_id, cuda, writable)
    if writable and info.writer_lease_id != info.shards[0].lease_id:
        # A qdpd from before write leases reads no `writable` and lends read views under a
        # lease that excludes nothing: writing through them would race its reads.
        lease.close()
        raise NotSupported(f"qdpd at {conn.target} lent views of {handle} that are not under "
                           "its write lease (a daemon from before write leases): upgrade qdpd")
    opened: Dict[Tuple[bytes, int], int] = {}
    views = []
    try:
        for m in info.shards:
            ordinal = cuda.device_of_uuid(m.uuid)
            if writable and ordinal not in lease.ordinals:
                lease.ordinals.append(ordinal)
            if m.view_ticket:
                fd = _handoff.take(conn.socket_path, m.view_ticket)
                try:
                    with cuda.on_device(ordinal):
                        ptr, h = cuda.map_fd(ordinal, fd, m.view_bytes)
                finally:
                    os.close(fd)  # the mapping holds the memory
                lease.maps.append((ptr, m.view_bytes, h))
                views.append(ShardView(Shard.from_proto(m), ordinal, ptr + m.ipc_offset, dtype,
                                       lease))
                continue
            key = (bytes(m.ipc_handle), ordinal)
            if key not in opened:  # one open per allocation: CUDA refuses a second
                opened[key] = cuda.open_handle(ordinal, bytes(m.ipc_handle))
                lease.bases.append(opened[key])
            views.append(ShardView(Shard.from_proto(m), ordinal, opened[key] + m.ipc_offset,
                                   dtype, lease))
    except BaseException:
        lease.close()
        raise
    return views


def as_tensor(views: List[ShardView], batch: int, qubits: int, shape: Tuple[int, ...],
              dtype: str, device: Optional[str]) -> Any:
    """A state of ``batch`` samples of ``qubits`` as one torch tensor of ``shape``, from the
    views of its shards: the single shard's view in place (the tensor holds the view, hence the
    lease), or the shards copied device to device into one tensor on ``device`` (default: the
    first shard's GPU), ending the lease once copied."""
    import torch

    first = f"cuda:{views[0].ordinal}"
    target = torch.device(device) if device is not None else torch.device(first)
    if len(views) == 1 and target == torch.device(first):
        t = torch.as_tensor(views[0], device=first)  # keeps the view, hence the lease, alive
        return t.reshape(shape)
    dt = torch.complex64 if dtype == "complex64" else torch.complex128
    out = torch.empty((batch, 1 << qubits), dtype=dt, device=target)
    try:
        for v in views:
            s = v.shard
            src = torch.as_tensor(v, device=f"cuda:{v.ordinal}")
            out[s.row_first:s.row_first + (s.rows or 1), s.first:s.first + s.count].copy_(src)
        if target.type == "cuda":
            torch.cuda.synchronize(target)
    finally:
        views[0].close()
    return out.reshape(shape)
