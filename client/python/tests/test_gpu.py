"""On a GPU daemon: zero-copy views of a state's shards (CUDA IPC under one lease), the state as
a CUDA tensor, and CUDA tensor input. Skipped where the daemon has no GPU or torch sees none."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import qdp

import reference as ref


@pytest.fixture
def gpu(gpu_daemon):
    torch = pytest.importorskip("torch")
    with qdp.Client(gpu_daemon.target, name="pytest-gpu") as c:
        if c.status().backend != "cuda":
            pytest.skip("the daemon found no GPU (--devices auto chose the CPU backend)")
        if not torch.cuda.is_available():
            pytest.skip("torch sees no GPU here")
        yield c, torch


def leases(c: qdp.Client, s: qdp.State) -> int:
    return s.info.leases


def test_views_read_the_state_in_place(gpu) -> None:
    c, torch = gpu
    X = np.random.default_rng(1).uniform(-1, 1, size=(3, 12))
    with c.encode(X, "angle", 12) as s:
        want = ref.batch("angle", X, 12)
        views = s.shards()
        assert views and leases(c, s) == 1
        for v in views:
            t = torch.as_tensor(v, device=f"cuda:{v.ordinal}")
            sh = v.shard
            got = t.cpu().numpy()
            ref.close(got, want[sh.row_first:sh.row_first + (sh.rows or 1),
                                sh.first:sh.first + sh.count], "complex128")
        views[0].close()
        views[0].close()
        assert leases(c, s) == 0


def test_state_as_a_cuda_tensor(gpu) -> None:
    c, torch = gpu
    x = np.linspace(0.1, 2.0, 10)
    with c.encode(x, "phase", 10, dtype="complex64") as s:
        t = s.torch()
        assert t.is_cuda and t.dtype == torch.complex64 and tuple(t.shape) == (1 << 10,)
        ref.close(t.cpu().numpy(), ref.phase(x, 10), "complex64")
        ref.close(s.numpy(), ref.phase(x, 10), "complex64")
        assert leases(c, s) == 1  # the tensor holds the view
        del t
        gc.collect()
        deadline = time.monotonic() + 10
        while leases(c, s) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leases(c, s) == 0
        cpu = s.torch(device="cpu")  # copied off the GPU, no lease left behind
        assert not cpu.is_cuda and leases(c, s) == 0
        ref.close(cpu.numpy(), ref.phase(x, 10), "complex64")


def test_cuda_tensor_input(gpu) -> None:
    c, torch = gpu
    t = torch.linspace(0.1, 1.0, 6, device="cuda:0", dtype=torch.float64)
    if not c.wire.has_field("Input", "cuda_ipc"):
        with pytest.raises(qdp.NotSupported, match="cuda_ipc"):
            c.encode(t, "angle", 6)
        return
    with c.encode(t, "angle", 6) as s:
        ref.close(s.numpy(), ref.angle(t.cpu().numpy(), 6), "complex128")
