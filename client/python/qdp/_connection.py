"""The connection to qdpd that a Client and everything it makes share: one gRPC channel, its
calls (failures raised as :class:`qdp.Error`), the descriptor handoff, and the quiet calls that
finalizers make.

It holds no Client: a State, a view's lease or a region's finalizer keeps only this, and the
channel stays open as long as any of them (or the Client) does, until :meth:`Connection.close`.
gRPC is imported when the first connection is made, not with qdp (see qdp._grpc_env).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

from ._grpc_env import import_grpc
from ._handoff import READ, WRITE, hand_over
from ._wire import Wire
from .errors import Error, FailedPrecondition, NotSupported, Unavailable, from_rpc_error


class Connection:
    """One channel to qdpd and the calls on it.

    Parameters
    ----------
    target : str
        The gRPC target: ``unix:/path/qdpd.sock`` or ``host:port``.
    metadata : tuple of (str, str)
        Sent with every call (the client's name, a bearer token).
    timeout : float
        Seconds each call may take unless it says otherwise.
    wire : Wire
        The contract to speak.

    Attributes
    ----------
    target, wire, timeout
        As given (``timeout`` may be changed).
    socket_path : str or None
        The daemon's socket when the target is a Unix socket, else None (TCP).
    unavailable_note : callable or None
        Gives a sentence added to an UNAVAILABLE error ("" for none): a private daemon's exit
        and its log.
    """

    def __init__(self, target: str, metadata: Tuple[Tuple[str, str], ...], timeout: float,
                 wire: Wire) -> None:
        grpc = import_grpc()
        self.target = target
        self.socket_path: Optional[str] = target[5:] if target.startswith("unix:") else None
        self.timeout = timeout
        self.wire = wire
        self._metadata = metadata
        self.unavailable_note: Optional[Callable[[], str]] = None
        self._rpc_error = grpc.RpcError
        # As libqdp: no message size cap of our own (states reach gigabytes; the daemon bounds
        # what it takes), and no retries, whose bookkeeping costs every call and which would
        # make gRPC buffer a whole upload to replay it.
        channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1),
                                                         ("grpc.max_send_message_length", -1),
                                                         ("grpc.enable_retries", 0)])
        self._calls: Dict[str, Callable[..., Any]] = {}
        for name in wire.service.methods_by_name:
            req, rep, cs, ss = wire.method_types(name)
            kind = {(False, False): channel.unary_unary,
                    (False, True): channel.unary_stream,
                    (True, False): channel.stream_unary,
                    (True, True): channel.stream_stream}[(cs, ss)]
            self._calls[name] = _multicallable(kind, f"/{wire.service.full_name}/{name}",
                                               req.SerializeToString, rep.FromString)
        self._close_channel = weakref.finalize(self, _close_quietly, channel)

    @property
    def open(self) -> bool:
        """False once :meth:`close` has run (or the process is exiting)."""
        return self._close_channel.alive

    def call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        """Calls unary RPC ``method``; returns the reply (see :meth:`qdp.Client.call`).

        Raises
        ------
        Error
            The subclass of the call's status, with its ErrorDetail fields; FailedPrecondition
            once closed; NotSupported for a method the wire does not have.
        """
        fn = self._calls.get(method)
        if fn is None:
            raise NotSupported(f"this package's qdp.proto has no method {method}")
        self._check_open()
        try:
            return fn(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except self._rpc_error as e:
            raise self._error(e) from None

    def stream(self, method: str, request: Any) -> Iterator[Any]:
        """The replies of server-streaming RPC ``method``, as they come."""
        self._check_open()
        try:
            for m in self._calls[method](request, timeout=self.timeout, metadata=self._metadata):
                yield m
        except self._rpc_error as e:
            raise self._error(e) from None

    def upload(self, method: str, requests: Iterable[Any]) -> Any:
        """Calls client-streaming RPC ``method`` with ``requests``; returns the reply."""
        self._check_open()
        try:
            return self._calls[method](requests, timeout=self.timeout, metadata=self._metadata)
        except self._rpc_error as e:
            raise self._error(e) from None

    def hand_over(self, fd: int, access: int = READ) -> str:
        """Hands ``fd`` to the daemon on this node (see qdp._handoff); returns the ticket."""
        if self.socket_path is None:
            raise NotSupported("descriptors can be handed only to a daemon on this node "
                               "(a unix: target)")
        self._check_open()
        return hand_over(self.socket_path, fd, access)

    def register_region(self, fd: int, writable: bool) -> Tuple[str, str]:
        """Hands a region's descriptor over and registers it (RegisterRegion), for the daemon
        to read, or with ``writable`` to write (FetchInto); returns its handle and token."""
        req = self.wire.RegisterRegionRequest(name="memfd:qdp-python", pid=os.getpid(), fd=fd,
                                              writable=writable)
        req.fd_ticket = self.hand_over(fd, WRITE if writable else READ)
        info = self.call("RegisterRegion", req)
        return info.handle, info.token

    def release_quietly(self, handle: str, token: str) -> None:
        """Release, for a State's finalizer: nothing once closed, and never an exception."""
        if not self.open:
            return
        try:
            self.call("Release", self.wire.StateRef(handle=handle, token=token), timeout=10)
        except BaseException:  # a GC or exit-time release must never raise
            pass

    def unregister_quietly(self, handle: str, token: str) -> None:
        """UnregisterRegion, for a region's close: nothing once closed, never an exception."""
        if not self.open:
            return
        try:
            self.call("UnregisterRegion", self.wire.RegionRef(handle=handle, token=token),
                      timeout=10)
        except BaseException:  # gone already (the daemon restarted), or from a finalizer
            pass

    def close(self) -> None:
        """Closes the channel; calls after it raise FailedPrecondition. Idempotent."""
        self._close_channel()

    def _check_open(self) -> None:
        if not self.open:
            raise FailedPrecondition(f"this client of {self.target} is closed: make a new "
                                     "qdp.Client (a state it made was released with it)",
                                     hint="")

    def _error(self, e: Any) -> Error:
        err = from_rpc_error(e, self.wire.ErrorDetail, self.target)
        note = self.unavailable_note() if self.unavailable_note and \
            isinstance(err, Unavailable) else ""
        if not note:
            return err
        return Unavailable(f"{err.message.rstrip('.')}. {note}", field=err.field,
                           rank=err.rank, device=err.device, cause=err.cause,
                           code_name=err.code_name, hint="")


def _multicallable(kind: Callable[..., Any], path: str, serialize: Callable[..., bytes],
                   deserialize: Callable[[bytes], Any]) -> Any:
    """A method of the channel; registered with it where grpcio can (1.62 and later), which
    spares every call the lookup of its path."""
    try:
        return kind(path, request_serializer=serialize, response_deserializer=deserialize,
                    _registered_method=True)
    except TypeError:
        return kind(path, request_serializer=serialize, response_deserializer=deserialize)


def _close_quietly(channel: Any) -> None:
    try:
        channel.close()
    except BaseException:
        pass
