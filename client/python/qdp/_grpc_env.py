"""Which of gRPC's client transports this process uses, settled when qdp makes its first channel.

grpcio 1.84's default client (the EventEngine one) answers each call on a thread of its own and
hands the reply over to the caller's: on an H200 node that hand-off cost 80 us of a 183 us Health
round trip and 290 us of a small encode and release (docs/performance.md, "From Python"). gRPC
reads its experiments once, at its first import, from GRPC_EXPERIMENTS. ``import qdp`` imports
no grpc and changes no environment; the first :class:`qdp.Client` made in the process imports
grpc (:func:`import_grpc`), and just before, asks for the transport that answers on the caller's
thread by setting GRPC_EXPERIMENTS=-event_engine_client, unless

- grpc was imported already (the process has chosen: nothing changes),
- GRPC_EXPERIMENTS is set (the user has chosen),
- QDP_GRPC_DEFAULTS is set to anything but "" or "0" (leave gRPC's defaults alone), or
- the installed grpcio is outside the versions known to have this experiment (1.51-1.84): an
  unknown experiment would only print an error at import.

The variable is set in this process's environment, so child processes started after the first
Client inherit it; it changes which transport gRPC uses, never what a call does.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Dict, MutableMapping, Optional, Tuple

EXPERIMENT = "-event_engine_client"
KNOWN = ((1, 51), (1, 84))  # grpcio versions (major, minor) that know the experiment


def _version(text: str) -> Optional[Tuple[int, int]]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _installed_grpcio() -> Optional[str]:
    try:
        return version("grpcio")
    except PackageNotFoundError:
        return None


def choose_transport(environ: MutableMapping[str, str] = os.environ,
                     modules: Dict[str, object] = sys.modules,
                     grpcio: Optional[str] = None) -> bool:
    """Sets GRPC_EXPERIMENTS in ``environ`` to answer calls on the caller's thread, unless one of
    the module docstring's exceptions holds; returns whether it did."""
    if "grpc" in modules or "GRPC_EXPERIMENTS" in environ:
        return False
    if environ.get("QDP_GRPC_DEFAULTS", "") not in ("", "0"):
        return False
    v = _version(grpcio if grpcio is not None else (_installed_grpcio() or ""))
    if v is None or not KNOWN[0] <= v <= KNOWN[1]:
        return False
    environ["GRPC_EXPERIMENTS"] = EXPERIMENT
    return True


def import_grpc() -> ModuleType:
    """The grpc module, imported with the transport chosen first (:func:`choose_transport`)
    when it is imported here for the first time."""
    choose_transport()
    import grpc

    return grpc
