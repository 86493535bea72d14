"""Files read block by block (Parquet row groups, Arrow record batches): a cache of the last
blocks read, and the blocks decoded ahead on threads of their own."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import operator
import os
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import InvalidArgument, OutOfRange
from ._base import Source, _call


class _Pending:
    """A block asked for and not in the cache yet: the future its readers wait on."""

    __slots__ = ("future", "shared")

    def __init__(self, future: "concurrent.futures.Future[np.ndarray]") -> None:
        self.future = future
        self.shared = False  # a second reader waits on it too: the array is not one's own


class _BlockSource(Source):
    """A file read block by block through ``_load_block``, with a cache of ``cache_blocks`` and
    up to ``readahead`` blocks decoded ahead on a pool of threads.

    A block is in at most one of: the cache (LRU), ``_ahead`` (started before it was asked:
    by a read, for the blocks after the one it asked, or by :meth:`will_need`; oldest first)
    and ``_loading`` (asked by a reader, decoding or awaited). The lock guards these dicts
    only; no decode and no wait runs under it, so readers of different blocks go on side by
    side. With ``readahead=0`` the lock is held through each decode, on ``_main_handle()``, and
    no thread is started.
    """

    def __init__(self, features: int, dtype: np.dtype, block_sizes: np.ndarray,
                 null_policy: str, cache_blocks: int,
                 reopen: Tuple[Callable[..., Source], tuple, dict],
                 readahead: Optional[int] = None) -> None:
        super().__init__(features, dtype, int(block_sizes.max()) if len(block_sizes) else 0)
        self._sizes = block_sizes.astype(np.int64)  # rows of each block in the file
        self._null_policy = null_policy
        self._cache_blocks = max(0, int(cache_blocks))
        self._readahead = _readahead_arg(readahead, self.block_rows * features * dtype.itemsize)
        self._cache: "collections.OrderedDict[int, np.ndarray]" = collections.OrderedDict()
        self._lock = threading.RLock()
        self._starts: Optional[np.ndarray] = None
        self._reopen = reopen
        self._file_starts = np.concatenate([[0], np.cumsum(self._sizes)]).astype(np.int64)
        if null_policy != "skip":
            self._starts = self._file_starts
        self._closed = False
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # block -> (its decode, whether will_need asked for it rather than a read guessing)
        self._ahead: collections.OrderedDict[
            int, Tuple[concurrent.futures.Future[np.ndarray], bool]] = collections.OrderedDict()
        self._loading: Dict[int, _Pending] = {}
        self._handles_lock = threading.Lock()
        self._free_handles: List[Any] = []  # file handles of decodes that ended, for the next
        if self._readahead:
            _THREADED.add(self)

    def __reduce__(self) -> Any:
        fn, args, kwargs = self._reopen
        return (_call, (fn, args, kwargs))

    def __repr__(self) -> str:
        rows = self.rows if self._starts is not None else "(after a scan)"
        return (f"<qdp.readers.{type(self).__name__} rows={rows} blocks={self.blocks} "
                f"features={self.features} {self.dtype} block_rows={self.block_rows}>")

    @property
    def blocks(self) -> int:
        """Blocks in the file."""
        return len(self._sizes)

    @property
    def readahead(self) -> int:
        """Blocks that may be decoding or decoded ahead at once, beyond the cache (0: none)."""
        return self._readahead

    @property
    def rows(self) -> int:
        return int(self.block_starts[-1])

    @property
    def block_starts(self) -> np.ndarray:
        if self._starts is None:
            with self._lock:
                if self._starts is None:
                    scan = [k for k in range(self.blocks) if self._maybe_nulls(k) is not False]
                    dropped = dict(zip(scan, self._decode_each(self._null_count, scan)))
                    kept = [self._sizes[k] - dropped.get(k, 0) for k in range(self.blocks)]
                    self._starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
        return self._starts

    @property
    def cached_blocks(self) -> Tuple[int, ...]:
        """The blocks held now, least recently used first."""
        with self._lock:
            return tuple(self._cache)

    @property
    def ahead_blocks(self) -> Tuple[int, ...]:
        """The blocks decoding or decoded ahead of being asked, oldest first (at most
        ``readahead``)."""
        with self._lock:
            return tuple(self._ahead)

    def block(self, k: int) -> np.ndarray:
        """Block ``k`` whole, as rows after ``null_policy`` (through the cache; do not modify)."""
        if not 0 <= k < self.blocks:
            raise OutOfRange(f"block {k} of {self.blocks}", field="block")
        return self._get(k, own=False)

    def will_need(self, blocks: Iterable[int]) -> None:
        """Starts decoding ``blocks``, in the order given, so that reads of them find them
        decoded: the blocks of the batches to come where they are not simply the next ones
        (a shuffled epoch).

        Blocks cached or started already are passed over; as many start as ``readahead``
        allows. To make room, blocks decoded ahead and not asked since, oldest first, are
        dropped (never one of ``blocks``, never one still decoding). A no-op with
        ``readahead=0``.

        Parameters
        ----------
        blocks : iterable of int
            Block numbers in [0, blocks), most urgent first.

        Raises
        ------
        qdp.OutOfRange
            A block outside [0, blocks).
        """
        try:
            ks = [operator.index(k) for k in blocks]
        except TypeError:
            raise InvalidArgument("will_need() takes an iterable of integer block numbers",
                                  field="blocks") from None
        bad = [k for k in ks if not 0 <= k < self.blocks]
        if bad:
            raise OutOfRange(f"block {bad[0]} of a source of {self.blocks} blocks: pass "
                             f"blocks in [0, {self.blocks})", field="blocks")
        with self._lock:
            self._start(ks, hinted=True)

    def _get(self, k: int, own: bool) -> np.ndarray:
        """Block ``k``: the cached array (do not modify), or with ``own`` one of the caller's
        own, not kept in the cache (iter_blocks: a stream would only push out what reads use)."""
        if not self._readahead:
            with self._lock:
                cached = self._cache.get(k)
                if own:
                    return cached.copy() if cached is not None else self._load_block(k)
                if cached is not None:
                    self._cache.move_to_end(k)
                    return cached
                while self._cache and len(self._cache) >= self._cache_blocks:
                    self._cache.popitem(last=False)  # before the load: at most cache_blocks
                arr = self._load_block(k)
                if self._cache_blocks:
                    self._cache[k] = arr
                return arr
        while True:
            with self._lock:
                cached = self._cache.get(k)
                if cached is not None:
                    self._cache.move_to_end(k)
                    return cached.copy() if own else cached
                pending = self._loading.get(k)
                decode_here = False
                if pending is not None:
                    pending.shared = True
                else:
                    started, hinted = self._ahead.pop(k, (None, False))
                    decode_here = started is None
                    pending = _Pending(started or concurrent.futures.Future())
                    self._loading[k] = pending
                    if not hinted:  # a miss, or a guess that came true: the next blocks too
                        self._start(range(k + 1, min(k + 1 + self._readahead, self.blocks)),
                                    hinted=False)
            if decode_here:
                try:
                    pending.future.set_result(self._load_block(k))
                except BaseException as e:  # to every reader of the block, as to this one
                    pending.future.set_exception(e)
            try:
                arr = pending.future.result()
            except concurrent.futures.CancelledError:
                self._unload(k, pending)  # cancelled by close() before it began: read it here
                continue
            except BaseException:
                self._unload(k, pending)  # the next reader of the block decodes it again
                raise
            with self._lock:
                if self._loading.get(k) is pending:
                    del self._loading[k]
                if own and not pending.shared:
                    return arr
                if self._cache_blocks and not self._closed and k not in self._cache:
                    while len(self._cache) >= self._cache_blocks:
                        self._cache.popitem(last=False)
                    self._cache[k] = arr
            return arr.copy() if own else arr

    def _unload(self, k: int, pending: _Pending) -> None:
        with self._lock:
            if self._loading.get(k) is pending:
                del self._loading[k]

    def _start(self, ks: Iterable[int], hinted: bool, keep: Iterable[int] = ()) -> None:
        """Under the lock: submits the decodes of blocks ``ks`` in order, up to the bound.

        Room is made by dropping the oldest block ahead that is decoded or not begun, is not
        one of ``ks`` or ``keep`` and, for a read's guess (``hinted`` False), was a guess too.
        """
        if self._closed or not self._readahead:
            return
        ks = list(ks)
        named = set(ks).union(keep)
        for k in ks:
            if k in self._ahead:
                if hinted:
                    self._ahead[k] = (self._ahead[k][0], True)
                continue
            if k in self._cache or k in self._loading:
                continue
            if len(self._ahead) >= self._readahead and not self._drop_one(named, hinted):
                return
            self._ahead[k] = (self._executor().submit(self._load_block, k), hinted)

    def _drop_one(self, keep: set, hinted: bool) -> bool:
        for j, (fut, was_hinted) in self._ahead.items():
            if j in keep or (was_hinted and not hinted):
                continue
            if fut.done() or fut.cancel():  # one still decoding would stay in memory
                del self._ahead[j]
                return True
        return False

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._readahead, thread_name_prefix="qdp-readahead")
        return self._pool

    def _decode_each(self, fn: Callable[[int], Any], ks: List[int]) -> Iterable[Any]:
        """``fn`` of each of ``ks``, on the pool where there is one (``readahead`` at once)."""
        if self._readahead and not self._closed and len(ks) > 1:
            return self._executor().map(fn, ks)
        return map(fn, ks)

    def _null_count(self, k: int) -> int:
        return int(self._null_rows(k).sum())

    def _read(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self.features), dtype=self.dtype)
        if stop == start:
            return out
        starts = self.block_starts
        k = self.block_of(start)
        while k < self.blocks and starts[k] < stop:
            lo, hi = max(start, starts[k]), min(stop, starts[k + 1])
            if hi > lo:
                block = self.block(k)
                out[lo - start:hi - start] = block[lo - starts[k]:hi - starts[k]]
                del block
            k += 1
        return out

    def _take(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self.features), dtype=self.dtype)
        if not len(idx):
            return out
        starts = self.block_starts
        blk = self.block_of(idx)
        order = np.argsort(blk, kind="stable")
        sorted_blk = blk[order]
        cuts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_blk)) + 1, [len(idx)]])
        needed = [int(k) for k in sorted_blk[cuts[:-1]]]
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            k = needed[i]
            if self._readahead:  # the blocks after this one are known: not a guess
                with self._lock:
                    self._start(needed[i + 1:i + 1 + self._readahead], hinted=True, keep=(k,))
            pos = order[a:b]
            block = self.block(k)
            out[pos] = block[idx[pos] - starts[k]]
            del block
        return out

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        for k in range(self.blocks):
            yield self._get(k, own=True)

    def close(self) -> None:
        """Lets go of the file and the blocks held: decodes under way are waited for, those
        not begun are cancelled. Reads after it fail."""
        with self._lock:
            self._closed = True
            self._cache.clear()
            ahead = [fut for fut, _ in self._ahead.values()]
            self._ahead.clear()
            pool, self._pool = self._pool, None
        for fut in ahead:
            fut.cancel()
        if pool is not None:
            # Decodes under way end (a reader waiting on one gets it); those not begun are
            # cancelled, and their readers read through the closed file, failing as after close.
            pool.shutdown(wait=True, cancel_futures=True)
        with self._handles_lock:
            free, self._free_handles = self._free_handles, []
        for h in free:
            self._close_handle(h)
        with self._lock:
            self._close()

    def _after_fork(self) -> None:
        """In a forked child: the parent's threads are not there, nor is what they were doing."""
        self._lock = threading.RLock()
        self._handles_lock = threading.Lock()
        self._pool = None
        self._ahead = collections.OrderedDict()
        self._loading = {}
        self._free_handles = []  # dropped with the parent's threads: this process opens its own

    @contextlib.contextmanager
    def _handle(self) -> Iterator[Any]:
        """A file handle for one decode: pyarrow's readers are not shared between threads, so
        each decode running takes one of its own (kept for later decodes) while there are
        threads; the main one under the lock with ``readahead=0``, and after close (so reads
        fail as they did)."""
        if not self._readahead:
            yield self._main_handle()  # the caller holds the lock
            return
        if self._closed:
            # No decode waits on the pool under the lock once closed (the scan of
            # block_starts runs on this thread then), so a pool thread may take it too.
            with self._lock:
                yield self._main_handle()
            return
        with self._handles_lock:
            h = self._free_handles.pop() if self._free_handles else None
        if h is None:
            h = self._open_handle()
        try:
            yield h
        finally:
            with self._handles_lock:
                keep = not self._closed
                if keep:
                    self._free_handles.append(h)
            if not keep:
                self._close_handle(h)

    # A file kind gives these.
    def _load_block(self, k: int) -> np.ndarray:
        """Block ``k`` converted: a fresh C-contiguous (n, features) array, nulls handled."""
        raise NotImplementedError

    def _maybe_nulls(self, k: int) -> Optional[bool]:
        """False when the metadata says block ``k`` has no nulls; True or None (not known)."""
        return None

    def _null_rows(self, k: int) -> np.ndarray:
        """A bool per row of block ``k`` of the file: whether it holds a null."""
        raise NotImplementedError

    def _main_handle(self) -> Any:
        """The handle opened with the source, which also answers for its metadata."""
        raise NotImplementedError

    def _open_handle(self) -> Any:
        """Another handle on the same file, for a decode thread."""
        raise NotImplementedError

    def _close_handle(self, h: Any) -> None:
        """Lets go of a handle of ``_open_handle``."""
        raise NotImplementedError

    def _close(self) -> None:
        pass


_THREADED: "weakref.WeakSet[_BlockSource]" = weakref.WeakSet()  # sources that start threads


def _forget_threads_after_fork() -> None:
    for src in list(_THREADED):
        src._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads_after_fork)


#: Decoded rows that blocks ahead may hold by default (``readahead=None``).
READAHEAD_BYTES = 1 << 30


def _readahead_arg(readahead: Any, block_bytes: int) -> int:
    """``readahead`` checked; None as the default: the blocks of ``block_bytes`` that fit in
    READAHEAD_BYTES, 1 to min(8, CPUs) (beyond about 8 decodes pyarrow gains little)."""
    if readahead is None:
        return max(1, min(8, os.cpu_count() or 1, READAHEAD_BYTES // max(1, block_bytes)))
    if isinstance(readahead, bool) or not isinstance(readahead, (int, np.integer)) or \
            readahead < 0:
        raise InvalidArgument(f"readahead={readahead!r}: pass a whole number of blocks >= 0 "
                              "(0 decodes on the reading thread only, with no threads)",
                              field="readahead")
    return int(readahead)
