"""qdp.torch: a data set's rows, encoded by qdpd batch after batch, as torch tensors for a training
loop, on every rank of a DDP job and every DataLoader worker.

    import qdp.torch
    ds = qdp.torch.QuantumDataset("train.parquet", "angle", 16, batch_size=64, shuffle=True)
    batches = qdp.torch.loader(ds, num_workers=2)  # its workers stay from one epoch to the next
    for epoch in range(3):
        ds.set_epoch(epoch)
        for psi in batches:                        # (64, 65536) complex128, on this rank's GPU
            ...

:func:`encode` is :func:`qdp.encode` as a torch autograd function: a classical layer that feeds
an encoding trains through it.

The epoch's order is :class:`qdp.sampling.BlockOrder` of (seed, epoch) alone, dealt to ranks and
workers by :class:`qdp.sampling.Shares`: the same global sequence of batches whatever the world
size, every row once per epoch. Sources are those of :func:`qdp.readers.open_source`.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import multiprocessing
import multiprocessing.util
import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from ._autograd import encode
from .client import Client
from .errors import Error, InvalidArgument, NotSupported
from .readers import Source, open_source
from .sampling import BlockOrder, Shares

__all__ = ["QuantumDataset", "loader", "encode"]

_COMPLEX = {"complex64": torch.complex64, "complex128": torch.complex128}


def _rank_world(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """The job's rank and size: as given, else torch.distributed's when it is initialised, else
    a job of one."""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise InvalidArgument("give rank and world_size together (or neither, to take "
                                  "torch.distributed's)", field="rank")
        if not 0 <= rank < world_size:
            raise InvalidArgument(f"rank {rank} is not in [0, {world_size})", field="rank")
        return rank, world_size
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class QuantumDataset(IterableDataset):
    """Batches of encoded samples, streamed from qdpd: an ``IterableDataset`` of complex tensors.

    Parameters
    ----------
    source : array, tensor, path or iterable
        The rows (one sample per row): anything :func:`qdp.readers.open_source` opens (NumPy
        array, CPU tensor, ``.npy``, Parquet, Arrow IPC/Feather, ``.pt``, CSV, an iterable of
        arrays).
    encoding : str
        An encoding's name, as :meth:`qdp.Client.encode` takes it (its Notes give each one's
        values per sample and state).
    qubits : int
        Qubits per sample.
    batch_size : int
        Samples per batch (the last of an epoch may be short unless ``drop_last``).
    dtype : str
        "complex128" or "complex64".
    device : str or torch.device, optional
        Where the batches are delivered: a CUDA device of a GPU daemon (each batch written by
        the daemon straight into a fresh tensor there, ``encode(..., out=)``), or "cpu" (fetched
        into host memory). Default: this process's current CUDA device when torch sees one and
        the daemon has GPUs, else the CPU.
    prefetch : int
        Requests to the daemon kept in flight (each of ``group`` batches), on as many threads,
        while the consumer works on the batches already delivered; 0 sends each request when
        its first batch is asked for.
    group : int, optional
        Batches per request. The daemon's cost per request is about half a millisecond
        whatever its size, so batches of small inputs are asked for together: by default as
        many as keep a request within 2 GiB of states (and 1/64 of the memory of the GPU, or
        of the host, they land in) and 8 MiB of input (at most 64), one for large inputs.
        Each batch is still its own tensor (a view of its request's), and on a GPU the
        batches in flight hold about ``(prefetch + 1) * group`` batches' states.
        An iteration's first requests carry 1, 2, 4, ... batches, so that its first batch
        comes as soon as one batch is encoded.
    shuffle : bool
        A new order every epoch (:meth:`set_epoch`), a keyed permutation of (seed, epoch); files
        are permuted by whole blocks (row groups), then rows within a block.
    seed : int
        The permutation's key: the same on every rank (draw it once and broadcast it).
    drop_last : bool
        Drop the epoch's final short batch.
    even_batches : bool, optional
        Give every rank the same number of batches (DDP's all-reduce needs equal steps); default
        True when the job has more than one rank.
    rank, world_size : int, optional
        This process's share of the job; default torch.distributed's when initialised.
    target : str, optional
        The daemon (see :class:`qdp.Client`); each iterator opens its own channel, so the data
        set can go to DataLoader worker processes.
    columns : sequence of str, optional
        For tables: the feature columns (see :func:`qdp.readers.open_source`).
    null_policy : str
        For tables: "error", "zero" or "skip".
    labels : array or tensor, optional
        One target per row (any dtype torch takes): each batch is then ``(states, targets)``,
        the targets of the same rows in the same order. Needs a source of known length.

    Notes
    -----
    Each yielded tensor is the caller's own: nothing in it is reused for a later batch. On a
    GPU, the daemon writes the batches into tensors allocated on the loader's own streams, and
    each is marked as used on the consumer's current stream when it is yielded (so its memory
    is not taken again before the work queued there is done); a model's queued steps never
    hold the loader up. Input rows reach the daemon with one copy: from the source into shared
    memory the daemon reads in place, or, for an array in memory read in order onto a GPU,
    straight from the array (pinned in place while the data set's channel is open) into GPU
    memory by DMA. States on a GPU never come back through the host.
    """

    def __init__(self, source: Any, encoding: str, qubits: int, *, batch_size: int = 64,
                 dtype: str = "complex128", device: Any = None, prefetch: int = 2,
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 even_batches: Optional[bool] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None, target: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, null_policy: str = "error",
                 labels: Any = None, group: Optional[int] = None) -> None:
        super().__init__()
        if dtype not in _COMPLEX:
            raise InvalidArgument(f"dtype {dtype!r}: use 'complex64' or 'complex128'",
                                  field="dtype")
        for name, value, low in (("batch_size", batch_size, 1), ("prefetch", prefetch, 0),
                                 ("group", 1 if group is None else group, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidArgument(f"{name} must be an integer >= {low}, not {value!r}",
                                      field=name)
        self.source: Source = source if isinstance(source, Source) else open_source(
            source, columns=columns, null_policy=null_policy)
        if shuffle and self.source.rows is None:
            raise NotSupported("shuffle needs a source with random access (an array or a "
                               "file), not an iterable: pass shuffle=False")
        self.encoding, self.qubits, self.dtype = encoding, int(qubits), dtype
        self.batch_size, self.prefetch = batch_size, prefetch
        self._row_bytes = self.source.features * self.source.dtype.itemsize
        self._state_bytes = (1 << self.qubits) * (16 if dtype == "complex128" else 8)
        self._group_given = group is not None
        self.group = group if group is not None else _default_group(
            batch_size, self._row_bytes, self._state_bytes)
        self.device = torch.device(device) if device is not None else None
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.rank, self.world_size = _rank_world(rank, world_size)
        self.even_batches = self.world_size > 1 if even_batches is None else even_batches
        self.target = target
        self._conn: Optional[_Conn] = None
        self._conn_finalizer: Optional[weakref.finalize] = None
        self.labels = None if labels is None else torch.as_tensor(labels)
        if self.labels is not None and (self.source.rows is None or
                                        len(self.labels) != self.source.rows):
            raise InvalidArgument(f"labels has {len(self.labels)} entries for a source of "
                                  f"{self.source.rows} rows: give one per row (and a source of "
                                  "known length)", field="labels")
        self.epoch = 0
        # The epoch again, in shared memory, for DataLoader workers kept from one epoch to the
        # next: their copy of the data set was made when they started. torch hands the tensor to
        # the processes it starts as the same memory; a pickled or deep copy gets its own.
        self._epoch_shared = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._began_in: Optional[int] = None  # the worker process whose first iteration began

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (its shuffled order), as DistributedSampler's: call
        it before the iteration begins (``for ... in loader``). DataLoader workers see it,
        persistent ones too.

        Raises
        ------
        InvalidArgument
            ``epoch`` is not an integer in [0, 2**64).
        """
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or \
                not 0 <= epoch < 1 << 64:
            raise InvalidArgument(f"epoch is {epoch!r}: pass an integer in [0, 2**64)",
                                  field="epoch")
        self.epoch = int(epoch)
        self._epoch_shared[0] = self.epoch - (1 << 64) if self.epoch >> 63 else self.epoch

    def _epoch_now(self, in_worker: bool) -> int:
        """The epoch of an iteration that begins now. In a DataLoader worker, the first
        iteration reads the epoch its copy of the data set was made with (at the worker's start,
        when the main process began that iteration), a persistent worker's later ones the epoch
        set last in the main process."""
        if not in_worker:
            return self.epoch
        if self._began_in != os.getpid():
            self._began_in = os.getpid()
            return self.epoch
        return int(self._epoch_shared[0]) % (1 << 64)  # the int64 holds the epoch's 64 bits

    def _shares(self, workers: int) -> Shares:
        rows = self.source.rows
        if rows is None:
            raise TypeError("an iterable source has no length until it is read")
        return Shares(rows, self.world_size, workers, self.batch_size, self.drop_last,
                      self.even_batches)

    def __len__(self) -> int:
        """Batches this rank yields in an epoch (over all its DataLoader workers)."""
        return self._shares(1).steps(self.rank)

    def _batches(self, worker: int, workers: int, epoch: int) -> Iterator["_Batch"]:
        """This (rank, worker)'s batches of ``epoch``, in order."""
        src = self.source
        if src.rows is None:  # a stream: every share reads it all and keeps its own batches
            k = 0
            for rows in _rebatch(src.iter_blocks(), self.batch_size, self.drop_last):
                if k % self.world_size == self.rank and \
                        (k // self.world_size) % workers == worker:
                    yield _Batch(len(rows), None,
                                 lambda out, rows=rows: np.copyto(out, rows.reshape(out.shape)))
                k += 1
            return
        shares = self._shares(workers)
        order = BlockOrder(src.rows, src.block_rows if self.shuffle else 1, seed=self.seed,
                           epoch=epoch, shuffle=self.shuffle)
        hinted = -1
        for k in shares.batch_indices(self.rank, worker):
            start, stop = shares.span(k)
            if self.shuffle:
                if getattr(src, "readahead", 0) and start // src.block_rows != hinted:
                    hinted = start // src.block_rows
                    self._hint(order, start)
                idx = order.at(np.arange(start, stop, dtype=np.int64))
                yield _Batch(stop - start, idx, lambda out, idx=idx: src.take(idx, out=out))
            else:
                yield _Batch(stop - start, slice(start, stop),
                             lambda out, a=start, b=stop: src.read(a, b, out=out))

    def _hint(self, order: BlockOrder, start: int) -> None:
        """Names to a file source the blocks a shuffled epoch reads from position ``start`` on
        (its own and the next ``readahead``), so they decode ahead: the epoch goes through the
        file block by block in a permuted order, where the reader's own guess (the blocks
        after) would be wrong."""
        src = self.source
        pos = np.arange(start, min(src.rows, start + (src.readahead + 1) * src.block_rows),
                        src.block_rows, dtype=np.int64)
        blocks = src.block_of(order.at(pos))
        _, first = np.unique(blocks, return_index=True)
        src.will_need(blocks[np.sort(first)].tolist())

    def __iter__(self) -> Iterator[Any]:
        """An epoch's batches; its epoch is fixed here, when the iteration begins."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self._iterate(worker, workers, self._epoch_now(info is not None))

    def _iterate(self, worker: int, workers: int, epoch: int) -> Iterator[Any]:
        conn = self._conn_for(worker)
        if not conn.lock.acquire(blocking=False):  # another iteration of this process runs
            conn = _Conn(self, worker)
        try:
            yield from _Stream(self, conn, worker, workers, epoch)
        finally:
            if conn is self._conn:
                conn.lock.release()
            else:
                conn.close()

    def _conn_for(self, worker: int) -> "_Conn":
        """This process's channel and shared-memory slots, kept from one epoch to the next
        (opening them costs milliseconds: registering a slot pins its pages); a process of its
        own (a DataLoader worker) opens its own."""
        if self._conn is None or self._conn.pid != os.getpid():
            self._conn = _Conn(self, worker)
            self._conn_finalizer = weakref.finalize(self, self._conn.close)
            if get_worker_info() is not None:
                # A forked worker leaves by os._exit, past atexit and so past weakref.finalize:
                # multiprocessing's exit hooks close the channel then, else its slots would stay
                # registered on the daemon for its lease grace.
                multiprocessing.util.Finalize(self, self._conn.close, exitpriority=0)
        return self._conn

    def close(self) -> None:
        """Closes this process's channel to the daemon and gives its slots back (also done when
        the data set is garbage collected). Idempotent; a later iteration opens them again."""
        if self._conn is not None and self._conn.pid == os.getpid():
            self._conn.close()
        self._conn = None

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["_conn"] = d["_conn_finalizer"] = None  # a channel never crosses processes
        return d

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        # A worker's copy maps the main process's epoch already (a no-op then); a copy made
        # by pickle or deepcopy holds its own and shares it with the workers it starts.
        self._epoch_shared.share_memory_()


def _rebatch(blocks: Iterator[np.ndarray], size: int, drop_last: bool) -> Iterator[np.ndarray]:
    """Blocks of any length regrouped into batches of ``size`` rows."""
    held: List[np.ndarray] = []
    have = 0
    for b in blocks:
        while len(b):
            take = min(size - have, len(b))
            held.append(b[:take])
            have += take
            b = b[take:]
            if have == size:
                yield np.concatenate(held) if len(held) > 1 else held[0]
                held, have = [], 0
    if have and not drop_last:
        yield np.concatenate(held)


#: A request's default bounds (``group``): its states (and on a GPU at most this share of
#: its memory), and its input rows. A request of 1024 angle states of 16 qubits in complex64
#: (512 MiB) spends about as long in the daemon's fixed costs as in its kernel; 4096 (2 GiB)
#: twice the rate on an H200.
GROUP_STATE_BYTES = 2 << 30
GROUP_DEVICE_SHARE = 64
GROUP_INPUT_BYTES = 8 << 20
GROUP_MAX = 64
#: Requests whose input is at least this large are copied onto the GPU by this process from an
#: in-memory array pinned in place; smaller ones go through shared memory, which costs less
#: than a copy and an IPC handle.
DIRECT_INPUT_BYTES = 1 << 20


def _default_group(batch_size: int, row_bytes: int, state_bytes: int,
                   device_bytes: Optional[int] = None) -> int:
    states = GROUP_STATE_BYTES if device_bytes is None else min(
        GROUP_STATE_BYTES, device_bytes // GROUP_DEVICE_SHARE)
    return max(1, min(GROUP_MAX, states // max(1, batch_size * state_bytes),
                      GROUP_INPUT_BYTES // max(1, batch_size * row_bytes)))


class _Batch:
    """One batch of a share: its rows (``m``), their indices in the source (an int64 array
    when shuffled, a slice in order, None for a stream) and how to copy them into a slot."""

    __slots__ = ("m", "idx", "fill")

    def __init__(self, m: int, idx: Any, fill: Callable[[np.ndarray], Any]) -> None:
        self.m, self.idx, self.fill = m, idx, fill


def _span(req: List[_Batch]) -> Optional[slice]:
    """The rows of ``req`` as one slice of the source when its batches follow each other in
    order, else None."""
    first, last = req[0].idx, req[-1].idx
    if not isinstance(first, slice) or not isinstance(last, slice):
        return None
    for a, b in zip(req, req[1:]):
        if not isinstance(b.idx, slice) or b.idx.start != a.idx.stop:
            return None
    return slice(first.start, last.stop)


class _Pinned:
    """An in-memory source array registered with the CUDA driver (pinned in place), so that
    batches read in order are copied from it onto the GPU by DMA; None where it cannot be."""

    def __init__(self, array: np.ndarray) -> None:
        self.tensor, self.ptr, self.owned = torch.from_numpy(array), array.ctypes.data, False
        rc = int(torch.cuda.cudart().cudaHostRegister(self.ptr, array.nbytes, 0))
        if rc == 712:  # cudaErrorHostMemoryAlreadyRegistered: pinned by its owner already
            return
        if rc != 0:
            raise OSError(rc, f"cudaHostRegister of {array.nbytes} bytes: CUDA error {rc}")
        self.owned = True

    @staticmethod
    def of(src: Source) -> Optional["_Pinned"]:
        array = src.in_memory()
        if array is None or not array.nbytes:
            return None
        try:
            return _Pinned(array)
        except (OSError, RuntimeError):
            return None  # the copy through shared memory gives the same rows

    def close(self) -> None:
        if self.owned:
            self.owned = False
            torch.cuda.cudart().cudaHostUnregister(self.ptr)


class _Conn:
    """A process's channel to the daemon and the slots its requests pass through: one array in
    a registered shared-memory region per request in flight (plain arrays over TCP, uploaded),
    and the source pinned in place when it is an array in memory read onto a GPU."""

    def __init__(self, ds: QuantumDataset, worker: int) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()  # held by the iteration using it
        self.client = Client(ds.target, name=f"qdp.torch:{ds.rank}.{worker}:{self.pid}")
        self.slots: List[np.ndarray] = []
        self.pinned: Optional[_Pinned] = None
        self._pin_tried = False
        self._gpu_daemon: Optional[bool] = None
        self._streams: List[Any] = []
        self._streams_on: Optional[torch.device] = None
        features, dt = ds.source.features, ds.source.dtype
        rows = ds.batch_size * ds.group
        for _ in range(max(1, ds.prefetch)):
            try:
                self.slots.append(self.client.empty((rows, features), dt))
            except (NotSupported, Error):
                self.slots.append(np.empty((rows, features), dt))

    def streams(self, device: torch.device) -> List[Any]:
        """A CUDA stream per slot on ``device`` (None each on the CPU), kept with the channel:
        the memory of a stream's batches is then allocated again from one epoch to the next,
        and the daemon's mappings of it stay valid."""
        if device.type != "cuda":
            return [None] * len(self.slots)
        if self._streams_on != device:
            self._streams = [torch.cuda.Stream(device) for _ in self.slots]
            self._streams_on = device
        return self._streams

    def gpu_daemon(self) -> bool:
        """Whether the daemon encodes on GPUs (asked once per channel)."""
        if self._gpu_daemon is None:
            self._gpu_daemon = self.client.status().backend == "cuda"
        return self._gpu_daemon

    def pin(self, src: Source) -> Optional[_Pinned]:
        """The source pinned in place, tried once per channel."""
        if not self._pin_tried:
            self._pin_tried = True
            self.pinned = _Pinned.of(src)
        return self.pinned

    def close(self) -> None:
        if self.pid == os.getpid():
            self.slots = []
            if self.pinned is not None:
                self.pinned.close()
                self.pinned = None
            self.client.close()


class _Stream:
    """One iteration: requests of ``group`` batches, each read into a slot and encoded
    ``prefetch`` ahead, then handed out batch by batch."""

    def __init__(self, ds: QuantumDataset, conn: _Conn, worker: int, workers: int,
                 epoch: int) -> None:
        self.ds, self.conn, self.client = ds, conn, conn.client
        self.batches = ds._batches(worker, workers, epoch)
        self.device = self._device(ds.device)
        self.group = ds.group
        if not ds._group_given:  # within a share of the memory the batches land in
            total = (torch.cuda.get_device_properties(self.device).total_memory
                     if self.device.type == "cuda"
                     else os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            self.group = min(ds.group, _default_group(ds.batch_size, ds._row_bytes,
                                                      ds._state_bytes, total))
        self.slots: Deque[Tuple[np.ndarray, Any]] = deque(
            zip(conn.slots, conn.streams(self.device)))
        self.pinned = conn.pin(ds.source) if (
            self.device.type == "cuda" and not ds.shuffle
            and ds.batch_size * self.group * ds._row_bytes >= DIRECT_INPUT_BYTES) else None
        # The first requests carry 1, 2, 4, ... batches up to ``group``: the first batch then
        # comes after one batch's read and encode, not a whole group's.
        self.ramp = 1

    def _device(self, asked: Optional[torch.device]) -> torch.device:
        gpu_daemon = self.conn.gpu_daemon()
        if asked is None:
            if gpu_daemon and torch.cuda.is_available():
                return torch.device("cuda", torch.cuda.current_device())
            return torch.device("cpu")
        if asked.type == "cuda" and not gpu_daemon:
            raise NotSupported(f"device {asked}: the daemon has no GPU; use device='cpu'")
        return asked

    def _next_request(self) -> List[_Batch]:
        n = min(self.ramp, self.group)
        self.ramp *= 2
        return list(itertools.islice(self.batches, n))

    def _encode(self, slot: Tuple[np.ndarray, Any],
                req: List[_Batch]) -> Tuple[List[Any], Any]:
        """Reads the batches of ``req`` and encodes them in one request: the batches' tensors
        (with their labels when the data set has them), and the CUDA event that the labels'
        copies are done at (None without them). Runs on a prefetch thread, so requests in
        flight read and copy side by side (sources guard their own caches)."""
        rows, stream = slot
        copied = None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            t = self._states(rows, req)
            labels = self.ds.labels
            out: List[Any] = list(t.split([b.m for b in req]))
            if labels is not None:
                for k, b in enumerate(req):
                    idx = torch.as_tensor(b.idx) if isinstance(b.idx, np.ndarray) else b.idx
                    lab = labels[idx]
                    if t.is_cuda:  # from pinned memory: a pageable copy can wait ~0.1 s while
                        # the consumer's kernels run on another stream
                        lab = lab.pin_memory().to(t.device, non_blocking=True)
                    out[k] = (out[k], lab)
                if stream is not None:
                    # The consumer's stream waits for the copies on the GPU. This thread waiting
                    # for them (a stream synchronize) held the consumer's next kernel launch
                    # until its queued work was done, measured on an H200 with prefetch 0.
                    copied = torch.cuda.Event()
                    copied.record(stream)
        return out, copied

    def _states(self, rows: np.ndarray, req: List[_Batch]) -> torch.Tensor:
        ds = self.ds
        m = sum(b.m for b in req)
        span = _span(req)
        x: Any
        if self.pinned is not None:  # a DMA per span, from the array into GPU memory
            x = torch.empty((m, ds.source.features), dtype=self.pinned.tensor.dtype,
                            device=self.device)
            off = 0
            for idx in [span] if span else [b.idx for b in req]:
                n = idx.stop - idx.start
                x[off:off + n].copy_(self.pinned.tensor[idx], non_blocking=True)
                off += n
        else:
            if span:  # batches in order: one read of all their rows
                ds.source.read(span.start, span.stop, out=rows[:m])
            else:
                off = 0
                for b in req:
                    b.fill(rows[off:off + b.m])
                    off += b.m
            x = rows[:m]
        if ds.encoding == "basis":  # one index per sample
            x = x[:, 0]
        if self.device.type == "cuda":
            out = torch.empty((m, 1 << ds.qubits), dtype=_COMPLEX[ds.dtype], device=self.device)
            return self.client.encode(x, ds.encoding, ds.qubits, dtype=ds.dtype, policy="single",
                                      out=out)
        with self.client.encode(x, ds.encoding, ds.qubits, dtype=ds.dtype) as s:
            return torch.from_numpy(s.numpy()).reshape(m, 1 << ds.qubits)

    def _handed(self, psi: Any, copied: Any) -> Any:
        """``psi`` as the consumer gets it: on a GPU, its memory marked as used on the
        consumer's current stream, so that it is not allocated again (to the loader's streams)
        before the work queued there on it is done; that stream waits for the event
        ``copied`` (its labels' copies) first."""
        if self.device.type == "cuda":
            consumer = torch.cuda.current_stream(self.device)
            if copied is not None:
                consumer.wait_event(copied)
            for t in psi if isinstance(psi, tuple) else (psi,):
                if t.is_cuda:
                    t.record_stream(consumer)
        return psi

    def __iter__(self) -> Iterator[Any]:
        if self.ds.prefetch == 0:
            while True:
                req = self._next_request()
                if not req:
                    return
                got, copied = self._encode(self.slots[0], req)
                for psi in got:
                    yield self._handed(psi, copied)
                del got
        # Each request is bound to its slot and future here, in order, so the batches come out
        # in the epoch's order however the threads run. A slot goes back to work as soon as its
        # request is answered, before its batches are handed out.
        pool = ThreadPoolExecutor(self.ds.prefetch, thread_name_prefix="qdp-prefetch")
        pending: Deque[Tuple[Future, Tuple[np.ndarray, Any]]] = deque()

        def submit() -> None:
            while self.slots:
                req = self._next_request()
                if not req:
                    return
                slot = self.slots.popleft()
                pending.append((pool.submit(self._encode, slot, req), slot))

        try:
            submit()
            while pending:
                fut, slot = pending.popleft()
                got, copied = fut.result()
                self.slots.append(slot)
                submit()
                for psi in got:
                    yield self._handed(psi, copied)
                del got
        finally:
            for fut, _ in pending:
                fut.cancel()
            pool.shutdown(wait=True)
            self.client.flush()  # the dropped batches' states are released when this returns


#: CUDA_ERROR_NOT_INITIALIZED: the driver's answer before the process's first cuInit.
_CUDA_NOT_INITIALIZED = 3


def _grpc_started() -> bool:
    """Whether gRPC may have started in this process: it holds an epoll instance (gRPC's poller
    opens one when gRPC starts and keeps it after its channels close; any other event loop's
    counts too), or GRPC_POLL_STRATEGY picks a poller that leaves no such trace, or /proc cannot
    tell."""
    if os.environ.get("GRPC_POLL_STRATEGY", "all").split(",")[0].strip() not in ("all", "epoll1"):
        return True
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return True
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventpoll]":
                return True
        except OSError:
            continue  # closed since it was listed (the listing's own descriptor)
    return False


def _cuda_started() -> bool:
    """Whether CUDA's driver is initialised in this process: by torch, or by any cuInit
    (``torch.cuda.is_available()`` makes one without torch's own initialisation), asked of the
    driver without initialising it."""
    if torch.cuda.is_initialized():
        return True
    try:
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False  # not even loaded
    count = ctypes.c_int()
    return int(driver.cuDeviceGetCount(ctypes.byref(count))) != _CUDA_NOT_INITIALIZED


def _start_method(dataset: QuantumDataset) -> str:
    """How :func:`loader` starts workers at this moment: "fork" where that is safe, else
    "spawn"."""
    if "fork" not in multiprocessing.get_all_start_methods() or _grpc_started():
        return "spawn"
    uses_cuda = dataset.device is None or dataset.device.type == "cuda"
    return "spawn" if uses_cuda and _cuda_started() else "fork"


class _Loader(DataLoader):
    """:func:`loader`'s DataLoader: picks its workers' start method each time it starts them,
    unless it was given one."""

    def __init__(self, dataset: QuantumDataset, *, num_workers: int, **kwargs: Any) -> None:
        self._pick = num_workers > 0 and kwargs.get("multiprocessing_context") is None
        self._kept = False  # persistent workers have started: nothing starts again
        if self._pick:
            kwargs["multiprocessing_context"] = _start_method(dataset)
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)

    def __iter__(self) -> Any:
        if self._pick and not self._kept:
            self.multiprocessing_context = _start_method(self.dataset)
        it = super().__iter__()
        self._kept = self.persistent_workers
        return it


def loader(dataset: QuantumDataset, *, num_workers: int = 0,
           persistent_workers: Optional[bool] = None, multiprocessing_context: Any = None,
           **kwargs: Any) -> DataLoader:
    """A torch DataLoader over ``dataset``'s batches as they come (no batching of its own:
    ``batch_size=None``); ``num_workers`` processes split each rank's batches further.

    Parameters
    ----------
    dataset : QuantumDataset
        The batches.
    num_workers : int
        DataLoader worker processes (each opens its own channel to the daemon, after it
        starts).
    persistent_workers : bool, optional
        Keep the workers, with their channels and slots, from one epoch to the next, until the
        loader is collected (default True with workers): an epoch then costs no start.
        Meanwhile each worker holds its process and its ``prefetch`` slots, registered with the
        daemon, and its copy of the data set as it was when it started, but for the epoch:
        :meth:`QuantumDataset.set_epoch` reaches it. False starts them afresh every epoch.
    multiprocessing_context : str or context, optional
        How the workers start: by default ``"fork"`` where that is safe at the moment they
        start, else ``"spawn"``. A value given here is used as it is (``"forkserver"`` works
        too).

        - fork copies this process: a worker is ready in milliseconds (two workers started
          every epoch cost about 0.15 s an epoch by fork with a CPU daemon, 2 to 4 s by spawn,
          each importing torch and qdp). It is unsafe once gRPC has started in this process
          (a qdp.Client, or a data set iterated here): a forked child's gRPC shares its
          parent's poller, and its calls fail or hang. GRPC_ENABLE_FORK_SUPPORT does not make
          it safe: a fork while another thread is in a call leaves the child's calls hanging
          and that thread's failing. gRPC counts as started while the process holds an epoll
          instance (gRPC's poller keeps its own after its channels close; another event loop's,
          such as asyncio's, counts too) or when GRPC_POLL_STRATEGY names a poller other than
          epoll1. For workers that may use CUDA (``device`` None or a CUDA device), fork is
          also unsafe once CUDA's driver is initialised here: a forked child cannot use CUDA
          then. A model moved to a GPU does that, and so does ``torch.cuda.is_available()``
          (unless PYTORCH_NVML_BASED_CUDA_CHECK=1).
        - spawn starts fresh interpreters and is always safe; each imports the main module
          again, so a script keeps its work under ``if __name__ == "__main__":``.

        Persistent workers are started once, at the first iteration, and the choice is made
        then; others at every epoch.
    **kwargs
        Passed to DataLoader (``pin_memory``, ``prefetch_factor``, ...).
    """
    if persistent_workers is None:
        persistent_workers = num_workers > 0
    return _Loader(dataset, num_workers=num_workers, persistent_workers=persistent_workers,
                   multiprocessing_context=multiprocessing_context, **kwargs)
