"""A remote client over TCP: a bearer token, inline and uploaded inputs, streamed fetches, and no
shared memory or node-local files."""

from __future__ import annotations

import numpy as np
import pytest

import qdp

import qdpref as ref
from conftest import TCP_TOKEN


@pytest.fixture
def remote(tcp_daemon):
    with qdp.Client(tcp_daemon.tcp, token=TCP_TOKEN) as c:
        yield c
        assert c.states() == []


def test_inline_and_uploaded_inputs(remote: qdp.Client) -> None:
    assert remote.socket_path is None
    with remote.encode([0.3, 0.1, 0.7], "angle", 3) as s:
        ref.assert_close(s.numpy(), ref.angle([0.3, 0.1, 0.7], 3), "complex128")
    X = np.random.default_rng(6).uniform(-1, 1, size=(2, 1 << 17))  # 2 MiB: uploaded
    with remote.encode(X, "amplitude", 17) as s:
        ref.assert_close(s.numpy(), ref.batch("amplitude", X, 17), "complex128")
    assert remote.status().regions == 0


def test_no_shared_memory_or_node_files(remote: qdp.Client, tmp_path) -> None:
    with pytest.raises(qdp.NotSupported, match="unix"):
        remote.empty(8)
    p = tmp_path / "x.npy"
    np.save(p, np.ones(4))
    with pytest.raises(qdp.Error) as e:  # no tcp_node_paths: the daemon names no files for TCP
        remote.encode(p, "amplitude", 2)
    assert e.value.status in ("PERMISSION_DENIED", "FAILED_PRECONDITION", "INVALID_ARGUMENT")


def test_a_table_path_over_tcp_says_how_to_read_it(remote: qdp.Client, tmp_path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("0.1,0.2\n")
    with pytest.raises(qdp.InvalidArgument) as e:
        remote.encode(p, "angle", 2)
    assert e.value.field == "input.path"
    assert "over TCP" in e.value.message and "qdp.readers.open_source" in e.value.message


def test_out_is_for_callers_on_the_node(remote: qdp.Client) -> None:
    """An IPC handle opens only on its own node: the client says so before sending, and the
    daemon refuses a TCP caller's EncodeRequest.out whatever it names."""
    with pytest.raises(qdp.NotSupported, match="unix") as e:
        remote.encode([0.1, 0.2], "angle", 2, out=object())
    assert e.value.field == "out"
    r = remote.wire.EncodeRequest(encoding=2, qubits=2)
    r.input.dtype, r.input.data = 2, np.array([0.1, 0.2]).tobytes()
    r.out.ipc_handle, r.out.bytes = bytes(64), 64
    with pytest.raises(qdp.PermissionDenied, match="daemon's node") as e:
        remote.call("Encode", r)
    assert e.value.field == "out"
    # The same through an upload: refused once the data is in, and its memory given back.
    r.input.ClearField("data")
    r.input.rows, r.input.cols = 1, 2
    with pytest.raises(qdp.PermissionDenied, match="daemon's node") as e:
        remote._upload(r, memoryview(np.array([0.1, 0.2]).tobytes()))
    assert e.value.field == "out"
    with remote.encode([0.1, 0.2], "angle", 2) as s:  # and the daemon serves on
        ref.assert_close(s.numpy(), ref.angle([0.1, 0.2], 2), "complex128")


def test_a_wrong_token_is_unauthenticated(tcp_daemon) -> None:
    with qdp.Client(tcp_daemon.tcp, token="wrong") as c:
        with pytest.raises(qdp.Unauthenticated, match="token"):
            c.status()
