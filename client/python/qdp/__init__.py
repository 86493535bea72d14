"""qdp: the Python client of qdpd, the qdp quantum data plane daemon.

Encode classical data into quantum state vectors that the daemon keeps resident, on GPUs or on its
CPU backend, and fetch them as NumPy arrays or torch tensors::

    import numpy as np, qdp
    with qdp.Client() as c:                       # $QDP_TARGET, else the default socket
        with c.encode(np.random.rand(64, 8), "angle", 8) as s:
            psi = s.numpy()                       # (64, 256) complex128

Qubit k is bit k of the amplitude index (little-endian); ``help(qdp.Client.encode)`` gives
every encoding's values per sample and formula, and :mod:`qdp.feature_maps` builds iqp's
parameters from features.

Importing qdp before grpc picks gRPC's lower-latency client transport for the process (see
qdp._grpc_env; QDP_GRPC_DEFAULTS=1 keeps gRPC's defaults).
"""

from ._grpc_env import choose_transport

choose_transport()  # before anything imports grpc, which reads its experiments once

from . import feature_maps  # noqa: E402
from .client import LARGE_BYTES, Client, default_target  # noqa: E402
from .errors import (  # noqa: E402
    Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,
    FailedPrecondition, Internal, InvalidArgument, NotFound, NotSupported, OutOfRange,
    PermissionDenied, ResourceExhausted, TtlCappedWarning, Unauthenticated, Unavailable,
    Unimplemented, Unknown)
from .state import State  # noqa: E402
from .records import (  # noqa: E402
    DeviceNeed, Device, Plan, Shard, StateInfo, Status, format_bytes)

__version__ = "0.1.0"

__all__ = [
    "Client", "State", "default_target", "LARGE_BYTES", "format_bytes", "feature_maps",
    "StateInfo", "Shard", "Plan", "DeviceNeed", "Status", "Device", "TtlCappedWarning",
    "Error", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "NotSupported",
]
