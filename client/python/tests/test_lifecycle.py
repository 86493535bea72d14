"""States are released by release(), a with block, garbage collection, closing the client and
interpreter exit; and the daemon's List shows each gone."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qdp

import qdpref as ref


def handles(c: qdp.Client) -> set:
    return {s.handle for s in c.states()}


def test_release_is_idempotent(client: qdp.Client) -> None:
    s = client.encode([1.0, 1.0], "amplitude", 1)
    assert s.handle in handles(client)
    s.release()
    s.release()
    assert s.released and s.handle not in handles(client)


def test_with_block_releases(client: qdp.Client) -> None:
    with client.encode([0.5], "angle", 1) as s:
        assert s.handle in handles(client)
    assert s.handle not in handles(client)


def test_garbage_collection_releases(client: qdp.Client) -> None:
    s = client.encode(np.ones((3, 4)), "amplitude", 2)
    h = s.handle
    assert h in handles(client)
    del s
    gc.collect()
    assert h not in handles(client)


def test_a_state_outlives_the_client_object_that_made_it(daemon) -> None:
    """The client's channel and fetch regions stay while a state it made lives, though nothing
    holds the Client itself; when the state goes too, it is released and the regions are
    unregistered."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    s = qdp.Client(daemon.target).encode(x, "amplitude", 2)
    gc.collect()
    ref.assert_close(s.numpy(), ref.amplitude(x, 2), "complex128")  # into a region the client keeps
    with qdp.Client(daemon.target) as other:
        assert s.handle in handles(other) and other.status().regions == 1
    h = s.handle
    del s
    gc.collect()
    with qdp.Client(daemon.target) as other:
        assert h not in handles(other) and other.status().regions == 0


def test_close_releases_what_is_left(daemon) -> None:
    c = qdp.Client(daemon.target)
    s = c.encode([1.0, 2.0], "phase", 2)
    buf = c.empty(16)
    buf[:] = 1
    c.encode(buf, "amplitude", 4)  # unreferenced: collected or closed
    with qdp.Client(daemon.target) as other:
        assert s.handle in handles(other) and other.status().regions == 1
        c.close()
        c.close()
        assert handles(other) == set() and other.status().regions == 0
    assert s.released


def test_a_released_state_says_how_it_was_released(daemon) -> None:
    c = qdp.Client(daemon.target)
    kept = c.encode([1.0, 2.0], "phase", 2)
    with c.encode([1.0, 2.0], "phase", 2) as s:
        pass
    with pytest.raises(qdp.NotFound) as e:
        s.numpy()
    assert "released by this process (State.release()" in str(e.value)
    c.close()
    for use in (kept.numpy, lambda: kept.info):
        with pytest.raises(qdp.NotFound) as e:
            use()
        text = str(e.value)
        assert "released when its Client closed" in text and "Client.close()" in text
        assert "by this process" not in text and "token is wrong" not in text


def test_interpreter_exit_releases_quietly(daemon) -> None:
    code = textwrap.dedent("""
        import qdp
        c = qdp.Client()
        s = c.encode([1.0, 2.0, 3.0], "amplitude", 2)
        keep = c.empty(8)
        print(s.handle)
    """)
    env = dict(os.environ, QDP_TARGET=daemon.target)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with qdp.Client(daemon.target) as c:
        assert r.stdout.strip() not in handles(c)
        assert c.status().regions == 0


def test_status_states_health(client: qdp.Client) -> None:
    st = client.status()
    assert st.backend == "cpu" and [d.name for d in st.devices] == ["cpu:0", "cpu:1"]
    assert st.version and st.max_qubits >= 24
    assert client.health() == "SERVING"
    with client.encode([1.0, 0.0], "amplitude", 1, label="mine") as s:
        (info,) = client.states()
        assert info.handle == s.handle and info.label == "mine" and info.owner.startswith("uid:")


def test_default_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QDP_TARGET", "unix:/x.sock")
    assert qdp.default_target() == "unix:/x.sock"
    monkeypatch.delenv("QDP_TARGET")
    monkeypatch.setenv("QDP_SOCKET", "/y.sock")
    assert qdp.default_target() == "unix:/y.sock"
    monkeypatch.delenv("QDP_SOCKET")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/5")
    want = ("unix:/run/qdp/qdpd.sock" if os.geteuid() == 0
            else "unix:/run/user/5/qdp/qdpd.sock")
    assert qdp.default_target() == want


def test_gpu_extension_points_say_what_to_use(client: qdp.Client) -> None:
    with client.encode([1.0, 1.0], "amplitude", 1) as s:
        with pytest.raises(qdp.NotSupported, match="numpy"):
            s.shards()  # host memory has no views
        with pytest.raises(qdp.NotSupported, match="numpy"):
            s.shards(writable=True)  # nor writable ones: no lease taken, nothing marked
        info = s.info
        assert (info.leases, info.written, info.writer_lease_id, info.writer) == (0, False, 0, "")
        assert s.__dlpack_device__() == (1, 0)  # kDLCPU: a fetched copy
        got = np.from_dlpack(s)
        ref.assert_close(got, ref.amplitude(np.array([1.0, 1.0]), 1), "complex128")
        with pytest.raises(BufferError, match="copy"):
            s.__dlpack__(copy=False)


def test_a_writable_tensor_needs_a_gpu_daemon(client: qdp.Client) -> None:
    pytest.importorskip("torch")
    with client.encode([0.3, 0.2], "angle", 2) as s:
        with pytest.raises(qdp.NotSupported, match="host memory"):
            s.torch(writable=True)
        assert not s.info.written
        ref.assert_close(s.numpy(), ref.angle(np.array([0.3, 0.2]), 2), "complex128")


def test_dlpack_of_a_cpu_state_is_a_copy_torch_reads(client: qdp.Client) -> None:
    torch = pytest.importorskip("torch")
    X = np.random.default_rng(3).uniform(-1, 1, size=(4, 6))
    with client.encode(X, "angle", 6, dtype="complex64") as s:
        t = torch.from_dlpack(s)
        assert t.dtype == torch.complex64 and tuple(t.shape) == (4, 64) and not t.is_cuda
        ref.assert_close(t.numpy(), ref.batch("angle", X, 6), "complex64")
