"""The connection to qdpd that a Client and everything it makes share: one gRPC channel, its
calls (failures raised as :class:`qdp.Error`), the descriptor handoff, and the quiet calls that
finalizers make.

It holds no Client: a State, a view's lease or a region's finalizer keeps only this, and the
channel stays open as long as any of them (or the Client) does, until :meth:`Connection.close`.
Unary calls to a daemon on this node go through libqdp where the package finds it
(qdp._native); the rest through grpcio, imported at the first call that needs it, not with qdp
(see qdp._grpc_env).
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, Optional, Tuple, TypeVar

from . import _native
from ._grpc_env import import_grpc
from ._handoff import READ, WRITE, hand_over
from ._tls import Tls
from ._wire import Wire
from .errors import Error, FailedPrecondition, NotFound, NotSupported, Unavailable, \
    from_rpc_error

T = TypeVar("T")


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
    tls : qdp._tls.Tls, optional
        TLS to a TCP target (certificates read already); None: a plain channel.

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
                 wire: Wire, tls: Optional[Tls] = None) -> None:
        self.target = target
        self.tls = tls
        self.socket_path: Optional[str] = target[5:] if target.startswith("unix:") else None
        self.timeout = timeout
        self.wire = wire
        self._metadata = metadata
        self.unavailable_note: Optional[Callable[[], str]] = None
        # The client's session (qdp._session.Session), which what it makes ends with; None: none.
        self.session: Any = None
        self._lock = threading.Lock()
        # What close() ends, in order: the deferred calls (made while still open), then the
        # libqdp client and, once a call needed it, the grpcio channel.
        self._ends: Dict[str, Any] = {"open": True}
        self._calls: Dict[str, Callable[..., Any]] = {}
        self._rpc_error: Any = None
        types = {name: wire.method_types(name) for name in wire.service.methods_by_name}
        self._unary = {name: t[1] for name, t in types.items() if not any(t[2:])}
        lib = _native.library() if self.socket_path is not None else None
        self._native = _native.Transport(lib, target, metadata) if lib is not None else None
        self._ends["native"] = self._native
        self._later = self._ends["later"] = _Later()
        self._closed = weakref.finalize(self, _close_quietly, self._ends)
        if self._native is None:
            self._grpc_calls()

    def _grpc_calls(self) -> Dict[str, Callable[..., Any]]:
        """The methods of the grpcio channel, made at the first call that needs one: every call
        without libqdp, streaming calls with it (gRPC is imported then, not before)."""
        with self._lock:
            if self._calls:
                return self._calls
            grpc = import_grpc()
            # As libqdp: no message size cap of our own (states reach gigabytes; the daemon
            # bounds what it takes), and no retries, whose bookkeeping costs every call and
            # which would make gRPC buffer a whole upload to replay it.
            options = [("grpc.max_receive_message_length", -1),
                       ("grpc.max_send_message_length", -1), ("grpc.enable_retries", 0)]
            tls = self.tls
            if tls is None:
                channel = grpc.insecure_channel(self.target, options=options)
            else:
                if tls.server_name:
                    options.append(("grpc.ssl_target_name_override", tls.server_name))
                creds = grpc.ssl_channel_credentials(root_certificates=tls.ca,
                                                     private_key=tls.key,
                                                     certificate_chain=tls.cert)
                channel = grpc.secure_channel(self.target, creds, options=options)
            self._ends["channel"] = channel
            wire = self.wire
            calls = {}
            for name in wire.service.methods_by_name:
                req, rep, cs, ss = wire.method_types(name)
                kind = {(False, False): channel.unary_unary,
                        (False, True): channel.unary_stream,
                        (True, False): channel.stream_unary,
                        (True, True): channel.stream_stream}[(cs, ss)]
                calls[name] = _multicallable(kind, f"/{wire.service.full_name}/{name}",
                                             req.SerializeToString, rep.FromString)
            self._rpc_error = grpc.RpcError
            self._calls = calls
            return calls

    @property
    def open(self) -> bool:
        """False once :meth:`close` has run (or the process is exiting)."""
        return bool(self._ends.get("open"))

    @property
    def native(self) -> bool:
        """Whether unary calls go through libqdp (qdp._native) rather than grpcio."""
        return self._native is not None

    def call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        """Calls unary RPC ``method``; returns the reply (see :meth:`qdp.Client.call`).

        Raises
        ------
        Error
            The subclass of the call's status, with its ErrorDetail fields; FailedPrecondition
            once closed; NotSupported for a method the wire does not have.
        """
        if method not in self.wire.service.methods_by_name:
            raise NotSupported(f"this package's qdp.proto has no method {method}")
        self._check_open()
        self._later.drain()
        reply = self._unary.get(method)
        if self._native is not None and reply is not None:
            try:
                data = self._native.call(method, request.SerializeToString(),
                                         timeout or self.timeout)
            except Error as e:
                raise self._noted(e) from None
            return reply.FromString(data)
        fn = self._grpc_calls()[method]
        try:
            return fn(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except self._rpc_error as e:
            raise self._error(e) from None

    def stream(self, method: str, request: Any) -> Iterator[Any]:
        """The replies of server-streaming RPC ``method``, as they come."""
        self._check_open()
        self._later.drain()
        calls = self._grpc_calls()
        try:
            for m in calls[method](request, timeout=self.timeout, metadata=self._metadata):
                yield m
        except self._rpc_error as e:
            raise self._error(e) from None

    def upload(self, method: str, requests: Iterable[Any]) -> Any:
        """Calls client-streaming RPC ``method`` with ``requests``; returns the reply."""
        self._check_open()
        self._later.drain()
        calls = self._grpc_calls()
        try:
            return calls[method](requests, timeout=self.timeout, metadata=self._metadata)
        except self._rpc_error as e:
            raise self._error(e) from None

    def hand_over(self, fd: int, access: int = READ) -> str:
        """Hands ``fd`` to the daemon on this node (see qdp._handoff); returns the ticket."""
        if self.socket_path is None:
            raise NotSupported("descriptors can be handed only to a daemon on this node "
                               "(a unix: target)")
        self._check_open()
        return hand_over(self.socket_path, fd, access)

    def session_id(self) -> str:
        """The id of the client's session, which a request names for what it makes ("" for
        none); opens the session at the first call."""
        return self.session.id() if self.session is not None else ""

    def in_session(self, make: Callable[[str], T], session: bool = True) -> T:
        """``make(id)`` of a call that makes something in the client's session (``id`` "" with
        none, or with ``session`` False); made once more in a new session when the daemon no
        longer knows the old one (it restarted: what the old one held is gone already)."""
        sid = self.session_id() if session else ""
        try:
            return make(sid)
        except NotFound as e:
            if not sid or e.field != "session":
                raise
        return make(self.session.renew(sid))

    def register_region(self, fd: int, writable: bool) -> Tuple[str, str]:
        """Hands a region's descriptor over and registers it (RegisterRegion) in the client's
        session, for the daemon to read, or with ``writable`` to write (FetchInto); returns its
        handle and token."""
        def register(sid: str) -> Any:
            req = self.wire.RegisterRegionRequest(name="memfd:qdp-python", pid=os.getpid(), fd=fd,
                                                  writable=writable, session=sid)
            req.fd_ticket = self.hand_over(fd, WRITE if writable else READ)
            return self.call("RegisterRegion", req)
        info = self.in_session(register)
        return info.handle, info.token

    def later(self, job: Callable[[], None]) -> None:
        """Runs ``job`` (which makes calls on this connection and raises nothing a caller needs)
        on the connection's own thread, after those queued before and before any call made
        after; for finalizers (see :class:`_Later`)."""
        self._later.put(job)

    def flush(self) -> None:
        """Waits until the calls :meth:`later` queued have been made."""
        self._later.drain()

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
        self._closed()

    def _check_open(self) -> None:
        if not self.open:
            raise FailedPrecondition(f"this client of {self.target} is closed: make a new "
                                     "qdp.Client (a state it made was released with it)",
                                     hint="")

    def _error(self, e: Any) -> Error:
        return self._noted(from_rpc_error(e, self.wire.ErrorDetail, self.target))

    def _noted(self, err: Error) -> Error:
        """``err`` with the private daemon's exit note when it says the daemon is unreachable."""
        note = self.unavailable_note() if self.unavailable_note and \
            isinstance(err, Unavailable) else ""
        if not note:
            return err
        return Unavailable(f"{err.message.rstrip('.')}. {note}", field=err.field,
                           rank=err.rank, device=err.device, cause=err.cause,
                           code_name=err.code_name, hint="")


class _Later:
    """The thread that makes a connection's deferred calls, in order of queueing, off the
    caller's path: the ends of view leases and the releases of states that the garbage collector
    reclaimed (a tensor over a view, a State, going out of scope in a loop). Every other call of
    the connection first sees those queued before it done (:meth:`drain`), so nothing a program
    observes through the connection changes; only where the work falls does."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._jobs: Deque[Callable[[], None]] = collections.deque()
        self._pending = 0  # queued or running
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._pid = os.getpid()
        self._in_job = threading.local()  # set on a thread while it runs a job

    def put(self, job: Callable[[], None]) -> None:
        with self._cv:
            if not self._closed and os.getpid() == self._pid:
                self._jobs.append(job)
                self._pending += 1
                if self._thread is None:
                    thread = threading.Thread(target=self._run, name="qdp-later", daemon=True)
                    try:
                        thread.start()
                        self._thread = thread
                    except RuntimeError:  # no new thread at interpreter exit: at once, below
                        self._jobs.pop()
                        self._pending -= 1
                        self._closed = True
                if self._thread is not None:
                    self._cv.notify_all()
                    return
        _quietly(job)  # closed, or another process's: at once, here

    def drain(self) -> None:
        """Returns once every job put before has run: those still queued run here, on the
        caller's thread (sooner than a wake-up of the connection's), one running there is
        waited for. At once within a job (its own calls), and in a child of ``fork``, where
        that thread does not run (nor may this connection's gRPC)."""
        if not self._pending or getattr(self._in_job, "on", False) or \
                os.getpid() != self._pid:
            return
        while True:
            with self._cv:
                while not self._jobs and self._pending:
                    self._cv.wait()
                if not self._pending:
                    return
                job = self._jobs.popleft()
            self._done(job)

    def _done(self, job: Callable[[], None]) -> None:
        self._in_job.on = True  # its own calls must not wait for it
        try:
            _quietly(job)
        finally:
            self._in_job.on = False
        with self._cv:
            self._pending -= 1
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            self._done(job)

    def close(self) -> None:
        """Runs what is queued, then ends the thread. Idempotent."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread() and \
                os.getpid() == self._pid:
            thread.join(30)


def _quietly(job: Callable[[], None]) -> None:
    try:
        job()
    except BaseException:  # a deferred call's failure has no caller to reach
        pass


def _multicallable(kind: Callable[..., Any], path: str, serialize: Callable[..., bytes],
                   deserialize: Callable[[bytes], Any]) -> Any:
    """A method of the channel; registered with it where grpcio can (1.62 and later), which
    spares every call the lookup of its path."""
    try:
        return kind(path, request_serializer=serialize, response_deserializer=deserialize,
                    _registered_method=True)
    except TypeError:
        return kind(path, request_serializer=serialize, response_deserializer=deserialize)


def _close_quietly(ends: Dict[str, Any]) -> None:
    later = ends.pop("later", None)
    if later is not None:
        later.close()  # the deferred calls, while the connection is still open
    ends["open"] = False
    for end in (ends.pop("native", None), ends.pop("channel", None)):
        try:
            if end is not None:
                end.close()
        except BaseException:
            pass
