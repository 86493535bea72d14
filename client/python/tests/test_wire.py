"""The wire contract shipped in the package is proto/qdp.proto: compared message by message,
enum by enum and method by method with a FileDescriptorSet freshly compiled from it
($QDP_FRESH_DESC, e.g. build/proto/qdp.desc; else compiled here with protoc or protoc-c)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
from google.protobuf import descriptor_pb2

import qdp
from qdp import _wire

PROTO = pathlib.Path(__file__).resolve().parents[3] / "proto" / "qdp.proto"


def fresh(tmp_path: pathlib.Path) -> bytes:
    path = os.environ.get("QDP_FRESH_DESC")
    if path:
        return pathlib.Path(path).read_bytes()
    compiler = shutil.which("protoc") or shutil.which("protoc-c")
    if compiler is None or not PROTO.exists():
        pytest.skip("no QDP_FRESH_DESC, and no protoc or proto/qdp.proto to compile one")
    out = tmp_path / "qdp.desc"
    subprocess.run([compiler, f"--proto_path={PROTO.parent}", f"--descriptor_set_out={out}",
                    str(PROTO)], check=True)
    return out.read_bytes()


def by_name(data: bytes) -> dict:
    fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    (f,) = [f for f in fds.file if f.package == "qdp"]
    out = {}
    for m in f.message_type:
        out["message " + m.name] = m
    for e in f.enum_type:
        out["enum " + e.name] = e
    for s in f.service:
        for m in s.method:
            out[f"rpc {s.name}.{m.name}"] = m
    out["options"] = f.options
    return out


def test_shipped_descriptor_is_proto_qdp_proto(tmp_path: pathlib.Path) -> None:
    shipped, want = by_name(_wire.descriptor_bytes()), by_name(fresh(tmp_path))
    missing = sorted(set(want) - set(shipped))
    extra = sorted(set(shipped) - set(want))
    changed = sorted(k for k in set(want) & set(shipped) if want[k] != shipped[k])
    assert not (missing or extra or changed), (
        f"client/python/qdp/qdp.desc has drifted from proto/qdp.proto (missing {missing}, "
        f"extra {extra}, changed {changed}): run client/python/tools/update_wire.sh and commit")


def test_every_method_has_a_call(client: qdp.Client) -> None:
    calls = client._conn._grpc_calls()  # grpcio's, made when first needed
    for name in client.wire.service.methods_by_name:
        assert name in calls


def test_package_ships_its_data() -> None:
    root = pathlib.Path(qdp.__file__).parent
    assert (root / "py.typed").exists() and (root / "qdp.desc").exists()


def test_the_names_of_an_enum_are_the_wires() -> None:
    """records' names come from the contract's enums: a value added to Encoding is named by the
    same rule (ENCODING_FOO_BAR is "foo-bar"), in the order of the numbers; UNSPECIFIED is
    not a name."""
    fds = descriptor_pb2.FileDescriptorSet.FromString(_wire.descriptor_bytes())
    (f,) = [f for f in fds.file if f.package == "qdp"]
    (enum,) = [e for e in f.enum_type if e.name == "Encoding"]
    added = max(v.number for v in enum.value) + 1
    enum.value.add(name="ENCODING_FOO_BAR", number=added)
    names = _wire.enum_names("Encoding", "ENCODING_", fds.SerializeToString())
    assert 0 not in names and list(names) == sorted(names) and names[added] == "foo-bar"
    assert tuple(names.values()) == qdp.records.ENCODINGS + ("foo-bar",)
    assert names[5] == "iqp-z"  # ENCODING_IQP_Z
    assert _wire.enum_names("Policy", "POLICY_")[0] == "auto"  # an enum whose 0 is a name
