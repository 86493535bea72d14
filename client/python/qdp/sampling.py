"""The order and the shares of a data loader's epoch: which row comes at which position, and which
positions each (rank, worker) of a job reads.

Two pieces, both pure functions of their arguments (no torch, no daemon, no state kept between
calls), so every process of a job computes the same epoch without talking to the others:

* An *order* maps a position ``p`` in ``[0, n)`` of the epoch to the row read there.
  :class:`Permutation` is a keyed bijection of ``[0, n)``; :class:`BlockOrder` permutes blocks of
  rows (a file's row groups) and the rows inside each block, so a reader streams whole blocks.
  Both are functions of ``(n, seed, epoch)`` (and ``block``) alone and cost O(1) time and memory
  per position: no list of ``n`` rows is ever built.
* :class:`Shares` deals the positions of an epoch, in batches of ``batch_size`` consecutive
  positions, to the ranks of a job and the DataLoader workers of each rank.

A loader reads, on rank ``r`` and worker ``w``::

    order = BlockOrder(n, block, seed=seed, epoch=epoch)       # same seed on every rank
    shares = Shares(n, world, workers, batch_size=64)
    for k in shares.batch_indices(r, w):
        start, stop = shares.span(k)
        rows = order.at(np.arange(start, stop))                # batch k of the epoch

Every rank must pass the same ``seed`` (draw it once, on rank 0, and broadcast it): ranks with
different seeds read overlapping rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple, Union, overload

import numpy as np

from .errors import InvalidArgument

_MASK64 = (1 << 64) - 1
_C1 = 0xBF58476D1CE4E5B9  # SplitMix64's finalizer constants
_C2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15
_ROUNDS = 4  # 4 make a Feistel network of good round functions a pseudorandom permutation
_INNER_SALT = 0x5EED_B10C_0000_0001  # keeps the rows' permutations apart from the blocks'

Positions = Union[int, np.integer, np.ndarray]


def _mix(z: int) -> int:
    """SplitMix64's finalizer on a Python int, modulo 2**64."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _C1) & _MASK64
    z = ((z ^ (z >> 27)) * _C2) & _MASK64
    return z ^ (z >> 31)


def _mix_np(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on a uint64 array, in place (uint64 products wrap modulo 2**64)."""
    z ^= z >> _S30
    z *= _U1
    z ^= z >> _S27
    z *= _U2
    z ^= z >> _S31
    return z


# NumPy scalars made once: building them costs as much as an operation on a batch
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_U1, _U2 = np.uint64(_C1), np.uint64(_C2)


def _round_keys(seed: int, epoch: int, salt: int = 0) -> Tuple[int, ...]:
    """One 64-bit key per round, chained through the hash so that (seed, epoch) pairs that differ
    anywhere give unrelated keys."""
    h = _mix(_mix(_mix(seed + _GOLDEN) ^ epoch) ^ salt)
    return tuple(_mix(h + (r + 1) * _GOLDEN) for r in range(_ROUNDS))


def _check_int(value: object, name: str, low: int, high: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name} is {value!r}: pass an integer", field=name)
    v = int(value)
    if v < low or (high is not None and v >= high):
        span = f">= {low}" if high is None else f"in [{low}, {high})"
        raise InvalidArgument(f"{name} is {v}: pass an integer {span}", field=name)
    return v


class _Feistel:
    """A keyed bijection of ``[0, n)``: a Feistel network over ``[0, A*B)``, cycle-walked back
    into ``[0, n)``.

    A value ``x`` is the pair ``(x // B, x % B)``; a round maps ``(L, R)``, L in Z_p and R in
    Z_q, to ``(R, (L + F(R)) mod p)`` (FF1's alternating halves). With ``A = ceil(sqrt(n))`` and
    ``B = ceil(n / A)`` the network's domain exceeds ``n`` by under ``A``, so a walk outside
    ``[0, n)`` is rare (under 1 in ``sqrt(n)``), where the next power of two would send up to
    half of the indices of a batch round the network again. ``F`` is SplitMix64's finalizer of
    ``R`` xor the round's key, xor a per-element tweak when there is one (:class:`BlockOrder`
    gives every block its own permutation that way, in one call).
    """

    def __init__(self, n: int, keys: Tuple[int, ...]) -> None:
        self.n = n
        self.a = math.isqrt(n - 1) + 1 if n > 1 else 1
        self.b = -(-n // self.a) if n > 1 else 1
        self.keys = keys
        # L's modulus in round r: A, B, A, B, ...; an even number of rounds ends at (A, B).
        self.mods = tuple(self.a if r % 2 == 0 else self.b for r in range(len(keys)))
        self._keys_np = tuple(np.uint64(k) for k in keys)
        self._mods_np = tuple(np.uint64(m) for m in self.mods)
        self._a_np, self._b_np, self._n_np = np.uint64(self.a), np.uint64(self.b), np.uint64(n)

    # The scalar path: Python ints, far cheaper than NumPy for one index.

    def _net(self, x: int, tweak: int, inverse: bool) -> int:
        left, right = divmod(x, self.b)
        if not inverse:
            for k, m in zip(self.keys, self.mods):
                left, right = right, (left + _mix(right ^ tweak ^ k)) % m
        else:
            # Undo the rounds last first: (L2, R2) = (R, (L + F(R)) mod m) gives R = L2 and
            # L = (R2 - F(L2)) mod m.
            for k, m in zip(reversed(self.keys), reversed(self.mods)):
                left, right = (right - _mix(left ^ tweak ^ k)) % m, left
        return left * self.b + right

    def one(self, x: int, tweak: int = 0, inverse: bool = False) -> int:
        x = self._net(x, tweak, inverse)
        while x >= self.n:  # ends: x's cycle under the network comes back into [0, n)
            x = self._net(x, tweak, inverse)
        return x

    # The vector path: uint64 arrays, a dozen NumPy operations per round on the whole array.

    def _net_np(self, x: np.ndarray, tweak: Union[None, np.uint64, np.ndarray],
                inverse: bool) -> np.ndarray:
        left, right = np.divmod(x, self._b_np)
        rounds = zip(self._keys_np, self._mods_np)
        if inverse:
            rounds = zip(reversed(self._keys_np), reversed(self._mods_np))
        for k, m in rounds:
            src = right if not inverse else left
            f = src ^ k
            if tweak is not None:
                f ^= tweak
            _mix_np(f)
            f %= m
            if not inverse:
                # (L + F) mod m, with both terms already under m
                f += left
                f %= m
                left, right = right, f
            else:
                # (R2 - F) mod m without going below zero in uint64
                f = m - f
                f += right
                f %= m
                left, right = f, left
        left *= self._b_np
        left += right
        return left

    def many(self, x: np.ndarray, tweak: Union[None, np.uint64, np.ndarray] = None,
             inverse: bool = False) -> np.ndarray:
        """``x``: a 1-D uint64 array in [0, n); ``tweak``: one for all or one per element.
        Returns a new array."""
        y = self._net_np(x, tweak, inverse)
        out = np.flatnonzero(y >= self._n_np)
        while out.size:
            # Walk only the elements still outside; the rest are done.
            t = tweak[out] if isinstance(tweak, np.ndarray) and tweak.ndim else tweak
            y[out] = self._net_np(y[out], t, inverse)
            out = out[y[out] >= self._n_np]
        return y


def _as_positions(p: object, n: int, field: str) -> np.ndarray:
    """``p`` as a 1-D uint64 array, after checking that it holds integers in [0, n)."""
    a = np.asarray(p)
    if a.size == 0:
        return np.zeros(0, dtype=np.uint64)  # np.asarray([]) is float64: nothing to check
    if a.dtype.kind not in "iu":
        raise InvalidArgument(f"{field} has dtype {a.dtype}: pass integers", field=field)
    flat = a.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        raise InvalidArgument(f"{field} spans [{flat.min()}, {flat.max()}], outside [0, {n}): "
                              f"pass values in [0, {n})", field=field)
    return flat.astype(np.uint64)


class Permutation:
    """A keyed permutation of ``[0, n)``: position ``p`` of the epoch reads row ``at(p)``.

    A function of ``(n, seed, epoch)`` alone, computed per position in O(1) time and memory (a
    Feistel network keyed by a hash of seed, epoch and round, cycle-walked into ``[0, n)``), so
    every process computes the same order and none holds a list of ``n`` rows. It is a bijection
    for every ``n >= 0``; it is not cryptographic.

    Parameters
    ----------
    n : int
        Rows in the data set, >= 0.
    seed : int
        In [0, 2**64); the same on every rank of a job.
    epoch : int
        In [0, 2**64); a new order each epoch.
    shuffle : bool
        False gives the identity (``at(p) == p``).
    """

    def __init__(self, n: int, *, seed: int = 0, epoch: int = 0, shuffle: bool = True) -> None:
        self.n = _check_int(n, "n", 0)
        self.seed = _check_int(seed, "seed", 0, 1 << 64)
        self.epoch = _check_int(epoch, "epoch", 0, 1 << 64)
        self.shuffle = bool(shuffle)
        self._net = _Feistel(self.n, _round_keys(self.seed, self.epoch)) \
            if self.shuffle else None

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (f"Permutation({self.n}, seed={self.seed}, epoch={self.epoch}, "
                f"shuffle={self.shuffle})")

    @overload
    def at(self, p: Union[int, np.integer]) -> int: ...
    @overload
    def at(self, p: np.ndarray) -> np.ndarray: ...

    def at(self, p: Positions) -> Union[int, np.ndarray]:
        """The rows at positions ``p``.

        Parameters
        ----------
        p : int or array of int
            Positions in [0, n).

        Returns
        -------
        int or numpy.ndarray
            An int for an int; an int64 array of ``p``'s shape for an array.
        """
        return self._apply(p, inverse=False)

    def index_of(self, row: Positions) -> Union[int, np.ndarray]:
        """The inverse of :meth:`at`: the positions at which ``row`` is read."""
        return self._apply(row, inverse=True)

    def _apply(self, p: Positions, inverse: bool) -> Union[int, np.ndarray]:
        field = "row" if inverse else "p"
        if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
            x = _check_int(p, field, 0, self.n)
            return x if self._net is None else self._net.one(x, inverse=inverse)
        shape = np.shape(p)
        x = _as_positions(p, self.n, field)
        y = x if self._net is None else self._net.many(x, inverse=inverse)
        return y.astype(np.int64).reshape(shape)


class BlockOrder:
    """An order that reads whole blocks of ``block`` consecutive rows (a file's row groups), the
    blocks in a keyed order and the rows inside each block in a keyed order of their own.

    Rows ``[b * block, (b + 1) * block)`` form block ``b``; the last block is short when ``block``
    does not divide ``n``. The epoch reads the blocks in the order of
    ``Permutation(ceil(n / block), seed, epoch)``, and block ``b``'s rows in the order of a
    permutation keyed by (seed, epoch, b), so consecutive positions stay inside one block until it
    is read out. A bijection of ``[0, n)``, a function of ``(n, block, seed, epoch)`` alone, O(1)
    per position. ``block=1`` is exactly ``Permutation(n, seed=seed, epoch=epoch)``;
    ``shuffle=False`` is the identity.

    Parameters
    ----------
    n : int
        Rows in the data set, >= 0.
    block : int
        Rows per block, >= 1 (a Parquet row group's rows, say).
    seed, epoch, shuffle
        As for :class:`Permutation`.
    """

    def __init__(self, n: int, block: int = 1, *, seed: int = 0, epoch: int = 0,
                 shuffle: bool = True) -> None:
        self.n = _check_int(n, "n", 0)
        self.block = _check_int(block, "block", 1)
        self.blocks = -(-self.n // self.block)
        self.order = Permutation(self.blocks, seed=seed, epoch=epoch, shuffle=shuffle)
        self.seed, self.epoch, self.shuffle = self.order.seed, self.order.epoch, self.order.shuffle
        self.short = self.n % self.block  # rows of the short last block; 0 when none
        # The short block sits at one place of the block order; positions after it are shifted
        # back by (block - short). Found once here by the inverse permutation.
        self.short_at = self.order.index_of(self.blocks - 1) if self.short else self.blocks
        keys = _round_keys(self.seed, self.epoch, _INNER_SALT)
        self._full = _Feistel(self.block, keys)
        self._last = _Feistel(self.short, keys)
        self._identity = Permutation(self.n, shuffle=False)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (f"BlockOrder({self.n}, {self.block}, seed={self.seed}, epoch={self.epoch}, "
                f"shuffle={self.shuffle})")

    def _tweak(self, b: int) -> int:
        return _mix(b + _GOLDEN)

    @overload
    def at(self, p: Union[int, np.integer]) -> int: ...
    @overload
    def at(self, p: np.ndarray) -> np.ndarray: ...

    def at(self, p: Positions) -> Union[int, np.ndarray]:
        """The rows at positions ``p`` (an int for an int, an int64 array of ``p``'s shape for an
        array), as :meth:`Permutation.at`."""
        if not self.shuffle:
            return self._identity.at(p)
        if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
            x = _check_int(p, "p", 0, self.n)
            k, o = self._split(x)
            b = self.order.at(k)
            net = self._last if b == self.blocks - 1 and self.short else self._full
            return b * self.block + (net.one(o, self._tweak(b)) if self.block > 1 else 0)
        shape = np.shape(p)
        x = _as_positions(p, self.n, "p").astype(np.int64)
        k, o = self._split_np(x)
        if k.size and self.block > 1 and k.min() == k.max():
            # A loader's batch mostly lies inside one block: that block's place and key once,
            # on the scalar path.
            b0 = self.order.at(int(k[0]))
            net = self._last if b0 == self.blocks - 1 and self.short else self._full
            o = net.many(o.astype(np.uint64), np.uint64(self._tweak(b0)))
            return (o.astype(np.int64) + b0 * self.block).reshape(shape)
        b = self.order.at(k)
        if self.block > 1:
            tweak = _mix_np(b.astype(np.uint64) + np.uint64(_GOLDEN))
            o = o.astype(np.uint64)
            last = (b == self.blocks - 1) if self.short else None
            if last is None or not last.any():
                o = self._full.many(o, tweak)
            else:
                full = ~last
                o[full] = self._full.many(o[full], tweak[full])
                o[last] = self._last.many(o[last], tweak[last])
            b = b * self.block + o.astype(np.int64)
        return b.reshape(shape)

    def index_of(self, row: Positions) -> Union[int, np.ndarray]:
        """The inverse of :meth:`at`: the positions at which ``row`` is read."""
        if not self.shuffle:
            return self._identity.at(row)
        if isinstance(row, (int, np.integer)) and not isinstance(row, bool):
            x = _check_int(row, "row", 0, self.n)
            b, o = divmod(x, self.block)
            net = self._last if b == self.blocks - 1 and self.short else self._full
            if self.block > 1:
                o = net.one(o, self._tweak(b), inverse=True)
            k = self.order.index_of(b)
            return k * self.block - (self.block - self.short if k > self.short_at else 0) + o
        shape = np.shape(row)
        x = _as_positions(row, self.n, "row").astype(np.int64)
        b, o = np.divmod(x, self.block)
        if self.block > 1:
            tweak = _mix_np(b.astype(np.uint64) + np.uint64(_GOLDEN))
            o = o.astype(np.uint64)
            last = b == self.blocks - 1
            full = ~last if self.short else np.ones_like(last)
            o[full] = self._full.many(o[full], tweak[full], inverse=True)
            if self.short:
                o[last] = self._last.many(o[last], tweak[last], inverse=True)
            o = o.astype(np.int64)
        k = self.order.index_of(b)
        start = k * self.block - np.where(k > self.short_at, self.block - self.short, 0)
        return (start + o).reshape(shape)

    def _split(self, x: int) -> Tuple[int, int]:
        """Position -> (index in the block order, offset inside that block)."""
        s, short = self.short_at, self.short
        if x < s * self.block:
            return divmod(x, self.block)
        if x < s * self.block + short:
            return s, x - s * self.block
        return divmod(x - short + self.block, self.block)

    def _split_np(self, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        if not self.short:
            return np.divmod(x, self.block)
        s0 = self.short_at * self.block
        # Past the short block, positions are shifted forward by the rows it lacks.
        return np.divmod(np.where(x >= s0 + self.short, x + (self.block - self.short), x),
                         self.block)


@dataclass(frozen=True)
class Shares:
    """Which positions of an epoch each (rank, worker) of a job reads, dealt by whole batches.

    The epoch's positions ``0 .. n-1`` (into an order such as :class:`BlockOrder`) are cut into
    batches of ``batch_size`` consecutive positions: batch ``k`` is ``span(k)``. Batch ``k`` goes
    to rank ``k % world``; a rank's ``i``-th batch (``i = k // world``) goes to its worker
    ``i % workers``, the order in which a torch DataLoader takes batches from its workers, so each
    rank sees its batches in global order. Reading batches ``0, 1, 2, ...`` in turn, whichever
    rank holds them, gives the same sequence of positions for every ``world`` and ``workers``.

    No position is repeated: unlike torch's ``DistributedSampler``, nothing is padded, so without
    ``even_batches`` ranks may get one batch more than others, and the last batch of the epoch
    may be short.

    Parameters
    ----------
    n : int
        Positions in the epoch (rows of the data set), >= 0.
    world : int
        Ranks of the job, >= 1.
    workers : int
        DataLoader workers per rank, >= 1 (the same on every rank).
    batch_size : int
        Positions per batch, >= 1.
    drop_last : bool
        Drop the epoch's final batch when it is short (``n % batch_size`` positions), as
        DataLoader's drop_last; the same positions are dropped for every ``world``.
    even_batches : bool
        Also drop the trailing ``batches % world`` batches, so that every rank gets the same
        number of batches: DDP needs equal steps on every rank, else the ranks with more wait
        for the others forever in the gradients' all-reduce. At most ``world - 1`` batches go;
        which ones depends on ``world``, but the batches kept are the same prefix of the same
        sequence.
    """

    n: int
    world: int = 1
    workers: int = 1
    batch_size: int = 1
    drop_last: bool = False
    even_batches: bool = False

    def __post_init__(self) -> None:
        _check_int(self.n, "n", 0)
        _check_int(self.world, "world", 1)
        _check_int(self.workers, "workers", 1)
        _check_int(self.batch_size, "batch_size", 1)

    @property
    def batches(self) -> int:
        """Batches the epoch deals, over all ranks, after ``drop_last`` and ``even_batches``."""
        b = self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)
        return b - b % self.world if self.even_batches else b

    @property
    def positions_dealt(self) -> int:
        """Positions the epoch deals: ``n`` unless batches were dropped."""
        return min(self.n, self.batches * self.batch_size)

    def span(self, k: int) -> Tuple[int, int]:
        """Positions ``[start, stop)`` of global batch ``k``."""
        k = _check_int(k, "k", 0, self.batches)
        return k * self.batch_size, min((k + 1) * self.batch_size, self.n)

    def batch_indices(self, rank: int, worker: int = 0) -> range:
        """The global batch indices that ``worker`` of ``rank`` reads, in order."""
        rank = _check_int(rank, "rank", 0, self.world)
        worker = _check_int(worker, "worker", 0, self.workers)
        return range(rank + self.world * worker, self.batches, self.world * self.workers)

    def steps(self, rank: int) -> int:
        """Batches ``rank`` gets over all its workers (its optimizer steps in the epoch)."""
        rank = _check_int(rank, "rank", 0, self.world)
        return len(range(rank, self.batches, self.world))

    def positions(self, rank: int, worker: int = 0) -> np.ndarray:
        """The positions that ``worker`` of ``rank`` reads, in order, as an int64 array.

        Holds ``n / (world * workers)`` values: for a large ``n``, walk :meth:`batch_indices`
        and :meth:`span` instead.
        """
        ks = np.asarray(self.batch_indices(rank, worker), dtype=np.int64)
        starts = ks * self.batch_size
        # Each batch is a run of consecutive positions; only the epoch's last may be short.
        pos = (starts[:, None] + np.arange(self.batch_size, dtype=np.int64)).reshape(-1)
        return pos[pos < self.n]


def epoch_positions(n: int, rank: int, world: int, worker: int = 0, workers: int = 1,
                    drop_last: bool = False, batch_size: int = 1,
                    even_batches: bool = False) -> np.ndarray:
    """The positions ``worker`` of ``rank`` reads in an epoch of ``n``, in order: shorthand for
    ``Shares(n, world, workers, batch_size, drop_last, even_batches).positions(rank, worker)``.

    The union over all ranks and workers is every position exactly once (no padding, unlike
    torch's DistributedSampler); see :class:`Shares` for how batches are dealt and dropped.
    """
    return Shares(n, world, workers, batch_size, drop_last, even_batches).positions(rank, worker)
