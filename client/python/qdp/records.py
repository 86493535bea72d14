"""Plain records of what the daemon answers: layouts, plans, status. Each keeps the protobuf
message it came from as ``raw`` for fields not copied here.

The names of encodings, dtypes and placement policies are the wire's (the enums of the shipped
``qdp.desc``): ENCODING_IQP_Z is "iqp-z", DTYPE_COMPLEX64 "complex64", POLICY_AUTO "auto".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

import numpy as np

from ._wire import enum_names
from .errors import InvalidArgument

#: Each enum of the wire that a request names by a word: its names by number.
_ENUMS: Dict[str, Dict[int, str]] = {
    "Encoding": enum_names("Encoding", "ENCODING_"),
    "DType": enum_names("DType", "DTYPE_"),
    "Policy": enum_names("Policy", "POLICY_"),
}
ENCODINGS = tuple(_ENUMS["Encoding"].values())
DTYPES = tuple(_ENUMS["DType"].values())
POLICIES = tuple(_ENUMS["Policy"].values())

NUMPY_DTYPES: Dict[str, np.dtype] = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
                                     "complex64": np.dtype("<c8"), "complex128": np.dtype("<c16"),
                                     "int64": np.dtype("<i8")}

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_bytes(n: int) -> str:
    """A byte count for people, in binary units as qdpctl prints it: "512 B", "10.4 GiB",
    "16 TiB".

    Parameters
    ----------
    n : int
        Bytes, >= 0.

    Returns
    -------
    str
        Below 1 KiB the exact count and "B"; else the largest unit (KiB to EiB) that leaves a
        value of at least 1, with one decimal unless it prints as ".0" (1023.96 KiB is
        "1024 KiB"). The exact figure, where it matters, travels beside it (``need_bytes``).
    """
    n = int(n)
    if n < 1024:
        return f"{n} B"
    x, unit = float(n), -1
    while x >= 1024 and unit < len(_UNITS) - 1:
        x /= 1024
        unit += 1
    text = f"{x:.1f}"
    return f"{text[:-2] if text.endswith('.0') else text} {_UNITS[unit]}"


def encoding_name(number: int) -> str:
    """The package's name of Encoding ``number`` ("iqp-z"); "unspecified" for 0."""
    return _ENUMS["Encoding"].get(number, "unspecified")


def dtype_name(number: int) -> str:
    """The package's name of DType ``number`` ("complex128"); "unspecified" for 0."""
    return _ENUMS["DType"].get(number, "unspecified")


def enum_number(enum: str, name: str, what: str, field: str) -> int:
    """The wire's number of ``name`` in enum ``enum`` ("Encoding", "DType" or "Policy").

    Raises
    ------
    InvalidArgument
        An unknown name, naming ``what`` it is, the names there are, and ``field``.
    """
    for number, known in _ENUMS[enum].items():
        if known == name:
            return number
    raise InvalidArgument(f"unknown {what} {name!r}: use one of "
                          f"{', '.join(_ENUMS[enum].values())}", field=field)


@dataclass(frozen=True)
class Shard:
    """One shard of a state: which device of which rank holds which amplitudes and samples.

    Attributes
    ----------
    rank : int
        World rank holding it (0 for a plain qdpd).
    device : str
        "cpu:0", "cuda:1".
    uuid : str
        GPU UUID; empty on the CPU backend.
    first, count : int
        Amplitude index range [first, first + count) within each sample.
    row_first, rows : int
        Sample range [row_first, row_first + rows).
    bytes : int
        Device bytes the shard holds.
    """

    rank: int
    device: str
    uuid: str
    first: int
    count: int
    row_first: int
    rows: int
    bytes: int
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> "Shard":
        """Builds it from a ``qdp.Shard`` message."""
        return cls(m.rank, m.device, m.uuid, m.first, m.count, m.row_first, m.rows, m.bytes, m)


@dataclass(frozen=True)
class StateInfo:
    """A state's description and layout (Describe).

    Attributes
    ----------
    handle : str
        The state's name.
    encoding : str
        "amplitude", ..., "phase".
    qubits, batch : int
        Qubits per sample and samples.
    dtype : str
        "complex64" or "complex128".
    bytes : int
        Device bytes of the whole state.
    policy : str
        The placement policy the plan resolved to.
    shards : tuple of Shard
        Its layout.
    label, owner : str
        Free text kept with it, and the identity that created it ("uid:1000").
    expires_unix_ms : int
        When its TTL ends (0: never).
    leases : int
        Open view leases.
    collective : str
        What its shards exchanged while it was encoded: "none" (nothing), "host", "mpi" or
        "nccl" for amplitude's norm, "local", "peer", "nccl", "copy" or "mpi" for iqp's
        global-bit stages.
    encode_ms : float
        Milliseconds its encode took on the devices.
    ttl_seconds : int
        The lifetime it was given, in whole seconds (0: it never expires): the ttl asked for,
        the daemon's default_ttl when none was, or its max_ttl when the ttl asked for was longer.
    ttl_capped : bool
        Whether the ttl asked for was above the daemon's max_ttl, which it got instead
        (:class:`qdp.TtlCappedWarning` says so when it is made).
    written : bool
        Whether writable views were ever opened on it (:meth:`qdp.State.shards` with
        ``writable=True``): its amplitudes are then what was written, no longer necessarily
        its encoding's.
    writer_lease_id : int
        The write lease open now (0: none); while it is open the daemon reads none of its
        amplitudes.
    writer : str
        Who holds that lease: the identity and the process's pid ("uid:1000 (pid 4242)"), or "".
    session : str
        The session it ends with (:attr:`qdp.Client.session`), or "" (it ends by its release
        or its ttl).
    """

    handle: str
    encoding: str
    qubits: int
    batch: int
    dtype: str
    bytes: int
    policy: str
    shards: Tuple[Shard, ...]
    label: str = ""
    owner: str = ""
    expires_unix_ms: int = 0
    leases: int = 0
    collective: str = ""
    encode_ms: float = 0.0
    ttl_seconds: int = 0
    ttl_capped: bool = False
    written: bool = False
    writer_lease_id: int = 0
    writer: str = ""
    session: str = ""
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> "StateInfo":
        """Builds it from a ``qdp.StateInfo`` message."""
        writer = f"{m.writer} (pid {m.writer_pid})" if m.writer_lease_id else ""
        return cls(m.handle, encoding_name(m.encoding), m.qubits, m.batch or 1,
                   dtype_name(m.dtype), m.bytes, m.policy,
                   tuple(Shard.from_proto(s) for s in m.shards), m.label, m.owner,
                   m.expires_unix_ms, m.leases, m.collective, m.encode_ms,
                   m.ttl_seconds, m.ttl_capped, m.written, m.writer_lease_id, writer,
                   getattr(m, "session", ""), m)


@dataclass(frozen=True)
class DeviceNeed:
    """What one device must hold for a plan, against its budget (bytes)."""

    rank: int
    device: str
    shard_bytes: int
    staging_bytes: int
    workspace_bytes: int
    need_bytes: int
    budget_bytes: int
    fits: bool

    @classmethod
    def from_proto(cls, m: Any) -> "DeviceNeed":
        """Builds it from a ``qdp.DeviceNeed`` message."""
        return cls(m.rank, m.device, m.shard_bytes, m.staging_bytes, m.workspace_bytes,
                   m.need_bytes, m.budget_bytes, m.fits)


@dataclass(frozen=True)
class Plan:
    """A dry run's answer (Plan): the placement and every device's arithmetic.

    Attributes
    ----------
    feasible : bool
        Whether an Encode of the same request would fit now.
    policy : str
        The policy the plan resolved to.
    global_bits : int
        g of an even plan, else 0.
    total_bytes : int
        Device bytes of the state.
    shards : tuple of Shard
        The layout it would have.
    needs : tuple of DeviceNeed
        Per device: shard, staging and workspace bytes against the budget.
    message : str
        When not feasible: why, with the numbers.
    """

    feasible: bool
    policy: str
    global_bits: int
    total_bytes: int
    shards: Tuple[Shard, ...]
    needs: Tuple[DeviceNeed, ...]
    message: str
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> "Plan":
        """Builds it from a ``qdp.PlanReply`` message."""
        return cls(m.feasible, m.policy, m.global_bits, m.total_bytes,
                   tuple(Shard.from_proto(s) for s in m.shards),
                   tuple(DeviceNeed.from_proto(n) for n in m.needs), m.message, m)


@dataclass(frozen=True)
class Device:
    """One device of the daemon (Status)."""

    name: str
    kind: str
    rank: int
    model: str
    total_bytes: int
    free_bytes: int
    budget_bytes: int
    used_bytes: int
    uuid: str = ""  # a GPU's, as nvidia-smi prints it ("GPU-..."); "" for a CPU device

    @classmethod
    def from_proto(cls, m: Any) -> "Device":
        """Builds it from a ``qdp.Device`` message."""
        return cls(m.name, m.kind, m.rank, m.model, m.total_bytes, m.free_bytes,
                   m.budget_bytes, m.used_bytes, m.uuid)


@dataclass(frozen=True)
class Status:
    """The daemon's status: version, backend, devices, budgets and counts."""

    version: str
    backend: str
    ranks: int
    devices: Tuple[Device, ...]
    budget_bytes: int
    used_bytes: int
    states: int
    max_qubits: int
    regions: int
    region_bytes: int
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> "Status":
        """Builds it from a ``qdp.StatusReply`` message."""
        return cls(m.version, m.backend, m.ranks, tuple(Device.from_proto(d) for d in m.devices),
                   m.budget_bytes, m.used_bytes, m.states, m.max_qubits, m.regions,
                   m.region_bytes, m)
