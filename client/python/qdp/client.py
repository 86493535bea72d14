"""qdp.Client: one channel to qdpd, and the calls on it."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union, overload

import numpy as np

from . import _ipc, _local, _region, _session, _tls
from ._connection import Connection
from ._fetch import Fetcher
from ._region import Region
from ._values import EncodeInput, encode_input, ttl_seconds
from ._wire import Wire
from .errors import Error, FailedPrecondition, Internal, InvalidArgument, NotFound, \
    NotSupported, PermissionDenied
from .records import NUMPY_DTYPES, Plan, StateInfo, Status, enum_number
from .state import Owner, State

#: Arrays of at least this many bytes go through shared memory (same node) or an upload (TCP)
#: rather than inline in the request.
LARGE_BYTES = 1 << 20
#: qdp.encode's results up to this size come back in the Encode's reply (one round trip); larger
#: ones are fetched into shared memory, which copies nothing on the way (State.numpy).
REPLY_AMPLITUDES_BYTES = 4 << 20
#: Bytes per message of a streamed upload.
UPLOAD_CHUNK = 1 << 20
#: Bytes of fetch regions a client keeps registered by default (``region_cache_bytes``): two
#: 1 GiB states, so that a loop that fetches the next state while it holds the last one reuses
#: both.
REGION_CACHE_BYTES = 2 << 30

#: The first bytes of every .npy file.
NPY_MAGIC = b"\x93NUMPY"

PathLike = Union[str, "os.PathLike[str]"]
#: What ``encode(..., out=...)`` writes into, and returns.
Out = TypeVar("Out")


def default_target() -> str:
    """The daemon's target as libqdp and qdpctl find it.

    Returns
    -------
    str
        ``$QDP_TARGET``; else ``unix:$QDP_SOCKET``; else ``unix:/run/qdp/qdpd.sock`` for root;
        else ``unix:$XDG_RUNTIME_DIR/qdp/qdpd.sock``, or ``unix:/run/user/UID/qdp/qdpd.sock``
        without a runtime directory.

    Notes
    -----
    ``qdp.Client()`` uses it when ``QDP_TARGET`` or ``QDP_SOCKET`` is set, or when a daemon
    answers there; otherwise this user's private daemon (:class:`qdp.LocalDaemon`), unless
    ``QDP_AUTOSTART=0``.
    """
    t = _env_target()
    if t:
        return t
    if os.geteuid() == 0:
        return "unix:/run/qdp/qdpd.sock"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return f"unix:{xdg}/qdp/qdpd.sock"
    return f"unix:/run/user/{os.geteuid()}/qdp/qdpd.sock"


def _env_target() -> str:
    """The target the environment names (``QDP_TARGET``, else ``QDP_SOCKET``), or ""."""
    t = os.environ.get("QDP_TARGET")
    if t:
        return t
    sock = os.environ.get("QDP_SOCKET")
    return "unix:" + sock if sock else ""


def _resolve_target() -> Tuple[str, Optional["_local.LocalDaemon"]]:
    """What ``Client()`` connects to: the environment's target, else a daemon that answers at
    the default socket, else (unless QDP_AUTOSTART=0) this user's private daemon."""
    target = default_target()
    if _env_target() or not _local.autostart_enabled() or _local.answers(target):
        return target, None
    try:
        daemon = _local.implicit()
    except Error as e:
        raise type(e)(f"no qdpd answers at {target}, and qdp.Client() could not start a private "
                      f"one (QDP_AUTOSTART=0 leaves that to you): {e.message}", field=e.field,
                      hint="") from None
    return daemon.target, daemon


def _check_qubits(qubits: Any) -> None:
    """Refuses what no daemon takes, in the daemon's words; its max_qubits is its own."""
    limit = "expected 1..max_qubits, the daemon's limit (Client.status().max_qubits)"
    if not isinstance(qubits, (int, np.integer)) or isinstance(qubits, bool):
        raise InvalidArgument(f"qubits must be an integer, not {qubits!r}: {limit}",
                              field="qubits")
    if not 1 <= qubits < 1 << 32:
        raise InvalidArgument(f"qubits {qubits} is out of range: {limit}", field="qubits")


def _table_suffixes() -> Tuple[str, ...]:
    """The files an encode reads here through qdp.readers (imported only now: it registers a
    fork handler) rather than handing them to the daemon: what it reads but .npy."""
    from .readers import SUFFIXES

    return tuple(s for s in SUFFIXES if s != ".npy")


def _open_input(path: str) -> int:
    """Opens a file an encode reads, with this process's rights; the errors name the path."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"{path}: no such file", field="input.path") from None
    except PermissionError:
        raise PermissionDenied(f"{path}: this process may not read it",
                               field="input.path") from None
    except OSError as e:
        raise InvalidArgument(f"{path}: {e.strerror}", field="input.path") from None


def _check_npy(fd: int, path: str) -> None:
    """Refuses a file that is not a .npy before the daemon sees it, saying what it is."""
    try:
        head = os.pread(fd, 64, 0)
    except IsADirectoryError:
        raise InvalidArgument(f"{path} is a directory: name a .npy file",
                              field="input.path") from None
    except OSError as e:
        raise InvalidArgument(f"{path}: {e.strerror}", field="input.path") from None
    if head.startswith(NPY_MAGIC):
        return
    tables = ", ".join(_table_suffixes())
    if not head:
        what = "is empty"
    elif _is_text(head):
        what = f"holds text ({head[:24].decode('utf-8', 'replace')!r}...)"
    else:
        what = f"starts with {head[:8]!r}, not {NPY_MAGIC!r}"
    raise InvalidArgument(f"{path} {what}, not a .npy array (numpy.save writes those): encode "
                          f"reads a path ending in {tables} through qdp.readers.open_source and "
                          "any other as .npy; name a CSV file *.csv, or pass the values as an "
                          "array", field="input.path")


def _is_text(head: bytes) -> bool:
    """Whether the first bytes of a file read as text (UTF-8, cut anywhere)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not merely a character cut at the end
            return False
        text = head[:e.start].decode("utf-8")
    return all(c.isprintable() or c in "\t\r\n\ufeff" for c in text)


class Client:
    """One channel to qdpd.

    Parameters
    ----------
    target : str, optional
        A gRPC target: ``unix:/path/qdpd.sock`` (the daemon's node) or ``host:port`` (TCP). By
        default ``$QDP_TARGET`` (or ``unix:$QDP_SOCKET``); else the default socket of
        :func:`default_target` when a daemon answers there; else this user's private daemon,
        started when none runs (:class:`LocalDaemon`; ``QDP_AUTOSTART=0`` turns that off).
    token : str, optional
        The bearer token for TCP; default ``$QDP_TOKEN``.
    name : str
        A label for the daemon's log (``qdp-client`` metadata); it grants nothing.
    timeout : float
        Seconds each call may take.
    wire : Wire, optional
        The contract to speak; the one shipped in the package by default.
    region_cache_bytes : int
        Bytes of the shared memory regions that :meth:`State.numpy` fetches into (on the
        daemon's node) which the client may keep registered for later fetches, counting those
        that live arrays still use; the daemon keeps them pinned. A fetch of about a size fetched
        before then reuses a region rather than registering one, the slow part of a large fetch.
        At most four regions are kept; 0 keeps none (each is unregistered once its fetch is
        done: its array needs only the mapping).
    tls_ca, tls_cert, tls_key : str, optional
        TLS to a TCP target: the CA certificates (PEM file) the daemon's certificate must chain
        to, which turns TLS on, and this client's certificate chain and key (PEM files), for a
        daemon with mutual TLS (which then knows a client without a token as
        ``x509:<subject>``). Default ``$QDP_TLS_CA``, ``$QDP_TLS_CERT``, ``$QDP_TLS_KEY``;
        ``""`` is none. A ``unix:`` target refuses them as arguments and ignores the
        environment's. A wrong CA, an expired certificate, or a daemon that asks for a
        certificate this client lacks make calls fail with :class:`Unavailable`.
    tls_server_name : str, optional
        The name the daemon's certificate carries when it is not the target's host; default
        ``$QDP_TLS_SERVER_NAME``.
    session : bool
        Make states and regions in a session of this client (OpenSession), which the daemon
        ends, releasing what is left in it, when the client closes or when its process dies,
        even of SIGKILL: nothing it made outlives it by accident. A state made with
        ``encode(..., outlive=True)`` is outside it. False: states end only by their release,
        this client's close or their ttl, as from a daemon without sessions.
    heartbeat : float, optional
        Seconds without a call after which the daemon ends the session: over TCP, where the
        daemon cannot see this process, a thread calls Heartbeat four times within it (default
        60 s); on a Unix socket none by default (the session ends with the process).

    Attributes
    ----------
    target : str
        The target it talks to.
    daemon : LocalDaemon or None
        The private daemon it talks to (started by ``Client()`` or made by
        :meth:`LocalDaemon.client`), else None. While one runs, ``daemon.log_path`` is its
        log; an error of a call that finds it gone names that log and quotes its end.

    Raises
    ------
    InvalidArgument
        A negative ``region_cache_bytes``; a ``heartbeat`` that is not seconds > 0; a
        ``QDP_AUTOSTART`` other than 0 or 1; TLS options
        for a ``unix:`` target, a certificate without its key, or a file that holds no PEM.
    Unavailable, DeadlineExceeded, NotFound, PermissionDenied
        Only when the private daemon is started: see :meth:`LocalDaemon.start` and
        :class:`LocalDaemon`; NotFound and PermissionDenied also for a TLS file that is not there
        or that this process may not read.

    Notes
    -----
    A client on the daemon's node (a Unix socket target) opens files and shared memory itself
    and hands their descriptors over, so the daemon reads only what this process could read.
    Large arrays travel through shared memory regions this client creates and registers; over TCP
    they are uploaded in chunks. Use it as a context manager, or call :meth:`close`: that
    releases the states it made that are still alive and unregisters its regions (arrays over
    them stay valid).
    """

    def __init__(self, target: Optional[str] = None, *, token: Optional[str] = None,
                 name: str = "python", timeout: float = 120.0,
                 wire: Optional[Wire] = None,
                 region_cache_bytes: int = REGION_CACHE_BYTES,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, tls_server_name: Optional[str] = None,
                 session: bool = True, heartbeat: Optional[float] = None) -> None:
        heartbeat = _session.check_heartbeat(heartbeat)
        if (not isinstance(region_cache_bytes, (int, np.integer))
                or isinstance(region_cache_bytes, bool) or region_cache_bytes < 0):
            raise InvalidArgument(f"region_cache_bytes must be a number of bytes >= 0 (0 keeps "
                                  f"no fetch regions), not {region_cache_bytes!r}",
                                  field="region_cache_bytes")
        daemon: Optional[_local.LocalDaemon] = None
        if target:
            self.target = target
        else:
            self.target, daemon = _resolve_target()
        self.daemon = daemon
        tls = _tls.resolve(self.target, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                           tls_server_name=tls_server_name)
        md: List[Tuple[str, str]] = [("qdp-client", name)]
        token = os.environ.get("QDP_TOKEN") if token is None else token
        if token:
            md.append(("authorization", "Bearer " + token))
        self._conn = Connection(self.target, tuple(md), timeout, wire or Wire(), tls)
        self.wire = self._conn.wire
        self._session = _session.Session(self._conn, heartbeat, name) if session else None
        self._conn.session = self._session
        self._fetcher = Fetcher(self._conn, int(region_cache_bytes))
        self._owner = Owner(self._conn, self._fetcher)
        self._states = self._owner.states  # those close() releases
        self._lock = threading.Lock()  # the staging regions
        self._staging: Optional[Region] = None
        self._copy_pool: Optional[ThreadPoolExecutor] = None
        self._regions: Dict[int, Region] = {}  # the staging and empty() regions
        self._user_regions: Dict[int, Region] = {}  # those behind empty() arrays
        if daemon is not None:
            self._use_daemon(daemon)

    # ---- plumbing ----

    def _use_daemon(self, daemon: "_local.LocalDaemon") -> None:
        """Records the private daemon of this client's target, whose exit its errors name."""
        self.daemon = daemon
        self._conn.unavailable_note = daemon._exit_note

    @property
    def socket_path(self) -> Optional[str]:
        """The daemon's socket path when the target is a Unix socket, else None (TCP)."""
        return self._conn.socket_path

    @property
    def session(self) -> Optional[str]:
        """The id of this client's session on the daemon (opened now if it was not yet), or
        None: sessions off (``session=False``), or a daemon without them."""
        return self._conn.session_id() or None

    @property
    def timeout(self) -> float:
        """Seconds each call may take (may be changed)."""
        return self._conn.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._conn.timeout = seconds

    def call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        """Calls unary RPC ``method`` with a request message; returns the reply message.

        Parameters
        ----------
        method : str
            The RPC's name in proto/qdp.proto ("Describe").
        request : protobuf message
            Its request (``client.wire.DescribeRequest(...)``).
        timeout : float, optional
            Seconds; the client's default when omitted.

        Raises
        ------
        Error
            The subclass of the call's status, with its ErrorDetail fields.
        """
        return self._conn.call(method, request, timeout)

    def flush(self) -> None:
        """Waits until the calls this client makes off the caller's path have been made: the
        releases of the states and the ends of the view leases that the garbage collector
        reclaimed. Every other call of the client sees them done first anyway; this is for a
        program that then looks at the daemon through another client or process."""
        self._conn.flush()

    def _new_region(self, nbytes: int, contents: Optional[memoryview] = None) -> Region:
        r = Region(nbytes, self._conn.register_region, self._conn.unregister_quietly,
                   contents=contents)
        self._regions[id(r)] = r
        return r

    def _drop_region(self, region: Optional[Region]) -> None:
        if region is not None:
            self._regions.pop(id(region), None)
            self._user_regions.pop(id(region), None)
            region.close()

    def _drop_region_later(self, conn: Connection, key: int) -> None:
        region = self._regions.get(key)
        if region is not None and conn.open:
            try:
                self._drop_region(region)
            except BaseException:  # from a finalizer: never raise
                pass

    def close(self) -> None:
        """Releases the states this client made that are still alive (but those made to
        outlive it), unregisters its regions (those kept for fetches too; arrays over them stay
        valid), ends its session and closes the channel. Idempotent."""
        if not self._conn.open:
            return
        for s in list(self._states):
            try:
                s._release(closed=True)
            except Error:
                pass  # the daemon is gone or restarted: nothing is left to free
        for r in list(self._regions.values()):
            self._drop_region(r)
        self._staging = None
        with self._lock:
            pool, self._copy_pool = self._copy_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._fetcher.close()  # while the channel is open: it unregisters the fetch regions
        if self._session is not None:
            self._session.close()
        self._conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- requests ----

    def _request(self, encoding: str, qubits: int, dtype: str, policy: str,
                 devices: Optional[Sequence[str]], ttl: Optional[float], label: str) -> Any:
        if dtype not in ("complex64", "complex128"):
            raise InvalidArgument(f"output dtype {dtype!r}: use 'complex64' or 'complex128'",
                                  field="output_dtype")
        _check_qubits(qubits)
        r = self.wire.EncodeRequest()
        r.encoding = enum_number("Encoding", encoding, "encoding", "encoding")
        r.qubits = int(qubits)
        r.output_dtype = enum_number("DType", dtype, "dtype", "output_dtype")
        r.placement.policy = enum_number("Policy", policy, "policy", "placement.policy")
        if devices:
            r.placement.devices.extend([devices] if isinstance(devices, str) else devices)
        r.ttl_seconds = ttl_seconds(ttl)
        if label:
            r.label = label
        return r

    def _owned_region(self, arr: np.ndarray) -> Optional[Tuple[Region, int]]:
        for r in list(self._user_regions.values()):
            off = r.offset_of(arr)
            if off is not None:
                return r, off
        return None

    def _fill_input(self, r: Any, src: EncodeInput) -> Optional[Tuple[Any, memoryview]]:
        """Fills r.input from src; returns (request, bytes) when the input must be uploaded."""
        inp = r.input
        if src.kind == "path":
            inp.path = src.path
            if self.socket_path is not None:
                inp.fd_ticket = self._hand_npy(src.path)
            return None
        if src.kind == "cuda":
            # Kept in src, which encode holds until the daemon has read the memory.
            src.tensor = _ipc.fill_cuda_input(inp, src.tensor)
            return None
        arr = src.array
        assert arr is not None
        inp.dtype = enum_number("DType", dtype_name_of(arr), "input dtype", "input.dtype")
        inp.rows, inp.cols = src.rows, src.cols
        owned = self._owned_region(arr) if self.socket_path is not None else None
        if owned is not None:
            inp.shm.region, inp.shm.region_token = owned[0].handle, owned[0].token
            inp.shm.offset, inp.shm.length = owned[1], arr.nbytes
            return None
        if arr.nbytes < LARGE_BYTES:
            inp.data = arr.tobytes()
            return None
        if self.socket_path is not None:
            region: Optional[Region] = self._staging
            if region is None or region.size < arr.nbytes:
                self._drop_region(region)
                self._staging = None
                try:
                    region = self._staging = self._new_region(
                        max(arr.nbytes, 2 * (region.size if region else 0)))
                except Error:
                    region = None  # no region to be had (max_regions): upload instead
            if region is not None:
                region.write(arr, self._copier())
                inp.shm.region, inp.shm.region_token = region.handle, region.token
                inp.shm.offset, inp.shm.length = 0, arr.nbytes
                return None
        return r, memoryview(np.ascontiguousarray(arr)).cast("B")  # type: ignore[arg-type]

    def _copier(self) -> ThreadPoolExecutor:
        """The threads that copy a large input into the staging region (made at first use;
        called with ``_lock`` held, as the staging region is)."""
        if self._copy_pool is None:
            self._copy_pool = _region.copier()
        return self._copy_pool

    def _hand_npy(self, path: str) -> str:
        """Opens the .npy file ``path`` here, checks that it is one, and hands that descriptor
        over (the daemon reads what was checked); returns the ticket."""
        fd = _open_input(path)
        try:
            _check_npy(fd, path)
            return self._conn.hand_over(fd)
        finally:
            os.close(fd)

    def _input(self, data: Any, encoding: str) -> EncodeInput:
        """An encode's input resolved: a table file (CSV, Parquet, Arrow, .pt) read here into
        an array, any other path left for the daemon to read as .npy."""
        src = encode_input(data, encoding)
        if src.kind == "path" and src.path.lower().endswith(_table_suffixes()):
            return encode_input(self._read_table(src.path), encoding)
        return src

    def _read_table(self, path: str) -> np.ndarray:
        """The rows of a table file, read here as ``qdp.readers.open_source(path)`` does."""
        from . import readers

        if self.socket_path is None:
            raise InvalidArgument(f"{path}: over TCP a path names a .npy file on the daemon's "
                                  "node, and the daemon reads no tables: read it here, src = "
                                  "qdp.readers.open_source(path), and encode its rows, "
                                  "src.read(0, src.rows)", field="input.path")
        try:
            fd = _open_input(path)  # the errors of a path, not of a reader
            os.close(fd)
            src = readers.open_source(path)
            return src.read(0, src.rows)
        except IsADirectoryError:
            raise InvalidArgument(f"{path} is a directory: name a file",
                                  field="input.path") from None
        except InvalidArgument as e:
            raise InvalidArgument(f"{e.message} (encode reads {path} as "
                                  "qdp.readers.open_source(path) does: for other columns or "
                                  "nulls, encode the rows of src = qdp.readers.open_source(path, "
                                  "columns=..., null_policy=...), src.read(0, src.rows))",
                                  field="input.path") from None

    def _upload(self, request: Any, data: Any) -> Any:
        """EncodeUpload of ``request`` with its input ``data`` streamed in chunks."""
        wire = self.wire

        def chunks() -> Iterator[Any]:
            yield wire.UploadChunk(request=request)
            n = len(data)
            for i in range(0, n, UPLOAD_CHUNK):
                yield wire.UploadChunk(data=bytes(data[i:i + UPLOAD_CHUNK]),
                                       last=i + UPLOAD_CHUNK >= n)
        return self._conn.upload("EncodeUpload", chunks())

    @overload
    def encode(self, data: Any, encoding: str, qubits: int, *, dtype: Optional[str] = None,
               policy: str = "auto", devices: Optional[Sequence[str]] = None,
               ttl: Optional[float] = None, label: str = "", out: None = None,
               outlive: bool = False) -> State: ...

    @overload
    def encode(self, data: Any, encoding: str, qubits: int, *, dtype: Optional[str] = None,
               policy: str = "auto", devices: Optional[Sequence[str]] = None,
               ttl: Optional[float] = None, label: str = "", out: Out,
               outlive: bool = False) -> Out: ...

    def encode(self, data: Any, encoding: str, qubits: int, *, dtype: Optional[str] = None,
               policy: str = "auto", devices: Optional[Sequence[str]] = None,
               ttl: Optional[float] = None, label: str = "", out: Any = None,
               outlive: bool = False) -> Any:
        """Encodes classical data into a state the daemon keeps, or into ``out``.

        Parameters
        ----------
        data : list, numpy.ndarray, torch.Tensor, str or os.PathLike
            One sample (1-D) or a batch of samples (2-D, one per row) of real numbers, float32
            or float64 (integers and other real types become float64); for basis, one index per
            sample (an int, or a 1-D array of indices: a batch). Booleans, complex values,
            strings, None and rows of different lengths are refused. A path ending in ``.csv``,
            ``.parquet``, ``.arrow``, ``.feather``, ``.ipc`` or ``.pt`` is read here as
            :func:`qdp.readers.open_source` reads it (its rows are the batch; a unix: target
            only); any other path names an ``.npy`` file, opened here, checked and handed over
            (over TCP: a file on the daemon's node). A CPU tensor is read without a copy; a
            CUDA tensor needs a daemon with CUDA IPC input; a tensor that requires grad is
            refused (the state carries no gradient). Arrays that live in :meth:`empty` buffers
            are read in place.
        encoding : str
            "amplitude", "angle", "basis", "iqp", "iqp-z" or "phase": see Notes for each one's
            values per sample and state.
        qubits : int
            Qubits per sample, 1 to the daemon's max_qubits; qubit k is bit k of the amplitude
            index.
        dtype : str, optional
            The state's dtype, "complex128" or "complex64"; by default complex128, or the dtype
            of ``out``.
        policy : str
            Placement: "auto", "single", "even", "uneven", "capacity" or "batch".
        devices : sequence of str, optional
            Device names as :meth:`status` lists them; all when omitted.
        ttl : float, optional
            Seconds (> 0, rounded up to whole seconds) the state lives unless released; the
            daemon's default_ttl when None. One above the daemon's max_ttl gets max_ttl, with a
            :class:`qdp.TtlCappedWarning`.
        label : str
            Free text kept with the state.
        out : torch.Tensor or object with ``__cuda_array_interface__``, optional
            Memory on one of the daemon's GPUs to write the state into instead of keeping it:
            C-contiguous, complex64 or complex128 (the state's ``dtype``), of ``batch * 2**qubits``
            elements in any shape (``(batch, 2**qubits)``, or ``(2**qubits,)`` for one sample),
            a slice of a larger tensor included. One call: the daemon opens the tensor's
            allocation through CUDA IPC, writes the amplitudes there on the tensor's GPU (one
            shard: ``policy`` "auto" or "single", ``devices`` none or that GPU) and answers once
            they are in place; it keeps nothing. The work queued on the tensor's current stream
            is waited for first. Same-node daemons on GPUs only; after a failure the tensor
            holds anything. ``ttl``, ``label`` and ``outlive`` describe a kept state: not with
            ``out``.
        outlive : bool
            Make the state outside the client's session: it is not released when the client
            closes, is collected or its process dies, only by :meth:`State.release` (of this or
            any holder of its handle and token) or its ttl. For a state another process picks up
            by :meth:`Client.state`.

        Returns
        -------
        State or the type of ``out``
            The resident state (release it, or use ``with``, when done); with ``out``, ``out``
            itself, holding the state.

        Raises
        ------
        InvalidArgument
            A bad field (``field`` names it; "input.data" or "input.dtype" for values that are
            not real numbers or a tensor that requires grad; "input.path" for a file that is
            not a .npy or a table; "ttl" for one that is not seconds > 0; "out" for a tensor of
            the wrong dtype, size or layout; "ttl" or "label" given with ``out``), zero norm,
            non-finite values.
        NotFound, PermissionDenied
            A path that does not exist or that this process may not read (field "input.path").
        NotSupported
            ``out`` where it cannot be written: a CPU daemon, a GPU it does not own, a TCP
            target, a tensor not in CUDA memory.
        ResourceExhausted
            It does not fit (``need_bytes``, ``free_bytes``).
        Error
            Any other failure, as its status's subclass.

        Warns
        -----
        TtlCappedWarning
            ``ttl`` is above the daemon's max_ttl, which the state got instead
            (``StateInfo.ttl_seconds``).

        Notes
        -----
        Qubit k is bit k of the amplitude index b (little-endian: b = sum_k b_k 2^k); a batch is
        row-major ``(batch, 2**qubits)``. On n qubits, each encoding takes these values per
        sample and gives these amplitudes psi_b:

        ==========  ==============  =========================================================
        encoding    values          psi_b
        ==========  ==============  =========================================================
        amplitude   L <= 2^n        x_b / ||x|| for b < L, else 0
        angle       n               prod_k (cos x_k if b_k = 0 else sin x_k): RY(2 x_k) on
                                    each qubit k of |0...0>
        basis       1 (an index i)  1 at b = i, else 0
        iqp         n + n(n-1)/2    2^-n sum_z (-1)^popcount(z & b) e^{i theta(z)}, with
                                    theta(z) = sum_i d_i z_i + sum_{i<j} d_p(i,j) z_i z_j:
                                    the n singles d_0 .. d_{n-1}, then the pair terms in the
                                    order (0,1), (0,2) ... (0,n-1), (1,2) ... (n-2,n-1)
        iqp-z       n               as iqp without the pair terms
        phase       n               2^(-n/2) e^{i sum_k x_k b_k}
        ==========  ==============  =========================================================

        As circuits on |0...0>: iqp is H on every qubit, P(d_i) on qubit i, CP(d_p(i,j)) on
        qubits i and j, then H on every qubit; iqp-z the same without CP; phase is H on every
        qubit, then P(x_k) on qubit k. :func:`qdp.feature_maps.iqp_parameters` builds iqp's
        values from n features; :mod:`qdp.interop` gives each encoding's PennyLane and Qiskit
        circuit.
        """
        if out is not None:
            self._kept_only(ttl, label, outlive)
        dst = self._output(out, dtype) if out is not None else None
        r = self._request(encoding, qubits, dst.dtype if dst else dtype or "complex128", policy,
                          devices, ttl, label)
        src = self._input(data, encoding)

        def send(sid: str) -> Any:
            r.session = sid
            return self._send(r, src, dst)
        reply = self._conn.in_session(send, session=dst is None and not outlive)
        if dst is not None:
            return out  # dst held it until the reply; the amplitudes are in place
        return self._owner.adopt(reply.state, src.batched or reply.state.batch > 1, ttl,
                                 outlive=outlive)

    def _send(self, r: Any, src: EncodeInput, dst: Optional[_ipc.CudaOutput] = None) -> Any:
        """Sends EncodeRequest ``r`` with input ``src`` (inline, a region, staged, uploaded, a
        handed-over file) and, with ``dst``, the tensor to write into; returns the reply."""
        staged = (src.kind == "array" and src.array is not None
                  and src.array.nbytes >= LARGE_BYTES and self.socket_path is not None
                  and self._owned_region(src.array) is None)
        # The staging region holds one input at a time, until its Encode has read it.
        with self._lock if staged else contextlib.nullcontext():
            upload = self._fill_input(r, src)
            if dst is not None:
                dst.fill(r, _batch_of(r.input, src), r.qubits)  # an upload sends r too
            try:
                if upload is None:
                    return self.call("Encode", r)
                req, payload = upload
                req.input.ClearField("data")
                return self._upload(req, payload)
            except FailedPrecondition as e:
                if dst is not None and e.field in ("out", "out.device_uuid"):
                    raise NotSupported(f"out=: {e.message}", field=e.field) from None
                raise

    def _encode_amplitudes(self, src: EncodeInput, encoding: str, qubits: int, samples: int, *,
                           dtype: str, policy: str = "auto",
                           devices: Optional[Sequence[str]] = None) -> np.ndarray:
        """Every amplitude of the encode of ``src`` (resolved by :meth:`_input`; ``samples`` as
        the caller counts them), flat, with the state kept nowhere: in the Encode's reply
        (EncodeRequest.reply_amplitudes, one round trip) up to REPLY_AMPLITUDES_BYTES, else
        encoded, fetched and released."""
        dt = NUMPY_DTYPES[dtype]
        r = self._request(encoding, qubits, dtype, policy, devices, None, "")
        r.reply_amplitudes = (samples << qubits) * dt.itemsize <= REPLY_AMPLITUDES_BYTES
        reply = self._send(r, src)
        if not reply.state.handle:  # the amplitudes came back, the state is gone
            want = (reply.state.batch or 1) << reply.state.qubits
            if len(reply.amplitudes) != want * dt.itemsize:
                raise Internal(f"the daemon sent {len(reply.amplitudes)} B of amplitudes for "
                               f"{want} {dtype} ones", hint="")
            return np.frombuffer(reply.amplitudes, dt).copy()
        # Larger, or a daemon without reply_amplitudes, which kept the state: fetched.
        with self._owner.adopt(reply.state, True, None) as s:
            return s.numpy().reshape(-1)

    def _output(self, out: Any, dtype: Optional[str]) -> _ipc.CudaOutput:
        """``out`` of :meth:`encode`, checked before anything is sent; its dtype is the state's."""
        if self.socket_path is None:
            raise NotSupported("out= needs a daemon on this node (a unix: target): an IPC handle "
                               "opens only on its own node", field="out")
        dst = _ipc.CudaOutput(out)
        if dtype is not None and dtype != dst.dtype:
            raise InvalidArgument(f"out is {dst.dtype} but dtype is {dtype!r}: pass a {dtype} "
                                  "tensor, or leave dtype out", field="out")
        return dst

    @staticmethod
    def _kept_only(ttl: Optional[float], label: str, outlive: bool) -> None:
        """Refuses what only a kept state has, for encode with ``out``, which keeps nothing."""
        for name, given in (("ttl", ttl is not None), ("label", label != ""),
                            ("outlive", bool(outlive))):
            if given:
                raise InvalidArgument(f"{name} describes a state the daemon keeps, but out= keeps "
                                      f"nothing: leave {name} out, or encode without out= and "
                                      "read the state with State.torch()", field=name)

    def plan(self, data: Any, encoding: str, qubits: int, *, dtype: str = "complex128",
             policy: str = "auto", devices: Optional[Sequence[str]] = None,
             shape: Optional[Tuple[int, int]] = None, input_dtype: str = "float64") -> Plan:
        """Asks what an encode would take, allocating nothing (a dry run).

        Parameters
        ----------
        data : array-like, str, os.PathLike or None
            As for :meth:`encode`; only its shape and dtype are sent (an .npy path is handed
            over, a table read here). None with ``shape``.
        encoding, qubits, dtype, policy, devices
            As for :meth:`encode`.
        shape : (int, int), optional
            (samples, values per sample), when ``data`` is None.
        input_dtype : str
            The values' dtype with ``shape``: "float32", "float64" or "int64".

        Returns
        -------
        Plan
            Feasible or not, with the layout and every device's bytes against its budget.
        """
        r = self._request(encoding, qubits, dtype, policy, devices, None, "")
        if data is None:
            if shape is None:
                raise InvalidArgument("plan needs data or shape=(samples, values per sample)",
                                      field="input")
            r.input.rows, r.input.cols = int(shape[0]), int(shape[1])
            r.input.dtype = enum_number("DType", input_dtype, "input dtype", "input.dtype")
        else:
            src = self._input(data, encoding)
            if src.kind == "path":
                self._fill_input(r, src)
            elif src.kind == "cuda":
                raise NotSupported("plan of a CUDA tensor: pass shape= and input_dtype=")
            else:
                assert src.array is not None
                r.input.rows, r.input.cols = src.rows, src.cols
                r.input.dtype = enum_number("DType", dtype_name_of(src.array), "input dtype",
                                            "input.dtype")
        return Plan.from_proto(self.call("Plan", r))

    def empty(self, shape: Union[int, Tuple[int, ...]], dtype: Any = np.float64) -> np.ndarray:
        """A NumPy array in shared memory registered with the daemon: fill it, then encode it
        (or any C-contiguous slice of it) as often as needed without a copy.

        Parameters
        ----------
        shape : int or tuple of int
            The array's shape (1-D sample or 2-D batch).
        dtype : numpy dtype
            float32, float64 or int64.

        Returns
        -------
        numpy.ndarray
            Zero-filled; the region is unregistered when the array (and every view of it) is
            gone, or when the client closes.

        Raises
        ------
        NotSupported
            Over TCP: shared memory needs a daemon on this node.
        """
        if self.socket_path is None:
            raise NotSupported("client.empty needs a daemon on this node (a unix: target); "
                               "over TCP pass ordinary arrays")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dt = np.dtype(dtype)
        if dt.newbyteorder("<") not in (NUMPY_DTYPES["float32"], NUMPY_DTYPES["float64"],
                                        NUMPY_DTYPES["int64"]):
            raise InvalidArgument(f"empty(dtype={dt}): use float32, float64 or int64",
                                  field="input.dtype")
        nbytes = math.prod(int(n) for n in shape) * dt.itemsize  # no int64 to overflow
        region = self._new_region(nbytes)
        arr = region.array(shape, dt.newbyteorder("<"))
        self._user_regions[id(region)] = region
        # The mapping lives as long as the array and its views; then the region is forgotten.
        weakref.finalize(region.detach(), self._drop_region_later, self._conn, id(region))
        return arr

    def frozen(self, data: Any) -> np.ndarray:
        """A read-only copy of ``data`` in shared memory registered with the daemon, which no
        process can change any more: encode it (or any C-contiguous slice of it) as often as
        needed without a copy.

        :meth:`empty` gives memory to fill and refill; this gives an input handed over for good.
        Its memfd is sealed against shrinking, growing and writing (``F_SEAL_WRITE``), so the
        daemon knows its bytes cannot change under any read, and reports it frozen. What the
        caller gives up: the seals cannot be removed, so the bytes stay as they are until the
        region goes (when the array and its views are gone, or the client closes); for other
        values, make another.

        Parameters
        ----------
        data : array_like
            float32, float64 or int64 values (1-D sample or 2-D batch).

        Returns
        -------
        numpy.ndarray
            Read-only, over the region's mapping.

        Raises
        ------
        NotSupported
            Over TCP, or where the kernel cannot seal a memfd against writing.
        """
        if self.socket_path is None:
            raise NotSupported("client.frozen needs a daemon on this node (a unix: target); "
                               "over TCP pass ordinary arrays")
        arr = np.ascontiguousarray(data)
        dt = arr.dtype
        if dt.newbyteorder("<") not in (NUMPY_DTYPES["float32"], NUMPY_DTYPES["float64"],
                                        NUMPY_DTYPES["int64"]):
            raise InvalidArgument(f"frozen(dtype={dt}): use float32, float64 or int64",
                                  field="input.dtype")
        arr = arr.astype(dt.newbyteorder("<"), copy=False)
        region = self._new_region(arr.nbytes, memoryview(arr).cast("B"))
        out = region.array(arr.shape, arr.dtype)
        self._user_regions[id(region)] = region
        weakref.finalize(region.detach(), self._drop_region_later, self._conn, id(region))
        return out

    def state(self, handle: str, token: str) -> State:
        """A :class:`State` for a handle and token made elsewhere (qdpctl, another process).

        It is not released when this object is collected; call :meth:`State.release`.
        """
        info = self.call("Describe", self.wire.DescribeRequest(handle=handle, token=token))
        info.token = token
        return State(self._owner, info, batched=info.batch > 1, owned=False)

    def kernel(self, a: State, b: Optional[State] = None, *, overlaps: bool = False,
               out: Any = None) -> Any:
        """The kernel matrix of two resident batches, computed where their shards are.

        Parameters
        ----------
        a : State
            The rows' states (a batch, or one sample: one row).
        b : State, optional
            The columns' states, of the same qubits and dtype; by default ``a`` itself (the
            symmetric case, each pair computed once).
        overlaps : bool
            Return the complex overlaps <a_i|b_j> instead of the fidelities |<a_i|b_j>|^2.
        out : torch.Tensor or object with ``__cuda_array_interface__``, optional
            A C-contiguous CUDA tensor of the matrix's shape and dtype on a GPU of the daemon's
            node, which the daemon writes the matrix into (device to device: it never passes
            through this process); a GPU daemon and its Unix socket only.

        Returns
        -------
        numpy.ndarray or out
            Of shape ``(a.batch, b.batch)``: float64 fidelities (float32 for complex64 states),
            or complex overlaps of the states' dtype. The states stay resident. With ``out``,
            ``out``.

        Raises
        ------
        InvalidArgument
            ``b`` of other qubits or dtype than ``a`` (field "b"); ``out`` of another dtype,
            size or layout (field "out").
        NotSupported
            ``out`` not a CUDA tensor (field "out").
        FailedPrecondition
            ``out`` given to a daemon on the CPU backend (field "out").
        NotFound
            A state released or unknown (field "a" or "b").
        ResourceExhausted
            The workspace does not fit the device (``need_bytes``, ``free_bytes``), or over TCP a
            matrix larger than a reply carries (64 MiB).

        Notes
        -----
        The daemon sums each pair's products over blocks of up to 2^20 amplitudes along one
        fixed tree, so the matrix has the same bits however the states are sharded. A matrix
        of up to 4 MiB comes back in the reply; a larger one is written by the daemon straight
        into shared memory that becomes the returned array.
        """
        if not isinstance(a, State) or not (b is None or isinstance(b, State)):
            raise InvalidArgument("kernel takes the qdp.State of an encode (a, and b when "
                                  "given); encode arrays first", field="a")
        return self._owner.kernel(a, b, overlaps, out)

    def kernel_of(self, X: Any, encoding: str, qubits: int, Y: Any = None, *,
                  overlaps: bool = False, max_bytes: int = 0, dtype: Optional[str] = None,
                  policy: str = "auto", devices: Optional[Sequence[str]] = None,
                  out: Any = None) -> Any:
        """The kernel matrix of the states of inputs X (and Y) with no state kept: the daemon
        encodes a piece at a time on one device and pairs the pieces there.

        Parameters
        ----------
        X, Y : array_like or str
            Samples, one per row, as :meth:`encode` takes them (arrays, .npy paths, CUDA
            tensors); Y omitted: X with itself.
        encoding, qubits, dtype
            As :meth:`encode` takes them, for both.
        overlaps : bool
            The complex overlaps <x_i|y_j> instead of the fidelities |<x_i|y_j>|^2.
        max_bytes : int
            The most device memory that holds amplitudes (two tiles of states, or the blocks of
            amplitudes of every row for angle, basis and phase): it sets the tiles. The partial
            sums of the products come on top (up to the matrix's size, as :meth:`kernel`'s).
            0: the tiles :meth:`kernel` takes.
        policy, devices
            "auto" or "single", and the devices to choose from: the matrix is computed on one.
        out : torch.Tensor, optional
            A CUDA tensor the daemon writes the matrix into, as :meth:`kernel` takes it.

        Returns
        -------
        numpy.ndarray or out
            ``(len(X), len(Y))``, as :meth:`kernel` returns it.

        Raises
        ------
        InvalidArgument
            max_bytes too small for a tile of one row (``need_bytes``), another policy, or a
            bad input (the message names the rows of its tile).
        ResourceExhausted
            The device has no room for the tiles (``need_bytes``, ``free_bytes``).

        Notes
        -----
        Angle, basis and phase states are encoded a block of amplitudes at a time into the
        products' operands, with no bound in :meth:`kernel`'s tiles (so with its bits). The
        other encodings need whole samples: each tile of X's rows is encoded once per row of
        tiles and each of Y's once per tile, so a smaller ``max_bytes`` costs more encodes, and
        their products are complex.
        """
        if not isinstance(max_bytes, (int, np.integer)) or isinstance(max_bytes, bool) \
                or max_bytes < 0:
            raise InvalidArgument(f"max_bytes={max_bytes!r}: a number of bytes, 0 for the "
                                  "default tiles", field="max_bytes")
        r = self._request(encoding, qubits, dtype or "complex128", policy, devices, None, "")
        req = self.wire.KernelRequest(overlaps=bool(overlaps), max_bytes=int(max_bytes))
        srcs = [self._input(X, encoding)] + ([] if Y is None else [self._input(Y, encoding)])
        temps: List[Region] = []
        try:
            with self._lock:  # the staging region holds X until the call has read it
                self._fill_kernel_input(r, srcs[0], temps, staging=True)
                req.encode.CopyFrom(r)
                rows = cols = _batch_of(r.input, srcs[0])
                if Y is not None:
                    b = self.wire.EncodeRequest()
                    self._fill_kernel_input(b, srcs[1], temps, staging=False)
                    req.input_b.CopyFrom(b.input)
                    cols = _batch_of(b.input, srcs[1])
                return self._owner.matrix(req, dtype or "complex128", bool(overlaps),
                                          (rows, cols), out)
        finally:
            for t in temps:
                self._drop_region(t)

    def _fill_kernel_input(self, r: Any, src: EncodeInput, temps: List[Region], *,
                           staging: bool) -> None:
        """r.input from src as an encode fills it, but never uploaded (Kernel is one request):
        a large array beside the staging one goes into a region of its own (added to temps),
        and what an encode would upload (over TCP) travels in the request."""
        arr = src.array
        large = (src.kind == "array" and arr is not None and arr.nbytes >= LARGE_BYTES
                 and self._owned_region(arr) is None)
        if large and self.socket_path is not None and not staging:
            inp = r.input
            inp.dtype = enum_number("DType", dtype_name_of(arr), "input dtype", "input.dtype")
            inp.rows, inp.cols = src.rows, src.cols
            region = self._new_region(arr.nbytes)
            temps.append(region)
            region.write(arr, self._copier())
            inp.shm.region, inp.shm.region_token = region.handle, region.token
            inp.shm.offset, inp.shm.length = 0, arr.nbytes
            return
        upload = self._fill_input(r, src)
        if upload is not None:  # no region to be had: in the request
            r.input.data = bytes(upload[1])

    def states(self) -> List[StateInfo]:
        """The caller's own states (List): every state of this identity, from any client."""
        return [StateInfo.from_proto(s) for s in self.call("List", self.wire.ListRequest()).states]

    def status(self) -> Status:
        """The daemon's version, backend, devices, budgets and counts."""
        return Status.from_proto(self.call("Status", self.wire.StatusRequest()))

    def health(self) -> str:
        """The daemon's serving status: "SERVING", "NOT_SERVING" or "UNKNOWN"."""
        rep = self.call("Health", self.wire.HealthRequest())
        return self.wire.HealthReply.DESCRIPTOR.fields_by_name["status"].enum_type \
            .values_by_number[rep.status].name


def _batch_of(inp: Any, src: EncodeInput) -> int:
    """The samples of an encode's input as the daemon will count them: the request's rows, or a
    file's from its .npy header; 0 when that cannot be read here (the daemon then says why)."""
    if src.kind != "path":
        return inp.rows or 1
    try:
        shape = np.load(src.path, mmap_mode="r").shape
    except (OSError, ValueError):
        return 0
    return int(shape[0]) if len(shape) == 2 else 1


def dtype_name_of(arr: np.ndarray) -> str:
    """The wire's name of a (little-endian) array's dtype: "float32", "float64" or "int64"."""
    for k in ("float32", "float64", "int64"):
        if arr.dtype == NUMPY_DTYPES[k]:
            return k
    raise InvalidArgument(f"input dtype {arr.dtype}: use float32, float64 or int64",
                          field="input.dtype")
