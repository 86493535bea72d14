"""State.numpy() on the daemon's node fetches (FetchInto) into writable regions the client keeps
registered for the next fetch once no array over them is alive: reuse, the bounds, threads,
close, regions the daemon no longer takes, and those of a killed client, which the daemon
unregisters itself."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import pytest

import qdp
from qdp._region import POOL_REGIONS

import qdpref as ref
from polling import wait_for
from conftest import Daemon, client_of, qdpd_path

Q = 12  # 4096 amplitudes: 64 KiB of complex128
NBYTES = (1 << Q) * 16


class Calls:
    """Wraps a client's calls: records the writable regions it registers, and fails the
    FetchInto calls into one region when told to."""

    def __init__(self, client: qdp.Client, monkeypatch: pytest.MonkeyPatch) -> None:
        self.registered: List[Tuple[str, str]] = []  # (handle, token) of each, in order
        # (region handle, the error to raise): made anew each time, as a traceback kept with an
        # error would keep the frames that hold the arrays of the fetch that raised it.
        self.refuse: Optional[Tuple[str, Callable[[], qdp.Error]]] = None
        real = client._conn.call  # every call of the client, its states' and regions' too

        def call(method: str, request: Any, timeout: Optional[float] = None) -> Any:
            if method == "FetchInto" and self.refuse and request.region.handle == self.refuse[0]:
                raise self.refuse[1]()
            reply = real(method, request, timeout)
            if method == "RegisterRegion" and request.writable:
                self.registered.append((reply.handle, reply.token))
            return reply

        monkeypatch.setattr(client._conn, "call", call)


@pytest.fixture
def calls(client: qdp.Client, monkeypatch: pytest.MonkeyPatch) -> Calls:
    """The calls of the test's client."""
    return Calls(client, monkeypatch)


def sample(seed: int, q: int = Q) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=1 << q)


def regions(c: qdp.Client) -> int:
    return c.status().regions


def test_a_second_numpy_of_the_size_reuses_the_region(client: qdp.Client, calls: Calls) -> None:
    x, y = sample(1), sample(2)
    with client.encode(x, "amplitude", Q) as s, client.encode(y, "amplitude", Q) as t:
        a = s.numpy()
        assert len(calls.registered) == 1 and regions(client) == 1
        ref.assert_close(a, ref.amplitude(x, Q), "complex128")
        del a
        assert regions(client) == 1  # kept, idle
        b = t.numpy()  # another state of the same size
        assert len(calls.registered) == 1
        ref.assert_close(b, ref.amplitude(y, Q), "complex128")
        del b
        c = s.numpy()
        assert len(calls.registered) == 1 and regions(client) == 1
        ref.assert_close(c, ref.amplitude(x, Q), "complex128")


def test_a_small_fetch_does_not_take_a_much_larger_region(client: qdp.Client,
                                                          calls: Calls) -> None:
    with client.encode(sample(3), "amplitude", Q) as big:
        big.numpy()  # 64 KiB, kept once the array is gone
        assert len(calls.registered) == 1
        x = sample(4, Q - 1)  # 32 KiB: the region is at most twice that plus a page
        with client.encode(x, "amplitude", Q - 1) as half:
            ref.assert_close(half.numpy(), ref.amplitude(x, Q - 1), "complex128")
        assert len(calls.registered) == 1
        x = sample(5, Q - 3)  # 8 KiB: the 64 KiB region is too large for it
        with client.encode(x, "amplitude", Q - 3) as small:
            ref.assert_close(small.numpy(), ref.amplitude(x, Q - 3), "complex128")
        assert len(calls.registered) == 2 and regions(client) == 2


def test_values_stay_right_across_reuse(client: qdp.Client, calls: Calls) -> None:
    xs = [sample(10 + i) for i in range(3)]
    want = [ref.amplitude(x, Q) for x in xs]
    states = [client.encode(x, "amplitude", Q) for x in xs]
    a = states[0].numpy()
    b = states[1].numpy()  # while a is held: another region
    assert len(calls.registered) == 2 and not np.shares_memory(a, b)
    ref.assert_close(a, want[0], "complex128")
    ref.assert_close(b, want[1], "complex128")
    held = a.copy()
    del b
    c = states[2].numpy()  # into b's region, never a's
    assert len(calls.registered) == 2 and not np.shares_memory(a, c)
    ref.assert_close(c, want[2], "complex128")
    assert np.array_equal(a, held)  # untouched while held
    del a, c
    d = states[1].numpy()
    e = states[0].numpy()
    assert len(calls.registered) == 2 and not np.shares_memory(d, e)
    ref.assert_close(d, want[1], "complex128")
    ref.assert_close(e, want[0], "complex128")
    for s in states:
        s.release()


def test_a_view_keeps_its_region_from_reuse(client: qdp.Client, calls: Calls) -> None:
    x, y = sample(20), sample(21)
    with client.encode(x, "amplitude", Q) as s, client.encode(y, "amplitude", Q) as t:
        a = s.numpy()
        assert type(a) is np.ndarray and a.flags.writeable and not a.flags.owndata
        base = a  # the chain of bases ends in one object that is not an array
        while isinstance(base, np.ndarray):
            base = base.base
        assert base is not None and hasattr(base, "__array_interface__")
        del base  # it is what holds the region
        view = a.reshape(64, 64)[3:9, ::2]
        mem = memoryview(a[100:150])  # apart from the view
        assert np.shares_memory(view, a) and np.shares_memory(np.asarray(mem), a)
        view_was = view.copy()
        del a
        gc.collect()
        b = t.numpy()
        assert len(calls.registered) == 2
        assert not np.shares_memory(view, b) and not np.shares_memory(np.asarray(mem), b)
        ref.assert_close(b, ref.amplitude(y, Q), "complex128")
        assert np.array_equal(view, view_was)
        view[0, 0] = 7  # still writable memory of the first region
        del view, b
        gc.collect()
        c = t.numpy()  # the memoryview still holds the first region: the second serves
        assert len(calls.registered) == 2 and not np.shares_memory(np.asarray(mem), c)
        ref.assert_close(np.asarray(mem), ref.amplitude(x, Q)[100:150], "complex128")
        del mem, c
        gc.collect()
        d, e = s.numpy(), t.numpy()  # both idle again: no new region
        assert len(calls.registered) == 2
        ref.assert_close(d, ref.amplitude(x, Q), "complex128")
        ref.assert_close(e, ref.amplitude(y, Q), "complex128")


def test_threads_never_share_a_region(client: qdp.Client) -> None:
    xs = [sample(30 + i) for i in range(6)]
    want = [ref.amplitude(x, Q) for x in xs]
    states = [client.encode(x, "amplitude", Q) for x in xs]
    held: List[np.ndarray] = []
    failures: List[str] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        last: List[np.ndarray] = []
        for i in range(25):
            j = (k + i) % len(states)
            got = states[j].numpy()
            if not np.allclose(got, want[j], rtol=0, atol=1e-12):
                failures.append(f"thread {k}, fetch {i}: state {j} came back wrong")
            last = (last + [got])[-2:]  # hold the last two while fetching the next
        with lock:
            held.extend(last)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures
    for i in range(len(held)):
        for j in range(i + 1, len(held)):
            assert not np.shares_memory(held[i], held[j])
    assert regions(client) <= POOL_REGIONS
    for s in states:
        s.release()


def test_the_bound_counts_the_regions_behind_live_arrays(daemon: Daemon,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for c in client_of(daemon, region_cache_bytes=NBYTES):
        calls = Calls(c, monkeypatch)
        x, y = sample(40), sample(41)
        with c.encode(x, "amplitude", Q) as s, c.encode(y, "amplitude", Q) as t:
            a = s.numpy()
            b = t.numpy()  # no room beside a's region: unregistered once filled
            assert len(calls.registered) == 2 and regions(c) == 1
            ref.assert_close(a, ref.amplitude(x, Q), "complex128")
            ref.assert_close(b, ref.amplitude(y, Q), "complex128")
            del a, b
            ref.assert_close(t.numpy(), ref.amplitude(y, Q), "complex128")
            assert len(calls.registered) == 2 and regions(c) == 1
            x2 = sample(42, Q + 1)  # larger than the bound: never kept
            with c.encode(x2, "amplitude", Q + 1) as big:
                ref.assert_close(big.numpy(), ref.amplitude(x2, Q + 1), "complex128")
                ref.assert_close(big.numpy(), ref.amplitude(x2, Q + 1), "complex128")
            assert len(calls.registered) == 4 and regions(c) == 1


def test_a_new_size_evicts_an_idle_region(daemon: Daemon,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for c in client_of(daemon, region_cache_bytes=2 * NBYTES):
        calls = Calls(c, monkeypatch)
        with c.encode(sample(43), "amplitude", Q) as s:
            s.numpy()
        x = sample(44, Q + 1)  # twice the size: the bound holds it only without the idle one
        with c.encode(x, "amplitude", Q + 1) as s:
            ref.assert_close(s.numpy(), ref.amplitude(x, Q + 1), "complex128")
            assert regions(c) == 1
            ref.assert_close(s.numpy(), ref.amplitude(x, Q + 1), "complex128")
        assert len(calls.registered) == 2 and regions(c) == 1


def test_at_most_a_few_regions_are_kept(client: qdp.Client, calls: Calls) -> None:
    xs = [sample(50 + i, 6) for i in range(POOL_REGIONS + 3)]
    states = [client.encode(x, "amplitude", 6) for x in xs]
    got = [s.numpy() for s in states]  # all held: one region each, the last few passing
    assert len(calls.registered) == len(xs) and regions(client) == POOL_REGIONS
    for g, x in zip(got, xs):
        ref.assert_close(g, ref.amplitude(x, 6), "complex128")
    del got
    got = [s.numpy() for s in states]
    assert len(calls.registered) == len(xs) + 3 and regions(client) == POOL_REGIONS
    for s in states:
        s.release()


def test_zero_keeps_no_region(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    for c in client_of(daemon, region_cache_bytes=0):
        calls = Calls(c, monkeypatch)
        x = sample(60)
        with c.encode(x, "amplitude", Q) as s:
            a = s.numpy()
            assert regions(c) == 0  # unregistered once filled; the mapping stays with a
            assert type(a) is np.ndarray and a.flags.writeable
            del a
            b = s.numpy()
            assert len(calls.registered) == 2 and regions(c) == 0
            ref.assert_close(b, ref.amplitude(x, Q), "complex128")


def test_region_cache_bytes_must_be_a_size(daemon: Daemon) -> None:
    with pytest.raises(qdp.InvalidArgument, match="region_cache_bytes"):
        qdp.Client(daemon.target, region_cache_bytes=-1)


def test_close_unregisters_the_kept_regions(daemon: Daemon) -> None:
    c = qdp.Client(daemon.target, name="pytest")
    x = sample(70)
    s = c.encode(x, "amplitude", Q)
    s.numpy()  # idle
    a = s.numpy()
    b = s.numpy()  # lent, both
    with qdp.Client(daemon.target) as other:
        assert other.status().regions == 2
        c.close()
        assert other.status().regions == 0
    ref.assert_close(a, ref.amplitude(x, Q), "complex128")  # the arrays outlive their regions
    ref.assert_close(b, ref.amplitude(x, Q), "complex128")
    del a, b
    gc.collect()
    with qdp.Client(daemon.target) as other:
        assert other.status().regions == 0


def test_a_collected_client_unregisters_its_kept_regions(daemon: Daemon) -> None:
    c = qdp.Client(daemon.target, name="pytest")
    with c.encode(sample(71), "amplitude", Q) as s:
        s.numpy()
        a = s.numpy()
    del s, c
    gc.collect()
    with qdp.Client(daemon.target) as other:
        assert other.status().regions == 0 and other.states() == []
    assert a.shape == (1 << Q,)


@pytest.mark.parametrize("how", ["unregistered", "refused"])
def test_a_region_the_daemon_no_longer_takes_is_replaced(client: qdp.Client, calls: Calls,
                                                         how: str) -> None:
    x = sample(80)
    with client.encode(x, "amplitude", Q) as s:
        s.numpy()
        (handle, token), = calls.registered
        if how == "unregistered":  # behind the client's back
            client.call("UnregisterRegion", client.wire.RegionRef(handle=handle, token=token))
            assert regions(client) == 0
        else:
            calls.refuse = (handle, lambda: qdp.PermissionDenied("not yours", field="region"))
        a = s.numpy()
        assert len(calls.registered) == 2 and regions(client) == 1
        ref.assert_close(a, ref.amplitude(x, Q), "complex128")
        del a
        ref.assert_close(s.numpy(), ref.amplitude(x, Q), "complex128")
        assert len(calls.registered) == 2  # the fresh one is kept; the refused one is gone


def test_a_state_error_keeps_the_region(client: qdp.Client, calls: Calls) -> None:
    with client.encode(sample(81), "amplitude", Q) as s:
        s.numpy()
        other = client.state(s.handle, s.token)
    with pytest.raises(qdp.NotFound):
        other.numpy()  # released: the state's fault, not the region's
    with client.encode(sample(82), "amplitude", Q) as s:
        s.numpy()
    assert len(calls.registered) == 1 and regions(client) == 1


def encode_when_back(c: qdp.Client, x: np.ndarray) -> qdp.State:
    deadline = time.monotonic() + 30
    while True:
        try:
            return c.encode(x, "amplitude", Q)
        except qdp.Unavailable:  # the channel reconnects with a backoff
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_restarted_daemon_gets_fresh_regions(monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.access(qdpd_path(), os.X_OK):
        pytest.skip(f"no qdpd at {qdpd_path()}: build it (sh deploy/build.sh) or set QDPD")
    with tempfile.TemporaryDirectory(prefix="qdp-py.") as folder:
        os.chmod(folder, 0o755)
        d = Daemon(folder)
        try:
            c = qdp.Client(d.target, name="pytest")
            calls = Calls(c, monkeypatch)
            with c.encode(sample(90), "amplitude", Q) as s:
                s.numpy()  # kept, idle
            d.proc.kill()  # a crash (a clean stop would wait for the client's channel)
            d.proc.wait()
            d = Daemon(folder)  # on the same socket, without the old regions
            x = sample(91)
            s = encode_when_back(c, x)
            ref.assert_close(s.numpy(), ref.amplitude(x, Q), "complex128")
            assert len(calls.registered) == 2 and regions(c) == 1
            s.release()
            c.close()
            with qdp.Client(d.target) as check:
                assert check.status().regions == 0
        finally:
            assert d.stop() == 0


def test_interpreter_exit_unregisters_the_kept_regions(daemon: Daemon) -> None:
    code = textwrap.dedent("""
        import numpy as np, qdp
        c = qdp.Client()
        s = c.encode(np.ones(4096), "amplitude", 12)
        a = s.numpy()
        held = s.numpy()
        del a
        assert c.status().regions == 2  # one idle, one lent
    """)
    env = dict(os.environ, QDP_TARGET=daemon.target)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with qdp.Client(daemon.target) as c:
        assert c.status().regions == 0 and c.states() == []


KILLED = """
import sys, time
import numpy as np
import qdp
c = qdp.Client(sys.argv[1], name="pytest-killed")
x = np.random.default_rng(7).uniform(-1, 1, size=1 << 17)  # 1 MiB: through the staging region
s = c.encode(x, "amplitude", 17)
held = s.numpy()  # a kept region, lent to this array
s.numpy()  # a second one, idle again once its array is gone
st = c.status()
print(s.handle, s.token, st.regions, st.region_bytes, flush=True)
time.sleep(600)
"""


def wait_regions(c: qdp.Client, want: int, seconds: float = 20) -> int:
    return wait_for(lambda: c.status().regions, want, seconds)


def test_a_killed_clients_regions_are_unregistered(sweeping_daemon: Daemon) -> None:
    """A client SIGKILLed while it holds its staging region and two kept fetch regions (one lent,
    one idle): the daemon's sweep (the fixture's: every second, 1 s grace) unregisters all three;
    a live client's region is left alone."""
    with qdp.Client(sweeping_daemon.target, name="pytest") as c:
        mine = c.empty(1 << 10)  # a region of this live process
        mine[:] = 1.0
        p = subprocess.Popen([sys.executable, "-c", KILLED, sweeping_daemon.target],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline().split()
            if len(line) != 4:
                p.kill()
                raise AssertionError(f"the child printed {line}: {p.communicate()[1][-2000:]}")
            handle, token, theirs, their_bytes = line[0], line[1], int(line[2]), int(line[3])
            assert theirs == 4 and their_bytes == (1 << 20) + 2 * (2 << 20) + mine.nbytes
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()  # reaped: a zombie's pid still exists
        t0 = time.monotonic()
        assert wait_regions(c, 1) == 1, "the daemon kept the killed client's regions"
        print(f"bench op=region-sweep s={time.monotonic() - t0:.2f}")
        assert c.status().region_bytes == mine.nbytes
        time.sleep(2.5)  # more sweeps past the grace: this process is alive
        assert c.status().regions == 1
        with c.encode(mine, "amplitude", 10) as s:  # read in place from the live region
            ref.assert_close(s.numpy(), ref.amplitude(np.ones(1 << 10), 10), "complex128")
        with pytest.raises(qdp.NotFound):  # released with the killed client's session
            c.state(handle, token).info
        del mine
        gc.collect()
    with qdp.Client(sweeping_daemon.target) as check:
        st = check.status()
        assert st.regions == 0 and st.region_bytes == 0 and check.states() == []
