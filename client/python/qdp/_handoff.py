"""The descriptor handoff ("QDPFD/1", proto/qdp.proto): how a client on the daemon's node gives
it a file or shared memory that the client opened with its own rights.

One connection to the daemon's socket per descriptor: 16 bytes in one sendmsg ("QDPFD/1\\n", a
little-endian u32 access, a u32 0) with the descriptor attached (SCM_RIGHTS); the daemon answers
one line, "OK <ticket>" or "ERR <STATUS> <message>". The ticket is then named in the request.
"""

from __future__ import annotations

import array
import socket
import struct

from .errors import Error, error_for

READ = 1
WRITE = 2
MAGIC = b"QDPFD/1\n"


def hand_over(socket_path: str, fd: int, access: int = READ, timeout: float = 30.0) -> str:
    """Hands ``fd`` to the daemon listening on ``socket_path``.

    Parameters
    ----------
    socket_path : str
        The daemon's Unix socket.
    fd : int
        An open descriptor: a regular file, POSIX shared memory or a memfd, opened for ``access``.
    access : int
        ``READ`` (1) or ``WRITE`` (2).
    timeout : float
        Seconds to wait for the daemon's answer.

    Returns
    -------
    str
        The ticket, good once, for this uid, for 60 s.

    Raises
    ------
    Error
        The subclass of the daemon's status (PermissionDenied, ResourceExhausted, ...), or
        Unavailable when the socket cannot be reached.
    """
    header = MAGIC + struct.pack("<II", access, 0)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
            s.settimeout(timeout)
            s.connect(socket_path)
            s.sendmsg([header],
                      [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())])
            line = b""
            while not line.endswith(b"\n") and len(line) < 65536:
                part = s.recv(4096)
                if not part:
                    break
                line += part
    except OSError as e:
        raise error_for("UNAVAILABLE", f"cannot hand a descriptor to qdpd at {socket_path}: "
                        f"{e.strerror or e}") from None
    text = line.decode("utf-8", "replace").rstrip("\n")
    if text.startswith("OK "):
        return text[3:]
    if text.startswith("ERR "):
        status, _, message = text[4:].partition(" ")
        raise error_for(status, message)
    raise error_for("UNAVAILABLE", f"qdpd at {socket_path} gave no answer to a descriptor "
                    f"handoff ({text!r}); is it a qdpd socket?")


__all__ = ["READ", "WRITE", "hand_over", "Error"]
