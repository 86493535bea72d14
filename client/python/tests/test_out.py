"""encode(..., out=...) and kernel(..., out=...) where no GPU is needed: what the client checks
of the tensor before it sends anything (dtype, size, layout, where it lives), the request it sends
for a CUDA array (stand-ins for the CUDA calls), the CPU daemon's refusal as NotSupported with its
field, the daemon's own checks of EncodeRequest.out and KernelRequest.out reached through
Client.call. The GPU cases are in test_gpu.py."""

from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

import numpy as np
import pytest

import qdp
from qdp import _cuda

UUID = "GPU-00000000-1111-2222-3333-444444444444"


class FakeCuda:
    """The CUDA calls CudaOutput makes, recorded instead of made."""

    def __init__(self) -> None:
        self.synced: List[int] = []
        self.exported: List[Tuple[int, int]] = []

    def device_of_pointer(self, ptr: int) -> int:
        return 0

    def synchronize(self, stream: int) -> None:
        self.synced.append(stream)

    def export(self, ordinal: int, ptr: int) -> Tuple[bytes, int]:
        self.exported.append((ordinal, ptr))
        return bytes(range(64)), 4096

    def uuid(self, ordinal: int) -> str:
        return UUID


class CudaArray:
    """An object with __cuda_array_interface__ (version 3) and no memory behind it."""

    def __init__(self, shape: Tuple[int, ...], typestr: str = "<c16",
                 strides: Optional[Tuple[int, ...]] = None, stream: Optional[int] = None,
                 readonly: bool = False) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0x7f0000001000, readonly), "version": 3,
                                         "strides": strides, "stream": stream}


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    monkeypatch.setattr(_cuda, "_RUNTIME", fake)
    return fake


def sent(client: qdp.Client, monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """The requests client.call sends from now on."""
    requests: List[Any] = []
    call = client.call

    def recording(method: str, request: Any, timeout: Optional[float] = None) -> Any:
        requests.append(request)
        return call(method, request, timeout)

    monkeypatch.setattr(client, "call", recording)
    return requests


def test_the_cpu_daemon_refuses_out_as_not_supported(client: qdp.Client, cuda: FakeCuda,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    requests = sent(client, monkeypatch)
    out = CudaArray((2, 4), "<c8", stream=2)
    with pytest.raises(qdp.NotSupported, match="host memory") as e:
        client.encode(np.full((2, 2), 0.3), "angle", 2, out=out)
    assert e.value.field == "out", repr(e.value)
    assert "leave out unset" in e.value.message
    # Left at its default, dtype is out's; the request names the allocation as exported.
    r = requests[0]
    assert r.output_dtype == qdp.records.DTYPES.index("complex64") + 1
    assert (r.out.ipc_handle, r.out.offset, r.out.bytes) == (bytes(range(64)), 4096, 2 * 4 * 8)
    assert r.out.device_uuid == UUID
    assert cuda.synced == [2] and cuda.exported == [(0, 0x7f0000001000)]


def test_the_tensor_is_checked_before_anything_is_sent(client: qdp.Client, cuda: FakeCuda,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    requests = sent(client, monkeypatch)
    x = np.full(3, 0.2)  # 2^3 amplitudes
    cases = [
        (CudaArray((8,), "<c8"), dict(dtype="complex128"), "out is complex64 but dtype is"),
        (CudaArray((7,)), {}, "out has 7 elements; the state has 1 x 2^3 = 8 amplitudes"),
        (CudaArray((2, 8)), {}, "pass a tensor of shape (1, 8)"),
        (CudaArray((8,), "<f8"), {}, "typestr '<f8'"),
        (CudaArray((2, 4), strides=(16, 32)), {}, "not C-contiguous"),
        (CudaArray((8,), readonly=True), {}, "read-only"),
    ]
    for out, kw, words in cases:
        with pytest.raises(qdp.InvalidArgument, match=re.escape(words)) as e:
            client.encode(x, "angle", 3, out=out, **kw)
        assert e.value.field == "out"
    with pytest.raises(qdp.NotSupported, match="__cuda_array_interface__") as e:
        client.encode(x, "angle", 3, out=np.zeros(8, np.complex128))
    assert e.value.field == "out"
    assert requests == [] and cuda.exported == []


def test_ttl_and_label_are_refused_with_out(client: qdp.Client, cuda: FakeCuda,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """out= keeps nothing, so a lifetime or a label for the state would be dropped unseen."""
    requests = sent(client, monkeypatch)
    for kw, field in ((dict(ttl=5.0), "ttl"), (dict(label="run 7"), "label")):
        with pytest.raises(qdp.InvalidArgument, match="out= keeps nothing") as e:
            client.encode(np.full(3, 0.2), "angle", 3, out=CudaArray((8,)), **kw)
        assert e.value.field == field
    assert requests == [] and cuda.exported == []


def test_a_cpu_tensor_is_not_an_out(client: qdp.Client, cuda: FakeCuda) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(qdp.NotSupported, match="CUDA tensor") as e:
        client.encode([0.1, 0.2], "angle", 2, out=torch.zeros(4, dtype=torch.complex128))
    assert e.value.field == "out" and cuda.exported == []


def test_the_daemon_checks_out_with_its_fields(client: qdp.Client) -> None:
    """The daemon's own checks, reached through Client.call: the request's faults before the
    backend, with their numbers."""
    def request(handle: bytes = bytes(64), nbytes: int = 4 * 16) -> Any:
        r = client.wire.EncodeRequest(encoding=2, qubits=2)  # angle, 4 complex128 amplitudes
        r.input.dtype, r.input.rows, r.input.cols = 2, 1, 2
        r.input.data = np.array([0.1, 0.2]).tobytes()
        r.out.ipc_handle, r.out.bytes, r.out.device_uuid = handle, nbytes, UUID
        return r
    with pytest.raises(qdp.InvalidArgument, match="8 bytes") as e:
        client.call("Encode", request(handle=bytes(8)))
    assert e.value.field == "out.ipc_handle"
    with pytest.raises(qdp.InvalidArgument, match="needs 64 B but out offers 48 B") as e:
        client.call("Encode", request(nbytes=48))
    assert (e.value.field, e.value.need_bytes, e.value.free_bytes) == ("out.bytes", 64, 48)
    with pytest.raises(qdp.FailedPrecondition, match="cpu:2") as e:
        client.call("Encode", request())
    assert e.value.field == "out"



def test_kernel_out_is_checked_and_refused_by_the_cpu_daemon(client: qdp.Client, cuda: FakeCuda,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    with client.encode(np.full((3, 2), 0.3), "angle", 2) as a, \
            client.encode(np.full((2, 2), 0.1), "angle", 2) as b:
        requests: List[Any] = []  # what the states' calls send
        conn, call = client._owner.conn, client._owner.conn.call
        monkeypatch.setattr(conn, "call", lambda method, request, *rest:
                            requests.append(request) or call(method, request, *rest))
        cases = [
            (CudaArray((3, 2), "<c16"), {}, "out is complex128; the matrix is float64"),
            (CudaArray((3, 3)), dict(overlaps=True), "out has 9 elements; the matrix has 3 x 2"),
            (CudaArray((3, 2), "<f8", strides=(8, 24)), {}, "not C-contiguous"),
            (CudaArray((3, 2), "<i8"), {}, "float32 ('<f4') or float64 ('<f8')"),
        ]
        for out, kw, words in cases:
            with pytest.raises(qdp.InvalidArgument, match=re.escape(words)) as e:
                client.kernel(a, b, out=out, **kw)
            assert e.value.field == "out"
        with pytest.raises(qdp.NotSupported, match="__cuda_array_interface__") as e:
            a.kernel(b, out=np.zeros((3, 2)))
        assert requests == [] and cuda.exported == []
        with pytest.raises(qdp.NotSupported, match="host memory") as e:
            client.kernel(a, b, out=CudaArray((3, 2), "<f8", stream=5))
        assert e.value.field == "out"
        r = requests[0]
        assert (r.out.ipc_handle, r.out.offset, r.out.bytes) == (bytes(range(64)), 4096, 3 * 2 * 8)
        assert r.out.device_uuid == UUID and cuda.synced == [5]


def test_the_daemon_checks_kernel_out_with_its_fields(client: qdp.Client) -> None:
    with client.encode(np.full((3, 2), 0.3), "angle", 2) as a:
        def request(handle: bytes = bytes(64), nbytes: int = 9 * 8, offset: int = 0) -> Any:
            r = client.wire.KernelRequest()
            r.a.CopyFrom(a._ref())
            r.out.ipc_handle, r.out.bytes, r.out.offset = handle, nbytes, offset
            r.out.device_uuid = UUID
            return r
        with pytest.raises(qdp.InvalidArgument, match="8 bytes") as e:
            client.call("Kernel", request(handle=bytes(8)))
        assert e.value.field == "out.ipc_handle"
        with pytest.raises(qdp.InvalidArgument, match="needs 72 B but out offers 64 B") as e:
            client.call("Kernel", request(nbytes=64))
        assert (e.value.field, e.value.need_bytes, e.value.free_bytes) == ("out.bytes", 72, 64)
        r = request()
        r.region.handle = "r-1"
        with pytest.raises(qdp.InvalidArgument, match="give one") as e:
            client.call("Kernel", r)
        assert e.value.field == "region"
        with pytest.raises(qdp.FailedPrecondition, match="cpu:2") as e:
            client.call("Kernel", request())
        assert e.value.field == "out"
