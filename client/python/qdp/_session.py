"""The session of a :class:`qdp.Client` (OpenSession in proto/qdp.proto): what the states and
regions it makes end with on the daemon, even when its process is killed before it can release
them.

On a Unix socket the daemon ends the session when this process exits (it watches the process
through a pidfd); over TCP, when no call names the session for its heartbeat timeout, which a
thread of this module keeps from lapsing while the session is open. The session is opened at the
first call that makes something, so a client that only reads costs no extra call; a daemon
without sessions (older than the OpenSession call) is served as before, without one.
"""

from __future__ import annotations

import threading
import weakref
from typing import Optional

from ._connection import Connection
from .errors import Error, InvalidArgument

#: The heartbeat timeout of a TCP client's session by default, in seconds: it is beaten four
#: times within it.
TCP_HEARTBEAT = 60.0


def check_heartbeat(heartbeat: Optional[float]) -> Optional[float]:
    """``heartbeat`` as Client takes it: None, or seconds > 0 (InvalidArgument otherwise)."""
    if heartbeat is None:
        return None
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)) or \
            not heartbeat > 0:
        raise InvalidArgument(f"heartbeat must be seconds > 0 (or None: the default), not "
                              f"{heartbeat!r}", field="heartbeat")
    return float(heartbeat)


class Session:
    """One Client's session, opened lazily (:meth:`id`) and ended by :meth:`close`.

    Parameters
    ----------
    conn : Connection
        The client's connection.
    heartbeat : float, optional
        Seconds without a call after which the daemon ends the session. Default: none on a Unix
        socket (it ends with this process), :data:`TCP_HEARTBEAT` over TCP.
    label : str
        For the daemon's log.
    """

    def __init__(self, conn: Connection, heartbeat: Optional[float], label: str) -> None:
        self._conn = conn
        tcp = conn.socket_path is None
        self.heartbeat = heartbeat if heartbeat is not None else TCP_HEARTBEAT if tcp else None
        self._label = label[:63]
        self._lock = threading.Lock()
        self._id: Optional[str] = None  # "" once known that the daemon has no sessions
        self._stop = threading.Event()

    def id(self) -> str:
        """The session's id, opening it at the first call; "" when the daemon has none."""
        sid = self._id
        if sid is not None:
            return sid
        with self._lock:
            if self._id is None:
                self._id = self._open()
            return self._id

    def renew(self, old: str) -> str:
        """A new session in place of ``old``, which the daemon no longer knows (it restarted, or
        the heartbeat timeout passed while it was unreachable: what ``old`` held is gone)."""
        with self._lock:
            if self._id == old:
                self._stop.set()  # the old session's heartbeat thread
                self._stop = threading.Event()
                self._id = self._open()
            return self._id

    def _open(self) -> str:
        conn = self._conn
        req = conn.wire.OpenSessionRequest(label=self._label)
        if self.heartbeat:
            req.heartbeat_ms = int(self.heartbeat * 1000)
        try:
            info = conn.call("OpenSession", req)
        except Error as e:
            if e.status == "UNIMPLEMENTED":
                return ""  # a daemon from before sessions: states end by release or TTL only
            raise
        if self.heartbeat:
            t = threading.Thread(target=_beat, name="qdp-heartbeat", daemon=True,
                                 args=(weakref.ref(self), self._stop, self.heartbeat / 4))
            t.start()
        return info.session

    def close(self) -> None:
        """Ends the session on the daemon, which releases what is left in it (nothing when the
        client released it all already). Idempotent; quiet when the daemon is gone."""
        self._stop.set()
        with self._lock:
            sid, self._id = self._id, ""
        if sid:
            try:
                self._conn.call("CloseSession", self._conn.wire.SessionRef(session=sid),
                                timeout=10)
            except Error:
                pass  # the daemon is gone or restarted: nothing of the session is left

    def _beat_once(self) -> bool:
        sid = self._id
        if not sid or not self._conn.open:
            return False
        try:
            self._conn.call("Heartbeat", self._conn.wire.SessionRef(session=sid), timeout=10)
        except Error as e:
            # Ended (the timeout passed while the daemon was unreachable): what it held is
            # released, and the next call that names it says so.
            return e.status not in ("NOT_FOUND", "FAILED_PRECONDITION")
        return True


def _beat(ref: "weakref.ref[Session]", stop: threading.Event, every: float) -> None:
    """The heartbeat thread: beats until the session is closed, ended or collected."""
    while not stop.wait(every):
        s = ref()
        if s is None or not s._beat_once():
            return
        del s
