"""libqdp as the transport of unary calls: serialized requests in, serialized replies out
(``qdp_call``), through the C library's gRPC core instead of grpcio's.

On an H200 node a small encode from Python took 0.16 ms through libqdp against 0.26 ms
through grpcio's Python layer, Health 0.15 against 0.21 ms (docs/performance.md, "From
Python"): the transport is most of a small job's round trip. The package keeps building and
reading its messages (qdp._wire); libqdp only carries the bytes and reports failures in
``qdp_last_error()``, which become the same :class:`qdp.Error` subclasses.

Which library: ``$QDP_LIBQDP`` when set (a path; "0" turns the transport off), else the one
installed inside the package (``qdp/_lib/libqdp.so.0``, from ``pip install .``), else
``libqdp.so.0`` where the loader finds it (a system install). It is used only when its version is
this package's (``qdp.__version__``): another release may speak another wire. Streaming calls
stay on grpcio.

gRPC does not survive ``fork``: a transport made in one process is never used, nor destroyed, in
another, and a child of a process that made one uses grpcio instead (whose core is then fresh).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Dict, Optional, Tuple

from .errors import Error, error_for

_STATUS = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
           "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
           "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
           "UNAUTHENTICATED")


class _Opts(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("target", ctypes.c_char_p),
                ("token", ctypes.c_char_p), ("client_name", ctypes.c_char_p),
                ("timeout_ms", ctypes.c_int64), ("stream_timeout_ms", ctypes.c_int64),
                ("wait_for_ready", ctypes.c_int), ("log", ctypes.c_void_p),
                ("log_arg", ctypes.c_void_p),
                # since 0.7: TLS (qdp_client_opts.tls_*); "" is none, NULL the environment's
                ("tls_ca", ctypes.c_char_p), ("tls_cert", ctypes.c_char_p),
                ("tls_key", ctypes.c_char_p), ("tls_server_name", ctypes.c_char_p)]


class _ErrInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("code", ctypes.c_int),
                ("remote", ctypes.c_int), ("rank", ctypes.c_int), ("device", ctypes.c_int),
                ("cause", ctypes.c_int), ("need_bytes", ctypes.c_uint64),
                ("free_bytes", ctypes.c_uint64), ("code_name", ctypes.c_char * 48),
                ("field", ctypes.c_char * 64), ("msg", ctypes.c_char * 1024)]


class _Library:
    """The loaded libqdp and the process that first made a client with it."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.pid = 0  # the process whose gRPC core runs: no other may use it
        lib.qdp_client_create.argtypes = [ctypes.POINTER(_Opts), ctypes.POINTER(ctypes.c_void_p)]
        lib.qdp_client_create.restype = ctypes.c_int
        lib.qdp_client_destroy.argtypes = [ctypes.c_void_p]
        lib.qdp_client_destroy.restype = None
        lib.qdp_call.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                 ctypes.c_size_t, ctypes.c_int64,
                                 ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_size_t)]
        lib.qdp_call.restype = ctypes.c_int
        lib.qdp_free.argtypes = [ctypes.c_void_p]
        lib.qdp_free.restype = None
        lib.qdp_last_error.argtypes = []
        lib.qdp_last_error.restype = ctypes.POINTER(_ErrInfo)


_lock = threading.Lock()
_loaded: Dict[str, Optional[_Library]] = {}  # by candidate path: what loading it gave


def _candidates() -> Tuple[str, ...]:
    env = os.environ.get("QDP_LIBQDP", "")
    if env == "0":
        return ()
    if env:
        return (env,)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libqdp.so.0")
    return (here, "libqdp.so.0") if os.path.exists(here) else ("libqdp.so.0",)


def _load(path: str) -> Optional[_Library]:
    from . import __version__

    try:
        lib = ctypes.CDLL(path)
        lib.qdp_version_string.restype = ctypes.c_char_p
        if lib.qdp_version_string().decode() != __version__ or not hasattr(lib, "qdp_call"):
            return None
        return _Library(lib)
    except (OSError, AttributeError):
        return None


def library() -> Optional[_Library]:
    """The libqdp this process may call through, or None (none found, another version, turned
    off, or one whose gRPC another process started before a fork)."""
    for path in _candidates():
        with _lock:
            if path not in _loaded:
                _loaded[path] = _load(path)
            lib = _loaded[path]
        if lib is not None:
            return lib if lib.pid in (0, os.getpid()) else None
    return None


class Transport:
    """One libqdp client: the unary calls of one :class:`qdp._connection.Connection`.

    Parameters
    ----------
    lib : _Library
        From :func:`library`.
    target : str
        The gRPC target.
    metadata : tuple of (str, str)
        The connection's: its ``qdp-client`` name and ``authorization`` token go to libqdp.
    """

    def __init__(self, lib: _Library, target: str, metadata: Tuple[Tuple[str, str], ...]) -> None:
        md = dict(metadata)
        token = md.get("authorization", "")
        token = token[len("Bearer "):] if token.startswith("Bearer ") else token
        # timeout_ms is given with every call; wait_for_ready 0: fail at once when unreachable.
        # The transport serves Unix targets only, which take no TLS: none, whatever the
        # environment says (qdp._tls decided that already).
        opts = _Opts(ctypes.sizeof(_Opts), target.encode(), token.encode(),
                     md.get("qdp-client", "python").encode(), 0, 0, 0, None, None,
                     b"", b"", b"", b"")
        handle = ctypes.c_void_p()
        with _lock:
            lib.pid = lib.pid or os.getpid()
        if lib.lib.qdp_client_create(ctypes.byref(opts), ctypes.byref(handle)) != 0:
            raise _error(lib)
        self._lib = lib
        self._handle = handle.value
        self._close = weakref.finalize(self, _destroy, lib, handle.value, os.getpid())

    def call(self, method: str, request: bytes, timeout: float) -> bytes:
        """The serialized reply of unary ``method`` to the serialized ``request``.

        Raises
        ------
        Error
            The call's status as its subclass, with the ErrorDetail fields.
        """
        reply = ctypes.c_void_p()
        n = ctypes.c_size_t()
        rc = self._lib.lib.qdp_call(self._handle, method.encode(), request, len(request),
                                    max(1, int(timeout * 1000)), ctypes.byref(reply),
                                    ctypes.byref(n))
        if rc != 0:
            raise _error(self._lib)
        try:
            return ctypes.string_at(reply.value, n.value) if n.value else b""
        finally:
            self._lib.lib.qdp_free(reply)

    def close(self) -> None:
        """Destroys the libqdp client (no call may be in flight). Idempotent."""
        self._close()


def _destroy(lib: _Library, handle: Any, pid: int) -> None:
    if os.getpid() == pid:  # a forked child leaves its parent's gRPC alone
        lib.lib.qdp_client_destroy(handle)


def _error(lib: _Library) -> Error:
    e = lib.lib.qdp_last_error().contents
    status = _STATUS[e.code] if 0 < e.code < len(_STATUS) else "UNKNOWN"
    code_name = e.code_name.decode(errors="replace")
    return error_for(status, e.msg.decode(errors="replace"),
                     field=e.field.decode(errors="replace"), rank=e.rank, device=e.device,
                     cause=e.cause, need_bytes=e.need_bytes, free_bytes=e.free_bytes,
                     code_name="" if code_name == f"QDP_ERR_{status}" else code_name)
