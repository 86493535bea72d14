"""qdp.torch: a data set's rows, encoded by qdpd batch after batch, as torch tensors for a training
loop, on every rank of a DDP job and every DataLoader worker.

    import qdp.torch
    ds = qdp.torch.QuantumDataset("train.parquet", "angle", 16, batch_size=64, shuffle=True)
    for epoch in range(3):
        ds.set_epoch(epoch)
        for psi in qdp.torch.loader(ds):          # (64, 65536) complex128, on this rank's GPU
            ...

The epoch's order is :class:`qdp.sampling.BlockOrder` of (seed, epoch) alone, dealt to ranks and
workers by :class:`qdp.sampling.Shares`: the same global sequence of batches whatever the world
size, every row once per epoch. Sources are those of :func:`qdp.readers.open_source`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .client import Client
from .errors import Error, InvalidArgument, NotSupported
from .readers import Source, open_source
from .sampling import BlockOrder, Shares

__all__ = ["QuantumDataset", "loader"]

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
        "amplitude", "angle", "basis", "iqp", "iqp-z" or "phase".
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
        Batches encoded ahead, on as many threads, while the consumer works on the current one;
        0 encodes each batch when it is asked for.
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
    Each yielded tensor is the caller's own: nothing in it is reused for a later batch. The
    host side copies each batch once, from the source into shared memory the daemon reads in
    place; on a GPU it never comes back through the host.
    """

    def __init__(self, source: Any, encoding: str, qubits: int, *, batch_size: int = 64,
                 dtype: str = "complex128", device: Any = None, prefetch: int = 2,
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 even_batches: Optional[bool] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None, target: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, null_policy: str = "error",
                 labels: Any = None) -> None:
        super().__init__()
        if dtype not in _COMPLEX:
            raise InvalidArgument(f"dtype {dtype!r}: use 'complex64' or 'complex128'",
                                  field="dtype")
        for name, value, low in (("batch_size", batch_size, 1), ("prefetch", prefetch, 0)):
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

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (its shuffled order), as DistributedSampler's."""
        self.epoch = int(epoch)

    def _shares(self, workers: int) -> Shares:
        rows = self.source.rows
        if rows is None:
            raise TypeError("an iterable source has no length until it is read")
        return Shares(rows, self.world_size, workers, self.batch_size, self.drop_last,
                      self.even_batches)

    def __len__(self) -> int:
        """Batches this rank yields in an epoch (over all its DataLoader workers)."""
        return self._shares(1).steps(self.rank)

    def _batches(self, worker: int, workers: int) -> Iterator[Tuple[Any, int, Any]]:
        """This (rank, worker)'s batches of the epoch, in order: how to fill a slot with the
        rows (``fill(out)``), how many, and their indices in the source (None for a stream)."""
        src = self.source
        if src.rows is None:  # a stream: every share reads it all and keeps its own batches
            k = 0
            for rows in _rebatch(src.iter_blocks(), self.batch_size, self.drop_last):
                if k % self.world_size == self.rank and \
                        (k // self.world_size) % workers == worker:
                    yield (lambda out, rows=rows: np.copyto(out, rows.reshape(out.shape))), \
                        len(rows), None
                k += 1
            return
        shares = self._shares(workers)
        order = BlockOrder(src.rows, src.block_rows if self.shuffle else 1, seed=self.seed,
                           epoch=self.epoch, shuffle=self.shuffle)
        for k in shares.batch_indices(self.rank, worker):
            start, stop = shares.span(k)
            if self.shuffle:
                idx = order.at(np.arange(start, stop, dtype=np.int64))
                yield (lambda out, idx=idx: src.take(idx, out=out)), stop - start, idx
            else:
                yield (lambda out, a=start, b=stop: src.read(a, b, out=out)), stop - start, \
                    slice(start, stop)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        conn = self._conn_for(worker)
        if not conn.lock.acquire(blocking=False):  # another iteration of this process runs
            conn = _Conn(self, worker)
        try:
            yield from _Stream(self, conn, worker, workers)
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


class _Conn:
    """A process's channel to the daemon and the slots its batches pass through: one array in
    a registered shared-memory region per batch in flight (plain arrays over TCP, uploaded)."""

    def __init__(self, ds: QuantumDataset, worker: int) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()  # held by the iteration using it
        self.client = Client(ds.target, name=f"qdp.torch:{ds.rank}.{worker}:{self.pid}")
        self.slots: List[np.ndarray] = []
        features, dt = ds.source.features, ds.source.dtype
        for _ in range(max(1, ds.prefetch)):
            try:
                self.slots.append(self.client.empty((ds.batch_size, features), dt))
            except (NotSupported, Error):
                self.slots.append(np.empty((ds.batch_size, features), dt))

    def close(self) -> None:
        if self.pid == os.getpid():
            self.slots = []
            self.client.close()


class _Stream:
    """One iteration: batches read, copied into shared memory and encoded ``prefetch`` ahead."""

    def __init__(self, ds: QuantumDataset, conn: _Conn, worker: int, workers: int) -> None:
        self.ds, self.client = ds, conn.client
        self.batches = ds._batches(worker, workers)
        self.device = self._device(ds.device)
        self.slots: Deque[np.ndarray] = deque(conn.slots)

    def _device(self, asked: Optional[torch.device]) -> torch.device:
        gpu_daemon = self.client.status().backend == "cuda"
        if asked is None:
            if gpu_daemon and torch.cuda.is_available():
                return torch.device("cuda", torch.cuda.current_device())
            return torch.device("cpu")
        if asked.type == "cuda" and not gpu_daemon:
            raise NotSupported(f"device {asked}: the daemon has no GPU; use device='cpu'")
        return asked

    def _encode(self, slot: np.ndarray, batch: Tuple[Any, int, Any]) -> Any:
        """Reads ``batch`` into ``slot`` and encodes it (with its labels when the data set has
        them). Runs on a prefetch thread: the copy into the slot, the daemon's only input, is
        made there, so batches in flight copy side by side (sources guard their own caches)."""
        fill, m, idx = batch
        fill(slot[:m])
        t = self._states(slot, m)
        labels = self.ds.labels
        return t if labels is None else (t, labels[torch.as_tensor(idx) if isinstance(
            idx, np.ndarray) else idx].to(t.device))

    def _states(self, slot: np.ndarray, m: int) -> torch.Tensor:
        ds = self.ds
        x = slot[:m, 0] if ds.encoding == "basis" else slot[:m]  # basis: one index per sample
        if self.device.type == "cuda":
            out = torch.empty((m, 1 << ds.qubits), dtype=_COMPLEX[ds.dtype], device=self.device)
            return self.client.encode(x, ds.encoding, ds.qubits, dtype=ds.dtype, policy="single",
                                      out=out)
        with self.client.encode(x, ds.encoding, ds.qubits, dtype=ds.dtype) as s:
            return torch.from_numpy(s.numpy()).reshape(m, 1 << ds.qubits)

    def __iter__(self) -> Iterator[Any]:
        if self.ds.prefetch == 0:
            for batch in self.batches:
                yield self._encode(self.slots[0], batch)
            return
        # Each batch is bound to its slot and future here, in order, so the batches come out in
        # the epoch's order however the threads run.
        pool = ThreadPoolExecutor(self.ds.prefetch, thread_name_prefix="qdp-prefetch")
        pending: Deque[Tuple[Future, np.ndarray]] = deque()
        try:
            while True:
                while self.slots:
                    batch = next(self.batches, None)
                    if batch is None:
                        break
                    slot = self.slots.popleft()
                    pending.append((pool.submit(self._encode, slot, batch), slot))
                if not pending:
                    return
                fut, slot = pending.popleft()
                t = fut.result()
                self.slots.append(slot)
                yield t
        finally:
            for fut, _ in pending:
                fut.cancel()
            pool.shutdown(wait=True)


def loader(dataset: QuantumDataset, *, num_workers: int = 0, **kwargs: Any) -> DataLoader:
    """A torch DataLoader over ``dataset``'s batches as they come (no batching of its own:
    ``batch_size=None``); ``num_workers`` processes split each rank's batches further.

    Parameters
    ----------
    dataset : QuantumDataset
        The batches.
    num_workers : int
        DataLoader worker processes (each opens its own channel to the daemon).
    **kwargs
        Passed to DataLoader (``pin_memory``, ``persistent_workers``, ...).
    """
    if num_workers and "multiprocessing_context" not in kwargs:
        kwargs["multiprocessing_context"] = "spawn"  # gRPC channels do not survive a fork
    return DataLoader(dataset, batch_size=None, num_workers=num_workers, **kwargs)
