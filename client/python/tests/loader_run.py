"""Runs qdp.torch.loader with DataLoader workers in a process of its own, for
test_torch_workers.py: the process starts with no gRPC and no CUDA, as a training script does,
and a hang ends with the caller's timeout instead of the test session.

    python loader_run.py '{"target": "unix:...", "plan": [[3, "all"], [0, "all"]], ...}'

Each step of the plan sets the data set's epoch and reads that epoch from the loader ("all") or
its first batch only ("first", the rest is abandoned). Every batch's states are checked against
the reference states of the rows its labels name. Prints one JSON line: the row ids of every
batch of every step, the workers' start method, whether they persist, the largest difference
from the reference states, and (with "probe_grpc") whether gRPC counted as started in this
process when the loader was made.
"""

from __future__ import annotations

import copy
import gc
import json
import pathlib
import pickle
import sys
from typing import Any, Dict

import numpy as np

import qdp
import qdp.torch as qt

# A process of its own: conftest.py's path to the reference is not its path.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "reference"))
import qdpref as ref  # noqa: E402

Q = 6


def run(cfg: Dict[str, Any]) -> Dict[str, Any]:
    X = np.random.default_rng(cfg.get("data_seed", 0)).uniform(-1, 1, size=(cfg["rows"], Q))
    want = ref.batch("angle", X, Q)
    ds = qt.QuantumDataset(X, "angle", Q, batch_size=cfg["batch_size"], shuffle=True,
                           seed=cfg["seed"], prefetch=cfg.get("prefetch", 2),
                           labels=np.arange(len(X)), target=cfg["target"])
    if cfg.get("grpc_first"):  # this process talks to the daemon before its workers start
        with qdp.Client(cfg["target"]) as c:
            c.status()
    original = ds
    if cfg.get("copy") == "pickle":
        ds = pickle.loads(pickle.dumps(ds))
    elif cfg.get("copy") == "deepcopy":
        ds = copy.deepcopy(ds)
    grpc_started = qt._grpc_started() if cfg.get("probe_grpc") else None
    dl = qt.loader(ds, num_workers=cfg["workers"], **cfg.get("loader", {}))
    steps, err = [], 0.0
    for epoch, how in cfg["plan"]:
        ds.set_epoch(epoch)
        if original is not ds:  # a copy's epoch is its own
            original.set_epoch(epoch + 1000)
        ids = []
        for states, rows in dl:
            err = max(err, float(np.abs(states.numpy() - want[rows.numpy()]).max()))
            ids.append(rows.tolist())
            if how == "first":
                break
        steps.append(ids)
    out = {"steps": steps, "err": err, "grpc_started": grpc_started,
           "method": dl.multiprocessing_context.get_start_method(),
           "persistent": dl.persistent_workers}
    del dl  # its workers leave now, each closing its channel
    gc.collect()
    return out


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
