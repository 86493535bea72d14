"""qdp.readers of Parquet and Arrow IPC files: every layout read back against the NumPy values
written here, reads and takes across block boundaries, columns and list columns, nulls under each
policy, the bound on blocks held in memory, blocks decoded ahead on threads, and files that are
not what their name says. No daemon is needed."""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import pickle
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import Any, List

import numpy as np
import pytest

import qdp
from qdp.readers import _blocks, open_source

from sources import (ROWS, SIZES, check_random_access, features, table, write_ipc,
                     write_parquet)


# --- Parquet and Arrow IPC ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["columns", "list", "fixed"])
def test_parquet_row_groups(tmp_path: pathlib.Path, pa: Any, kind: str) -> None:
    X = features()
    src = open_source(write_parquet(pa, tmp_path / "x.parquet", table(pa, X, kind)))
    assert src.blocks == len(SIZES) and src.block_rows == max(SIZES)
    assert src.block_starts.tolist() == np.concatenate([[0], np.cumsum(SIZES)]).tolist()
    assert src.block_of(np.array([0, 4, 5, 21, 22, 23])).tolist() == [0, 0, 1, 1, 2, 3]
    assert src.dtype == np.float64
    check_random_access(src, X)


@pytest.mark.parametrize("kind", ["columns", "list", "fixed"])
@pytest.mark.parametrize("suffix", [".arrow", ".ipc"])
def test_arrow_ipc_record_batches(tmp_path: pathlib.Path, pa: Any, kind: str,
                                  suffix: str) -> None:
    X = features(dtype=np.float32)
    src = open_source(write_ipc(pa, tmp_path / f"x{suffix}", table(pa, X, kind)))
    assert src.blocks == len(SIZES) and src.dtype == np.float32
    check_random_access(src, X)


def test_feather(tmp_path: pathlib.Path, pa: Any) -> None:
    import pyarrow.feather
    X = features()
    pyarrow.feather.write_feather(table(pa, X), str(tmp_path / "x.feather"), chunksize=8)
    src = open_source(tmp_path / "x.feather")
    assert src.blocks == -(-ROWS // 8)
    check_random_access(src, X)


def test_default_and_named_columns(tmp_path: pathlib.Path, pa: Any) -> None:
    X = features()
    t = table(pa, X).append_column("name", pa.array([f"r{i}" for i in range(ROWS)]))
    path = write_parquet(pa, tmp_path / "s.parquet", t)
    src = open_source(path)  # every numeric column, in schema order; the strings left out
    assert src.columns == ["x0", "x1", "x2"]
    check_random_access(src, X)
    np.testing.assert_array_equal(open_source(path, columns=["x2", "x0"]).read(0, ROWS),
                                  X[:, [2, 0]])
    with pytest.raises(qdp.InvalidArgument, match="'name' .* is string, not numbers"):
        open_source(path, columns=["x0", "name"])
    with pytest.raises(qdp.InvalidArgument, match="has no column 'nope'; its columns: x0"):
        open_source(path, columns=["nope"])
    with pytest.raises(qdp.InvalidArgument, match=r"columns=\['x0'\]"):
        open_source(path, columns="x0")
    both = table(pa, X, "list").append_column("y", pa.array(np.arange(ROWS)))
    lpath = write_parquet(pa, tmp_path / "l.parquet", both)
    with pytest.raises(qdp.InvalidArgument, match=r"list column 'x': pass columns=\['x'\]"):
        open_source(lpath)
    check_random_access(open_source(lpath, columns=["x"]), X)
    with pytest.raises(qdp.InvalidArgument, match="mixes a list column"):
        open_source(lpath, columns=["x", "y"])


def test_column_types(tmp_path: pathlib.Path, pa: Any) -> None:
    n = 6
    t = pa.table({"f32": pa.array(np.ones(n, np.float32)), "f64": pa.array(np.ones(n)),
                  "i": pa.array(np.arange(n, dtype=np.int16)),
                  "h": pa.array(np.ones(n, np.float16))})
    path = write_parquet(pa, tmp_path / "t.parquet", t, [n])
    with pytest.raises(qdp.InvalidArgument, match="mix float32 .* dtype='float64'"):
        open_source(path)
    assert open_source(path, dtype="float64").read(0, n)[:, 2].tolist() == list(range(n))
    assert open_source(path, columns=["i", "h"]).dtype == np.float64
    assert open_source(path, columns=["f32"]).dtype == np.float32
    ints = open_source(path, columns=["i"], dtype="int64")
    assert ints.dtype == np.int64 and ints.read(0, n)[:, 0].tolist() == list(range(n))
    with pytest.raises(qdp.InvalidArgument, match="dtype='int64' but column 'f64'"):
        open_source(path, columns=["i", "f64"], dtype="int64")
    nested = pa.table({"x": pa.array([[[1.0]], [[2.0]]])})
    with pytest.raises(qdp.InvalidArgument, match="must hold numbers"):
        open_source(write_parquet(pa, tmp_path / "n.parquet", nested, [2]))


def test_ragged_list_column(tmp_path: pathlib.Path, pa: Any) -> None:
    rows = [[1.0, 2.0]] * 9 + [[1.0, 2.0, 3.0]] + [[1.0, 2.0]] * 3
    path = write_parquet(pa, tmp_path / "r.parquet", pa.table({"x": pa.array(rows)}), [4, 4, 5])
    src = open_source(path)
    assert src.features == 2
    np.testing.assert_array_equal(src.read(0, 8), np.tile([1.0, 2.0], (8, 1)))
    with pytest.raises(qdp.InvalidArgument, match="row 9 of column 'x' .* has 3 values"):
        src.read(0, 13)


# --- nulls ---------------------------------------------------------------------------------------

def null_table(pa: Any, X: np.ndarray, kind: str) -> Any:
    """X with nulls at rows 7 and 25 (row groups 1 and 3 of SIZES) and a null list at 40."""
    if kind == "columns":
        cols = {f"x{j}": X[:, j].tolist() for j in range(X.shape[1])}
        cols["x2"][7] = None
        cols["x1"][25] = None
        cols["x0"][40] = cols["x2"][40] = None
        return pa.table(cols)
    rows: List[Any] = X.tolist()
    rows[7][2] = None
    rows[25][1] = None
    rows[40] = None
    typ = pa.list_(pa.float64(), X.shape[1]) if kind == "fixed" else pa.list_(pa.float64())
    return pa.table({"x": pa.array(rows, typ)})


def reads_null_fixed_lists(pa: Any, path: pathlib.Path) -> bool:
    """Whether this pyarrow reads back the null rows of a fixed-size list column of Parquet."""
    import pyarrow.parquet as pq
    try:
        pq.read_table(str(path))
    except pa.ArrowInvalid:
        return False
    return True


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("kind", ["columns", "list", "fixed"])
def test_null_policies(tmp_path: pathlib.Path, pa: Any, fmt: str, kind: str) -> None:
    X = features()
    t = null_table(pa, X, kind)
    write = write_parquet if fmt == "parquet" else write_ipc
    path = write(pa, tmp_path / f"n.{fmt}", t)
    column = "x2" if kind == "columns" else "x"
    if fmt == "parquet" and kind == "fixed" and not reads_null_fixed_lists(pa, path):
        with pytest.raises(qdp.InvalidArgument, match="cannot read null rows of a fixed-size"):
            open_source(path, null_policy="zero").read(0, ROWS)
        return
    # The metadata says row group 1 has a null: refused at open, naming the file's row.
    with pytest.raises(qdp.InvalidArgument, match=f"row 7, column '{column}' .* is null") as e:
        open_source(path)
    assert e.value.field == "data"
    zero = open_source(path, null_policy="zero")
    Z = X.copy()
    Z[7, 2] = Z[25, 1] = 0
    Z[40, [0, 2] if kind == "columns" else slice(None)] = 0
    check_random_access(zero, Z)
    skip = open_source(path, null_policy="skip")
    assert "after a scan" in repr(skip)
    keep = np.setdiff1d(np.arange(ROWS), [7, 25, 40])
    assert skip.rows == ROWS - 3
    assert np.diff(skip.block_starts).tolist() == [5, 16, 1, 8, 29, 2]
    check_random_access(skip, X[keep])


def test_null_found_on_read_without_statistics(tmp_path: pathlib.Path, pa: Any) -> None:
    X = features()
    path = write_parquet(pa, tmp_path / "n.parquet", null_table(pa, X, "columns"),
                         write_statistics=False)
    src = open_source(path)  # no statistics: nothing says there are nulls before a read
    np.testing.assert_array_equal(src.read(0, 5), X[:5])
    with pytest.raises(qdp.InvalidArgument, match="row 25, column 'x1'"):
        src.take([3, 26, 25])
    skip = open_source(path, null_policy="skip")
    assert skip.rows == ROWS - 3  # counted by reading each row group
    np.testing.assert_array_equal(skip.read(0, skip.rows),
                                  X[np.setdiff1d(np.arange(ROWS), [7, 25, 40])])


# --- bounded memory ------------------------------------------------------------------------------

class Loads:
    """Records the blocks a source converts and how many of them are alive at once (from any
    thread); a decode of a block in ``gated`` waits for ``gate``."""

    def __init__(self, src: Any, monkeypatch: pytest.MonkeyPatch, gated: Any = ()) -> None:
        self.loaded: List[int] = []
        self.alive = 0
        self.most = 0
        self.gate = threading.Event()
        self._lock = threading.RLock()  # _gone may run wherever an array dies
        load = src._load_block

        def counted(k: int) -> np.ndarray:
            if k in gated:
                assert self.gate.wait(10), f"the decode of block {k} was never let go"
            arr = load(k)
            with self._lock:
                self.loaded.append(k)
                self.alive += 1
                self.most = max(self.most, self.alive)
            weakref.finalize(arr, self._gone)
            return arr

        monkeypatch.setattr(src, "_load_block", counted)

    def _gone(self) -> None:
        with self._lock:
            self.alive -= 1


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_reads_hold_a_bounded_number_of_blocks(tmp_path: pathlib.Path, pa: Any, fmt: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = [10] * 20
    X = features(rows=200, cols=4)
    write = write_parquet if fmt == "parquet" else write_ipc
    src = open_source(write(pa, tmp_path / f"b.{fmt}", table(pa, X), sizes), readahead=0)
    loads = Loads(src, monkeypatch)
    np.testing.assert_array_equal(src.read(73, 77), X[73:77])
    assert loads.loaded == [7]  # block 7 alone is read
    np.testing.assert_array_equal(src.read(75, 79), X[75:79])
    assert loads.loaded == [7]  # and kept
    np.testing.assert_array_equal(src.read(0, 200), X)
    idx = np.random.default_rng(3).permutation(200)
    np.testing.assert_array_equal(src.take(idx), X[idx])
    assert sorted(loads.loaded[-20:]) == list(range(20))  # each block once per take
    for a in range(0, 200, 7):
        src.read(a, min(a + 7, 200))
    assert loads.most <= 2 and len(src.cached_blocks) <= 2
    for block in src.iter_blocks():
        assert len(src.cached_blocks) <= 2
    del block
    assert loads.most <= 4  # the cache's two, the one the loop holds and the next one
    one = open_source(write(pa, tmp_path / f"c.{fmt}", table(pa, X), sizes), cache_blocks=1,
                      readahead=0)
    loads = Loads(one, monkeypatch)
    one.take(idx)
    one.read(0, 200)
    assert loads.most == 1


def test_pickled_file_source_opens_again(tmp_path: pathlib.Path, pa: Any) -> None:
    X = features()
    src = open_source(write_parquet(pa, tmp_path / "p.parquet", table(pa, X)), columns=["x1"])
    again = pickle.loads(pickle.dumps(src))
    assert again.columns == ["x1"] and again.rows == ROWS
    np.testing.assert_array_equal(again.take([30, 2]), X[[30, 2]][:, [1]])


# --- readahead: blocks decoded ahead on threads ------------------------------------------------

BLOCKS = 20  # blocks of 10 rows


def blocks_file(pa: Any, tmp_path: pathlib.Path, fmt: str = "parquet") -> Any:
    """X (200 x 4) and a file of it in BLOCKS blocks of 10 rows."""
    X = features(rows=10 * BLOCKS, cols=4)
    write = write_parquet if fmt == "parquet" else write_ipc
    return X, write(pa, tmp_path / f"r.{fmt}", table(pa, X), [10] * BLOCKS)


def settle(src: Any) -> None:
    """Waits for the decodes started ahead to end (with a value or an error)."""
    concurrent.futures.wait([fut for fut, _ in list(src._ahead.values())], timeout=10)


def readahead_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("qdp-readahead")]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("kind", ["columns", "fixed"])
def test_readahead_reads_what_readahead_0_reads(tmp_path: pathlib.Path, pa: Any, fmt: str,
                                                kind: str) -> None:
    X = features()
    write = write_parquet if fmt == "parquet" else write_ipc
    path = write(pa, tmp_path / f"x.{fmt}", table(pa, X, kind))
    serial, ahead = open_source(path, readahead=0), open_source(path, readahead=4)
    assert (serial.readahead, ahead.readahead) == (0, 4)
    np.testing.assert_array_equal(ahead.read(0, 1), serial.read(0, 1))
    assert ahead.ahead_blocks == (1, 2, 3, 4) and serial.ahead_blocks == ()
    check_random_access(ahead, X)
    check_random_access(serial, X)
    assert [b.tolist() for b in ahead.iter_blocks()] == \
        [b.tolist() for b in serial.iter_blocks()]


def test_the_next_blocks_are_decoded_ahead_once(tmp_path: pathlib.Path, pa: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    X, path = blocks_file(pa, tmp_path)
    src = open_source(path, readahead=3)
    loads = Loads(src, monkeypatch)
    np.testing.assert_array_equal(src.read(0, 1), X[:1])
    assert src.ahead_blocks == (1, 2, 3) and src.cached_blocks == (0,)
    settle(src)
    assert sorted(loads.loaded) == [0, 1, 2, 3]
    np.testing.assert_array_equal(src.read(10, 30), X[10:30])  # blocks 1 and 2, from ahead
    assert src.cached_blocks == (1, 2) and src.ahead_blocks == (3, 4, 5)  # the window moves on
    settle(src)  # 4 and 5 decode in the background as soon as the read has moved the window
    assert sorted(loads.loaded) == [0, 1, 2, 3, 4, 5]  # 1 and 2 not decoded again
    stream = open_source(path, readahead=3)
    loads = Loads(stream, monkeypatch)
    got = []
    for block in stream.iter_blocks():
        assert len(stream.ahead_blocks) <= 3
        got.append(block)
    np.testing.assert_array_equal(np.concatenate(got), X)
    assert sorted(loads.loaded) == list(range(BLOCKS))  # each block once


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_readahead_holds_a_bounded_number_of_blocks(tmp_path: pathlib.Path, pa: Any, fmt: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    X, path = blocks_file(pa, tmp_path, fmt)
    src = open_source(path, readahead=3)  # and cache_blocks=2: at most 5 blocks held
    loads = Loads(src, monkeypatch)
    src.read(0, 1)
    settle(src)
    assert loads.alive == 4  # block 0 cached, 1-3 decoded ahead
    np.testing.assert_array_equal(src.read(150, 151), X[150:151])  # far from those
    settle(src)
    assert src.ahead_blocks == (16, 17, 18)  # 1-3, never read, dropped to make room
    assert src.cached_blocks == (0, 15) and loads.alive == 5
    rng = np.random.default_rng(5)
    for _ in range(40):
        a = int(rng.integers(0, 200))
        np.testing.assert_array_equal(src.read(a, min(a + 13, 200)), X[a:a + 13])
        idx = rng.integers(0, 200, 9)
        np.testing.assert_array_equal(src.take(idx), X[idx])
        assert len(src.cached_blocks) <= 2 and len(src.ahead_blocks) <= 3
    assert loads.most <= 2 + 3 + 1  # cache, ahead, and the one the reading thread converts
    for block in src.iter_blocks():
        assert len(src.cached_blocks) <= 2 and len(src.ahead_blocks) <= 3
    del block
    assert loads.most <= 2 + 3 + 2  # and the one the loop holds


def test_threads_reading_random_rows(tmp_path: pathlib.Path, pa: Any) -> None:
    X, path = blocks_file(pa, tmp_path)
    src = open_source(path, readahead=2)
    failures: List[str] = []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(25):
            a = int(rng.integers(0, 200))
            b = min(200, a + int(rng.integers(1, 40)))
            idx = rng.integers(0, 200, 16)
            out = np.empty((len(idx), 4))
            try:
                right = np.array_equal(src.read(a, b), X[a:b]) and \
                    np.array_equal(src.take(idx, out=out), X[idx])
            except Exception as e:
                failures.append(f"reader {seed}: {e!r}")
                return
            if not right:
                failures.append(f"reader {seed}: rows {a}-{b} or {idx.tolist()} wrong")

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads) and failures == []
    assert len(src.ahead_blocks) <= 2 and len(src.cached_blocks) <= 2


def test_two_readers_of_a_block_decode_it_once(tmp_path: pathlib.Path, pa: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    X, path = blocks_file(pa, tmp_path)
    src = open_source(path, readahead=2)
    loads = Loads(src, monkeypatch, gated={5})
    got: List[np.ndarray] = []
    threads = [threading.Thread(target=lambda: got.append(src.block(5))) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)  # all three asking while the first decodes
    loads.gate.set()
    for t in threads:
        t.join(10)
    assert loads.loaded.count(5) == 1 and len(got) == 3
    assert got[0] is got[1] is got[2]
    np.testing.assert_array_equal(got[0], X[50:60])


def test_a_wait_for_a_block_blocks_no_other_reader(tmp_path: pathlib.Path, pa: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    X, path = blocks_file(pa, tmp_path)
    src = open_source(path, readahead=2)
    loads = Loads(src, monkeypatch, gated={6, 12})
    src.read(50, 51)  # block 5: 6 (held at the gate) and 7 start ahead
    got = {}
    waiting = [threading.Thread(target=lambda k=k: got.setdefault(k, src.block(k)))
               for k in (6, 12)]  # 6 waits on its decode ahead, 12 decodes on its thread
    for t in waiting:
        t.start()
    time.sleep(0.1)
    other = threading.Thread(target=lambda: got.setdefault(0, src.read(0, 10)))
    other.start()
    other.join(5)
    assert not other.is_alive(), "a read of block 0 waited for readers of blocks 6 and 12"
    assert 6 not in got and 12 not in got
    np.testing.assert_array_equal(got[0], X[:10])
    loads.gate.set()
    for t in waiting:
        t.join(10)
    np.testing.assert_array_equal(got[6], X[60:70])
    np.testing.assert_array_equal(got[12], X[120:130])


def test_an_error_decoded_ahead_is_raised_by_its_block(tmp_path: pathlib.Path,
                                                       pa: Any) -> None:
    X = features()
    path = write_parquet(pa, tmp_path / "n.parquet", null_table(pa, X, "columns"),
                         write_statistics=False)  # nothing says there are nulls before a read
    with pytest.raises(qdp.InvalidArgument) as serial:
        open_source(path, readahead=0).read(23, 32)
    src = open_source(path, readahead=4)
    np.testing.assert_array_equal(src.read(0, 5), X[:5])
    assert src.ahead_blocks == (1, 2, 3, 4)
    settle(src)  # blocks 1 (rows 5-21, a null at 7) and 3 (rows 23-31, at 25) failed ahead
    np.testing.assert_array_equal(src.read(22, 23), X[22:23])  # block 2, between them
    for _ in range(2):  # raised on every read of it, not once
        with pytest.raises(qdp.InvalidArgument, match="row 25, column 'x1'") as e:
            src.read(23, 32)
        assert str(e.value) == str(serial.value) and e.value.field == "data"
    with pytest.raises(qdp.InvalidArgument, match="row 7, column 'x2'"):
        src.read(5, 22)
    with pytest.raises(qdp.InvalidArgument, match="row 25, column 'x1'"):
        src.take([3, 26, 25])
    np.testing.assert_array_equal(src.read(62, 64), X[62:64])
    np.testing.assert_array_equal(src.read(0, 5), X[:5])
    skip = [open_source(path, null_policy="skip", readahead=r) for r in (0, 3)]
    assert skip[1].block_starts.tolist() == skip[0].block_starts.tolist()  # scanned on threads
    assert skip[1].rows == ROWS - 3
    np.testing.assert_array_equal(skip[1].read(0, skip[1].rows),
                                  X[np.setdiff1d(np.arange(ROWS), [7, 25, 40])])


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_close_while_decoding_ahead(tmp_path: pathlib.Path, pa: Any, fmt: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    X, path = blocks_file(pa, tmp_path, fmt)
    closed = open_source(path, readahead=0)
    closed.close()
    with pytest.raises(Exception) as serial:
        closed.read(0, 5)
    src = open_source(path, readahead=2)
    loads = Loads(src, monkeypatch, gated={1, 2})
    before = set(readahead_threads())
    src.read(0, 1)  # 1 and 2 start and wait at the gate
    threads = [t for t in readahead_threads() if t not in before]
    assert threads and src.ahead_blocks == (1, 2)
    outcome: List[Any] = []

    def reader() -> None:
        try:
            outcome.append(src.read(10, 20))
        except Exception as e:
            outcome.append(e)

    waiting = threading.Thread(target=reader)
    waiting.start()
    time.sleep(0.05)
    threading.Timer(0.2, loads.gate.set).start()
    src.close()  # waits for the decodes under way
    waiting.join(10)
    assert not waiting.is_alive() and len(outcome) == 1
    if isinstance(outcome[0], np.ndarray):  # its block was decoded before close
        np.testing.assert_array_equal(outcome[0], X[10:20])
    assert not any(t.is_alive() for t in threads)
    assert src.ahead_blocks == () and src.cached_blocks == ()
    with pytest.raises(type(serial.value)):
        src.read(0, 5)
    assert src.ahead_blocks == ()


def test_will_need_starts_the_blocks_named(tmp_path: pathlib.Path, pa: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    X, path = blocks_file(pa, tmp_path)
    src = open_source(path, readahead=3)
    loads = Loads(src, monkeypatch)
    src.will_need([9, 2, 15, 7, 11])
    assert src.ahead_blocks == (9, 2, 15)  # in order, up to the bound
    settle(src)
    assert sorted(loads.loaded) == [2, 9, 15]
    np.testing.assert_array_equal(src.read(20, 30), X[20:30])
    assert loads.loaded.count(2) == 1
    assert src.ahead_blocks == (9, 15)  # a block asked for starts no guesses after it
    src.will_need([7, 9])
    assert src.ahead_blocks == (9, 15, 7)
    settle(src)
    src.will_need([0, 9])  # room made by the oldest not named: 15
    assert src.ahead_blocks == (9, 7, 0)
    settle(src)
    np.testing.assert_array_equal(src.read(180, 181), X[180:181])
    settle(src)
    assert src.ahead_blocks == (9, 7, 0)  # the guess of block 19 displaces no block named
    assert 19 not in loads.loaded
    np.testing.assert_array_equal(src.take([95, 1, 72]), X[[95, 1, 72]])
    assert sorted(loads.loaded) == [0, 2, 7, 9, 15, 18]  # taken from ahead
    with pytest.raises(qdp.OutOfRange, match=r"block 20 of a source of 20 blocks") as e:
        src.will_need([1, 20])
    assert e.value.field == "blocks"
    with pytest.raises(qdp.InvalidArgument, match="integer block numbers"):
        src.will_need([1.5])
    serial = open_source(path, readahead=0)
    serial_loads = Loads(serial, monkeypatch)
    serial.will_need([1, 2])
    assert serial.ahead_blocks == () and serial_loads.loaded == []
    assert open_source(X).will_need([1, 2]) is None  # arrays: nothing to prepare


def test_readahead_is_checked(tmp_path: pathlib.Path, pa: Any) -> None:
    X, path = blocks_file(pa, tmp_path)
    for bad in (-1, 1.5, "2", True):
        for data in (path, X):
            with pytest.raises(qdp.InvalidArgument, match="readahead=") as e:
                open_source(data, readahead=bad)
            assert e.value.field == "readahead"
    assert open_source(path, readahead=np.int64(2)).readahead == 2


def test_the_default_readahead_holds_a_gib_of_blocks(tmp_path: pathlib.Path, pa: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 10 rows x 4 float64 (320 bytes): as many as fit in READAHEAD_BYTES, 1 to
    min(8, CPUs)."""
    _, path = blocks_file(pa, tmp_path)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert open_source(path).readahead == 8  # 1 GiB holds millions
    monkeypatch.setattr(_blocks, "READAHEAD_BYTES", 3 * 320 + 319)
    assert open_source(path).readahead == 3
    monkeypatch.setattr(_blocks, "READAHEAD_BYTES", 100)
    assert open_source(path).readahead == 1  # a block larger than the budget: still one
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_blocks, "READAHEAD_BYTES", 1 << 30)
    assert open_source(path).readahead == 2


def test_pickling_keeps_readahead(tmp_path: pathlib.Path, pa: Any) -> None:
    X, path = blocks_file(pa, tmp_path)
    for n in (0, 3):
        again = pickle.loads(pickle.dumps(open_source(path, readahead=n, cache_blocks=1)))
        assert again.readahead == n
        np.testing.assert_array_equal(again.read(0, 15), X[:15])
        assert again.ahead_blocks == ((2, 3, 4) if n else ())


def test_a_replaced_file_is_refused(tmp_path: pathlib.Path, pa: Any) -> None:
    X, path = blocks_file(pa, tmp_path)
    src, serial = open_source(path, readahead=2), open_source(path, readahead=0)
    other = write_parquet(pa, tmp_path / "other.parquet", table(pa, X + 1), [10] * BLOCKS)
    os.replace(other, path)
    with pytest.raises(qdp.Aborted, match="changed since the source was opened"):
        src.read(0, 5)  # a decode thread would open the new file
    np.testing.assert_array_equal(serial.read(0, 5), X[:5])  # its file, open since


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
def test_a_forked_child_reads_with_threads_of_its_own(tmp_path: pathlib.Path, pa: Any) -> None:
    X, path = blocks_file(pa, tmp_path)
    src = open_source(path, readahead=2)
    src.read(0, 1)  # the parent's threads decode 1 and 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process
        pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if np.array_equal(src.read(0, 200), X) else 1)
        finally:
            os._exit(2)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung reading the source")
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_array_equal(src.read(0, 200), X)


def test_not_an_arrow_file(tmp_path: pathlib.Path, pa: Any) -> None:
    import pyarrow.ipc
    t = table(pa, features())
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as f, pyarrow.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    with pytest.raises(qdp.InvalidArgument, match="pyarrow.ipc.new_file"):
        open_source(tmp_path / "s.arrow")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(qdp.InvalidArgument, match="is not a Parquet file"):
        open_source(tmp_path / "junk.parquet")


def test_missing_pyarrow_says_what_to_install(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    (tmp_path / "x.feather").write_bytes(b"ARROW1")
    with pytest.raises(qdp.NotSupported, match="pip install pyarrow"):
        open_source(tmp_path / "x.feather")
    with pytest.raises(qdp.NotSupported, match="pip install pyarrow"):
        open_source(tmp_path / "x.parquet")
