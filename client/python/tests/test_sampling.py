"""qdp.sampling: the keyed orders are bijections that depend on (n, seed, epoch, block) alone, and
the shares of an epoch cover every position once, in the same global order for every world size
(each rank computed in a process of its own, as in a job). No daemon needed."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np
import pytest

import qdp
from qdp.sampling import BlockOrder, Permutation, Shares, epoch_positions

SMALL = list(range(0, 130)) + [251, 256, 257, 1000, 1021, 1024, 4096, 65521, 65536, 65537]
LARGE = [10**6 + 3, 2**31 - 1, 2**32, 2**32 + 1, 10**9, 10**12 + 39, 2**62 + 7]


def full(order, n: int) -> np.ndarray:
    return order.at(np.arange(n))


# --- Permutation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,epoch", [(0, 0), (1, 7), (2**64 - 1, 2**63)])
def test_permutation_is_a_bijection_for_every_small_n(seed: int, epoch: int) -> None:
    for n in SMALL:
        p = Permutation(n, seed=seed, epoch=epoch)
        rows = full(p, n)
        assert rows.dtype == np.int64 and rows.shape == (n,)
        assert np.array_equal(np.sort(rows), np.arange(n)), f"n={n}"
        assert np.array_equal(p.index_of(rows), np.arange(n)), f"n={n}"


def test_permutation_scalar_path_is_the_vector_path() -> None:
    for n in [1, 2, 3, 17, 100, 1021, 4097]:
        p = Permutation(n, seed=5, epoch=3)
        rows = full(p, n)
        assert [p.at(i) for i in range(n)] == rows.tolist()
        assert [p.index_of(int(r)) for r in rows] == list(range(n))
        assert isinstance(p.at(0), int) and isinstance(p.at(np.int32(0)), int)
    rng = np.random.default_rng(0)
    for n in LARGE:
        p = Permutation(n, seed=9, epoch=1)
        xs = rng.integers(0, n, size=300)
        assert [p.at(int(x)) for x in xs] == p.at(xs).tolist(), f"n={n}"


@pytest.mark.parametrize("n", LARGE)
def test_permutation_of_a_large_n_is_injective_on_samples(n: int) -> None:
    rng = np.random.default_rng(n % 1000)
    xs = np.concatenate([rng.integers(0, n, size=200_000), np.arange(1000),
                         np.arange(n - 1000, n)])
    p = Permutation(n, seed=123, epoch=4)
    rows = p.at(xs)
    assert rows.min() >= 0 and rows.max() < n
    # index_of is a function, so index_of(at(x)) == x for all x means at is injective on them
    assert np.array_equal(p.index_of(rows), xs)
    assert np.unique(rows).size == np.unique(xs).size


def test_permutation_of_a_million_is_a_bijection_in_one_call() -> None:
    n = 10**6 + 3
    rows = full(Permutation(n, seed=77, epoch=2), n)
    assert np.array_equal(np.bincount(rows, minlength=n), np.ones(n, dtype=np.int64))


def test_at_is_vectorized_and_keeps_the_shape() -> None:
    p = Permutation(10**9, seed=1, epoch=2)
    xs = np.arange(10**6, dtype=np.int64)
    rows = p.at(xs)
    assert rows.shape == (10**6,) and rows.dtype == np.int64
    assert rows[12345] == p.at(12345)
    grid = p.at(np.arange(64).reshape(8, 8))
    assert grid.shape == (8, 8) and grid[3, 5] == p.at(29)
    assert p.at(np.arange(5, dtype=np.uint32)).tolist() == p.at(np.arange(5)).tolist()
    assert p.at(np.zeros(0, dtype=np.int64)).shape == (0,)
    assert p.at([]).shape == (0,)


def test_permutation_is_deterministic_in_seed_and_epoch() -> None:
    n = 10_000
    base = full(Permutation(n, seed=42, epoch=3), n)
    assert np.array_equal(base, full(Permutation(n, seed=42, epoch=3), n))
    for other in [Permutation(n, seed=43, epoch=3), Permutation(n, seed=42, epoch=4),
                  Permutation(n, seed=3, epoch=42)]:
        # unrelated orders agree at about 1 position in n
        assert np.count_nonzero(full(other, n) == base) < 20, other
    # and neither is near the identity or a shift of it
    assert np.count_nonzero(base == np.arange(n)) < 20
    assert abs(np.corrcoef(base, np.arange(n))[0, 1]) < 0.05
    assert len(set(np.diff(base[:100]).tolist())) > 90


def test_a_fixed_step_in_position_gives_scattered_steps_in_row() -> None:
    # A weak network leaks structure as repeated differences: with two rounds, positions d = B
    # apart (B = 100 here, the network's inner radix) land rows apart by one of a few values.
    n = 10_000
    rows = full(Permutation(n, seed=6, epoch=1), n)
    p = np.arange(0, n - 400, 9)
    for d in range(1, 400):
        steps = rows[p + d] - rows[p]
        assert np.unique(steps).size > 0.9 * p.size, d


def test_every_order_of_two_and_three_is_reached() -> None:
    seen2 = {tuple(full(Permutation(2, seed=s), 2)) for s in range(64)}
    seen3 = {tuple(full(Permutation(3, seed=0, epoch=e), 3)) for e in range(200)}
    assert seen2 == {(0, 1), (1, 0)}
    assert len(seen3) == 6


def test_shuffle_false_is_the_identity() -> None:
    for n in [0, 1, 7, 1000]:
        assert np.array_equal(full(Permutation(n, seed=5, shuffle=False), n), np.arange(n))
        assert np.array_equal(full(BlockOrder(n, 16, seed=5, shuffle=False), n), np.arange(n))
    assert Permutation(10**9, shuffle=False).at(123456789) == 123456789


def test_wrong_arguments_name_their_field() -> None:
    p = Permutation(10, seed=1)
    cases = [(lambda: p.at(10), "p"), (lambda: p.at(-1), "p"),
             (lambda: p.at(np.array([0, 10])), "p"), (lambda: p.at(np.array([0.5])), "p"),
             (lambda: p.index_of(np.array([11])), "row"),
             (lambda: Permutation(-1), "n"), (lambda: Permutation(5, seed=-1), "seed"),
             (lambda: Permutation(5, epoch=2**64), "epoch"),
             (lambda: Permutation(5, seed=1.5), "seed"),
             (lambda: BlockOrder(5, 0), "block"), (lambda: Shares(10, world=0), "world"),
             (lambda: Shares(10, 2).batch_indices(2), "rank"),
             (lambda: Shares(10, 2, 2).batch_indices(0, 2), "worker"),
             (lambda: Shares(10, batch_size=0), "batch_size"),
             (lambda: Shares(10, batch_size=3).span(4), "k")]
    for call, field in cases:
        with pytest.raises(qdp.InvalidArgument) as e:
            call()
        assert e.value.field == field, (field, e.value)


# --- BlockOrder ----------------------------------------------------------------------------------

def test_block_order_is_a_bijection() -> None:
    for n in list(range(0, 60)) + [97, 256, 1000, 1021]:
        for block in [1, 2, 3, 4, 7, 16, 64, 1000, 5000]:
            o = BlockOrder(n, block, seed=11, epoch=2)
            rows = full(o, n)
            assert np.array_equal(np.sort(rows), np.arange(n)), (n, block)
            assert np.array_equal(o.index_of(rows), np.arange(n)), (n, block)
            assert [o.at(i) for i in range(n)] == rows.tolist(), (n, block)
            assert [o.index_of(int(r)) for r in rows] == list(range(n)), (n, block)


def test_block_order_reads_whole_blocks_in_the_blocks_order() -> None:
    for n, block in [(1000, 64), (1024, 64), (1003, 10), (7, 3), (65, 8), (100, 99)]:
        o = BlockOrder(n, block, seed=3, epoch=5)
        rows = full(o, n)
        blocks = -(-n // block)
        visited = Permutation(blocks, seed=3, epoch=5).at(np.arange(blocks))
        # consecutive positions stay in one block until it is read out, blocks in the keyed order
        runs = rows // block
        change = np.flatnonzero(np.diff(runs)) + 1
        assert np.array_equal(runs[np.r_[0, change]], visited), (n, block)
        for b in visited:
            span = rows[runs == b]
            want = np.arange(b * block, min((b + 1) * block, n))
            assert np.array_equal(np.sort(span), want), (n, block, b)


def test_block_order_shuffles_inside_blocks_each_block_its_own_way() -> None:
    n, block = 64 * 100, 64
    o = BlockOrder(n, block, seed=8, epoch=0)
    rows = full(o, n).reshape(100, block)
    offsets = rows % block
    assert len({tuple(r) for r in offsets.tolist()}) == 100
    assert not any(np.array_equal(r, np.arange(block)) for r in offsets)
    later = full(BlockOrder(n, block, seed=8, epoch=1), n)
    assert np.count_nonzero(later == rows.reshape(-1)) < 20


def test_block_order_of_one_is_the_permutation() -> None:
    for n in [1, 2, 5, 100, 4097]:
        assert np.array_equal(full(BlockOrder(n, 1, seed=4, epoch=9), n),
                              full(Permutation(n, seed=4, epoch=9), n))


def test_block_order_batches_inside_one_block_match_the_scalar_path() -> None:
    # batches of a loader mostly fall inside one block: that path is taken apart from the rest
    for n, block in [(10**9, 8192), (10**9 + 7, 1000), (1003, 10), (20, 64)]:
        o = BlockOrder(n, block, seed=2, epoch=6)
        for start in [0, block - 3, n - 5, n // 2, (n // block) * block - 1]:
            xs = np.arange(max(start, 0), min(start + 64, n))
            assert o.at(xs).tolist() == [o.at(int(x)) for x in xs], (n, block, start)
            assert o.index_of(o.at(xs)).tolist() == xs.tolist()


@pytest.mark.parametrize("n,block", [(10**9, 8192), (10**12 + 39, 1 << 20), (2**40, 1000)])
def test_block_order_of_a_large_n_is_injective_on_samples(n: int, block: int) -> None:
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.integers(0, n, size=100_000), np.arange(n - 3 * block, n)])
    o = BlockOrder(n, block, seed=31, epoch=7)
    rows = o.at(xs)
    assert rows.min() >= 0 and rows.max() < n
    assert np.array_equal(o.index_of(rows), xs)


# --- Shares ---------------------------------------------------------------------------------------

CONFIGS = [(n, bs) for n in [0, 1, 5, 64, 100, 1003] for bs in [1, 7, 64, 2000]]


def dealt(s: Shares) -> Dict[int, Tuple[int, int, np.ndarray]]:
    """Global batch index -> (rank, worker, positions), from every share of ``s``."""
    out: Dict[int, Tuple[int, int, np.ndarray]] = {}
    for r in range(s.world):
        for w in range(s.workers):
            pos = s.positions(r, w)
            ks = list(s.batch_indices(r, w))
            assert np.array_equal(pos, np.concatenate(
                [np.arange(*s.span(k)) for k in ks] or [np.zeros(0, np.int64)]))
            assert np.array_equal(pos, epoch_positions(s.n, r, s.world, w, s.workers,
                                                       s.drop_last, s.batch_size,
                                                       s.even_batches))
            for k in ks:
                assert k not in out
                out[k] = (r, w, np.arange(*s.span(k)))
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_shares_cover_every_position_once_in_one_global_order(world: int, workers: int) -> None:
    for n, bs in CONFIGS:
        s = Shares(n, world, workers, batch_size=bs)
        batches = dealt(s)
        assert sorted(batches) == list(range(s.batches))
        merged = np.concatenate([batches[k][2] for k in sorted(batches)] or [np.zeros(0)])
        assert np.array_equal(merged, np.arange(n)), (n, bs)
        for k, (r, w, pos) in batches.items():
            assert r == k % world and w == (k // world) % workers
            # a batch is a run of batch_size consecutive positions, only the epoch's last short
            assert pos.size == (bs if k < s.batches - 1 else n - k * bs)
        assert sum(s.steps(r) for r in range(world)) == s.batches
        assert max(map(s.steps, range(world))) - min(map(s.steps, range(world))) <= 1


def test_workers_of_a_rank_split_its_batches_round_robin() -> None:
    s = Shares(1000, world=3, workers=4, batch_size=8)
    for r in range(3):
        mine = [list(s.batch_indices(r, w)) for w in range(4)]
        flat = sorted(k for ks in mine for k in ks)
        assert flat == list(range(r, s.batches, 3))
        # the DataLoader's order (worker 0, 1, 2, 3, 0, ...) is the rank's batches in order
        interleaved = [ks[i] for i in range(max(map(len, mine))) for ks in mine if i < len(ks)]
        assert interleaved == flat
        pos = [set(s.positions(r, w).tolist()) for w in range(4)]
        assert all(not (pos[a] & pos[b]) for a in range(4) for b in range(a + 1, 4))


def test_drop_last_drops_the_epochs_short_batch_for_every_world() -> None:
    for n, bs in CONFIGS:
        for world in [1, 2, 3, 4]:
            s = Shares(n, world, 2, batch_size=bs, drop_last=True)
            got = np.sort(np.concatenate([s.positions(r, w) for r in range(world)
                                          for w in range(2)]))
            assert np.array_equal(got, np.arange(n // bs * bs)), (n, bs, world)
            assert s.batches == n // bs and s.positions_dealt == n // bs * bs


def test_even_batches_give_every_rank_the_same_steps() -> None:
    for n, bs in CONFIGS:
        for world in [1, 2, 3, 4]:
            for drop_last in [False, True]:
                s = Shares(n, world, 3, batch_size=bs, drop_last=drop_last, even_batches=True)
                plain = Shares(n, world, 3, batch_size=bs, drop_last=drop_last)
                steps = {s.steps(r) for r in range(world)}
                assert len(steps) == 1 and steps.pop() == plain.batches // world
                assert 0 <= plain.batches - s.batches < world
                # what is kept is the prefix of the same sequence
                got = np.sort(np.concatenate([s.positions(r, w) for r in range(world)
                                              for w in range(3)]))
                assert np.array_equal(got, np.arange(s.positions_dealt))


# --- one process per rank ------------------------------------------------------------------------

RANK = r"""
import sys, numpy as np
from qdp.sampling import BlockOrder, Shares
n, block, seed, epoch, bs, world, rank, workers, drop_last, even, out = sys.argv[1:]
n, block, seed, epoch, bs, world, rank, workers = map(
    int, (n, block, seed, epoch, bs, world, rank, workers))
order = BlockOrder(n, block, seed=seed, epoch=epoch)
shares = Shares(n, world, workers, bs, drop_last == "1", even == "1")
ks, rows = [], []
for w in range(workers):
    for k in shares.batch_indices(rank, w):
        start, stop = shares.span(k)
        ks.append(np.full(stop - start, k))
        rows.append(order.at(np.arange(start, stop)))
empty = [np.zeros(0, np.int64)]
np.savez(out, k=np.concatenate(ks or empty), rows=np.concatenate(rows or empty),
         steps=shares.steps(rank))
"""


def run_ranks(tmp: pathlib.Path, world: int, *, n: int, block: int, seed: int, epoch: int,
              bs: int, workers: int, drop_last: bool, even: bool) -> List[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(pathlib.Path(qdp.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    procs, outs = [], []
    for rank in range(world):
        out = tmp / f"w{world}-r{rank}.npz"
        args = [n, block, seed, epoch, bs, world, rank, workers, int(drop_last), int(even), out]
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, *map(str, args)], env=env,
                                      stderr=subprocess.PIPE))
        outs.append(out)
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    return [dict(np.load(o)) for o in outs]


def merged(results: List[dict]) -> np.ndarray:
    k = np.concatenate([r["k"] for r in results])
    rows = np.concatenate([r["rows"] for r in results])
    # stable: inside a batch, rows keep the order its rank read them in
    return rows[np.argsort(k, kind="stable")]


@pytest.mark.parametrize("drop_last,even", [(False, False), (True, True)])
def test_ranks_in_their_own_processes_read_one_order(tmp_path: pathlib.Path, drop_last: bool,
                                                      even: bool) -> None:
    cfg = dict(n=1003, block=10, seed=2024, epoch=3, bs=7, workers=2, drop_last=drop_last,
               even=even)
    sequences = {}
    for world in [1, 2, 3, 4]:
        results = run_ranks(tmp_path, world, **cfg)
        seq = merged(results)
        sequences[world] = seq
        assert np.unique(seq).size == seq.size, world
        if even:
            assert len({int(r["steps"]) for r in results}) == 1, world
        else:
            assert np.array_equal(np.sort(seq), np.arange(1003)), world
    want = full(BlockOrder(1003, 10, seed=2024, epoch=3), 1003)
    for world, seq in sequences.items():
        # every world reads the same sequence; even_batches only shortens it
        assert np.array_equal(seq, want[:seq.size]), world
        assert seq.size >= (1003 // 7 - (world - 1)) * 7 if even else seq.size == 1003
