"""qdp: the Python client of qdpd, the qdp quantum data plane daemon.

Encode classical data into quantum state vectors that the daemon keeps resident, on GPUs or on its
CPU backend, and fetch them as NumPy arrays or torch tensors. The plain functions return the
state itself, nothing to release::

    import numpy as np, qdp
    psi = qdp.encode(np.random.rand(64, 8), "angle", 8)  # a CUDA tensor on a GPU daemon,
                                                         # else a NumPy array

and a :class:`Client` keeps states resident between calls::

    with qdp.Client() as c:                       # $QDP_TARGET, else the default socket,
                                                  # else a private qdpd (qdp.LocalDaemon)
        with c.encode(np.random.rand(64, 8), "angle", 8) as s:
            psi = s.numpy()                       # (64, 256) complex128

Qubit k is bit k of the amplitude index (little-endian); ``help(qdp.Client.encode)`` gives
every encoding's values per sample and formula, and :mod:`qdp.feature_maps` builds iqp's
parameters from features. :mod:`qdp.readers`, :mod:`qdp.sampling`, :mod:`qdp.torch`,
:mod:`qdp.interop` and :mod:`qdp.sim` (cuStateVec on a served state, in place) are imported on
their own.

``import qdp`` imports no grpc and changes no environment variable. The first :class:`Client`
of the process imports grpc, and before that sets GRPC_EXPERIMENTS=-event_engine_client, gRPC's
client transport that answers on the caller's thread (80 us less per call on an H200 node): not
when grpc was imported already or GRPC_EXPERIMENTS is set, and not with QDP_GRPC_DEFAULTS=1,
which keeps gRPC's defaults (see qdp._grpc_env).
"""

from . import feature_maps
from ._functions import default_client, encode, kernel, plan, status
from ._local import LocalDaemon
from .client import Client, default_target
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,
                     FailedPrecondition, Internal, InvalidArgument, NotFound, NotSupported,
                     OutOfRange, PermissionDenied, ResourceExhausted, TtlCappedWarning,
                     Unauthenticated, Unavailable, Unimplemented, Unknown)
from .records import Device, DeviceNeed, Plan, Shard, StateInfo, Status, format_bytes
from .state import State

#: The project's version, as meson.build sets it; pyproject.toml takes the package's from here.
__version__ = "0.7.0"

__all__ = [
    # the plain functions and the client they share
    "encode", "kernel", "plan", "status", "default_client",
    # the client and its states
    "Client", "State", "default_target", "LocalDaemon",
    # what the daemon answers
    "StateInfo", "Shard", "Plan", "DeviceNeed", "Status", "Device", "format_bytes",
    # failures, one class per status, and the warning of a capped ttl
    "Error", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "NotSupported", "TtlCappedWarning",
    # encodings' parameters from features
    "feature_maps",
]
