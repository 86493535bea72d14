"""The plain functions of the package — :func:`encode`, :func:`plan`, :func:`status` — and the
one client they share, :func:`default_client`, made on first use.

The default client is the process's: made from :func:`qdp.default_target` at the first call,
closed at exit, and made again in a child after ``fork`` (a gRPC channel does not survive one).
A program that needs other settings makes its own :class:`qdp.Client`.
"""

from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import _region
from .client import Client
from .errors import InvalidArgument, NotSupported
from .records import NUMPY_DTYPES, Plan, Status

_STATE_DTYPES = ("complex128", "complex64")
#: A batch of at least CHUNK_BYTES of input is encoded in up to CHUNKS pieces of rows: each piece
#: is copied into shared memory while the daemon encodes the one before, so the copy and the
#: daemon's upload overlap (docs/performance.md, "From Python").
CHUNK_BYTES = 8 << 20
CHUNKS = 4


class _Stager:
    """Shared-memory input buffers of one client (:meth:`qdp.Client.empty`), reused by
    :func:`encode`: the pieces of a batch are copied into them one after another on the caller's
    thread (each copy in parallel parts) and encoded from them in place on the stager's threads,
    so that the daemon reads one piece while the next is copied; a buffer holds one piece until
    its Encode answers."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._free: List[np.ndarray] = []
        self._pool: Optional[ThreadPoolExecutor] = None  # the pieces' encodes
        self._copy_pool: Optional[ThreadPoolExecutor] = None  # the pieces' copies, in parts

    def pipeline(self, parts: List[np.ndarray],
                 encode: Callable[[int, np.ndarray], None]) -> None:
        """Stages each of ``parts`` in turn and calls ``encode(k, staged)`` for part k on the
        stager's threads while the next is copied; waits for every encode, and raises the first
        failure once all have ended (none is left reading a buffer)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(CHUNKS, thread_name_prefix="qdp-encode")
                self._copy_pool = _region.copier()
            pool, copy_pool = self._pool, self._copy_pool
        futures: List[Future] = []
        try:
            for k, rows in enumerate(parts):
                buf = self._take(rows.nbytes)
                try:
                    staged = buf[:rows.nbytes].view(rows.dtype).reshape(rows.shape)
                    _region.copy_into(staged, np.ascontiguousarray(rows), copy_pool)
                except BaseException:
                    self._give(buf)
                    raise
                futures.append(pool.submit(self._encode_then_give, encode, k, staged, buf))
        except BaseException:
            wait(futures)  # no encode is left reading a buffer
            raise
        _region.wait_all(futures)

    def _encode_then_give(self, encode: Callable[[int, np.ndarray], None], k: int,
                          staged: np.ndarray, buf: np.ndarray) -> None:
        try:
            encode(k, staged)
        finally:
            self._give(buf)

    def _take(self, n: int) -> np.ndarray:
        """A free buffer of at least ``n`` bytes (the smallest), else a new one."""
        with self._lock:
            fit = [i for i, b in enumerate(self._free) if b.nbytes >= n]
            # Indices, not list.remove: == between arrays compares their elements.
            buf = self._free.pop(min(fit, key=lambda i: self._free[i].nbytes)) if fit else None
        if buf is None:
            buf = self._client.empty(-(-max(n, 1 << 20) // 8), np.float64).view(np.uint8)
        return buf

    def _give(self, buf: np.ndarray) -> None:
        with self._lock:
            self._free.append(buf)
            if len(self._free) > CHUNKS:  # a larger batch left more than one round needs
                self._free.sort(key=lambda b: b.nbytes)
                del self._free[:len(self._free) - CHUNKS]

    def close(self) -> None:
        with self._lock:
            pools = (self._pool, self._copy_pool)
            self._pool, self._copy_pool, self._free = None, None, []
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)


class _Default:
    """The process's default client, made under a lock at first use; a child of ``fork`` makes
    its own. Also the daemon's GPUs as this process's CUDA ordinals, asked once per client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Optional[Client] = None
        self._pid = 0
        self._gpus: Optional[Tuple[Tuple[str, int], ...]] = None
        self._stager: Optional[_Stager] = None

    def client(self) -> Client:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client = Client(name="qdp.default")
                self._pid = os.getpid()
                self._gpus = None
                self._stager = None  # a forked child has none of the parent's threads
            return self._client

    def stager(self, c: Client) -> _Stager:
        """The stager of the default client ``c`` (made at first use)."""
        with self._lock:
            if self._stager is None or c is not self._client:
                self._stager = _Stager(c)
            return self._stager

    def gpus(self, c: Client) -> Tuple[Tuple[str, int], ...]:
        """The daemon's GPUs on this node that this process sees: (name, CUDA ordinal) pairs in
        the daemon's order; none on a CPU daemon or without a CUDA runtime here."""
        with self._lock:
            if self._gpus is not None and c is self._client:
                return self._gpus
        uuids = [(d.name, d.uuid) for d in c.status().devices if d.kind == "cuda" and d.rank == 0]
        found: Tuple[Tuple[str, int], ...] = ()
        if uuids:
            mine = _local_uuids()
            found = tuple((name, mine[u]) for name, u in uuids if u in mine)
        with self._lock:
            if c is self._client:
                self._gpus = found
        return found

    def close(self) -> None:
        with self._lock:
            c, self._client, self._gpus = self._client, None, None
            stager, self._stager = self._stager, None
            mine = self._pid == os.getpid()
        if stager is not None and mine:
            stager.close()
        if c is not None and mine:
            c.close()


def _local_uuids() -> dict:
    """UUID -> CUDA ordinal of every GPU this process sees (torch's numbering); empty without
    torch or CUDA."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    from . import _cuda

    rt = _cuda.runtime()
    return {rt.uuid(i): i for i in range(torch.cuda.device_count())}


_default = _Default()
atexit.register(_default.close)


def default_client() -> Client:
    """The client :func:`encode`, :func:`plan` and :func:`status` use: made at the first call
    from :func:`qdp.default_target` and kept for the process (closed at exit). Don't close it.

    Returns
    -------
    Client
    """
    return _default.client()


def encode(data: Any, encoding: str, qubits: int, *, dtype: Optional[str] = None,
           device: Optional[str] = None, policy: str = "auto",
           devices: Optional[Sequence[str]] = None) -> Any:
    """Encodes classical data and returns the state itself: nothing to release.

    Parameters
    ----------
    data, encoding, qubits, policy, devices
        As :meth:`qdp.Client.encode` takes them (``help(qdp.Client.encode)`` has each encoding's
        values and formula).
    dtype : str, optional
        "complex128" (the default) or "complex64".
    device : str, optional
        Where the result lives. By default a torch tensor on the daemon's first GPU that this
        process sees, or a NumPy array when the daemon has none (its CPU backend). "cuda" or
        "cuda:N" (torch's numbering): a tensor on that GPU, which must be one of the daemon's.
        "cpu": a torch tensor in host memory. "numpy": a NumPy array.

    Returns
    -------
    torch.Tensor or numpy.ndarray
        Of shape ``(batch, 2**qubits)`` for a batch, ``(2**qubits,)`` for one sample.

    Raises
    ------
    NotSupported
        ``device`` names a GPU the daemon does not own, or needs torch where it is missing.
    InvalidArgument, ResourceExhausted, Error
        As :meth:`qdp.Client.encode` raises them.

    Notes
    -----
    On a GPU the daemon writes the state straight into a tensor allocated here (``out=``): one
    call, and the daemon keeps nothing. Elsewhere the state is encoded, fetched and released.
    The client is :func:`default_client`; for other settings (a target, a timeout) use a
    :class:`qdp.Client` of your own.
    """
    dt = "complex128" if dtype is None else dtype
    if dt not in _STATE_DTYPES:
        raise InvalidArgument(f"dtype {dtype!r}: the state's dtype is 'complex128' or "
                              "'complex64'", field="dtype")
    c = default_client()
    ordinal = _cuda_ordinal(c, device)
    src = c._input(data, encoding)  # a table file is read once, here
    batch, batched = _samples(src, encoding)
    shape = (batch, 1 << qubits) if batched else (1 << qubits,)
    given = {"array": src.array, "path": src.path, "cuda": src.tensor}[src.kind]
    kw = {"dtype": dt, "policy": policy, "devices": devices}
    pieces = _pieces(src, batched) if c.socket_path is not None else 1
    if ordinal is None and pieces == 1:  # the fetched array is the result
        with c.encode(given, encoding, qubits, **kw) as s:
            out = s.numpy()
    else:
        if ordinal is not None:
            import torch

            out = torch.empty(shape, dtype=getattr(torch, dt), device=f"cuda:{ordinal}")
        else:
            out = np.empty(shape, dtype=NUMPY_DTYPES[dt])

        def into(x: Any, a: int, b: int) -> None:
            """Rows a to b of the result from their input x (the whole result unbatched)."""
            if ordinal is not None:
                c.encode(x, encoding, qubits, out=out[a:b] if batched else out, **kw)
                return
            with c.encode(x, encoding, qubits, **kw) as s:
                out[a:b] = s.numpy()

        if pieces == 1:
            into(given, 0, batch)
        else:
            cut = [batch * k // pieces for k in range(pieces + 1)]
            _default.stager(c).pipeline(
                [src.array[cut[k]:cut[k + 1]] for k in range(pieces)],
                lambda k, x: into(x, cut[k], cut[k + 1]))
    if ordinal is not None or device in (None, "numpy"):
        return out
    import torch  # device "cpu": _cuda_ordinal has checked torch is there

    return torch.from_numpy(out)


def _pieces(src: Any, batched: bool) -> int:
    """In how many pieces of rows an input is encoded: one, unless it is a batch of an array at
    least CHUNK_BYTES large."""
    if src.kind != "array" or not batched or src.array.nbytes < CHUNK_BYTES:
        return 1
    return min(CHUNKS, src.rows)


def _samples(src: Any, encoding: str) -> Tuple[int, bool]:
    """How many samples an encode's input holds and whether it is a batch, as the daemon counts
    them: from the array, the CUDA tensor's shape, or the .npy file's header (a file that
    cannot be read here counts as one batch row; the daemon then says what is wrong with it)."""
    if src.kind == "array":
        return src.rows, src.batched
    if src.kind == "cuda":
        shape = tuple(src.tensor.shape)
    else:
        try:
            shape = np.load(src.path, mmap_mode="r").shape
        except (OSError, ValueError):
            return 1, True
    batched = len(shape) == 2 or (encoding == "basis" and len(shape) == 1)
    return (int(shape[0]) if batched else 1), batched


def _cuda_ordinal(c: Client, device: Optional[str]) -> Optional[int]:
    """The CUDA ordinal ``device`` resolves to for an encode into a tensor; None for a result
    fetched to the host (NumPy, or a CPU tensor)."""
    if device in ("numpy", "cpu"):
        if device == "cpu":
            _need_torch("device='cpu'")
        return None
    if device is not None and not str(device).startswith("cuda"):
        raise InvalidArgument(f"device {device!r}: pass 'cuda', 'cuda:N', 'cpu' or 'numpy', or "
                              "leave it out", field="device")
    gpus = _default.gpus(c)
    if device is None:
        return gpus[0][1] if gpus else None
    _need_torch(f"device={device!r}")
    if not gpus:
        raise NotSupported(f"device={device!r}: the daemon at {c.target} has no GPU that this "
                           "process sees (a CPU backend, or CUDA_VISIBLE_DEVICES hides its GPUs); "
                           "leave device out for a NumPy array, or move the result with .to()",
                           field="device")
    import torch

    want = torch.device(device)
    ordinal = torch.cuda.current_device() if want.index is None else want.index
    if want.index is None and all(o != ordinal for _, o in gpus):
        ordinal = gpus[0][1]  # "cuda" means the daemon's GPU when the current one is not
    if all(o != ordinal for _, o in gpus):
        mine = ", ".join(f"cuda:{o} (the daemon's {n})" for n, o in gpus)
        raise NotSupported(f"device={device!r} is not one of the daemon's GPUs; it has {mine}",
                           field="device")
    return ordinal


def _need_torch(what: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise NotSupported(f"{what} returns a torch tensor: pip install torch, or pass "
                           "device='numpy'", field="device") from None


def plan(data: Any, encoding: str, qubits: int, **kwargs: Any) -> Plan:
    """:meth:`qdp.Client.plan` on the :func:`default_client`: where a state would go and what
    each device would hold, allocating nothing."""
    return default_client().plan(data, encoding, qubits, **kwargs)


def status() -> Status:
    """:meth:`qdp.Client.status` of the :func:`default_client`'s daemon: its devices, budgets
    and counts."""
    return default_client().status()
