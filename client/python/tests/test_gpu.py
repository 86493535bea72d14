"""On a GPU daemon: zero-copy views of a state's shards (under one lease), the state as
a CUDA tensor, CUDA tensor input, and encodes into a caller's tensor (out=). Skipped where the
daemon has no GPU or torch sees none."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import qdp

import qdpref as ref
from polling import wait_for


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
            ref.assert_close(got, want[sh.row_first:sh.row_first + (sh.rows or 1),
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
        ref.assert_close(t.cpu().numpy(), ref.phase(x, 10), "complex64")
        ref.assert_close(s.numpy(), ref.phase(x, 10), "complex64")
        assert leases(c, s) == 1  # the tensor holds the view
        del t
        gc.collect()
        deadline = time.monotonic() + 10
        while leases(c, s) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leases(c, s) == 0
        cpu = s.torch(device="cpu")  # copied off the GPU, no lease left behind
        assert not cpu.is_cuda and leases(c, s) == 0
        ref.assert_close(cpu.numpy(), ref.phase(x, 10), "complex64")


def test_cuda_tensor_input(gpu) -> None:
    c, torch = gpu
    t = torch.linspace(0.1, 1.0, 6, device="cuda:0", dtype=torch.float64)
    with c.encode(t, "angle", 6) as s:
        ref.assert_close(s.numpy(), ref.angle(t.cpu().numpy(), 6), "complex128")


def wait_leases(s: qdp.State, want: int, seconds: float = 10) -> int:
    return wait_for(lambda: s.info.leases, want, seconds)


def wait_used(c: qdp.Client, want: int, seconds: float = 10) -> int:
    return wait_for(lambda: c.status().used_bytes, want, seconds)


def test_torch_is_a_view_inside_the_mapped_allocation(gpu, monkeypatch) -> None:
    c, torch = gpu
    from qdp import _cuda, _views

    opened = []

    def recording(*args, **kwargs):
        views = real(*args, **kwargs)
        opened.extend(views)
        return views

    real = _views.open_views
    monkeypatch.setattr(_views, "open_views", recording)
    x = np.random.default_rng(2).uniform(-1, 1, size=1 << 20)
    with c.encode(x, "amplitude", 20, policy="single") as s:
        before = torch.cuda.memory_allocated(0)
        t = s.torch()
        assert len(opened) == 1
        v = opened[0]
        end = v.ptr + v.shape[0] * v.shape[1] * 16
        assert v.ptr <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= end, \
            f"tensor at {t.data_ptr():#x}+{t.numel() * 16} is outside view {v.ptr:#x}..{end:#x}"
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        rt = _cuda.runtime()
        fn = getattr(rt.drv, "cuMemGetAddressRange_v2", None) or rt.drv.cuMemGetAddressRange
        rt.check(fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(t.data_ptr())),
                 "cuMemGetAddressRange")
        mapped = v._lease.bases + [ptr for ptr, _, _ in v._lease.maps]
        assert base.value in mapped, "the tensor is not in the allocation the view mapped"
        assert torch.cuda.memory_allocated(0) == before, "torch allocated device memory"
        assert t.numel() == 1 << 20 and size.value >= (1 << 20) * 16
        ref.assert_close(t.cpu().numpy(), ref.amplitude(x, 20), "complex128")
        del t, v
        opened.clear()
        assert wait_leases(s, 0) == 0


def test_torch_time_does_not_grow_with_the_state(gpu) -> None:
    """.torch() of 2^20 and of 2^30 complex128 amplitudes (16 MiB and 16 GiB): a view either
    way, so both are fast and about as fast."""
    c, torch = gpu
    if c.status().devices[0].free_bytes < (17 << 30):
        pytest.skip("needs 17 GiB free on the first GPU")
    times = {}
    for q in (20, 30):
        with c.encode(np.full(q, 0.3), "angle", q, policy="single") as s:
            runs = []
            for _ in range(4):  # the first opens CUDA here: not counted
                t0 = time.perf_counter()
                t = s.torch()
                runs.append(time.perf_counter() - t0)
                assert t.is_cuda and t.numel() == 1 << q
                del t
                assert wait_leases(s, 0) == 0
            times[q] = sorted(runs[1:])[1]
    small, big = times[20] * 1e3, times[30] * 1e3
    print(f"bench op=torch-view qubits=20 ms={small:.3f}\nbench op=torch-view qubits=30 "
          f"ms={big:.3f} ratio={big / small:.2f}")
    assert small < 20 and big < 20, f".torch(): {small:.2f} ms at 2^20, {big:.2f} ms at 2^30"
    assert big / small < 10, f".torch() grows with the state: {small:.3f} ms -> {big:.3f} ms"


def same_bits_as_inline(c: qdp.Client, torch, X: np.ndarray, encoding: str, q: int,
                        gx=None) -> None:
    """Encodes X inline and as a CUDA tensor (gx, else X copied to the GPU): the same bits."""
    gx = torch.from_numpy(X).to("cuda:0") if gx is None else gx
    with c.encode(X, encoding, q) as a, c.encode(gx, encoding, q) as b:
        assert a.shape == b.shape
        want, got = a.numpy(), b.numpy()
        assert got.tobytes() == want.tobytes(), \
            f"CUDA input differs from inline: max |d| {np.abs(got - want).max():.3g}"


# Amplitude input on the state's GPU is read in place by both passes: rows shorter than the
# state (zero padding, a row stride that is not a power of two) and one sample larger than a
# staging slot (64 MiB) included.
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("encoding,shape,q", [
    ("amplitude", (37,), 6), ("amplitude", (5, 64), 6), ("amplitude", (5, 37), 6),
    ("amplitude", ((1 << 24) + 3,), 25), ("angle", (4, 9), 9)])
def test_cuda_tensor_input_gives_the_bits_of_inline_input(gpu, dtype, encoding, shape,
                                                          q) -> None:
    c, torch = gpu
    X = np.random.default_rng(7).uniform(-1, 1, size=shape).astype(dtype)
    same_bits_as_inline(c, torch, X, encoding, q)


def test_a_cuda_tensor_encoded_again_is_read_anew(gpu) -> None:
    """The daemon keeps a client's allocation open between jobs: a tensor changed in place, and
    a new tensor where a freed one was, are read as they are now."""
    c, torch = gpu
    rng = np.random.default_rng(8)
    X = rng.uniform(-1, 1, size=(4, 256))
    g = torch.from_numpy(X).to("cuda:0")
    same_bits_as_inline(c, torch, X, "amplitude", 8, g)
    X2 = rng.uniform(-1, 1, size=X.shape)
    g.copy_(torch.from_numpy(X2))
    same_bits_as_inline(c, torch, X2, "amplitude", 8, g)
    del g
    torch.cuda.empty_cache()  # the allocation goes back to the driver; a new one takes its place
    X3 = rng.uniform(-1, 1, size=X.shape)
    same_bits_as_inline(c, torch, X3, "amplitude", 8)


def test_dlpack_of_a_gpu_state(gpu) -> None:
    c, torch = gpu
    x = np.linspace(-1, 1, 256)
    with c.encode(x, "amplitude", 8, policy="single") as s:
        kind, ordinal = s.__dlpack_device__()
        assert kind == 2  # kDLCUDA
        t = torch.from_dlpack(s)
        assert t.is_cuda and t.device.index == ordinal and t.dtype == torch.complex128
        ref.assert_close(t.cpu().numpy(), ref.amplitude(x, 8), "complex128")
        assert leases(c, s) == 1  # the capsule's tensor holds the view
        del t
        assert wait_leases(s, 0) == 0


def test_dlpack_of_a_sharded_state_says_what_to_use(gpu) -> None:
    c, torch = gpu
    if len(c.status().devices) < 2:
        pytest.skip("one GPU: no state can be sharded")
    with c.encode(np.full(12, 0.2), "angle", 12, policy="even") as s:
        if len(s.info.shards) < 2:
            pytest.skip("the daemon kept the state on one GPU")
        with pytest.raises(qdp.NotSupported, match="shards"):
            s.__dlpack__()
        with pytest.raises(qdp.NotSupported, match="shards"):
            s.__dlpack_device__()


def test_leases_end_when_the_tensors_die(gpu) -> None:
    c, torch = gpu
    base = c.status().used_bytes
    x = np.random.default_rng(4).uniform(-1, 1, size=(3, 1 << 12))
    s = c.encode(x, "amplitude", 12, policy="single")
    assert c.status().used_bytes > base
    t1 = s.torch()
    t2 = torch.from_dlpack(s)
    views = s.shards()
    assert leases(c, s) == 3
    del t1
    assert wait_leases(s, 2) == 2
    ref.assert_close(t2.cpu().numpy(), ref.batch("amplitude", x, 12), "complex128")  # still mapped
    del views
    assert wait_leases(s, 1) == 1
    ref.assert_close(t2.cpu().numpy(), ref.batch("amplitude", x, 12), "complex128")
    del t2
    assert wait_leases(s, 0) == 0
    s.release()
    assert wait_used(c, base) == base


def test_a_writable_tensor_holds_the_write_lease_and_its_writes_are_read_after(gpu) -> None:
    c, torch = gpu
    x = np.full(10, np.pi / 4)  # every qubit (1, 1) / sqrt(2): real amplitudes
    with c.encode(x, "angle", 10, policy="single") as s, \
            c.encode(x, "angle", 10, policy="single") as b:
        base = s.numpy()
        t = s.torch(writable=True)
        info = s.info
        assert (info.written, info.leases) == (True, 1)
        assert info.writer_lease_id and f"(pid {os.getpid()})" in info.writer
        # While it is open: no read of s, no other view, whoever asks.
        for read in (s.numpy, s.shards, lambda: s.kernel(b), lambda: b.kernel(s),
                     lambda: s.probabilities()):
            with pytest.raises(qdp.FailedPrecondition, match="leased for writing"):
                read()
        with qdp.Client(c.target) as other:
            with pytest.raises(qdp.FailedPrecondition, match=f"lease {info.writer_lease_id}"):
                other.state(s.handle, s.token).numpy()
        assert b.numpy().shape == (1 << 10,)  # the other state reads as ever
        # Multiply amplitude k by i^popcount(k) (exact: a swap and signs) on a stream of our
        # own, then end the lease by dropping the tensor.
        pop = np.array([bin(k).count("1") % 4 for k in range(1 << 10)])
        table = np.array([1, 1j, -1, -1j])
        phases = torch.as_tensor(table[pop], device=t.device)
        with torch.cuda.stream(torch.cuda.Stream(t.device)):
            t.mul_(phases)
        del t
        np.testing.assert_array_equal(s.numpy(), base * table[pop])
        # s is now the product of (1, i) / sqrt(2): <s|b> = ((1 - i) / 2)^10, |.|^2 = 2^-10.
        # The real parts alone (the angle encoding's promise, which the writes broke) would
        # give Re(((1 + i) / 2)^10)^2 = 0.
        assert s.kernel(b)[0, 0] == pytest.approx(0.5 ** 10, rel=1e-12)
        assert s.info.written and s.info.writer_lease_id == 0


def test_writable_views_are_exclusive_and_every_shard_is_written(gpu) -> None:
    c, torch = gpu
    x = np.random.default_rng(6).uniform(-1, 1, size=12)
    policy = "even" if len(c.status().devices) > 1 else "single"
    with c.encode(x, "angle", 12, policy=policy) as s:
        views = s.shards()
        with pytest.raises(qdp.FailedPrecondition, match="1 open view lease"):
            s.shards(writable=True)
        views[0].close()
        w = s.shards(writable=True)
        assert all(v.writable for v in w)
        with pytest.raises(qdp.FailedPrecondition, match="leased for writing"):
            s.shards(writable=True)
        for v in w:
            torch.as_tensor(v, device=f"cuda:{v.ordinal}").neg_()
        w[0].close()
        ref.assert_close(s.numpy(), -ref.batch("angle", x[None, :], 12)[0], "complex128")
        assert s.info.leases == 0
        if len(s.info.shards) > 1:
            with pytest.raises(qdp.NotSupported, match=r"shards\(writable=True\)"):
                s.torch(writable=True)


CHILD = """
import sys, time
import numpy as np
import qdp
c = qdp.Client(sys.argv[1], name="pytest-killed")
s = c.encode(np.full(20, 0.4), "angle", 20, policy="single")
t = s.torch()
v = s.shards()
print(s.handle, s.token, flush=True)
time.sleep(600)
"""


def test_a_killed_client_leaves_nothing_behind(gpu, gpu_daemon) -> None:
    """A client process killed while it holds tensors of a state it made: its session ends with
    it (the state released), the lease sweep ends its leases (the fixture's daemon: 1 s grace),
    and only then do the state's bytes come back."""
    c, torch = gpu
    base = c.status().used_bytes
    p = subprocess.Popen([sys.executable, "-c", CHILD, gpu_daemon.target],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().split()
        if len(line) != 2:
            p.kill()
            raise AssertionError(f"the child printed {line}: {p.communicate()[1][-2000:]}")
        s = c.state(*line)
        assert s.info.leases == 2 and c.status().used_bytes > base
        assert s.info.session, "the child's state is not in its session"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()  # reaped: a zombie's pid still exists
    t0 = time.monotonic()
    assert wait_used(c, base, 20) == base, "the killed client's state kept its bytes"
    print(f"bench op=lease-sweep s={time.monotonic() - t0:.2f}")
    assert s.handle not in {i.handle for i in c.states()}


# ---- encode(..., out=tensor): the state written into the caller's own allocation ----

SENTINEL = complex(-7.25, 3.5)  # exact in both precisions; never an amplitude of a unit state


def nothing_kept(c: qdp.Client, used: int) -> None:
    assert c.states() == [], "out= left a state behind"
    assert wait_used(c, used) == used, "out= left bytes held on a device"


@pytest.mark.parametrize("encoding,in_dtype,dtype", [("amplitude", "float64", "complex128"),
                                                     ("amplitude", "float32", "complex64"),
                                                     ("angle", "float64", "complex128")])
def test_out_gives_the_bits_of_an_inline_encode_and_torch(gpu, encoding, in_dtype, dtype) -> None:
    """A batch of 64 on 16 qubits into a tensor of the state's dtype (left to out's when
    dtype= is not given): the bits .torch() of the same encode gives, out itself returned, and
    nothing kept on the daemon."""
    c, torch = gpu
    q, rows = 16, 64
    cols = (1 << q) - 5 if encoding == "amplitude" else q
    X = np.random.default_rng(21).uniform(-1, 1, size=(rows, cols)).astype(in_dtype)
    used = c.status().used_bytes
    with c.encode(X, encoding, q, dtype=dtype, policy="single") as s:
        want = s.torch().cpu().numpy()
    tdt = torch.complex64 if dtype == "complex64" else torch.complex128
    out = torch.full((rows, 1 << q), SENTINEL, dtype=tdt, device="cuda:0")
    got = c.encode(X, encoding, q, out=out)
    assert got is out
    assert out.cpu().numpy().tobytes() == want.tobytes(), \
        f"out= differs from .torch(): max |d| {np.abs(out.cpu().numpy() - want).max():.3g}"
    nothing_kept(c, used)


def test_out_into_a_slice_leaves_the_bytes_around_it_untouched(gpu) -> None:
    """Rows 2..3 of a larger tensor (a nonzero offset into its allocation), and a flat slice
    starting three amplitudes in: the state lands there, every other element keeps its value."""
    c, torch = gpu
    q = 10
    X = np.random.default_rng(22).uniform(-1, 1, size=(2, 1 << q))
    big = torch.full((5, 1 << q), SENTINEL, dtype=torch.complex128, device="cuda:0")
    c.encode(X, "amplitude", q, out=big[2:4])
    host = big.cpu().numpy()
    ref.assert_close(host[2:4], ref.batch("amplitude", X, q), "complex128")
    assert (host[[0, 1, 4]] == SENTINEL).all(), "out= wrote outside rows 2..3"
    flat = torch.full((3 + (1 << q) + 3,), SENTINEL, dtype=torch.complex64, device="cuda:0")
    c.encode(X[0], "amplitude", q, out=flat[3:3 + (1 << q)])
    host = flat.cpu().numpy()
    ref.assert_close(host[3:3 + (1 << q)], ref.amplitude(X[0], q), "complex64")
    assert (host[:3] == SENTINEL).all() and (host[3 + (1 << q):] == SENTINEL).all()


def test_an_out_tensor_is_checked_before_anything_is_sent(gpu) -> None:
    """A CUDA tensor of the wrong dtype, not contiguous, or requiring grad: InvalidArgument on
    field "out", and the tensor as it was."""
    c, torch = gpu
    x = np.full(4, 0.3)
    t = torch.full((16,), SENTINEL, dtype=torch.complex64, device="cuda:0")
    cases = [(t, dict(dtype="complex128"), "out is complex64 but dtype is 'complex128'"),
             (torch.zeros(16, device="cuda:0"), {}, "torch.float32 tensor"),
             (torch.zeros((4, 8), dtype=torch.complex64, device="cuda:0")[:, :4], {},
              "not contiguous"),
             (torch.zeros(16, dtype=torch.complex64, device="cuda:0", requires_grad=True), {},
              "requires grad")]
    for out, kw, words in cases:
        with pytest.raises(qdp.InvalidArgument, match=words) as e:
            c.encode(x, "angle", 4, out=out, **kw)
        assert e.value.field == "out"
    assert (t.cpu().numpy() == SENTINEL).all()


def out_request(c: qdp.Client, t, offered: int, qubits: int = 10) -> object:
    """An angle encode of one sample into tensor t, offering `offered` bytes from its start."""
    from qdp import _cuda

    r = c.wire.EncodeRequest(encoding=2, qubits=qubits, output_dtype=4)  # angle, complex128
    r.input.dtype, r.input.rows, r.input.cols = 2, 1, qubits
    r.input.data = np.full(qubits, 0.3).tobytes()
    cu = _cuda.runtime()
    handle, offset = cu.export(t.get_device(), t.data_ptr())
    r.out.ipc_handle, r.out.offset, r.out.bytes = handle, offset, offered
    r.out.device_uuid = cu.uuid(t.get_device())
    return r


def test_a_too_small_out_is_refused_and_nothing_is_written(gpu) -> None:
    """Refused here (the tensor's size) and by the daemon (the bytes offered, the allocation's
    end as the driver knows it), each with its field; the tensor keeps every value."""
    c, torch = gpu
    used = c.status().used_bytes
    small = torch.full((1 << 9,), SENTINEL, dtype=torch.complex128, device="cuda:0")
    with pytest.raises(qdp.InvalidArgument, match="2\\^10 = 1024 amplitudes") as e:
        c.encode(np.full(10, 0.3), "angle", 10, out=small)
    assert e.value.field == "out"
    with pytest.raises(qdp.InvalidArgument, match="needs 16384 B but out offers 8192 B") as e:
        c.call("Encode", out_request(c, small, small.numel() * 16))
    assert (e.value.field, e.value.need_bytes, e.value.free_bytes) == ("out.bytes", 16384, 8192)
    with pytest.raises(qdp.OutOfRange, match="pass the end of the allocation") as e:
        c.call("Encode", out_request(c, small, 1 << 40))
    assert e.value.field == "out.bytes"
    assert (small.cpu().numpy() == SENTINEL).all(), "a refused out= wrote into the tensor"
    nothing_kept(c, used)


def test_cuda_tensor_input_and_out_together(gpu) -> None:
    """A CUDA tensor in and a CUDA tensor out, one call: the bits of inline input; input and
    output in one allocation work apart and are refused where they share bytes."""
    c, torch = gpu
    q = 12
    X = np.random.default_rng(23).uniform(-1, 1, size=(3, 1 << q))
    with c.encode(X, "amplitude", q, policy="single") as s:
        want = s.numpy()
    out = torch.empty((3, 1 << q), dtype=torch.complex128, device="cuda:0")
    c.encode(torch.from_numpy(X).to("cuda:0"), "amplitude", q, out=out)
    assert out.cpu().numpy().tobytes() == want.tobytes()
    # One allocation: the input's 3 x 2^q float64 first, the state's complex128 after them.
    n_in = X.size
    buf = torch.zeros(n_in + 2 * X.size, dtype=torch.float64, device="cuda:0")
    buf[:n_in] = torch.from_numpy(X.ravel()).to("cuda:0")
    gx = buf[:n_in].view(3, 1 << q)
    c.encode(gx, "amplitude", q, out=buf[n_in:].view(torch.complex128))
    got = buf[n_in:].view(torch.complex128).cpu().numpy().reshape(3, 1 << q)
    assert got.tobytes() == want.tobytes()
    with pytest.raises(qdp.InvalidArgument, match="share bytes") as e:
        c.encode(gx, "amplitude", q, out=buf[: 2 * X.size].view(torch.complex128))
    assert e.value.field == "out"


def test_the_loader_delivers_cuda_tensors_of_the_reference_states(gpu, gpu_daemon) -> None:
    c, torch = gpu
    import qdp.torch as qt

    X = np.random.default_rng(9).uniform(-1, 1, size=(150, 10))
    for prefetch, group in ((0, None), (3, None), (3, 2), (0, 1)):
        ds = qt.QuantumDataset(X, "angle", 10, batch_size=32, prefetch=prefetch, group=group,
                               target=gpu_daemon.target, labels=np.arange(150))
        got, rows = [], []
        for psi, idx in ds:
            assert psi.is_cuda and psi.dtype == torch.complex128 and idx.is_cuda
            got.append(psi.cpu().numpy())
            rows.append(idx.cpu().numpy())
        ref.assert_close(np.concatenate(got), ref.batch("angle", X[np.concatenate(rows)], 10),
                         "complex128")
    assert c.states() == []  # out= tensors: nothing stays on the daemon


def test_the_loader_reads_an_array_in_memory_by_dma_from_where_it_is(gpu, gpu_daemon) -> None:
    """Batches of 1 MiB and more, in order, from an array in memory: the array is pinned in
    place while the channel is open (and let go at close), each batch copied onto the GPU from
    it; shuffled, the rows are gathered through shared memory instead. Both the reference."""
    c, torch = gpu
    import qdp.torch as qt

    q = 12
    X = np.random.default_rng(10).uniform(0.05, 1, size=(100, 1 << q))  # 32 rows: 1 MiB
    want = ref.batch("amplitude", X, q)
    cudart = torch.cuda.cudart()
    for shuffle in (False, True):
        for prefetch in (0, 3):
            ds = qt.QuantumDataset(X, "amplitude", q, batch_size=32, prefetch=prefetch,
                                   shuffle=shuffle, seed=5, target=gpu_daemon.target,
                                   labels=np.arange(100))
            got = [(psi.cpu().numpy(), rows.cpu().numpy()) for psi, rows in ds]
            ref.assert_close(np.concatenate([g for g, _ in got]),
                             want[np.concatenate([r for _, r in got])], "complex128")
            pinned = ds._conn.pinned
            assert (pinned is not None and pinned.owned) == (not shuffle)
            ds.close()
            rc = int(cudart.cudaHostRegister(X.ctypes.data, X.nbytes, 0))
            assert rc == 0, f"the array is still registered after close (CUDA error {rc})"
            cudart.cudaHostUnregister(X.ctypes.data)


def test_the_loader_neither_waits_for_nor_overwrites_the_consumers_queued_work(
        gpu, gpu_daemon) -> None:
    """The consumer queues a long sleep, then reads of each batch behind it, and drops the
    batches at once: the loader delivers a pass while the sleep still runs (it writes on its
    own streams), and no batch's memory is written again before the queued reads are done
    (each batch is marked as used on the consumer's stream). The pass timed is a data set's
    second: its first sets up what the driver may do only between kernels, and launches the
    consumer's own reduction once. The process's first launch of it waited for the running
    sleep on an H200, with CUDA_MODULE_LOADING=EAGER as with LAZY, loader or not; without
    that warm-up this test failed at prefetch 0 (its first pass). The sleep is long beside
    the pass's 12 requests."""
    c, torch = gpu
    import qdp.torch as qt

    X = np.random.default_rng(11).uniform(-1, 1, size=(96, 10))
    want = ref.batch("angle", X, 10)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(100_000_000)
    torch.cuda.synchronize()
    cycles = int(4 / ((time.perf_counter() - t0) / 100_000_000))  # about 4 s
    failures = []
    for prefetch, group in ((0, 1), (2, 1), (2, 3)):
        ds = qt.QuantumDataset(X, "angle", 10, batch_size=8, prefetch=prefetch, group=group,
                               target=gpu_daemon.target, labels=np.arange(96))
        for psi, _ in ds:  # a first pass registers the slots, maps the tensors' memory, and
            psi.real.sum(dim=1)  # launches the consumer's reduction once (see above)
        torch.cuda.synchronize()
        sums, rows = [], []
        torch.cuda._sleep(cycles)
        t0 = time.perf_counter()
        for psi, idx in ds:
            sums.append(psi.real.sum(dim=1))  # queued behind the sleep
            rows.append(idx)  # on the GPU: reading it here would wait for the sleep
            del psi
        took = time.perf_counter() - t0
        busy = not torch.cuda.current_stream().query()
        print(f"prefetch {prefetch} group {group}: the pass took {took:.3f} s, the sleep "
              f"{'still ran' if busy else 'was over'}")
        torch.cuda.synchronize()
        if not busy:
            failures.append(f"prefetch {prefetch} group {group}: the loader waited for the "
                            f"sleep (the pass took {took:.3f} s)")
        got = torch.cat(sums).cpu().numpy()
        rows = torch.cat(rows).cpu().numpy()
        if not np.allclose(got, want[rows].real.sum(axis=1), atol=1e-9):
            failures.append(f"prefetch {prefetch} group {group}: a batch was overwritten before "
                            "the consumer's queued reads")
        ds.close()
    assert not failures, failures


def test_plain_encode_returns_a_cuda_tensor_and_the_daemon_keeps_nothing(gpu, gpu_daemon,
                                                                        monkeypatch) -> None:
    from qdp import _functions

    c, torch = gpu
    monkeypatch.setenv("QDP_TARGET", gpu_daemon.target)
    _functions._default.close()
    try:
        X = np.random.default_rng(7).uniform(-1, 1, size=(64, 1 << 10))
        before = c.status().states
        t = qdp.encode(X, "amplitude", 10)
        assert t.is_cuda and t.shape == (64, 1 << 10) and t.dtype == torch.complex128
        ref.assert_close(t.cpu().numpy(), ref.batch("amplitude", X, 10), "complex128")
        one = qdp.encode([0.5, 1.0, 1.5], "angle", 3, dtype="complex64", device="cuda:0")
        assert one.shape == (8,) and one.device == torch.device("cuda:0")
        ref.assert_close(one.cpu().numpy(), ref.state("angle", [0.5, 1.0, 1.5], 3), "complex64")
        idx = qdp.encode(np.array([3, 0, 7]), "basis", 3)
        assert idx.shape == (3, 8)
        ref.assert_close(idx.cpu().numpy(), ref.batch("basis", [3, 0, 7], 3), "complex128")
        assert qdp.encode([1.0, 1.0], "amplitude", 1, device="numpy").dtype == np.complex128
        assert c.status().states == before  # nothing to release
        with pytest.raises(qdp.NotSupported, match="not one of the daemon's GPUs"):
            qdp.encode([1.0, 1.0], "amplitude", 1, device=f"cuda:{torch.cuda.device_count()}")
    finally:
        _functions._default.close()


@pytest.mark.parametrize("encoding,n,values,dtype,atol", [
    ("iqp", 6, 21, "complex128", 1e-13), ("amplitude", 10, 1000, "complex128", 1e-13),
    ("phase", 8, 8, "complex64", 2e-6)])
def test_the_kernel_matrix_on_the_gpu_is_the_reference(gpu, encoding, n, values, dtype,
                                                       atol) -> None:
    c, _ = gpu
    rng = np.random.default_rng(12)
    X, Y = rng.uniform(-1, 1, size=(37, values)), rng.uniform(-1, 1, size=(21, values))
    P, Q = ref.batch(encoding, X, n), ref.batch(encoding, Y, n)
    with c.encode(X, encoding, n, dtype=dtype) as a, c.encode(Y, encoding, n, dtype=dtype) as b:
        np.testing.assert_allclose(c.kernel(a, b, overlaps=True), P.conj() @ Q.T, rtol=0,
                                   atol=atol)
        S = c.kernel(a)
        np.testing.assert_allclose(S, np.abs(P.conj() @ P.T) ** 2, rtol=0, atol=atol)
        np.testing.assert_array_equal(S, S.T)
        np.testing.assert_array_equal(c.kernel(a), S)  # the same bits again


@pytest.mark.parametrize("encoding,n,values", [("iqp", 6, 21), ("amplitude", 10, 1000),
                                               ("angle", 7, 7)])
def test_the_kernel_matrix_from_inputs_on_the_gpu_is_the_reference(gpu, encoding, n,
                                                                  values) -> None:
    # max_bytes: two tiles of 5 rows of states for iqp and amplitude (by rows; X of 37 rows: a
    # short last tile), blocks of 16 amplitudes of every row for angle (by blocks); X by Y of 21
    # rows, from NumPy and from CUDA tensors.
    c, torch = gpu
    rng = np.random.default_rng(14)
    X, Y = rng.uniform(-1, 1, size=(37, values)), rng.uniform(-1, 1, size=(21, values))
    P, Q = ref.batch(encoding, X, n), ref.batch(encoding, Y, n)
    cap = 2 * 5 * (16 << n) + 3 * 25 * 16
    before = c.status().states
    np.testing.assert_allclose(c.kernel_of(X, encoding, n, Y, overlaps=True, max_bytes=cap),
                               P.conj() @ Q.T, rtol=0, atol=1e-13)
    S = c.kernel_of(torch.from_numpy(X).cuda(), encoding, n, max_bytes=cap)
    np.testing.assert_allclose(S, np.abs(P.conj() @ P.T) ** 2, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(S, S.T)
    assert c.status().states == before


def test_the_kernel_matrix_into_a_cuda_tensor_has_the_bits_of_the_array(gpu) -> None:
    c, torch = gpu
    rng = np.random.default_rng(15)
    X, Y = rng.uniform(-1, 1, size=(37, 21)), rng.uniform(-1, 1, size=(21, 21))
    with c.encode(X, "iqp", 6) as a, c.encode(Y, "iqp", 6) as b:
        t = torch.full((37, 21), float("nan"), dtype=torch.float64, device="cuda")
        assert c.kernel(a, b, out=t) is t
        np.testing.assert_array_equal(t.cpu().numpy(), c.kernel(a, b))
        o = torch.empty(37, 21, dtype=torch.complex128, device="cuda")
        a.kernel(b, overlaps=True, out=o)
        np.testing.assert_array_equal(o.cpu().numpy(), c.kernel(a, b, overlaps=True))
        # Rows 1..37 of a larger tensor: the bytes around them stay as they were.
        big = torch.full((40, 37), -7.0, dtype=torch.float64, device="cuda")
        a.kernel(out=big[1:38])
        got = big.cpu().numpy()
        np.testing.assert_array_equal(got[1:38], c.kernel(a))
        assert (got[0] == -7).all() and (got[38:] == -7).all()
        with pytest.raises(qdp.InvalidArgument, match="shape") as e:
            c.kernel(a, b, out=torch.empty(21, 37, dtype=torch.float64, device="cuda")[:20])
        assert e.value.field == "out"
    K = torch.empty(37, 21, dtype=torch.float64, device="cuda")
    c.kernel_of(X, "iqp", 6, Y, out=K, max_bytes=1 << 20)
    np.testing.assert_array_equal(K.cpu().numpy(), c.kernel_of(X, "iqp", 6, Y, max_bytes=1 << 20))


def test_a_large_kernel_matrix_on_the_gpu_comes_through_shared_memory(gpu) -> None:
    c, _ = gpu
    X = np.random.default_rng(13).uniform(-1, 1, size=(1500, 64))
    with c.encode(X, "amplitude", 6) as a:
        K = c.kernel(a)  # 18 MB of float64
        P = ref.batch("amplitude", X, 6)
        np.testing.assert_allclose(K, np.abs(P @ P.T) ** 2, rtol=0, atol=1e-13)


def test_measurements_on_the_gpu_are_the_reference(gpu) -> None:
    c, _ = gpu
    X = np.random.default_rng(14).uniform(-1, 1, size=(3, 21))
    with c.encode(X, "iqp", 6) as s:
        psi = ref.batch("iqp", X, 6)
        np.testing.assert_allclose(s.probabilities(), np.abs(psi) ** 2, rtol=0, atol=1e-15)
        P = np.abs(psi) ** 2
        want = np.stack([P[:, [b for b in range(64) if (b >> 5) & 1 == v]].sum(axis=1)
                         for v in (0, 1)], axis=1)
        np.testing.assert_allclose(s.probabilities([5]), want, rtol=0, atol=1e-15)
        zz = np.array([1 - 2 * (bin(b & 0b100001).count("1") % 2) for b in range(64)])
        np.testing.assert_allclose(s.expectations("ZIIIIZ"), P @ zz, rtol=0, atol=1e-14)


@pytest.mark.parametrize("encoding,n,m", [("angle", 3, 3), ("amplitude", 3, 6), ("iqp", 3, 6),
                                          ("phase", 3, 3)])
def test_gradients_on_the_gpu_pass_gradcheck(gpu, gpu_daemon, monkeypatch, encoding, n,
                                             m) -> None:
    from qdp import _functions
    import qdp.torch as qt

    _, torch = gpu
    monkeypatch.setenv("QDP_TARGET", gpu_daemon.target)
    _functions._default.close()
    try:
        x = torch.rand(4, m, dtype=torch.float64, device="cuda", requires_grad=True)
        psi = qt.encode(x, encoding, n)
        assert psi.is_cuda and psi.requires_grad
        assert torch.autograd.gradcheck(lambda t: qt.encode(t, encoding, n), (x,), eps=1e-6,
                                        atol=1e-7)
    finally:
        _functions._default.close()


def test_samples_on_the_gpu_follow_the_probabilities(gpu) -> None:
    c, _ = gpu
    X = np.random.default_rng(15).uniform(-1, 1, size=(2, 15))
    with c.encode(X, "iqp", 5) as s:
        a = s.sample(20000, seed=11)
        np.testing.assert_array_equal(a, s.sample(20000, seed=11))
        P = np.abs(ref.batch("iqp", X, 5)) ** 2
        for r in range(2):
            freq = np.bincount(a[r], minlength=32) / 20000
            assert np.abs(freq - P[r]).max() < 0.018
