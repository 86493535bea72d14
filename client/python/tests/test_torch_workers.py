"""qdp.torch.loader's DataLoader workers against the CPU daemon: every epoch's order reaches
workers kept from one epoch to the next (each start method, prefetch, several workers, copies
of the data set), checked against qdp.sampling's order of (seed, epoch), and workers that give
their slots back when they leave.

Loaders with workers run in a process of their own (loader_run.py), started without gRPC or
CUDA as a training script is, under a timeout: this session's process has talked to the daemon,
and a worker forked from it could not."""

from __future__ import annotations

import gc
import json
import pathlib
import subprocess
import sys
from typing import Any, Dict, List

import numpy as np
import pytest

import qdp
import qdp.readers
from qdp.sampling import BlockOrder

torch = pytest.importorskip("torch")
qt = pytest.importorskip("qdp.torch")

HERE = pathlib.Path(__file__).resolve().parent
ROWS, BATCH, SEED = 150, 16, 7  # 10 batches, the last of 6 rows
#: Epochs set before the first iteration and between iterations, one broken off after its
#: first batch (its workers' batches in flight are dropped), one read twice.
PLAN = [[3, "all"], [0, "all"], [5, "first"], [1, "all"], [1, "all"]]


def run(daemon, timeout: float = 240, **cfg: Any) -> Dict[str, Any]:
    cfg = {"target": daemon.target, "rows": ROWS, "batch_size": BATCH, "seed": SEED,
           "plan": PLAN, **cfg}
    p = subprocess.run([sys.executable, str(HERE / "loader_run.py"), json.dumps(cfg)],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def epoch_batches(epoch: int, rows: int = ROWS, batch: int = BATCH, seed: int = SEED,
                  data: Any = None) -> List[List[int]]:
    """The rows of each batch of ``epoch``, from qdp.sampling's order of (seed, epoch)."""
    block = qdp.readers.open_source(np.zeros((rows, 6)) if data is None else data).block_rows
    order = BlockOrder(rows, block, seed=seed, epoch=epoch).at(np.arange(rows, dtype=np.int64))
    return [order[i:i + batch].tolist() for i in range(0, rows, batch)]


def check_plan(out: Dict[str, Any], plan: List[List[Any]] = PLAN) -> None:
    assert out["err"] < 1e-12, "a batch's states are not those of the rows its labels name"
    for (epoch, how), got in zip(plan, out["steps"]):
        want = epoch_batches(epoch)
        assert got == (want[:1] if how == "first" else want), f"epoch {epoch}"
    firsts = {epoch: tuple(epoch_batches(epoch)[0]) for epoch, _ in plan}
    assert len(set(firsts.values())) == len(firsts), "two epochs begin with the same batch"


KEPT = {  # DataLoader settings that keep the workers from one epoch to the next
    "fork": dict(workers=2, loader={"multiprocessing_context": "fork",
                                    "persistent_workers": True}),
    "forkserver": dict(workers=2, loader={"multiprocessing_context": "forkserver",
                                          "persistent_workers": True}),
    "spawn": dict(workers=2, loader={"multiprocessing_context": "spawn",
                                     "persistent_workers": True}),
    "three-workers-deep-prefetch": dict(workers=3, prefetch=0,
                                        loader={"multiprocessing_context": "fork",
                                                "persistent_workers": True,
                                                "prefetch_factor": 4}),
    "one-worker": dict(workers=1, prefetch=1, loader={"multiprocessing_context": "fork",
                                                      "persistent_workers": True}),
    "pickled-copy": dict(workers=2, copy="pickle",
                         loader={"multiprocessing_context": "spawn", "persistent_workers": True}),
    "deep-copy": dict(workers=2, copy="deepcopy",
                      loader={"multiprocessing_context": "fork", "persistent_workers": True}),
}


@pytest.mark.parametrize("setting", list(KEPT))
def test_every_epoch_reaches_kept_workers(daemon, setting) -> None:
    """Workers kept between epochs hold a copy of the data set made when they started; each
    epoch's order must still be qdp.sampling's of (seed, epoch), whether set_epoch came before
    the first iteration or between iterations (after one broken off, too)."""
    out = run(daemon, **KEPT[setting])
    assert out["persistent"]
    check_plan(out)


def test_an_iterations_epoch_is_fixed_when_it_begins(daemon) -> None:
    X = np.random.default_rng(0).uniform(-1, 1, size=(ROWS, 6))
    ds = qt.QuantumDataset(X, "angle", 6, batch_size=BATCH, shuffle=True, seed=SEED,
                           labels=np.arange(ROWS), target=daemon.target)
    it = iter(ds)
    ds.set_epoch(1)  # for the next iteration
    assert [r.tolist() for _, r in it] == epoch_batches(0)
    assert [r.tolist() for _, r in ds] == epoch_batches(1)
    ds.close()


def test_set_epoch_refusals() -> None:
    ds = qt.QuantumDataset(np.zeros((4, 6)), "angle", 6)
    for bad in (-1, 1 << 64, 1.0, True, "2"):
        with pytest.raises(qdp.InvalidArgument) as e:
            ds.set_epoch(bad)
        assert e.value.field == "epoch"
    ds.set_epoch(np.int64(4))
    ds.set_epoch((1 << 64) - 1)  # every epoch qdp.sampling takes
    assert ds.epoch == (1 << 64) - 1
    assert ds._epoch_now(in_worker=True) == (1 << 64) - 1  # a worker's first iteration
    assert ds._epoch_now(in_worker=True) == (1 << 64) - 1  # its later ones, shared memory


def test_leaving_workers_give_their_slots_back(client, daemon) -> None:
    """Forked workers leave by os._exit, past atexit; each still closes its channel, so that
    its slots do not stay registered on the daemon for its lease grace (30 s here)."""
    gc.collect()
    base = client.status().regions
    run(daemon, workers=2, plan=[[0, "all"]],
        loader={"multiprocessing_context": "fork", "persistent_workers": False})
    assert client.status().regions == base
