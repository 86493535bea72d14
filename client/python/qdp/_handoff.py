"""The descriptor handoff ("QDPFD/1", proto/qdp.proto): how a client on the daemon's node gives
it a file or shared memory that the client opened with its own rights.

One connection to the daemon's socket per descriptor: 16 bytes in one sendmsg ("QDPFD/1\\n", a
little-endian u32 access, a u32 0) with the descriptor attached (SCM_RIGHTS); the daemon answers
one line, "OK <ticket>" or "ERR <STATUS> <message>". The ticket is then named in the request.
The other way, :func:`take` gets the descriptor of a view the daemon filed under a ticket
(Shard.view_ticket): the header with access 3 and the ticket's length, then the ticket; the
daemon answers "OK" with the descriptor attached.
"""

from __future__ import annotations

import array
import os
import socket
import struct

from .errors import Error, error_for

READ = 1
WRITE = 2
TAKE = 3
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


def take(socket_path: str, ticket: str, timeout: float = 30.0) -> int:
    """The descriptor the daemon on ``socket_path`` holds under ``ticket`` (a view's memory):
    this process's to close. Raises as :func:`hand_over` does (NotFound for a ticket that is
    unknown, taken already, lapsed or another identity's)."""
    raw = ticket.encode()
    fds = array.array("i")
    line = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
            s.settimeout(timeout)
            s.connect(socket_path)
            s.sendall(MAGIC + struct.pack("<II", TAKE, len(raw)) + raw)
            while not line.endswith(b"\n") and len(line) < 65536:
                part, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(4 * fds.itemsize))
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
                if not part:
                    break
                line += part
    except OSError as e:
        for fd in fds:
            os.close(fd)
        raise error_for("UNAVAILABLE", f"cannot take a view's descriptor from qdpd at "
                        f"{socket_path}: {e.strerror or e}") from None
    text = line.decode("utf-8", "replace").rstrip("\n")
    for fd in fds[1:]:
        os.close(fd)  # one is all a take gives
    if text == "OK" and fds:
        return fds[0]
    if fds:
        os.close(fds[0])
    if text.startswith("ERR "):
        status, _, message = text[4:].partition(" ")
        raise error_for(status, message, field="view_ticket")
    raise error_for("UNAVAILABLE", f"qdpd at {socket_path} gave no descriptor for a view "
                    f"({text!r})")


__all__ = ["READ", "WRITE", "TAKE", "hand_over", "take", "Error"]
