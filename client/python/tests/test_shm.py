"""Large arrays through shared memory on the daemon's node, client.empty buffers read in place,
and the streamed upload a remote client uses."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import qdp

import qdpref as ref


def test_large_array_goes_through_one_staging_region(unpooled: qdp.Client) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, size=1 << 18)  # 2 MiB of float64, above qdp.client.LARGE_BYTES
    assert x.nbytes >= qdp.client.LARGE_BYTES
    with unpooled.encode(x, "amplitude", 18) as s:
        ref.assert_close(s.numpy(), ref.amplitude(x, 18), "complex128")
    st = unpooled.status()
    assert st.regions == 1 and st.region_bytes >= x.nbytes
    # A second large input reuses the region; a larger one replaces it.
    y = rng.uniform(-1, 1, size=(2, 1 << 17))
    with unpooled.encode(y, "amplitude", 17) as s:
        ref.assert_close(s.numpy(), ref.batch("amplitude", y, 17), "complex128")
    assert unpooled.status().regions == 1
    z = rng.uniform(-1, 1, size=1 << 19).astype(np.float32)
    with unpooled.encode(z, "amplitude", 19, dtype="complex64") as s:
        got = s.numpy()
    ref.assert_close(got, ref.amplitude(z.astype(np.float64), 19), "complex64")
    assert unpooled.status().regions == 1


def test_empty_is_read_in_place_every_time(unpooled: qdp.Client) -> None:
    buf = unpooled.empty((8, 64))
    assert buf.shape == (8, 64) and buf.dtype == np.float64 and not buf.any()
    assert unpooled.status().regions == 1
    rng = np.random.default_rng(4)
    for _ in range(3):
        buf[:] = rng.uniform(-1, 1, size=buf.shape)
        with unpooled.encode(buf, "amplitude", 6) as s:
            ref.assert_close(s.numpy(), ref.batch("amplitude", buf, 6), "complex128")
        # A contiguous slice of the buffer is read in place too, at its offset.
        with unpooled.encode(buf[3:5], "amplitude", 6) as s:
            ref.assert_close(s.numpy(), ref.batch("amplitude", buf[3:5], 6), "complex128")
        with unpooled.encode(buf[6, :6], "angle", 6, dtype="complex64") as s:
            ref.assert_close(s.numpy(), ref.angle(buf[6, :6], 6), "complex64")
    assert unpooled.status().regions == 1  # nothing but the buffer's own region


def test_empty_sample_of_angles(client: qdp.Client) -> None:
    buf = client.empty(6, np.float32)
    buf[:] = np.linspace(0.1, 1.1, 6, dtype=np.float32)
    with client.encode(buf, "angle", 6, dtype="complex64") as s:
        ref.assert_close(s.numpy(), ref.angle(buf.astype(np.float64), 6), "complex64")


def test_empty_region_goes_with_its_array(unpooled: qdp.Client) -> None:
    buf = unpooled.empty(1 << 10)
    view = buf[10:20]
    assert unpooled.status().regions == 1
    del buf
    gc.collect()
    assert unpooled.status().regions == 1  # the view keeps the mapping
    view[:] = 1.0
    with unpooled.encode(view, "amplitude", 4) as s:
        ref.assert_close(s.numpy(), ref.amplitude(np.ones(10), 4), "complex128")
    del view
    gc.collect()
    assert unpooled.status().regions == 0


def test_empty_refuses_other_dtypes(client: qdp.Client) -> None:
    with pytest.raises(qdp.InvalidArgument, match="float32, float64 or int64"):
        client.empty(4, np.complex128)


def test_remote_clients_upload(client: qdp.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # As over TCP: no shared memory, the array is streamed in chunks (EncodeUpload).
    monkeypatch.setattr(client._conn, "socket_path", None)
    x = np.random.default_rng(9).uniform(-1, 1, size=(3, 1 << 16))  # 1.5 MiB
    with client.encode(x, "amplitude", 16) as s:
        ref.assert_close(s.numpy(), ref.batch("amplitude", x, 16), "complex128")
    monkeypatch.undo()
    assert client.status().regions == 0
    with pytest.raises(qdp.NotSupported, match="unix"):
        monkeypatch.setattr(client._conn, "socket_path", None)
        client.empty(4)


@pytest.mark.parametrize("n", [1, 4095, (8 << 20) + 4097, 3 * (8 << 20) + 5])
def test_a_copy_in_parts_equals_one_copy(n) -> None:
    from qdp import _region

    src = np.random.default_rng(n % 97).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros(n, np.uint8)
    with _region.copier() as pool:
        _region.copy_into(dst, src, pool)
    assert np.array_equal(dst, src)


def test_a_large_staged_input_is_copied_in_parts(client, monkeypatch) -> None:
    from qdp import _region

    calls = []
    real = _region.copy_into
    monkeypatch.setattr(_region, "copy_into",
                        lambda d, s, pool=None: calls.append(pool is not None) or real(d, s, pool))
    X = np.random.default_rng(5).uniform(-1, 1, (2, 1 << 20))  # 16 MiB: staged, copied in parts
    with client.encode(X, "amplitude", 20) as s:
        ref.assert_close(s.numpy(), ref.batch("amplitude", X, 20), "complex128")
    assert calls == [True]


def test_regions_are_sealed_and_frozen_ones_can_never_change(unpooled, monkeypatch) -> None:
    import fcntl

    from qdp import _region

    seals, infos, fetched = [], [], []
    real_memfd, real_call = _region._create_memfd, unpooled._conn.call

    def memfd(size, contents=None):
        fd = real_memfd(size, contents)
        seals.append(fcntl.fcntl(fd, fcntl.F_GET_SEALS))
        return fd

    def call(method, request, timeout=None):
        reply = real_call(method, request, timeout)
        if method == "RegisterRegion" and not request.writable:
            infos.append(reply)
        elif method == "RegisterRegion":
            fetched.append(reply)
        return reply

    monkeypatch.setattr(_region, "_create_memfd", memfd)
    monkeypatch.setattr(unpooled._conn, "call", call)
    size = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
    buf = unpooled.empty((4, 64))
    # The package's memfds cannot change size, and the daemon says so.
    assert seals[0] & size == size and not seals[0] & fcntl.F_SEAL_WRITE
    assert infos[0].sealed and not infos[0].frozen
    x = np.random.default_rng(6).uniform(-1, 1, (4, 64))
    fz = unpooled.frozen(x)
    # Frozen: sealed against writing too, read-only here, and reported frozen.
    assert seals[1] & (size | fcntl.F_SEAL_WRITE) == size | fcntl.F_SEAL_WRITE
    assert infos[1].sealed and infos[1].frozen
    assert not fz.flags.writeable and np.array_equal(fz, x)
    with pytest.raises(ValueError):
        fz[0, 0] = 1.0
    # Read in place, as empty()'s memory is: no other region is made for it.
    for _ in range(2):
        with unpooled.encode(fz, "amplitude", 6) as s:
            ref.assert_close(s.numpy(), ref.batch("amplitude", x, 6), "complex128")
        with unpooled.encode(fz[1:3], "amplitude", 6) as s:
            ref.assert_close(s.numpy(), ref.batch("amplitude", x[1:3], 6), "complex128")
    assert unpooled.status().regions == 2 and len(infos) == 2
    # The regions fetches write into (FetchInto) are the package's memfds too.
    assert fetched and all(f.sealed and not f.frozen for f in fetched)
    with pytest.raises(qdp.InvalidArgument, match="float32, float64 or int64"):
        unpooled.frozen(np.zeros(4, np.complex128))
    del buf, fz
    gc.collect()
    assert unpooled.status().regions == 0
