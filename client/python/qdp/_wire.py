"""The wire contract, loaded at run time from the FileDescriptorSet shipped in the package.

``qdp.desc`` is proto/qdp.proto compiled by protoc (tools/update_wire.sh). Loading it here rather
than shipping generated ``_pb2`` modules keeps the package free of a protoc version: the same
bytes work with Debian's protobuf 4.21 and with the 5.x-7.x releases on PyPI.
"""

from __future__ import annotations

import importlib.resources
from typing import Any, Callable, Dict, Optional

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "qdp"
SERVICE = "qdp.Qdp"


def descriptor_bytes() -> bytes:
    """The shipped FileDescriptorSet of proto/qdp.proto.

    Returns
    -------
    bytes
        The serialized ``google.protobuf.FileDescriptorSet``.
    """
    return importlib.resources.files(__package__).joinpath("qdp.desc").read_bytes()


def enum_names(enum: str, prefix: str, data: Optional[bytes] = None) -> Dict[int, str]:
    """The values of enum ``enum`` of the contract, by number, as the package names them.

    Parameters
    ----------
    enum : str
        The enum's name in package qdp ("Encoding").
    prefix : str
        What every value's name starts with ("ENCODING_").
    data : bytes, optional
        A serialized FileDescriptorSet; the shipped one when omitted.

    Returns
    -------
    dict of int to str
        In the order of the numbers; each name without ``prefix``, in lower case, with "-" for
        "_" (ENCODING_IQP_Z is "iqp-z"). The ``*_UNSPECIFIED`` value is left out.
    """
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_bytes() if data is None else data)
    for f in fds.file:
        for e in f.enum_type:
            if f.package == PACKAGE and e.name == enum:
                return {v.number: v.name[len(prefix):].lower().replace("_", "-")
                        for v in sorted(e.value, key=lambda v: v.number)
                        if v.name != prefix + "UNSPECIFIED"}
    raise KeyError(f"qdp.proto has no enum {enum}")


def _message_class_getter(pool: descriptor_pool.DescriptorPool) -> Callable[[Any], Any]:
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if get is not None:
        return get
    return message_factory.MessageFactory(pool).GetPrototype  # protobuf 4.21 (Debian 12)


class Wire:
    """The message classes and methods of one FileDescriptorSet.

    Parameters
    ----------
    data : bytes, optional
        A serialized FileDescriptorSet; the shipped one when omitted.

    Notes
    -----
    Messages are reached by their short name (``wire.EncodeRequest``).
    """

    def __init__(self, data: Optional[bytes] = None) -> None:
        fds = descriptor_pb2.FileDescriptorSet.FromString(
            descriptor_bytes() if data is None else data)
        self.pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            self.pool.Add(f)
        self._get = _message_class_getter(self.pool)
        self._classes: Dict[str, Any] = {}
        self.service = self.pool.FindServiceByName(SERVICE)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        cls = self._classes.get(name)
        if cls is None:
            try:
                desc = self.pool.FindMessageTypeByName(f"{PACKAGE}.{name}")
            except KeyError:
                raise AttributeError(f"qdp.proto has no message {name}") from None
            cls = self._get(desc)
            self._classes[name] = cls
        return cls

    def method_types(self, name: str) -> "tuple[Any, Any, bool, bool]":
        """The request and reply classes of RPC ``name`` and whether each side streams."""
        m = self.service.methods_by_name[name]
        return (self._get(m.input_type), self._get(m.output_type),
                m.client_streaming if hasattr(m, "client_streaming") else False,
                m.server_streaming if hasattr(m, "server_streaming") else False)
