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
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .client import Client
from .errors import InvalidArgument, NotSupported
from .records import Plan, Status

_STATE_DTYPES = ("complex128", "complex64")


class _Default:
    """The process's default client, made under a lock at first use; a child of ``fork`` makes
    its own. Also the daemon's GPUs as this process's CUDA ordinals, asked once per client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Optional[Client] = None
        self._pid = 0
        self._gpus: Optional[Tuple[Tuple[str, int], ...]] = None

    def client(self) -> Client:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client = Client(name="qdp.default")
                self._pid = os.getpid()
                self._gpus = None
            return self._client

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
            mine = self._pid == os.getpid()
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
    call, and the daemon keeps nothing. Elsewhere a result of up to 4 MiB comes back in the
    Encode's reply (one call, nothing kept); a larger one is encoded, fetched into shared
    memory and released.
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
    if ordinal is None:  # the amplitudes, sent back or fetched, are the result
        flat = c._encode_amplitudes(src, encoding, qubits, batch, **kw)
        out = flat.reshape((-1, 1 << qubits) if batched else (1 << qubits,))
    else:
        import torch

        out = torch.empty(shape, dtype=getattr(torch, dt), device=f"cuda:{ordinal}")
        c.encode(given, encoding, qubits, out=out, **kw)
    if ordinal is not None or device in (None, "numpy"):
        return out
    import torch  # device "cpu": _cuda_ordinal has checked torch is there

    return torch.from_numpy(out)


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


def kernel(X: Any, Y: Any = None, *, encoding: Optional[str] = None,
           qubits: Optional[int] = None, overlaps: bool = False,
           dtype: Optional[str] = None, policy: str = "auto",
           devices: Optional[Sequence[str]] = None,
           max_bytes: Optional[int] = None) -> np.ndarray:
    """The kernel matrix of the states of X (and Y) in one call, with no state kept:
    ``qdp.kernel(X, encoding="angle", qubits=8)``, ``qdp.kernel(X_test, X_train, ...)``.

    Parameters
    ----------
    X, Y : array_like
        Samples, one per row, as :meth:`qdp.Client.encode` takes them; Y omitted: X with itself
        (the symmetric case, each pair computed once).
    encoding, qubits : str, int
        By name, as :meth:`qdp.Client.encode` takes them.
    policy, devices
        As :meth:`qdp.Client.encode` takes them.
    overlaps : bool
        The complex overlaps <x_i|y_j> instead of the fidelities |<x_i|y_j>|^2.
    dtype : str, optional
        The states' dtype, "complex128" (the default) or "complex64".
    max_bytes : int, optional
        The most device memory that holds amplitudes (:meth:`qdp.Client.kernel_of`); None: the
        tiles of :meth:`qdp.Client.kernel`, whose matrix this then equals bit for bit for up to
        4096 samples.

    Returns
    -------
    numpy.ndarray
        ``(len(X), len(Y))``, as :meth:`qdp.Client.kernel` returns it.

    Notes
    -----
    With policy "auto" or "single" this is one Kernel call from the inputs: the daemon encodes
    them a piece at a time on one device as it pairs them (:meth:`qdp.Client.kernel_of`). A
    policy that shards states ("even", "uneven", "capacity", "batch") encodes both batches
    whole as it says, pairs them where they are and releases them, also after a failure. Sklearn's
    ``SVC(kernel="precomputed")`` takes ``kernel(X_train, ...)`` to fit and
    ``kernel(X_test, X_train, ...)`` to predict; :class:`qdp.sklearn.QuantumKernel` is a kernel
    object that sklearn calls itself.
    """
    if isinstance(Y, str):
        raise InvalidArgument(f"qdp.kernel's second argument is Y, the columns' samples, not "
                              f"{Y!r}: give the encoding and qubits by name, qdp.kernel(X, "
                              f"encoding={Y!r}, qubits=...)", field="Y")
    if encoding is None or qubits is None:
        raise InvalidArgument("qdp.kernel needs the encoding and qubits by name: qdp.kernel(X, "
                              "encoding='angle', qubits=8)",
                              field="encoding" if encoding is None else "qubits")
    return kernel_on(default_client(), X, encoding, qubits, Y, overlaps=overlaps, dtype=dtype,
                     policy=policy, devices=devices, max_bytes=max_bytes)


def kernel_on(c: Client, X: Any, encoding: str, qubits: int, Y: Any = None, *,
              overlaps: bool = False, dtype: Optional[str] = None, policy: str = "auto",
              devices: Optional[Sequence[str]] = None,
              max_bytes: Optional[int] = None) -> np.ndarray:
    """:func:`kernel` through the client ``c``."""
    if max_bytes is not None or policy in ("auto", "single"):
        return c.kernel_of(X, encoding, qubits, Y, overlaps=overlaps, max_bytes=max_bytes or 0,
                           dtype=dtype, policy=policy, devices=devices)
    kw = {"dtype": dtype, "policy": policy, "devices": devices}
    with c.encode(X, encoding, qubits, **kw) as a:
        if Y is None:
            return c.kernel(a, overlaps=overlaps)
        with c.encode(Y, encoding, qubits, **kw) as b:
            return c.kernel(a, b, overlaps=overlaps)


def plan(data: Any, encoding: str, qubits: int, **kwargs: Any) -> Plan:
    """:meth:`qdp.Client.plan` on the :func:`default_client`: where a state would go and what
    each device would hold, allocating nothing."""
    return default_client().plan(data, encoding, qubits, **kwargs)


def status() -> Status:
    """:meth:`qdp.Client.status` of the :func:`default_client`'s daemon: its devices, budgets
    and counts."""
    return default_client().status()
