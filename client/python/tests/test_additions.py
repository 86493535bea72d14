"""The wire additions the client is ready for (FetchInto into a writable region, CUDA tensor
input through Input.cuda_ipc), used only when the loaded contract has them: with a contract
that has them and a daemon that does not yet, the client falls back to what the daemon has."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import qdp
from qdp import _cuda
from qdp._wire import Wire, descriptor_bytes

import reference as ref

PROTO = pathlib.Path(__file__).resolve().parents[3] / "proto" / "qdp.proto"

# (text of proto/qdp.proto, what it becomes with the additions)
ADDITIONS = [
    ("  rpc Gather(GatherRequest) returns (EncodeReply);\n",
     "  rpc Gather(GatherRequest) returns (EncodeReply);\n"
     "  rpc FetchInto(FetchIntoRequest) returns (FetchIntoReply);\n"),
    ("    SharedMemory shm = 6;     // a client's shared memory on the same node\n",
     "    SharedMemory shm = 6;     // a client's shared memory on the same node\n"
     "    CudaIpcInput cuda_ipc = 8;\n"),
    ("  string fd_ticket = 4;\n}\n\n// A registered region",
     "  string fd_ticket = 4;\n  bool writable = 5;\n}\n\n// A registered region"),
]

MESSAGES = """
message CudaIpcInput { bytes ipc_handle = 1; uint64 offset = 2; string device_uuid = 3; }
message FetchIntoRequest {
  StateRef state = 1; uint64 offset = 2; uint64 count = 3; RegionRef region = 4;
  uint64 region_offset = 5;
}
message FetchIntoReply { uint64 count = 1; DType dtype = 2; uint64 bytes = 3; }
"""


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> Wire:
    """The shipped contract when it has the additions, else proto/qdp.proto with them added."""
    shipped = Wire()
    if shipped.has_method("FetchInto") and shipped.has_field("Input", "cuda_ipc"):
        return shipped
    compiler = shutil.which("protoc") or shutil.which("protoc-c")
    if compiler is None or not PROTO.exists():
        pytest.skip("needs protoc or protoc-c and proto/qdp.proto")
    text = PROTO.read_text()
    for anchor, added in ADDITIONS:
        assert anchor in text, f"proto/qdp.proto changed: {anchor!r} is gone; update this test"
        text = text.replace(anchor, added, 1)
    folder = tmp_path_factory.mktemp("wire")
    (folder / "qdp.proto").write_text(text + MESSAGES)
    subprocess.run([compiler, f"--proto_path={folder}", f"--descriptor_set_out={folder}/qdp.desc",
                    str(folder / "qdp.proto")], check=True)
    return Wire((folder / "qdp.desc").read_bytes())


def test_the_shipped_contract_is_guarded() -> None:
    w = Wire(descriptor_bytes())
    assert w.has_method("Encode") and w.has_field("SharedMemory", "region")


def test_numpy_falls_back_to_fetch_without_fetch_into(daemon, extended: Wire) -> None:
    assert extended.has_method("FetchInto")
    with qdp.Client(daemon.target, wire=extended) as c:
        X = np.random.default_rng(8).uniform(-1, 1, size=(2, 16))
        with c.encode(X, "amplitude", 4) as s:
            got = s.numpy()  # FetchInto first; this daemon answers UNIMPLEMENTED
            if c._can_fetch_into:
                pytest.skip("this daemon has FetchInto: the fallback is not exercised")
            ref.close(got, ref.batch("amplitude", X, 4), "complex128")
            ref.close(s.numpy(), ref.batch("amplitude", X, 4), "complex128")
        assert c.status().regions == 0  # the writable region went with the fallback


def test_numpy_falls_back_when_fetch_into_is_unimplemented(daemon, extended: Wire,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The region is registered (read-only, as today's daemon can); the FetchInto call itself is
    # then answered UNIMPLEMENTED.
    register = qdp.Client._register
    monkeypatch.setattr(qdp.Client, "_register", lambda self, fd, writable: register(self, fd,
                                                                                      False))
    with qdp.Client(daemon.target, wire=extended) as c:
        with c.encode([0.1, 0.2, 0.3], "phase", 3) as s:
            got = s.numpy()
            if c._can_fetch_into:
                pytest.skip("this daemon has FetchInto: the fallback is not exercised")
            ref.close(got, ref.phase([0.1, 0.2, 0.3], 3), "complex128")
        assert c.status().regions == 0


def test_cuda_tensor_input_needs_the_field() -> None:
    inp = Wire().Input()
    if Wire().has_field("Input", "cuda_ipc"):
        pytest.skip("the shipped contract has Input.cuda_ipc")
    with pytest.raises(qdp.NotSupported, match="cuda_ipc"):
        _cuda.fill_cuda_input(Wire(), inp, object())
