"""qdp.torch.loader's DataLoader workers against the CPU daemon: every epoch's order reaches
workers kept from one epoch to the next (each start method, prefetch, several workers, copies
of the data set), checked against qdp.sampling's order of (seed, epoch); how the workers start
(fork only where it is safe) and that they give their slots back when they leave.

Loaders with workers run in a process of their own (loader_run.py), started without gRPC or
CUDA as a training script is, under a timeout: this session's process has talked to the daemon,
and a worker forked from it could not."""

from __future__ import annotations

import gc
import json
import os
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


def epoch_batches(epoch: int) -> List[List[int]]:
    """The rows of each batch of ``epoch``, from qdp.sampling's order of (SEED, epoch)."""
    block = qdp.readers.open_source(np.zeros((ROWS, 6))).block_rows
    order = BlockOrder(ROWS, block, seed=SEED, epoch=epoch).at(np.arange(ROWS, dtype=np.int64))
    return [order[i:i + BATCH].tolist() for i in range(0, ROWS, BATCH)]


def check_plan(out: Dict[str, Any], plan: List[List[Any]] = PLAN) -> None:
    assert out["err"] < 1e-12, "a batch's states are not those of the rows its labels name"
    for (epoch, how), got in zip(plan, out["steps"]):
        want = epoch_batches(epoch)
        assert got == (want[:1] if how == "first" else want), f"epoch {epoch}"
    firsts = {epoch: tuple(epoch_batches(epoch)[0]) for epoch, _ in plan}
    assert len(set(firsts.values())) == len(firsts), \
        "two of the plan's epochs begin alike: a stale epoch could pass unseen"


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
    "the-default": dict(workers=2),
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


def test_a_process_that_talked_to_the_daemon_starts_workers_by_spawn(daemon) -> None:
    """A Client call before the loader starts gRPC in this process: a worker forked from it
    would share gRPC's poller with it, so the loader spawns its workers, which then give the
    right batches without hanging (the run's timeout)."""
    out = run(daemon, workers=2, grpc_first=True, probe_grpc=True)
    assert out["grpc_started"]
    assert out["method"] == "spawn" and out["persistent"]
    check_plan(out)


def test_a_fresh_process_forks_its_workers(daemon) -> None:
    """No gRPC and no CUDA in the process: the workers are forked, each makes its channel after
    the fork, and they persist by default."""
    out = run(daemon, workers=2, probe_grpc=True)
    assert not out["grpc_started"]
    assert out["method"] == "fork" and out["persistent"]
    check_plan(out)


def test_given_settings_are_kept(daemon) -> None:
    """persistent_workers and multiprocessing_context given to the loader are used as given."""
    plan = [[2, "all"], [4, "all"]]
    out = run(daemon, workers=2, plan=plan, loader={"persistent_workers": False})
    assert out["method"] == "fork" and not out["persistent"]
    check_plan(out, plan)
    out = run(daemon, workers=2, plan=plan, loader={"multiprocessing_context": "forkserver"})
    assert out["method"] == "forkserver" and out["persistent"]
    check_plan(out, plan)


def test_grpc_counts_as_started_from_the_first_channel_on(daemon) -> None:
    """The rule's view of gRPC, in a fresh process: not started before a Client, started once
    one has called the daemon, and still after it is closed; always started where
    GRPC_POLL_STRATEGY picks a poller that leaves no trace."""
    code = ("import json, sys, qdp, qdp.torch as qt\n"
            "seen = [qt._grpc_started()]\n"
            "c = qdp.Client(sys.argv[1]); c.status(); seen.append(qt._grpc_started())\n"
            "c.close(); del c; seen.append(qt._grpc_started())\n"
            "print(json.dumps(seen))\n")
    p = subprocess.run([sys.executable, "-c", code, daemon.target], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == [False, True, True]
    env = dict(os.environ, GRPC_POLL_STRATEGY="poll")
    p = subprocess.run([sys.executable, "-c", "import qdp.torch; print(qdp.torch._grpc_started())"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.stdout.strip() == "True", p.stderr[-2000:]


def test_workers_that_may_use_cuda_are_not_forked_once_cuda_is_up(monkeypatch) -> None:
    """With CUDA's driver initialised here, a forked worker could not use CUDA: workers that
    may (device None, or a CUDA device) are spawned; CPU ones are still forked."""
    monkeypatch.setattr(qt, "_grpc_started", lambda: False)
    X = np.zeros((4, 6))
    for cuda_up, device, want in ((False, None, "fork"), (True, None, "spawn"),
                                  (True, "cuda:0", "spawn"), (True, "cpu", "fork"),
                                  (False, "cuda:0", "fork")):
        monkeypatch.setattr(qt, "_cuda_started", lambda: cuda_up)
        ds = qt.QuantumDataset(X, "angle", 6, device=device)
        dl = qt.loader(ds, num_workers=2)
        assert dl.multiprocessing_context.get_start_method() == want, (cuda_up, device)
        assert dl.persistent_workers
    assert not qt.loader(ds).persistent_workers  # no workers: nothing to keep


CUDA_THEN_FORK = """
import json, multiprocessing as mp, sys, torch, qdp.torch as qt


def use_cuda(q):
    try:
        q.put(float(torch.ones(4, device="cuda").sum()) == 4.0)
    except Exception:
        q.put(False)


if __name__ == "__main__":
    if sys.argv[1] == "init":
        torch.cuda.init()
    elif sys.argv[1] == "is_available":
        torch.cuda.is_available()
    started = qt._cuda_started()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=use_cuda, args=(q,))
    p.start()
    print(json.dumps([started, q.get(timeout=120)]))
    p.join()
"""


def test_cuda_counts_as_started_when_a_forked_child_could_not_use_it() -> None:
    """On a GPU host, after each kind of CUDA use in a fresh process: the rule's view of CUDA
    (started or not) is right when it says whether a child forked then can use CUDA."""
    def after(use: str) -> List[bool]:
        p = subprocess.run([sys.executable, "-c", CUDA_THEN_FORK, use], capture_output=True,
                           text=True, timeout=240)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout)

    if not after("nothing")[1]:
        pytest.skip("no GPU that a process here can use")
    assert after("nothing") == [False, True]
    assert after("init") == [True, False]
    started, child_can = after("is_available")  # a cuInit, or none with NVML-based counting
    assert started != child_can


def test_leaving_workers_give_their_slots_back(client, daemon) -> None:
    """Forked workers leave by os._exit, past atexit; each still closes its channel, so that
    its slots do not stay registered on the daemon for its lease grace (30 s here)."""
    gc.collect()
    base = client.status().regions
    run(daemon, workers=2, plan=[[0, "all"]],
        loader={"multiprocessing_context": "fork", "persistent_workers": False})
    assert client.status().regions == base
