"""Errors: every failed call raises a :class:`Error` subclass named after its gRPC status.

The daemon's message already names the field and the numbers; each class adds one sentence on
what to do, and the fields of the call's ``qdp.ErrorDetail`` (trailing metadata
``qdp-error-bin``) are attributes, so a program can react without parsing text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Type

if TYPE_CHECKING:
    import grpc


class Error(Exception):
    """A failed qdp call.

    Parameters
    ----------
    message : str
        What went wrong.
    field, rank, device, cause, need_bytes, free_bytes, code_name
        The ErrorDetail fields, as the attributes below.
    hint : str, optional
        The sentence on what to do added to ``message``; by default the class's ("" adds
        none: the message says it).

    Attributes
    ----------
    status : str
        The gRPC status name ("INVALID_ARGUMENT").
    message : str
        The daemon's (or this package's) explanation, with what to do.
    code_name : str
        The daemon's own code ("QDP_ERR_RESOURCE_EXHAUSTED"); empty when it sent none.
    field : str
        The request field at fault ("qubits", "input.data"); empty when none.
    rank, device : int
        The world rank and the device index at fault; -1 when none.
    cause : int
        The daemon's underlying code (errno, CUDA error); 0 when none.
    need_bytes, free_bytes : int
        For a refusal for memory: what the job needs and what was free; 0 otherwise.
    """

    status = "UNKNOWN"
    hint = ""

    def __init__(self, message: str, *, field: str = "", rank: int = -1, device: int = -1,
                 cause: int = 0, need_bytes: int = 0, free_bytes: int = 0,
                 code_name: str = "", hint: Optional[str] = None) -> None:
        self.message = message
        self.field = field
        self.rank = rank
        self.device = device
        self.cause = cause
        self.need_bytes = need_bytes
        self.free_bytes = free_bytes
        self.code_name = code_name
        figures = self._figures()
        text = f"{message.rstrip('.')}{figures}" if figures else message
        hint = self._hint() if hint is None else hint
        if hint and hint not in message:
            text = f"{text.rstrip('.')}. {hint}" if text else hint
        super().__init__(text)

    def _hint(self) -> str:
        """The sentence on what to do, added to the message: the class's, unless the field at
        fault calls for another."""
        return self.hint

    def _figures(self) -> str:
        """Exact figures of the detail that the text shows after the message; none by default."""
        return ""

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.detail().items())
        return f"{type(self).__name__}({self.message!r}{extra})"

    def detail(self) -> Dict[str, Any]:
        """The ErrorDetail fields that are set, as a dict."""
        out: Dict[str, Any] = {}
        if self.field:
            out["field"] = self.field
        if self.rank >= 0:
            out["rank"] = self.rank
        if self.device >= 0:
            out["device"] = self.device
        if self.need_bytes or self.free_bytes:
            out["need_bytes"] = self.need_bytes
            out["free_bytes"] = self.free_bytes
        return out


class Cancelled(Error):
    """The call was cancelled (by this process, or the daemon is stopping)."""
    status = "CANCELLED"
    hint = "Nothing was kept; run it again."


class Unknown(Error):
    """A failure the daemon could not classify."""
    status = "UNKNOWN"
    hint = "See the daemon's log (journalctl -u qdpd) for the cause."


class InvalidArgument(Error):
    """A request field is wrong; ``field`` names it."""
    status = "INVALID_ARGUMENT"
    hint = "Fix the named field and call again."


class DeadlineExceeded(Error):
    """The call took longer than its timeout."""
    status = "DEADLINE_EXCEEDED"
    hint = "Nothing was committed; pass a larger timeout or a smaller job."


class NotFound(Error):
    """Unknown handle, or a wrong token (the two read alike); or a file named by a path that
    does not exist (``field`` names the path: "input.path")."""
    status = "NOT_FOUND"
    hint = ("The state or region was released, expired (its ttl) or its token is wrong; "
            "client.states() lists what you hold.")
    path_hint = ("Check the path: a unix: client opens it here, with this process's rights; "
                 "over TCP it names a file on the daemon's node, beneath its input_dir.")

    def _hint(self) -> str:
        return self.path_hint if self.field.endswith("path") else self.hint


class AlreadyExists(Error):
    """The target exists (an Export without overwrite)."""
    status = "ALREADY_EXISTS"
    hint = "Pick another path or pass overwrite=True."


class PermissionDenied(Error):
    """The caller may not do this (a file it cannot read, a state of another identity)."""
    status = "PERMISSION_DENIED"
    hint = "Open only what your own user may read or write; the daemon acts with your rights."


class ResourceExhausted(Error):
    """The job does not fit: ``need_bytes`` and ``free_bytes`` say by how much.

    The daemon's message gives sizes for people ("16 TiB"); the text adds the exact bytes of
    the detail after it: "... (need_bytes=17592186044416, free_bytes=11188373267)".
    """
    status = "RESOURCE_EXHAUSTED"
    hint = ("Use fewer qubits or a smaller batch, dtype='complex64', more devices "
            "(policy='even' or 'capacity'), or release states you hold (client.states()).")

    def _figures(self) -> str:
        if not (self.need_bytes or self.free_bytes):
            return ""
        return f" (need_bytes={self.need_bytes}, free_bytes={self.free_bytes})"


class FailedPrecondition(Error):
    """The daemon cannot do this in its current state or configuration."""
    status = "FAILED_PRECONDITION"
    hint = "See the message for what the daemon needs first."


class Aborted(Error):
    """The job was aborted (the input changed while it was read, a rank was lost)."""
    status = "ABORTED"
    hint = "Nothing was committed; run it again."


class OutOfRange(Error):
    """An offset or length lies outside its object (a region, a state)."""
    status = "OUT_OF_RANGE"
    hint = "Check offsets and lengths against the object's size."


class Unimplemented(Error):
    """The daemon does not have this method: it is older than this client."""
    status = "UNIMPLEMENTED"
    hint = "Upgrade qdpd, or use a qdp package of the daemon's version."


class Internal(Error):
    """A bug in the daemon."""
    status = "INTERNAL"
    hint = "Please report it with the daemon's log."


class Unavailable(Error):
    """The daemon cannot be reached, or a rank or device it needs is lost."""
    status = "UNAVAILABLE"
    hint = ("Is qdpd running? Set QDP_TARGET (unix:/path/to/qdpd.sock or host:port) "
            "or pass qdp.Client(target=...); with neither, qdp.Client() starts a private qdpd "
            "when no daemon answers unless QDP_AUTOSTART=0, and qdp.LocalDaemon starts one "
            "with options of your own.")


class DataLoss(Error):
    """Input bytes were cut short (an upload without its end, a file truncated while read)."""
    status = "DATA_LOSS"
    hint = "Nothing was encoded; hand over the complete input again."


class Unauthenticated(Error):
    """A TCP call without a valid bearer token."""
    status = "UNAUTHENTICATED"
    hint = "Pass token=... (or set QDP_TOKEN) with a token the daemon accepts."


class NotSupported(Error, NotImplementedError):
    """What was asked is not available with this daemon, client or device (yet)."""
    status = "UNIMPLEMENTED"
    hint = ""


class TtlCappedWarning(UserWarning):
    """A state got a shorter lifetime than the ttl asked for: the daemon's max_ttl.

    The state lives ``StateInfo.ttl_seconds`` (its ``ttl_capped`` is true); release it within
    that, or have the daemon's ``max_ttl`` raised. ``warnings.simplefilter("error",
    qdp.TtlCappedWarning)`` makes it an exception (the state is released then).
    """


ERRORS: Dict[str, Type[Error]] = {
    c.status: c for c in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound,
                          AlreadyExists, PermissionDenied, ResourceExhausted, FailedPrecondition,
                          Aborted, OutOfRange, Unimplemented, Internal, Unavailable, DataLoss,
                          Unauthenticated)
}


def error_for(status: str, message: str, **detail: Any) -> Error:
    """The :class:`Error` subclass of gRPC status name ``status``, made with ``message``.

    Parameters
    ----------
    status : str
        A gRPC status name ("NOT_FOUND").
    message : str
        What went wrong.
    **detail
        ErrorDetail fields (field, rank, device, cause, need_bytes, free_bytes, code_name).

    Returns
    -------
    Error
    """
    cls = ERRORS.get(status, Unknown)
    err = cls(message, **detail)
    if cls is Unknown and status != "UNKNOWN":
        err.status = status
    return err


def from_rpc_error(err: grpc.RpcError, detail_class: Optional[Any] = None,
                   target: str = "") -> Error:
    """Translates a failed gRPC call into its :class:`Error`.

    Parameters
    ----------
    err : grpc.RpcError
        The exception gRPC raised (a call object with code(), details(), trailing_metadata()).
    detail_class : type, optional
        The ``qdp.ErrorDetail`` message class, to decode trailing metadata ``qdp-error-bin``.
    target : str
        The daemon's target, named in the message when it cannot be reached.

    Returns
    -------
    Error
    """
    import grpc  # imported already: ``err`` is one of its errors

    code = err.code() if hasattr(err, "code") else None
    status = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    message = (err.details() if hasattr(err, "details") else None) or str(err)
    fields: Dict[str, Any] = {}
    if detail_class is not None and hasattr(err, "trailing_metadata"):
        for key, value in err.trailing_metadata() or ():
            if key == "qdp-error-bin":
                try:
                    d = detail_class.FromString(value)
                except Exception:  # a malformed detail must not hide the status
                    break
                fields = dict(field=d.field, rank=d.rank, device=d.device, cause=d.cause,
                              need_bytes=d.need_bytes, free_bytes=d.free_bytes,
                              code_name=d.code_name)
                break
    if status == "UNAVAILABLE" and target and target not in message:
        message = f"{message} (target {target})"
    return error_for(status, message, **fields)
