"""The reaper of a private qdpd (see qdp._local): qdpd's parent, which stops it once no process
uses it, however those processes ended.

This file is both a module (qdp._local imports the folder's layout and its lock from here) and
the reaper's program, which qdp._local runs as ``python -I -S _reaper.py`` with its
configuration in JSON on stdin: it imports the standard library alone, so that it starts in a
few tens of milliseconds.

The reaper

- is started by the first process that needs the daemon, forks once more (so that it is no
  process's child to wait for) in a session of its own (a Ctrl-C in its starter's terminal does
  not reach it), and ignores SIGINT and SIGHUP;
- starts qdpd as its child with PR_SET_PDEATHSIG=SIGTERM (qdpd stops when the reaper dies, even
  of SIGKILL), its output going to the log, and waits until qdpd's socket accepts connections;
- listens on ``local.reaper``, whose listening socket its starter made (and connected to first,
  so that the reaper has a user from its first instant), and answers each connection with one
  line: the daemon's pids once qdpd serves, or why it failed. Every process that uses the
  daemon keeps one such connection open, and the kernel closes it when that process exits,
  whatever killed it; the reaper counts them;
- when no connection is left for :data:`GRACE` seconds, takes the folder's lock, accepts what
  connected in the meantime (then it goes on serving), or else removes ``local.reaper`` and
  ``local.json`` (nobody can join any more), SIGTERMs qdpd, waits for it, removes the rest, and
  the folder once it is empty, and exits. A SIGTERM to the reaper does the same at once, as
  does qdpd's exit. The log stays when qdpd failed, died or never served: errors name it.

Every step that starts, joins or stops a daemon holds the folder's lock (:func:`lock`), so a
process never joins a reaper that is about to stop, nor starts a second qdpd beside one that is
stopping.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import selectors
import signal
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional

#: The folder's files: the lock, the discovery file, the reaper's socket, qdpd's socket and its
#: log (unless the user named another).
LOCK, INFO, REAPER, SOCKET, LOG = "local.lock", "local.json", "local.reaper", "local.sock", \
    "local.log"
#: Seconds without a user before the daemon stops: a process that opens a client again at once
#: finds the same daemon.
GRACE = 2.0
#: Seconds qdpd may take to stop once asked; then it is killed.
STOP_TIMEOUT = 10.0
#: Seconds between two attempts to connect to qdpd's socket while it starts.
POLL = 0.005
PR_SET_PDEATHSIG = 1


def lock(folder: str, deadline: Optional[float] = None,
         remake: Optional[Callable[[], object]] = None) -> int:
    """Takes the folder's lock: an exclusive flock on ``local.lock``, which this returns the
    descriptor of (close it to let go).

    Only the lock on the file the path names now counts (a reaper that stops unlinks it while it
    holds it), so this checks that and tries again. ``deadline`` (a time.monotonic() value)
    bounds the wait: TimeoutError past it; None waits as long as it takes. A missing folder is
    made again by ``remake`` when given, else FileNotFoundError.
    """
    path = os.path.join(folder, LOCK)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            if remake is None:
                raise
            remake()
            continue
        try:
            _flock(fd, deadline)
            held = os.fstat(fd)
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _flock(fd: int, deadline: Optional[float]) -> None:
    if deadline is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(errno.ETIMEDOUT, "the lock is held") from None
            time.sleep(0.01)


def read_info(folder: str) -> Optional[Dict[str, Any]]:
    """The discovery file's content; None when there is none (or it is cut short: its writer
    died before the rename, so nothing it describes was started)."""
    try:
        with open(os.path.join(folder, INFO), "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None


def write_info(folder: str, info: Dict[str, Any]) -> None:
    """Writes the discovery file whole (a new file renamed over the old), readable by this user
    alone; under the folder's lock."""
    path = os.path.join(folder, INFO)
    tmp = path + ".new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


def remove(*paths: str) -> None:
    """Unlinks each path that exists."""
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def clear(folder: str, keep_log: bool) -> None:
    """Removes the files a daemon leaves in the folder, and its log unless ``keep_log``; the
    lock and the folder stay (the caller holds the lock)."""
    sock = os.path.join(folder, SOCKET)
    remove(os.path.join(folder, REAPER), os.path.join(folder, INFO),
           os.path.join(folder, INFO) + ".new", sock, sock + ".lock")
    if not keep_log:
        remove(os.path.join(folder, LOG))


def leave(folder: str, keep_log: bool) -> None:
    """What a reaper does last, under the lock: removes the daemon's files (the log unless
    ``keep_log``), the lock, and the folder once it is empty."""
    clear(folder, keep_log)
    remove(os.path.join(folder, LOCK))
    try:
        os.rmdir(folder)
    except OSError:
        pass  # the log stays, or another daemon's socket shares it (XDG_RUNTIME_DIR/qdp)


def stop_stale(folder: str, timeout: float = STOP_TIMEOUT) -> None:
    """Stops what a reaper that was killed left: qdpd got SIGTERM when its parent died but may be
    finishing; it is the process that holds its socket's lock file (which qdpd writes its pid
    into), so it is killed while it holds it. Then its files are removed; the log stays. Under
    the folder's lock."""
    path = os.path.join(folder, SOCKET) + ".lock"
    deadline = time.monotonic() + timeout
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    try:
        while fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break  # nobody holds it: qdpd is gone
            except BlockingIOError:
                pid = os.pread(fd, 32, 0).split(b"\n")[0]
                if pid.isdigit():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if time.monotonic() > deadline:
                    raise TimeoutError(errno.ETIMEDOUT, f"{path} stays locked (pid {pid!r})")
                time.sleep(0.01)
    finally:
        if fd >= 0:
            os.close(fd)
    clear(folder, keep_log=True)


# ---- the reaper's program ----


def _die_with(parent: int, prctl: Callable[..., int]) -> None:
    """In qdpd's process before exec: SIGTERM when the reaper dies, and if it died already, an
    exit now."""
    if prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(127)


class Reaper:
    """The reaper's state: its listener, its users' connections, qdpd."""

    def __init__(self, cfg: Dict[str, Any]) -> None:
        self.folder: str = cfg["folder"]
        self.socket = os.path.join(self.folder, SOCKET)
        self.own_log: bool = cfg["own_log"]
        self.listener = socket.socket(fileno=cfg["listen_fd"])
        self.listener.setblocking(False)
        self.events = selectors.DefaultSelector()  # not select(): a user may be fd 1024 or more
        self.users: List[socket.socket] = []
        self.ready = b""  # the line each user gets once qdpd serves
        self.idle_since: Optional[float] = time.monotonic()
        self.wake_r, wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno())
        for sig in (signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, lambda *_: None)  # the wakeup descriptor says which came
        self._wake_w = wake_w
        for f in (self.listener, self.wake_r):
            self.events.register(f, selectors.EVENT_READ)
        import ctypes
        import subprocess

        me, prctl = os.getpid(), ctypes.CDLL(None, use_errno=True).prctl
        self.qdpd = subprocess.Popen(cfg["argv"], stdin=subprocess.DEVNULL, stdout=2, stderr=2,
                                     preexec_fn=lambda: _die_with(me, prctl), close_fds=True)

    def run(self) -> None:
        """Serves until qdpd exits, a SIGTERM comes or no user is left; then stops."""
        keep_log = True
        while True:
            timeout = None
            if not self.ready:
                timeout = POLL
            elif self.idle_since is not None:
                timeout = max(0.0, self.idle_since + GRACE - time.monotonic())
            readable = {key.fileobj for key, _ in self.events.select(timeout)}
            if self.wake_r in readable and signal.SIGTERM in self.wake_r.recv(64):
                keep_log = not self.ready
                break
            if self.qdpd.poll() is not None:
                if not self.ready:
                    self._tell(f"qdpd exited with status {self.qdpd.returncode} before it "
                               "served")
                break
            if self.listener in readable:
                self._accept()
            for u in self.users[:]:
                if u in readable:
                    self._read(u)
            if not self.ready and self._serves():
                self._tell("")
            if not self.users:
                now = time.monotonic()
                if self.idle_since is None:
                    self.idle_since = now
                if now - self.idle_since >= GRACE and self._stop_if_idle():
                    return
            else:
                self.idle_since = None
        self._stop(keep_log)

    def _accept(self) -> None:
        while True:
            try:
                u, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            u.setblocking(False)
            self.users.append(u)
            self.events.register(u, selectors.EVENT_READ)
            if self.ready:
                self._send(u, self.ready)

    def _read(self, u: socket.socket) -> None:
        """A user says nothing; what it sends is dropped, and its end is its process's exit."""
        try:
            if u.recv(4096):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self.users.remove(u)
        self.events.unregister(u)
        u.close()

    def _send(self, u: socket.socket, line: bytes) -> None:
        try:
            u.send(line)
        except OSError:
            pass  # gone: its end is read next

    def _serves(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def _tell(self, error: str) -> None:
        """Sends every user the line of the outcome: the pids, or ``error``."""
        if error:
            line = {"error": error}
        else:
            line = {"qdpd_pid": self.qdpd.pid, "reaper_pid": os.getpid()}
            self._record(line)
        data = (json.dumps(line) + "\n").encode()
        if not error:
            self.ready = data
        for u in self.users:
            self._send(u, data)

    def _record(self, pids: Dict[str, int]) -> None:
        """Adds the pids to the discovery file, for people and for the processes that join."""
        fd = lock(self.folder)
        try:
            info = read_info(self.folder)
            if info is not None:
                info.update(pids)
                write_info(self.folder, info)
        finally:
            os.close(fd)

    def _stop_if_idle(self) -> bool:
        """Stops when nobody connected while the lock was taken; False (and serves on) else."""
        fd = lock(self.folder)
        try:
            self._accept()
            if self.users:
                self.idle_since = None
                return False
            self._end(keep_log=False)
            return True
        finally:
            os.close(fd)

    def _stop(self, keep_log: bool) -> None:
        fd = lock(self.folder)
        try:
            self._end(keep_log)
        finally:
            os.close(fd)

    def _end(self, keep_log: bool) -> None:
        """Under the lock: nobody can join any more, qdpd stops, its files and the folder go (the
        log stays when ``keep_log`` or when qdpd did not stop cleanly)."""
        import subprocess

        self.listener.close()
        remove(os.path.join(self.folder, REAPER), os.path.join(self.folder, INFO))
        if self.qdpd.poll() is None:
            self.qdpd.send_signal(signal.SIGTERM)
            try:
                self.qdpd.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.qdpd.kill()
                self.qdpd.wait()
        leave(self.folder, (keep_log or self.qdpd.returncode != 0) and self.own_log)


def main() -> None:
    cfg = json.loads(sys.stdin.buffer.read())
    if os.fork() > 0:  # the starter waits for this process alone; the reaper is its child
        os._exit(0)
    try:
        reaper = Reaper(cfg)
    except Exception as e:
        # Its users see the connection close and quote the log.
        print(f"cannot start {cfg['argv'][0]}: {e}", file=sys.stderr, flush=True)
        fd = lock(cfg["folder"])
        try:
            leave(cfg["folder"], keep_log=True)
        finally:
            os.close(fd)
        sys.exit(1)
    reaper.run()


if __name__ == "__main__":
    main()
