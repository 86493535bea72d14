"""qdp.torch.QuantumDataset against the CPU daemon: every batch against NumPy reference states,
each row once per epoch on every world size, the same global order whatever the world size,
shuffling by (seed, epoch), prefetch, workers and the refusals."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import qdp
import qdp.readers

import qdpref as ref

torch = pytest.importorskip("torch")
qt = pytest.importorskip("qdp.torch")

Q = 6


def data(rows: int = 203, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=(rows, Q))


def rows_of(batch: "torch.Tensor", X: np.ndarray) -> np.ndarray:
    """The row of X each state of an angle batch encodes (matched against the reference states
    of every row), checking that each state is exactly one of them."""
    want = ref.batch("angle", X, Q)
    got = batch.numpy()
    d = np.abs(got[:, None, :] - want[None, :, :]).max(axis=2)
    idx = d.argmin(axis=1)
    assert np.all(d[np.arange(len(idx)), idx] < 1e-12), "a batch holds a state of no row"
    return idx


def epoch_rows(X: np.ndarray, daemon, world: int, **kw) -> list:
    """Every rank's batches of one epoch, merged by global batch index, as row indices."""
    per_rank = []
    for r in range(world):
        ds = qt.QuantumDataset(X, "angle", Q, target=daemon.target, rank=r, world_size=world,
                               **kw)
        per_rank.append([rows_of(b, X) for b in ds])
    merged = []
    for i in range(max(len(p) for p in per_rank)):
        for r in range(world):
            if i < len(per_rank[r]):
                merged.append(per_rank[r][i])
    return merged


def test_batches_are_the_reference_states_in_order(daemon) -> None:
    X = data()
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=64, target=daemon.target, prefetch=0)
    got = list(ds)
    assert [b.shape for b in got] == [(64, 1 << Q)] * 3 + [(203 - 192, 1 << Q)]
    assert got[0].dtype == torch.complex128 and got[0].device.type == "cpu"
    want = ref.batch("angle", X, Q)
    ref.assert_close(torch.cat(got).numpy(), want, "complex128")
    assert len(ds) == 4


@pytest.mark.parametrize("encoding,cols,dtype", [("amplitude", 50, "complex64"),
                                                 ("phase", Q, "complex128"),
                                                 ("iqp-z", Q, "complex64")])
def test_other_encodings_and_dtypes(daemon, encoding, cols, dtype) -> None:
    X = np.random.default_rng(4).uniform(0.1, 1, size=(70, cols)).astype(np.float32)
    ds = qt.QuantumDataset(X, encoding, Q, batch_size=32, dtype=dtype, target=daemon.target)
    got = torch.cat(list(ds)).numpy()
    assert got.dtype == np.complex64 if dtype == "complex64" else np.complex128
    ref.assert_close(got, ref.batch(encoding, X.astype(np.float64), Q), dtype)


def test_basis_indices(daemon) -> None:
    idx = np.array([0, 5, 63, 7, 2], dtype=np.int64)
    ds = qt.QuantumDataset(idx, "basis", Q, batch_size=2, target=daemon.target)
    got = torch.cat(list(ds)).numpy()
    assert got.shape == (5, 1 << Q)
    assert np.array_equal(np.abs(got).argmax(axis=1), idx)


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_world_size_reads_each_row_once_in_the_same_global_order(daemon, shuffle) -> None:
    X = data(rows=157)
    orders = {}
    for world in (1, 2, 3, 4):
        merged = epoch_rows(X, daemon, world, batch_size=10, shuffle=shuffle, seed=11,
                            even_batches=False)
        flat = np.concatenate(merged)
        assert sorted(flat.tolist()) == list(range(len(X))), f"world {world}"
        orders[world] = flat.tolist()
    assert orders[1] == orders[2] == orders[3] == orders[4]
    assert (orders[1] == list(range(len(X)))) == (not shuffle)


def test_the_order_is_a_function_of_seed_and_epoch(daemon) -> None:
    X = data(rows=90)

    def order(seed: int, epoch: int) -> list:
        ds = qt.QuantumDataset(X, "angle", Q, batch_size=30, shuffle=True, seed=seed,
                               target=daemon.target)
        ds.set_epoch(epoch)
        return np.concatenate([rows_of(b, X) for b in ds]).tolist()

    a = order(5, 0)
    assert a == order(5, 0)
    assert a != order(5, 1) and a != order(6, 0)
    assert sorted(order(5, 1)) == list(range(90))


def test_even_batches_by_default_in_a_job_and_drop_last(daemon) -> None:
    X = data(rows=95)  # 10 batches of 10 (the last short)
    counts = [len(qt.QuantumDataset(X, "angle", Q, batch_size=10, rank=r, world_size=3,
                                    target=daemon.target)) for r in range(3)]
    assert counts == [3, 3, 3]  # 10 batches: the 10th is dropped so that the ranks step alike
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=10, drop_last=True, target=daemon.target)
    assert [b.shape[0] for b in ds] == [10] * 9


def test_prefetch_depths_give_the_same_batches_in_the_same_order(daemon) -> None:
    """Batches in flight on several threads come out in the epoch's order, whichever thread
    finishes first (a batch is bound to its place when it is submitted)."""
    X = data(rows=300)
    want = None
    for depth, group in ((0, 1), (1, 1), (4, 1), (8, 1), (4, 1), (8, 1), (0, 3), (2, 3),
                         (4, 5), (3, None)):
        ds = qt.QuantumDataset(X, "angle", Q, batch_size=8, prefetch=depth, shuffle=True,
                               target=daemon.target, labels=np.arange(300), group=group)
        got = list(ds)
        assert [len(r) for _, r in got] == [8] * 37 + [4], f"prefetch {depth} group {group}"
        states = torch.cat([b for b, _ in got]).numpy()
        rows = torch.cat([r for _, r in got]).numpy()
        if want is None:
            want = (states, rows)
        assert np.array_equal(rows, want[1]), \
            f"prefetch {depth} group {group}: the batches came out of order"
        assert np.array_equal(states, want[0])


def test_the_default_group_keeps_a_request_within_its_bounds() -> None:
    """Hand-computed: 2 GiB of states (and 1/64 of a GPU's memory), 8 MiB of input, 64
    batches at most, 1 at least."""
    X = np.zeros((10, 16))
    for qubits, cols, dtype, bs, want in ((16, 16, "complex128", 64, 32),  # 64 MiB of states
                                          (16, 16, "complex64", 64, 64),
                                          (6, 6, "complex128", 8, 64),      # the cap
                                          (16, 1 << 16, "complex128", 64, 1),  # 32 MiB input
                                          (10, 1 << 10, "complex128", 64, 16),  # 512 KiB input
                                          (20, 20, "complex128", 64, 2),    # 1 GiB of states
                                          (21, 21, "complex128", 64, 1)):   # 2 GiB of states
        ds = qt.QuantumDataset(np.zeros((10, cols)), "angle", qubits, batch_size=bs,
                               dtype=dtype)
        assert ds.group == want, (qubits, cols, dtype, bs)
    assert qt.QuantumDataset(X, "angle", 16, group=3).group == 3
    # On a GPU of 16 GiB a request holds at most 256 MiB: 8 batches of 32 MiB.
    assert qt._default_group(64, 128, 8 << 16, device_bytes=16 << 30) == 8
    assert qt._default_group(64, 128, 8 << 16, device_bytes=141 << 30) == 64


def test_an_iterations_first_requests_grow_to_the_group(daemon, monkeypatch) -> None:
    """Requests of 1, 2, 4, ... batches up to ``group``, so the first batch is not held back
    until a whole group is encoded; every batch still comes, in order."""
    sizes = []
    encode = qt._Stream._encode

    def spy(self, slot, req):
        sizes.append(len(req))
        return encode(self, slot, req)

    monkeypatch.setattr(qt._Stream, "_encode", spy)
    X = data(rows=400)
    for prefetch in (0, 2):
        sizes.clear()
        ds = qt.QuantumDataset(X, "angle", Q, batch_size=10, prefetch=prefetch, group=8,
                               target=daemon.target)
        got = np.concatenate([rows_of(b, X) for b in ds]).tolist()
        assert sizes == [1, 2, 4, 8, 8, 8, 8, 1], (prefetch, sizes)
        assert got == list(range(400))


def test_grouped_batches_are_each_the_callers_own(daemon) -> None:
    """Batches answered in one request are views of one tensor: kept past later requests and
    epochs, each still holds its own rows' states."""
    X = data(rows=100)
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=7, prefetch=2, group=4, shuffle=True,
                           seed=3, target=daemon.target, labels=np.arange(100))
    kept = list(ds)
    ds.set_epoch(1)
    later = list(ds)
    assert not np.array_equal(torch.cat([r for _, r in kept]).numpy(),
                              torch.cat([r for _, r in later]).numpy())
    want = ref.batch("angle", X, Q)
    for psi, rows in kept + later:
        ref.assert_close(psi.numpy(), want[rows.numpy()], "complex128")


def test_breaking_off_leaves_nothing_on_the_daemon(client, daemon) -> None:
    gc.collect()  # data sets of earlier tests give their slots back when collected
    base = client.status().regions
    X = data(rows=500)
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=20, prefetch=3, target=daemon.target)
    it = iter(ds)
    next(it)
    it.close()  # the consumer stops early: the batches in flight are dropped
    assert client.status().states == 0
    ds.close()  # and the slots kept for the next epoch go back
    assert client.status().regions == base


def test_workers_split_a_ranks_batches(daemon) -> None:
    X = data(rows=100)
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=10, target=daemon.target)
    got = [rows_of(b, X) for b in qt.loader(ds, num_workers=2)]
    assert sorted(np.concatenate(got).tolist()) == list(range(100))


def test_an_iterable_source_streams_in_order(daemon) -> None:
    X = data(rows=45)
    ds = qt.QuantumDataset((X[i:i + 7] for i in range(0, 45, 7)), "angle", Q, batch_size=10,
                           target=daemon.target)
    got = np.concatenate([rows_of(b, X) for b in ds]).tolist()
    assert got == list(range(45))
    with pytest.raises(qdp.NotSupported, match="shuffle"):
        qt.QuantumDataset(iter([X]), "angle", Q, shuffle=True, target=daemon.target)


def test_refusals(daemon) -> None:
    X = data(rows=10)
    with pytest.raises(qdp.InvalidArgument) as e:
        qt.QuantumDataset(X, "angle", Q, dtype="float64")
    assert e.value.field == "dtype"
    for kw, field in (({"batch_size": 0}, "batch_size"), ({"prefetch": -1}, "prefetch"),
                      ({"group": 0}, "group"), ({"group": True}, "group"),
                      ({"rank": 1}, "rank"), ({"rank": 4, "world_size": 4}, "rank")):
        with pytest.raises(qdp.InvalidArgument) as e:
            qt.QuantumDataset(X, "angle", Q, **kw)
        assert e.value.field == field
    ds = qt.QuantumDataset(X, "angle", Q, device="cuda:0", target=daemon.target)
    with pytest.raises(qdp.NotSupported, match="no GPU"):
        next(iter(ds))
    bad = qt.QuantumDataset(X, "angle", Q + 1, target=daemon.target)  # 6 values for 7 qubits
    with pytest.raises(qdp.InvalidArgument):
        next(iter(bad))


def test_labels_follow_their_rows(daemon) -> None:
    X = data(rows=77)
    y = np.arange(77) * 10
    for shuffle in (False, True):
        ds = qt.QuantumDataset(X, "angle", Q, batch_size=16, shuffle=shuffle, seed=2, labels=y,
                               target=daemon.target)
        for states, targets in ds:
            assert torch.equal(targets, torch.as_tensor(y[rows_of(states, X)]))
    with pytest.raises(qdp.InvalidArgument) as e:
        qt.QuantumDataset(X, "angle", Q, labels=y[:5])
    assert e.value.field == "labels"


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_parquet_file_of_row_groups(daemon, tmp_path, shuffle) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X = data(rows=130)
    path = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({f"c{k}": X[:, k] for k in range(Q)}), path, row_group_size=40)
    ds = qt.QuantumDataset(path, "angle", Q, batch_size=16, shuffle=shuffle, seed=4,
                           target=daemon.target)
    got = np.concatenate([rows_of(b, X) for b in ds]).tolist()
    assert sorted(got) == list(range(130))
    assert (got == list(range(130))) == (not shuffle)


def test_a_shuffled_epoch_names_its_next_row_groups_to_the_reader(daemon, tmp_path,
                                                                   monkeypatch) -> None:
    """A shuffled epoch reads the file block by block in a permuted order: as it comes to a
    block, the loader names that block and the next ones in that order for decoding ahead."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X = data(rows=130)
    path = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({f"c{k}": X[:, k] for k in range(Q)}), path, row_group_size=40)
    src = qdp.readers.open_source(path, readahead=2)
    calls = []
    will_need = src.will_need
    monkeypatch.setattr(src, "will_need", lambda b: (calls.append(list(b)), will_need(b))[1])
    ds = qt.QuantumDataset(src, "angle", Q, batch_size=16, shuffle=True, seed=4, prefetch=0,
                           target=daemon.target)
    batches = [rows_of(b, X) for b in ds]
    assert sorted(np.concatenate(batches).tolist()) == list(range(130))
    # A call at each batch that starts in another 40 positions than the one before: 0, 3, 5, 8.
    starts = [k for k in range(len(batches)) if k == 0 or 16 * k // 40 != 16 * (k - 1) // 40]
    assert len(calls) == len(starts) == 4
    seq = []  # the blocks in the order the epoch comes to them
    for r in np.concatenate(batches) // 40:
        if not seq or seq[-1] != r:
            seq.append(int(r))
    assert seq[:3] == calls[0]  # its own block and the next two in the permuted order
    for c, k in zip(calls, starts):
        assert c[0] == batches[k][0] // 40, f"the call at batch {k} names {c}"
        assert c == seq[seq.index(c[0]):seq.index(c[0]) + len(c)]


def test_epochs_reuse_the_channel_and_slots_and_close_gives_them_back(client, daemon) -> None:
    X = data(rows=100)
    gc.collect()  # data sets of earlier tests give their slots back when collected
    base = client.status().regions
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=20, prefetch=2, target=daemon.target)
    first = torch.cat(list(ds))
    regions = client.status().regions
    # One slot per batch in flight, and on the CPU the client's kept fetch regions (at most 4).
    assert base + 2 <= regions <= base + 2 + 4
    for epoch in (1, 2):
        ds.set_epoch(epoch)
        assert torch.equal(torch.cat(list(ds)), first)  # not shuffled: the same batches
        assert client.status().regions == regions
    both = [iter(ds), iter(ds)]  # two iterations at once: the second opens its own
    assert [next(it).shape for it in both] == [(20, 1 << Q)] * 2
    for it in both:
        it.close()
    ds.close()
    assert client.status().regions == base
