"""qdp.State: a resident state vector (or batch) on the daemon, by handle and token; and its
:class:`Owner`, what the states of one Client need of it."""

from __future__ import annotations

import functools
import warnings
import weakref
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _cuda, _ipc, _views
from ._connection import Connection
from ._fetch import Fetcher
from ._values import ttl_seconds
from .errors import (FailedPrecondition, InvalidArgument, NotFound, NotSupported,
                     TtlCappedWarning, error_for)
from .records import NUMPY_DTYPES, StateInfo, dtype_name, encoding_name

_DL_CPU, _DL_CUDA = 1, 2  # DLDeviceType: kDLCPU, kDLCUDA

#: How a state this process released was released, for the error of a later use.
_RELEASED = ("was released by this process (State.release(), or the end of its with block): "
             "encode it again to use it")
_CLOSED = ("was released when its Client closed: Client.close() (and the end of the client's "
           "with block) releases the states it made; use them before their client closes")


class State:
    """A state the daemon keeps for this client: handle, token and what it holds.

    Made by :meth:`Client.encode`. It is released by :meth:`release`, at the end of a ``with``
    block, when the object is garbage collected, or when its client closes (whichever comes
    first); a state made by :meth:`Client.state` from another's handle is released only
    explicitly.

    Attributes
    ----------
    handle, token : str
        Its name and capability (anyone holding both may use it).
    encoding, dtype : str
        "amplitude", ...; "complex64" or "complex128".
    qubits, batch : int
        Qubits per sample and samples.
    shape : tuple of int
        ``(2**qubits,)`` for one sample, ``(batch, 2**qubits)`` for a batch.
    """

    def __init__(self, owner: "Owner", info: Any, batched: bool = False,
                 owned: bool = True) -> None:
        self._owner = owner
        self.handle: str = info.handle
        self.token: str = info.token
        self.encoding = encoding_name(info.encoding)
        self.dtype = dtype_name(info.dtype)
        self.qubits: int = info.qubits
        self.batch: int = info.batch or 1
        dim = 1 << self.qubits
        self.shape: Tuple[int, ...] = (self.batch, dim) if batched else (dim,)
        self._reply = info  # the reply's StateInfo message, made a record when asked for
        self._first: Optional[StateInfo] = None
        self._released = False
        self._released_how = ""
        self._finalizer: Optional[weakref.finalize] = None
        if owned:
            # Collected: released on the connection's own thread (Connection.later).
            self._finalizer = weakref.finalize(
                self, owner.conn.later,
                functools.partial(owner.conn.release_quietly, self.handle, self.token))

    def __repr__(self) -> str:
        state = "released" if self._released else "resident"
        return (f"<qdp.State {self.handle} {self.encoding} qubits={self.qubits} "
                f"batch={self.batch} {self.dtype} {state}>")

    @property
    def _first_info(self) -> StateInfo:
        """The state as the reply that made it described it (its shards' devices)."""
        if self._first is None:
            self._first = StateInfo.from_proto(self._reply)
        return self._first

    def _ref(self) -> Any:
        if self._released:
            raise NotFound(f"state {self.handle} {self._released_how}", field="state", hint="")
        return self._owner.conn.wire.StateRef(handle=self.handle, token=self.token)

    @property
    def released(self) -> bool:
        """Whether :meth:`release` has run."""
        return self._released

    @property
    def size(self) -> int:
        """Amplitudes in the whole state (batch * 2**qubits)."""
        return self.batch << self.qubits

    @property
    def info(self) -> StateInfo:
        """Its description and layout, asked of the daemon now (Describe)."""
        conn = self._owner.conn
        req = conn.wire.DescribeRequest(handle=self.handle, token=self._ref().token)
        return StateInfo.from_proto(conn.call("Describe", req))

    def numpy(self, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The amplitudes, fetched into one array allocated up front.

        Parameters
        ----------
        out : numpy.ndarray, optional
            A C-contiguous array of :attr:`size` elements of the state's dtype to fill (by the
            streamed Fetch).

        Returns
        -------
        numpy.ndarray
            Of :attr:`shape` and the state's dtype (complex64 or complex128); qubit k is bit k
            of the amplitude index.

        Notes
        -----
        On the daemon's node, a daemon with FetchInto writes the amplitudes straight into shared
        memory that becomes the returned array (no copy); otherwise they are streamed (Fetch) in
        order, each chunk copied once to its place in an array allocated up front. The client
        keeps that shared memory registered once the array and every view of it are gone, for the
        next fetch of about its size, within ``region_cache_bytes`` (see :class:`Client`); it
        never writes into memory a live array shows.
        """
        dt = NUMPY_DTYPES[self.dtype]
        ref = self._ref()
        if out is None:
            return self._owner.fetcher.fetch(ref, self.size, dt).reshape(self.shape)
        if out.dtype != dt or out.size != self.size or not out.flags.c_contiguous:
            raise error_for("INVALID_ARGUMENT", f"out must be a C-contiguous {self.dtype} "
                            f"array of {self.size} elements, not {out.dtype} {out.shape}",
                            field="out")
        self._owner.fetcher.stream(ref, out.reshape(-1), 0)
        return out

    def probabilities(self, qubits: Optional[Sequence[int]] = None) -> np.ndarray:
        """The probabilities of a measurement in the computational basis, computed where the
        state is.

        Parameters
        ----------
        qubits : sequence of int, optional
            The qubits measured (at most 10, each once): outcome m has bit j equal to the value
            of qubit ``qubits[j]``. By default every qubit, each basis state's probability.

        Returns
        -------
        numpy.ndarray
            float64, ``(2**k,)`` for one sample or ``(batch, 2**k)`` for a batch (k the qubits
            measured); every row sums to 1 within rounding.

        Raises
        ------
        InvalidArgument
            A qubit the state does not have, one named twice, or more than 10 (field "qubits").

        Notes
        -----
        The sums run in double precision over blocks along one fixed tree: the same bits
        however the state is sharded. Probabilities of up to 4 MiB come back in the reply;
        larger ones are written by the daemon into shared memory that becomes the array.
        """
        req = self._owner.conn.wire.MeasureRequest(measurement=1)  # PROBABILITIES
        req.state.CopyFrom(self._ref())
        qs = [] if qubits is None else [_qubit(q) for q in qubits]
        req.qubits.extend(qs)
        cols = 1 << (len(qs) if qs else self.qubits)
        return self._measured(req, cols)

    def expectations(self, paulis: Union[str, Sequence[str]]) -> np.ndarray:
        """Expectation values <psi|P|psi> of Pauli strings, computed where the state is.

        Parameters
        ----------
        paulis : str or sequence of str
            One letter per qubit, I, X, Y or Z, letter k acting on qubit k: "ZI" is Z on qubit
            0 of a 2-qubit state.

        Returns
        -------
        numpy.ndarray
            float64, ``(len(paulis),)`` for one sample or ``(batch, len(paulis))`` for a batch.
            One string (not in a list) drops the strings' axis: a 0-d array for one sample
            (``float(s.expectations("ZI"))``), ``(batch,)`` for a batch.

        Raises
        ------
        InvalidArgument
            A string of the wrong length or with another letter (field "paulis").

        Notes
        -----
        Strings of Z and I read the state once together; each other X pattern reads it once
        more. Summed in double precision along one fixed tree: the same bits however the state
        is sharded.
        """
        one = isinstance(paulis, str)
        strings = [paulis] if one else list(paulis)
        if not strings or not all(isinstance(p, str) for p in strings):
            raise InvalidArgument("paulis: pass a Pauli string ('ZI') or a list of them",
                                  field="paulis")
        req = self._owner.conn.wire.MeasureRequest(measurement=2)  # EXPECTATIONS
        req.state.CopyFrom(self._ref())
        req.paulis.extend(strings)
        out = self._measured(req, len(strings))
        return out[..., 0] if one else out

    def sample(self, shots: int, seed: int = 0) -> np.ndarray:
        """Basis states drawn by their probabilities, where the state is.

        Parameters
        ----------
        shots : int
            Draws per sample, at least 1 (2**24 in all at most).
        seed : int
            Shot i of sample r is drawn with a number that is a function of (seed, r, i) alone:
            the same seed gives the same samples however the state is sharded.

        Returns
        -------
        numpy.ndarray
            int64 basis-state indices (qubit k is bit k), ``(shots,)`` for one sample or
            ``(batch, shots)`` for a batch.

        Raises
        ------
        InvalidArgument
            shots out of range (field "shots"), a seed that is not an unsigned 64-bit number
            ("seed"), a state of more than 38 qubits ("state").

        Notes
        -----
        Each draw is found by a search down the fixed tree of the state's sums, 2**10 children
        at a time, reading at each level only the ranges some draw falls in.
        """
        if isinstance(shots, bool) or not isinstance(shots, (int, np.integer)) or shots < 1:
            raise InvalidArgument(f"shots: {shots!r} is not a count of draws (1, 2, ...)",
                                  field="shots")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
                not 0 <= seed < 1 << 64:
            raise InvalidArgument(f"seed: {seed!r} is not an unsigned 64-bit number",
                                  field="seed")
        req = self._owner.conn.wire.MeasureRequest(measurement=3, shots=int(shots),
                                                   seed=int(seed))  # SAMPLES
        req.state.CopyFrom(self._ref())
        return self._measured(req, int(shots), np.dtype("<i8"))

    def _measured(self, req: Any, cols: int, dtype: np.dtype = np.dtype("<f8")) -> np.ndarray:
        out = self._owner.fetcher.computed("Measure", req, (self.batch, cols), dtype)
        return out if len(self.shape) == 2 else out.reshape(cols)

    def kernel(self, other: Optional["State"] = None, *, overlaps: bool = False,
               out: Any = None) -> Any:
        """The kernel matrix of this state's samples with themselves or with ``other``'s,
        computed where their shards are: :meth:`Client.kernel` of ``(self, other)``.

        Parameters
        ----------
        other : State, optional
            The columns' states, of the same qubits and dtype; by default this state itself
            (the symmetric case, each pair computed once).
        overlaps : bool
            Return the complex overlaps <a_i|b_j> instead of the fidelities |<a_i|b_j>|^2.
        out : torch.Tensor, optional
            A CUDA tensor the daemon writes the matrix into, as :meth:`Client.kernel` takes it.

        Returns
        -------
        numpy.ndarray or out
            Of shape ``(self.batch, other.batch)``: float64 fidelities (float32 for complex64
            states), or complex overlaps of the states' dtype; with ``out``, ``out``.

        Raises
        ------
        InvalidArgument
            ``other`` not a State, or of other qubits or dtype (field "other").
        NotFound
            A state released or unknown.
        """
        if other is not None:
            self._check_pair(other)
        return self._owner.kernel(self, other, overlaps, out)

    def fidelity(self, other: "State") -> float:
        """|<self|other>|^2 of two single states, computed where they are.

        Parameters
        ----------
        other : State
            One sample of the same qubits and dtype.

        Returns
        -------
        float
            In [0, 1] within rounding (of float32 for complex64 states).

        Raises
        ------
        InvalidArgument
            This state or ``other`` a batch of several samples (field "state" or "other": use
            :meth:`kernel` for a batch), or ``other`` not a State of the same qubits and dtype
            ("other").
        """
        self._check_single(other, "fidelity")
        return float(self._owner.kernel(self, other, False)[0, 0])

    def inner(self, other: "State") -> complex:
        """The inner product <self|other> of two single states, computed where they are.

        Parameters
        ----------
        other : State
            One sample of the same qubits and dtype.

        Returns
        -------
        complex
            Conjugate-linear in this state: ``self.inner(other)`` is the conjugate of
            ``other.inner(self)``.

        Raises
        ------
        InvalidArgument
            As :meth:`fidelity`.
        """
        self._check_single(other, "inner")
        return complex(self._owner.kernel(self, other, True)[0, 0])

    def _check_pair(self, other: Any) -> None:
        """Refuses an ``other`` that cannot pair with this state in a kernel (field "other")."""
        if not isinstance(other, State):
            raise InvalidArgument(f"other is a {type(other).__name__}, not a qdp.State: encode "
                                  "it first (Client.encode)", field="other")
        if (other.qubits, other.dtype) != (self.qubits, self.dtype):
            raise InvalidArgument(f"other is {other.qubits} qubits of {other.dtype} but this "
                                  f"state is {self.qubits} qubits of {self.dtype}: a kernel "
                                  "pairs states of the same qubits and dtype; encode both alike",
                                  field="other")

    def _check_single(self, other: Any, what: str) -> None:
        """Refuses a pair for ``what`` that is not two single states."""
        self._check_pair(other)
        for st, field in ((self, "state"), (other, "other")):
            if st.batch != 1:
                raise InvalidArgument(f"{field} {st.handle} is a batch of {st.batch} samples, "
                                      f"but State.{what} pairs two single states: use "
                                      "State.kernel(other) for every pair of two batches",
                                      field=field)

    def torch(self, device: Optional[str] = None, writable: bool = False) -> Any:
        """The amplitudes as a torch tensor (torch is imported only here).

        Parameters
        ----------
        device : str, optional
            Where the tensor should live ("cpu", "cuda:0"). On a CPU daemon, or with "cpu", the
            tensor is ``torch.from_numpy(self.numpy())`` (moved to ``device`` when one is
            given). On a GPU daemon by default it is a view of the state's memory in place (one
            shard) or its shards copied device to device into one tensor (several).
        writable : bool, default False
            A tensor over the state's memory in place that may be written, under the state's
            write lease (see :meth:`shards`): a state of one shard on a GPU only. The lease ends
            when the tensor and every tensor sharing its memory are collected (``del t``); the
            client's next call sees it ended, after this process's work on the device is done.

        Returns
        -------
        torch.Tensor
            complex64 or complex128, of :attr:`shape`.

        Raises
        ------
        NotSupported
            For a state on GPUs that cannot be viewed from here (see :meth:`shards`), and with
            ``writable`` on the CPU backend or for a state of several shards (use
            ``shards(writable=True)``).
        FailedPrecondition
            With ``writable``, while another lease is open or a call reads the state.
        """
        try:
            import torch
        except ImportError:
            raise NotSupported("State.torch needs PyTorch: pip install torch") from None
        on_gpu = any(s.device.startswith("cuda") for s in self._first_info.shards)
        if writable:
            if not on_gpu:
                raise NotSupported("a writable tensor is the state's memory in place, which "
                                   "only a GPU daemon on this node can lend; this state is in "
                                   "host memory: encode again with your changes, or use "
                                   "State.numpy()")
            if len(self._first_info.shards) != 1:
                raise NotSupported(f"state {self.handle} has {len(self._first_info.shards)} "
                                   "shards, and one tensor in place covers one: use "
                                   "State.shards(writable=True), a view per shard")
            views = self.shards(writable=True)
            first = f"cuda:{views[0].ordinal}"
            if device is not None and torch.device(device) != torch.device(first):
                views[0].close()
                raise InvalidArgument(f"device={device!r}: the state lies on {first} here, and "
                                      "a writable tensor is its memory in place",
                                      field="device")
            return torch.as_tensor(views[0], device=first).reshape(self.shape)
        if on_gpu and (device is None or str(device).startswith("cuda")):
            return self._tensor(device)
        t = torch.from_numpy(self.numpy())
        return t if device is None or str(device) == "cpu" else t.to(device)

    def shards(self, writable: bool = False) -> List[_views.ShardView]:
        """Zero-copy views of every shard of a state on GPUs, one lease for all: each shard's
        memory as a descriptor the daemon hands over on its socket (across PID namespaces, so
        from inside a container too), or a legacy daemon's CUDA IPC handle.

        Parameters
        ----------
        writable : bool, default False
            Views that may be written, under the state's exclusive write lease: it opens only
            while no other view of the state is open and no call reads it, and until it ends
            the daemon reads none of the state's amplitudes (``numpy()``, kernels and
            measurements raise FailedPrecondition naming the lease). The amplitudes are
            complete when this returns; closing the views waits for this process's work on
            their devices, so every later read sees what was written. The state is marked
            :attr:`qdp.StateInfo.written` for good.

        Returns
        -------
        list of ShardView
            Each with ``__cuda_array_interface__`` (so ``torch.as_tensor(view, device=...)`` or
            ``cupy.asarray(view)`` use it in place) and its :class:`~qdp.records.Shard` layout;
            close them (or use ``with``) to end the lease, which also ends with this process.

        Raises
        ------
        NotSupported
            On the CPU backend (host memory has no views), or without a CUDA runtime here.
        FailedPrecondition
            With ``writable``, while another lease is open or a call reads the state (the
            message says which); without it, while a write lease is open.
        """
        return _views.open_views(self._owner.conn, self.handle, self.token, self.dtype,
                                 writable=bool(writable))

    def _tensor(self, device: Optional[str]) -> Any:
        """The whole state as one torch tensor on a GPU (see :func:`qdp._views.as_tensor`)."""
        return _views.as_tensor(self.shards(), self.batch, self.qubits, self.shape, self.dtype,
                                device)

    def _gpu_shards(self) -> List[Any]:
        return [s for s in self._first_info.shards if s.device.startswith("cuda")]

    def __dlpack_device__(self) -> Tuple[int, int]:
        """The DLPack device of :meth:`__dlpack__`: ``(2, ordinal)`` (kDLCUDA and this process's
        ordinal of the state's GPU) for a state on one GPU, ``(1, 0)`` (kDLCPU) on the CPU
        backend.

        Raises
        ------
        NotSupported
            For a state sharded over several GPUs (see :meth:`__dlpack__`).
        """
        shards = self._gpu_shards()
        if not shards:
            return (_DL_CPU, 0)
        self._single_gpu(shards)
        return (_DL_CUDA, _cuda.runtime().device_of_uuid(shards[0].uuid))

    def _single_gpu(self, shards: List[Any]) -> None:
        if len(shards) > 1:
            raise NotSupported(f"state {self.handle} is sharded over {len(shards)} GPU pieces "
                               "and DLPack describes one buffer: use State.shards() for a view "
                               "of each, or State.torch(device='cuda:N') to gather them")

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule of the amplitudes, so ``torch.from_dlpack(state)``,
        ``cupy.from_dlpack(state)`` and ``numpy.from_dlpack(state)`` work.

        On a GPU daemon (a state on one GPU) the capsule describes the state's memory in place,
        mapped here (:meth:`shards`): it is built by torch from the view's
        ``__cuda_array_interface__`` (by CuPy when torch is absent), and the capsule holds that
        tensor, hence the view and its lease, until the consumer frees it. ``stream`` (and any
        newer DLPack keyword: ``max_version``, ``dl_device``, ``copy``) goes to that producer.

        On the CPU backend there is no memory to share: the capsule is NumPy's, of a fresh
        :meth:`numpy` copy (which the consumer then owns); ``copy=False`` is refused.

        Raises
        ------
        NotSupported
            For a state sharded over several GPUs: use :meth:`shards` or
            ``torch(device=...)``; on a GPU daemon with neither torch nor CuPy here.
        BufferError
            ``copy=False`` on the CPU backend.
        """
        shards = self._gpu_shards()
        if not shards:
            if kwargs.get("copy") is False:
                raise BufferError(f"state {self.handle} is in the daemon's host memory: DLPack "
                                  "can only give a copy (State.numpy())")
            kwargs.pop("copy", None)
            kwargs.pop("dl_device", None)
            arr = self.numpy()
            try:
                return arr.__dlpack__(stream=stream, **kwargs)
            except TypeError:
                if not kwargs:
                    raise
                return arr.__dlpack__(stream=stream)  # NumPy before 2.0: no max_version
        self._single_gpu(shards)
        try:
            import torch  # noqa: F401
        except ImportError:
            try:
                import cupy
            except ImportError:
                raise NotSupported("State.__dlpack__ of a GPU state needs PyTorch or CuPy here "
                                   "(pip install torch); or use State.shards()") from None
            views = self.shards()
            with cupy.cuda.Device(views[0].ordinal):
                arr = cupy.asarray(views[0]).reshape(self.shape)  # holds the view: the lease
            return arr.__dlpack__(stream=stream, **kwargs)
        t = self._tensor(None)  # the view in place; the tensor holds the lease
        return t.__dlpack__(stream=stream, **kwargs)

    def gather(self, device: Union[str, int], *, ttl: Optional[float] = None,
               label: str = "") -> "State":
        """A copy of the whole state on one device, as a new state (Gather): one piece for a
        consumer of a state sharded over several devices. This state stays as it is.

        Parameters
        ----------
        device : str or int
            The device that receives it, as :meth:`Client.status` lists it ("cuda:0", "cpu:1"),
            or its index in that list ("0").
        ttl : float, optional
            Seconds the new state lives unless released, as for :meth:`Client.encode`.
        label : str
            Free text kept with the new state.

        Returns
        -------
        State
            The new state, released like those :meth:`Client.encode` makes (by its client's
            close too).

        Raises
        ------
        InvalidArgument
            An unknown device, or a ttl that is not seconds > 0 (``field``).
        ResourceExhausted
            The device or the caller's budget has no room for the copy.

        Warns
        -----
        TtlCappedWarning
            The ttl asked for is above the daemon's max_ttl, which the new state got instead.
        """
        if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
            device = str(device)
        if not isinstance(device, str) or not device:
            raise InvalidArgument("device must name one of the daemon's devices ('cuda:0', or "
                                  f"its index in Client.status().devices), not {device!r}",
                                  field="device")
        conn = self._owner.conn
        req = conn.wire.GatherRequest(device=device, ttl_seconds=ttl_seconds(ttl), label=label)
        req.state.CopyFrom(self._ref())

        def gather(sid: str) -> Any:
            req.session = sid
            return conn.call("Gather", req)
        reply = conn.in_session(gather)
        return self._owner.adopt(reply.state, len(self.shape) == 2, ttl)

    def release(self) -> None:
        """Frees the state on the daemon now. Idempotent; a state already gone (expired, or
        released by another holder of its token) is not an error. (A state that is collected
        unreleased is released on its client's own thread, before the client's next call.)"""
        self._release(closed=False)

    def _release(self, closed: bool) -> None:
        """:meth:`release`, remembering whether its client's close did it (for later errors)."""
        if self._released:
            return
        self._released = True
        self._released_how = _CLOSED if closed else _RELEASED
        if self._finalizer is not None:
            self._finalizer.detach()
        conn = self._owner.conn
        try:
            conn.call("Release", conn.wire.StateRef(handle=self.handle, token=self.token))
        except Exception as e:
            if getattr(e, "status", "") != "NOT_FOUND":
                raise

    def __enter__(self) -> "State":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _qubit(q: Any) -> int:
    """A qubit number as the wire takes it; InvalidArgument for anything but a non-negative int."""
    if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or q < 0 or q >= 1 << 32:
        raise InvalidArgument(f"qubits: {q!r} is not a qubit number (0, 1, ...)", field="qubits")
    return int(q)


class Owner:
    """What the states of one Client need of it: its connection (calls, the wire, views), its
    fetcher of amplitudes, and the set of its states alive, which the Client releases when it
    closes. The Client makes one; each of its states holds it, never the Client.

    Parameters
    ----------
    conn : Connection
        The client's connection.
    fetcher : Fetcher
        Its fetches into this process.
    """

    def __init__(self, conn: Connection, fetcher: Fetcher) -> None:
        self.conn = conn
        self.fetcher = fetcher
        self.states: "weakref.WeakSet[State]" = weakref.WeakSet()

    def kernel(self, a: State, b: Optional[State], overlaps: bool, out: Any = None) -> Any:
        """The Kernel call of :meth:`Client.kernel` and :meth:`State.kernel`: the matrix of
        ``a``'s samples against ``b``'s (``a``'s own when None), as :meth:`Client.kernel`
        returns it (into ``out``, a CUDA tensor, when given)."""
        req = self.conn.wire.KernelRequest(overlaps=bool(overlaps))
        req.a.CopyFrom(a._ref())
        if b is not None:
            req.b.CopyFrom(b._ref())
        return self.matrix(req, a.dtype, overlaps, (a.batch, (a if b is None else b).batch), out)

    def matrix(self, req: Any, states: str, overlaps: bool, shape: Tuple[int, int],
               out: Any) -> Any:
        """A Kernel request's matrix of ``shape`` for states of dtype ``states``: into ``out`` (a
        CUDA tensor) when given, else as :meth:`Fetcher.computed` returns it."""
        name = states if overlaps else "float32" if states == "complex64" else "float64"
        if out is not None:
            dst = _ipc.CudaOutput(out, _ipc.MATRIX_DTYPES, "the kernel matrix")
            dst.fill_matrix(req, name, shape[0], shape[1])
            try:
                self.conn.call("Kernel", req)
            except FailedPrecondition as e:
                if e.field in ("out", "out.device_uuid"):
                    raise NotSupported(f"out=: {e.message}", field=e.field) from None
                raise
            return out
        return self.fetcher.computed("Kernel", req, shape, NUMPY_DTYPES[name])

    def adopt(self, info: Any, batched: bool, ttl: Optional[float],
              outlive: bool = False) -> State:
        """The State of a reply's new state, released with the client (unless it was made to
        ``outlive`` it: then only by its release or its ttl); warns (from the caller's caller)
        when the daemon gave it a shorter lifetime than ``ttl``."""
        st = State(self, info, batched=batched, owned=not outlive)
        if not outlive:
            self.states.add(st)
        if info.ttl_capped:
            try:
                warnings.warn(TtlCappedWarning(
                    f"state {info.handle}: ttl={ttl!r} s was asked for, but the daemon's "
                    f"max_ttl gave it {info.ttl_seconds} s; release it within that, or have "
                    "max_ttl raised"), stacklevel=3)
            except BaseException:  # warnings as errors: the state is refused, so freed
                st.release()
                raise
        return st

