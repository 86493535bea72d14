"""A private qdpd of this user, started on demand: :class:`LocalDaemon`, and what
``qdp.Client()`` does when no daemon answers.

The design in one minute:

- ``qdp.Client()`` with no target, no ``QDP_TARGET`` or ``QDP_SOCKET``, and nothing answering at
  the default socket (:func:`qdp.default_target`), uses this user's private qdpd, starting it
  when none runs; ``QDP_AUTOSTART=0`` turns that off. A system service that answers always wins.
- A private daemon lives in a private folder: ``$XDG_RUNTIME_DIR/qdp`` when that runtime folder
  is this user's and 0700, else ``qdp-UID`` in the temporary folder (made 0700 and checked: a
  folder of another user, a link or a mode open to others is refused). Its files are named
  ``local.*``: ``local.sock`` (qdpd's socket), ``local.json`` (the discovery file: paths,
  options, pids), ``local.lock`` (the flock every start, join and stop holds), ``local.reaper``
  and ``local.log`` (qdpd's output, unless the user named a file).
- qdpd is the child of a small reaper process (qdp._reaper, stdlib only), which every process
  that uses the daemon holds one connection to. The kernel closes that connection when the
  process exits, however it exits; 2 s after the last one closed, the reaper stops qdpd,
  removes the files and the folder, and exits. qdpd dies with the reaper (PR_SET_PDEATHSIG).
- In a process, every client, and every LocalDaemon of the same options, shares one connection
  (the registry below, under a lock). A forked child forgets its parent's (os.register_at_fork)
  and makes its own when it needs the daemon, as a spawned worker or another process does: by
  the discovery file, under the lock.
- qdpd runs with ``--devices auto`` (unless told otherwise), no config file, its socket 0600,
  and an environment without QDP_* and launcher (MPI, Slurm) variables, so it is no MPI rank
  and takes its options from LocalDaemon alone. When it fails to start or dies, the error names
  its log and quotes its last lines; that log is kept then.
"""

from __future__ import annotations

import json
import numbers
import os
import socket
import stat
import sys
import threading
import time
from collections import abc
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _reaper, _tools
from .errors import (DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound,
                     PermissionDenied, Unavailable)

if TYPE_CHECKING:
    from .client import Client

#: The environment variables of the caller that qdpd does not get: its own options (it takes
#: them from LocalDaemon alone), MPI's and Slurm's (it would join the caller's MPI world), and
#: systemd's (they are the caller's service's).
_NOT_INHERITED_PREFIXES = ("QDP_", "OMPI_", "PMIX_", "PMI_")
_NOT_INHERITED = ("SLURM_LOCALID", "MPI_LOCALRANKID", "NOTIFY_SOCKET", "WATCHDOG_USEC",
                  "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "JOURNAL_STREAM",
                  "RUNTIME_DIRECTORY")
#: qdpd's options that are the private daemon's own: its socket is this user's alone.
_RESERVED = {"socket": "the private daemon's socket is in its private folder (LocalDaemon.target)",
             "socket_mode": "the private daemon's socket is 0600: this user's alone",
             "socket_group": "the private daemon's socket is 0600: this user's alone"}
#: Options qdpd gets through its environment rather than its command line, which every user of
#: the node may read (ps).
_SECRET = ("tcp_token",)
#: The options a daemon runs with when none is given, as qdpd --print-config shows them.
_DEFAULT_OPTIONS = {"config": "", "devices": "auto"}
#: The longest path of a Unix socket (sockaddr_un.sun_path, less its NUL).
_SUN_PATH_MAX = 107
#: Seconds an error of a client waits for qdpd to be seen gone, once its socket closed.
_EXIT_WAIT = 0.5
#: Lines of a log an error quotes.
_LOG_LINES = 5

Value = Union[str, int, float, bool, "os.PathLike[str]", None]


def find_qdpd() -> str:
    """The qdpd program a private daemon runs.

    Returns
    -------
    str
        ``$QDPD`` (a path), else the one installed with this package (``qdp._tools``), else
        ``qdpd`` on ``PATH``.

    Raises
    ------
    NotFound
        None of them is there (the message says how to get one), or ``$QDPD`` names no
        executable file.
    """
    env = os.environ.get("QDPD")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise NotFound(f"QDPD={env!r} is not an executable file: set QDPD to the path of a qdpd "
                       "program (build/daemon/qdpd of a build), or unset it", field="QDPD",
                       hint="")
    bundled = _tools.binary("qdpd")
    if bundled:
        return bundled
    import shutil

    found = shutil.which("qdpd")
    if found:
        return found
    raise NotFound("no qdpd program to start a private daemon with: install the package with "
                   "its programs (pip install PATH-TO-THE-QDP-REPOSITORY, its root folder), or "
                   "build qdpd (meson setup build && ninja -C build daemon/qdpd) and set "
                   "QDPD=$PWD/build/daemon/qdpd, or put qdpd on PATH; or connect to a running "
                   "daemon (QDP_TARGET=unix:/path/qdpd.sock)", field="QDPD", hint="")


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077 == 0


def private_folder() -> str:
    """The folder of this user's private daemon, made when missing.

    Returns
    -------
    str
        ``$XDG_RUNTIME_DIR/qdp`` when ``XDG_RUNTIME_DIR`` is a folder of this user that only it
        may use (0700) and ``qdp`` in it is missing (then made 0700) or a folder of this user;
        else ``qdp-UID`` in the temporary folder (``tempfile.gettempdir()``, ``$TMPDIR``), made
        0700 when missing.

    Raises
    ------
    PermissionDenied
        ``qdp-UID`` is a link, not a folder, another user's, or open to others (its mode is
        not 0700): nothing in it is used, and the message says what to do.
    """
    uid = os.geteuid()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        try:
            base = os.stat(xdg)
        except OSError:
            base = None
        if base is not None and stat.S_ISDIR(base.st_mode) and _private(base):
            folder = os.path.join(xdg, "qdp")
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
            except OSError:
                folder = ""
            if folder:
                st = os.lstat(folder)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                    return folder
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"qdp-{uid}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise PermissionDenied(f"cannot make {folder} for a private qdpd: {e.strerror}; set "
                               "TMPDIR (or XDG_RUNTIME_DIR) to a folder of your own",
                               field="TMPDIR", hint="") from None
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        what = "a link" if stat.S_ISLNK(st.st_mode) else "not a folder"
    elif st.st_uid != uid:
        what = f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    elif not _private(st):
        what = f"of mode {stat.S_IMODE(st.st_mode):04o}, open to other users"
    else:
        return folder
    raise PermissionDenied(f"{folder} is {what}: a private qdpd uses only a folder of mode 0700 "
                           "that this user made; remove it (if it is yours: rm -r "
                           f"{folder}), or set TMPDIR (or XDG_RUNTIME_DIR) to a folder of your "
                           "own", field="TMPDIR", hint="")


def daemon_env() -> Dict[str, str]:
    """The environment qdpd (and its reaper) gets: this process's, less the variables that would
    configure it or make it an MPI rank."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(_NOT_INHERITED_PREFIXES) and k not in _NOT_INHERITED}


def _text(name: str, value: Value) -> Optional[str]:
    """An option's value as qdpd's command line takes it; None leaves it at its default."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, (str, os.PathLike)) and "\0" not in os.fspath(value):
        return os.fspath(value)
    raise InvalidArgument(f"{name}={value!r}: give a str, int, float or bool (qdpd --help says "
                          "what each option takes)", field=name)


def _log_tail(path: str) -> str:
    """The last lines of a log, indented for a message; says so when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        return f"its log {path} cannot be read ({e.strerror})"
    lines = [ln for ln in lines if ln.strip()][-_LOG_LINES:]
    if not lines:
        return f"its log {path} is empty"
    return f"its log {path} ends with:\n" + "\n".join("    " + ln for ln in lines)


def _connect(path: str, timeout: float = 5.0) -> Optional[socket.socket]:
    """A connection to a Unix socket; None when nothing listens there."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.settimeout(timeout)
    try:
        s.connect(path)
        return s
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        s.close()
        return None
    except BaseException:
        s.close()
        raise


def answers(target: str) -> bool:
    """Whether a daemon may be at ``target``: a TCP target, or a Unix socket that accepts a
    connection or refuses it for another reason than that nothing listens (the daemon is there
    but this user may not connect: its calls will say so)."""
    if not target.startswith("unix:"):
        return True
    try:
        s = _connect(target[5:], timeout=1.0)
    except OSError:
        return True
    if s is None:
        return False
    s.close()
    return True


def autostart_enabled() -> bool:
    """Whether ``qdp.Client()`` may start a private daemon: ``QDP_AUTOSTART`` unset, empty or 1.

    Raises
    ------
    InvalidArgument
        Any other value than 0 or 1.
    """
    v = os.environ.get("QDP_AUTOSTART", "")
    if v in ("", "1"):
        return True
    if v == "0":
        return False
    raise InvalidArgument(f"QDP_AUTOSTART={v!r}: set 1 (qdp.Client() starts a private qdpd "
                          "when no daemon answers, the default) or 0 (never)",
                          field="QDP_AUTOSTART")


class _Hold:
    """This process's connection to a reaper (which keeps the daemon running while it is open)
    and what the daemon is: the discovery file's content and the pids."""

    def __init__(self, conn: socket.socket, info: Dict[str, Any]) -> None:
        self.conn = conn
        self.info = info

    def alive(self) -> bool:
        """False once the reaper has ended (its end of the connection is closed)."""
        try:
            return self.conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.conn.close()


class _Process:
    """The registry of this process: its one hold on the private daemon, how many started
    LocalDaemons share it, and the one ``qdp.Client()`` uses."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.hold: Optional[_Hold] = None
        self.users = 0
        self.implicit: Optional[LocalDaemon] = None


_process = _Process()


def _forget_after_fork() -> None:
    """In a forked child: the parent's connection is the parent's; the child makes its own when
    it needs the daemon."""
    global _process
    old, _process = _process, _Process()
    if old.hold is not None:
        old.hold.close()


os.register_at_fork(after_in_child=_forget_after_fork)


class LocalDaemon:
    """A private qdpd of this user, shared by the processes that use it and stopped once none
    does.

    Parameters
    ----------
    devices : str or sequence of int
        What qdpd owns: ``"auto"`` (every GPU, else one host-memory device), ``"cpu:N"``, or
        GPU ordinals (``"0,1"`` or ``[0, 1]``).
    memory : int or str, optional
        Bytes qdp may hold per device (qdpd's ``device_budget``: ``8 << 30`` or ``"8Gi"``); by
        default qdpd's share of each device's free memory (``mem_fraction``).
    log : str or os.PathLike, optional
        A file qdpd's log is appended to, kept; by default ``local.log`` in the daemon's
        folder, removed with it (but kept when qdpd failed or died).
    start_timeout : float
        Seconds :meth:`start` waits for qdpd to answer on its socket.
    **config
        qdpd's other options by name, as ``qdpd --help`` lists them (``store_budget="64Gi"`` is
        ``--store-budget 64Gi``, ``lease_grace=5``, ``log_level="debug"``; True and False are
        yes and no, None leaves the default). qdpd reads no config file unless ``config`` names
        one, and none of the ``QDP_*`` environment variables. The socket is the daemon's own:
        ``socket``, ``socket_mode`` and ``socket_group`` are refused.

    Raises
    ------
    InvalidArgument
        An option qdpd does not have (the message lists those it has), one of the socket's,
        ``memory`` with ``device_budget``, or a value qdpd refuses (in its words): all before
        anything starts.
    NotFound
        No qdpd program: it is ``$QDPD``, else the one installed with the package, else
        ``qdpd`` on ``PATH``; the message says how to get one.

    Notes
    -----
    There is one private daemon per user. :meth:`start` joins the one that runs when its
    options are these, and starts one when none runs; every process that started one (and
    ``qdp.Client()``, which starts a default one when no daemon answers) keeps it running until
    it calls :meth:`stop` or exits, however it exits: 2 s after the last one, the daemon stops
    and its files are removed. Use it as a context manager and talk to it through
    :meth:`client`::

        with qdp.LocalDaemon(devices="cpu:4", store_budget="8Gi") as d, d.client() as c:
            s = c.encode(X, "angle", 12)

    Other programs of this user reach it at :attr:`target` (``qdpctl`` with
    ``QDP_SOCKET=...``); its files are in ``$XDG_RUNTIME_DIR/qdp``, or ``qdp-UID`` in the
    temporary folder (qdp._local says how it works). A forked child does not hold its parent's
    daemon: its :meth:`stop` does nothing, and its own clients join the daemon again.
    """

    def __init__(self, devices: Union[str, Sequence[int]] = "auto",
                 memory: Union[int, str, None] = None,
                 log: Union[str, "os.PathLike[str]", None] = None, *,
                 start_timeout: float = 60.0, **config: Value) -> None:
        if not isinstance(start_timeout, (int, float)) or isinstance(start_timeout, bool) \
                or not start_timeout > 0:
            raise InvalidArgument(f"start_timeout={start_timeout!r}: give seconds > 0",
                                  field="start_timeout")
        self._timeout = float(start_timeout)
        self._log = os.path.abspath(os.fspath(log)) if log is not None else None
        self._any = False  # True for qdp.Client()'s: whatever daemon runs is the one
        self._hold: Optional[_Hold] = None
        self._seen: Optional[Dict[str, Any]] = None  # the daemon it last joined
        self._memory = memory is not None  # device_budget is called memory here
        self._qdpd = find_qdpd()
        options = self._options(devices, memory, config)
        self._args = [f"--{k}={v}" for k, v in sorted(options.items()) if k not in _SECRET]
        self._env = daemon_env()
        self._env.update({"QDP_" + k.upper(): v for k, v in options.items() if k in _SECRET})
        self._wanted = dict(options) if options == _DEFAULT_OPTIONS else self._check(options)

    @staticmethod
    def _options(devices: Union[str, Sequence[int]], memory: Union[int, str, None],
                 config: Dict[str, Value]) -> Dict[str, str]:
        """The options as qdpd's command line takes them, by name."""
        if isinstance(devices, str):
            dev = devices
        elif isinstance(devices, abc.Sequence) and devices and all(
                isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0
                for d in devices):
            dev = ",".join(str(d) for d in devices)
        else:
            raise InvalidArgument(f"devices={devices!r}: give 'auto', 'cpu:N', or GPU ordinals "
                                  "('0,1' or [0, 1])", field="devices")
        out = {"devices": dev}
        names = {k.replace("-", "_"): v for k, v in config.items()}
        for name in sorted(names):
            if name in _RESERVED:
                raise InvalidArgument(f"{name}: {_RESERVED[name]}", field=name)
        if memory is not None:
            if "device_budget" in names:
                raise InvalidArgument("memory and device_budget are the same option: give one",
                                      field="memory")
            if isinstance(memory, (bool, np.bool_)) or \
                    not isinstance(memory, (numbers.Integral, str)) or \
                    (isinstance(memory, numbers.Integral) and memory < 0):
                raise InvalidArgument(f"memory={memory!r}: give bytes per device, an int >= 0 "
                                      "or a size such as '8Gi'", field="memory")
            names["device_budget"] = memory
        for name, value in names.items():
            text = _text(name, value)
            if text is not None:
                out[name] = text
        out.setdefault("config", "")
        return out

    def _check(self, options: Dict[str, str]) -> Dict[str, str]:
        """qdpd's own check of the options (``--print-config``, which starts nothing); returns
        them as it prints them, the form two daemons' options are compared in."""
        import subprocess

        out = subprocess.run([self._qdpd, *self._args, "--print-config"], capture_output=True,
                             text=True, env=self._env, timeout=30)
        if out.returncode == 0:
            return {name: value for name, value, source in _printed(out.stdout)
                    if name in options}
        known = subprocess.run([self._qdpd, "--config=", "--print-config"], capture_output=True,
                               text=True, env=daemon_env(), timeout=30)
        names = [n for n, _, _ in _printed(known.stdout) if n not in _RESERVED]
        for name in sorted(options):
            if names and name not in names:
                raise InvalidArgument(f"qdpd has no option {name!r}; LocalDaemon takes "
                                      f"{', '.join(names)}", field=name)
        said = out.stderr.strip().removeprefix("qdpd: ") or f"exit status {out.returncode}"
        field = next((n for n in sorted(options, key=len, reverse=True) if n in said), "")
        if field == "device_budget" and self._memory:
            field = "memory"
        raise InvalidArgument(f"qdpd refuses the options: {said}", field=field, hint="")

    # ---- what it is ----

    def _info(self) -> Dict[str, Any]:
        if self._seen is None:
            raise FailedPrecondition("this LocalDaemon is not started: use it in a with block, "
                                     "or call start() first", hint="")
        return self._seen

    @property
    def target(self) -> str:
        """The daemon's gRPC target, ``unix:FOLDER/local.sock`` (this and the next two describe
        the daemon it joined last, also once stopped)."""
        return "unix:" + self._info()["socket"]

    @property
    def log_path(self) -> str:
        """The file qdpd's log goes to."""
        return str(self._info()["log"])

    @property
    def pid(self) -> int:
        """qdpd's process id."""
        return int(self._info()["qdpd_pid"])

    @property
    def running(self) -> bool:
        """Whether this process holds the daemon through this object and the daemon runs."""
        with _process.lock:
            return self._hold is not None and self._hold is _process.hold and \
                self._hold.alive()

    def __repr__(self) -> str:
        if self._seen is None:
            return f"LocalDaemon({' '.join(self._args)}, not started)"
        return f"LocalDaemon({self.target}, pid {self.pid}, log {self.log_path})"

    # ---- start and stop ----

    def start(self) -> "LocalDaemon":
        """Joins this user's private daemon, starting it when none runs; returns self.

        Returns once qdpd accepts connections on its socket. Idempotent.

        Raises
        ------
        FailedPrecondition
            The daemon that runs (in this process or another of this user) has other
            options: the message gives both.
        Unavailable
            qdpd exited before it served: the message names its log and quotes its last lines.
        DeadlineExceeded
            qdpd did not answer within ``start_timeout`` (the message quotes its log), or the
            folder's lock stayed taken that long.
        PermissionDenied
            ``qdp-UID`` in the temporary folder is a link, another user's or open to others.
        """
        with _process.lock:
            if self.running:
                return self
            hold = _process.hold
            if hold is not None and not hold.alive():
                hold.close()
                _process.hold, _process.users = None, 0
            if _process.hold is None:
                _process.hold = self._acquire()
            else:
                self._fits(_process.hold.info)
            _process.users += 1
            self._hold = _process.hold
            self._seen = self._hold.info
        return self

    def stop(self) -> None:
        """Lets the daemon go: once no other started LocalDaemon of this process (nor
        ``qdp.Client()``, which keeps the one it uses until the process exits) and no other
        process uses it, it stops 2 s later. Idempotent; does nothing in a forked child (the
        hold is the parent's)."""
        with _process.lock:
            if self._hold is not None and self._hold is _process.hold:
                _process.users -= 1
                if _process.users == 0:
                    _process.hold.close()
                    _process.hold = None
            self._hold = None

    def __enter__(self) -> "LocalDaemon":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def client(self, **kwargs: Any) -> "Client":
        """A :class:`qdp.Client` of this daemon (started first when it is not);
        ``kwargs`` go to Client. An error of a call that finds the daemon gone names its log."""
        from .client import Client

        self.start()
        c = Client(self.target, **kwargs)
        c._use_daemon(self)
        return c

    def _exit_note(self) -> str:
        """For an error of a client of this daemon: "" while qdpd runs, else that it exited and
        the end of its log."""
        info = self._info()
        if not _exited(int(info["qdpd_pid"]), _EXIT_WAIT):
            return ""
        return f"The private qdpd (pid {info['qdpd_pid']}) has exited; {_log_tail(info['log'])}"

    def _fits(self, info: Dict[str, Any]) -> None:
        """Refuses a running daemon whose options are not this object's."""
        if self._any:
            return
        if info["options"] == self._wanted and (self._log is None or info["log"] == self._log):
            return
        want = dict(self._wanted, log=self._log or "(its folder's)")
        have = dict(info["options"], log=info["log"])
        pid = info.get("qdpd_pid", "starting")
        raise FailedPrecondition(f"this user's private qdpd (pid {pid}, unix:{info['socket']}) "
                                 f"runs with {_options_text(have)}, not {_options_text(want)}; "
                                 "one private daemon runs per user: use its options, stop the "
                                 "processes that use it (it stops 2 s after the last), or use "
                                 "it as it is with qdp.Client()", hint="")

    def _acquire(self) -> _Hold:
        """Joins the running daemon or starts one, under the folder's lock; then waits for it."""
        folder = private_folder()
        longest = os.fsencode(os.path.join(folder, _reaper.REAPER))
        if len(longest) > _SUN_PATH_MAX:
            raise FailedPrecondition(f"{folder} is too long a folder for a Unix socket in it "
                                     f"({len(longest)} bytes of a socket's {_SUN_PATH_MAX}): set "
                                     "TMPDIR (or XDG_RUNTIME_DIR) to a shorter path",
                                     field="TMPDIR", hint="")
        deadline = time.monotonic() + self._timeout
        try:
            fd = _reaper.lock(folder, deadline, remake=private_folder)
        except TimeoutError:
            raise DeadlineExceeded(f"{os.path.join(folder, _reaper.LOCK)} stayed locked for "
                                   f"{self._timeout:g} s (start_timeout): another process is "
                                   "starting or stopping the private qdpd", hint="") from None
        try:
            info = _reaper.read_info(folder)
            conn = _connect(info["reaper"]) if info and "reaper" in info else None
            if conn is not None:
                try:
                    self._fits(info)
                except BaseException:
                    conn.close()
                    raise
            else:
                _reaper.stop_stale(folder)  # what a reaper that was killed left, if anything
                conn, info = self._spawn(folder)
        finally:
            os.close(fd)
        return self._wait(conn, info, deadline)

    def _spawn(self, folder: str) -> Tuple[socket.socket, Dict[str, Any]]:
        """Starts a reaper (which starts qdpd) for a connection made first: the reaper has a
        user from its first instant, and this process holds the daemon whatever happens next.
        Under the folder's lock."""
        import subprocess

        info = {"reaper": os.path.join(folder, _reaper.REAPER),
                "socket": os.path.join(folder, _reaper.SOCKET),
                "log": self._log or os.path.join(folder, _reaper.LOG),
                "options": self._wanted}
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            log = os.open(info["log"], flags | (os.O_APPEND if self._log else os.O_TRUNC), 0o600)
        except OSError as e:
            raise InvalidArgument(f"log {info['log']}: {e.strerror}: name a file this user may "
                                  "write", field="log") from None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            listener.bind(info["reaper"])
            listener.listen(64)
            conn.connect(info["reaper"])
            _reaper.write_info(folder, info)
            cfg = {"folder": folder, "own_log": self._log is None,
                   "listen_fd": listener.fileno(),
                   "argv": [self._qdpd, *self._args, "--socket=" + info["socket"],
                            "--socket-mode=0600"]}
            try:
                rc = subprocess.run([sys.executable, "-I", "-S", _reaper.__file__],
                                    input=json.dumps(cfg).encode(), stdout=subprocess.DEVNULL,
                                    stderr=log, pass_fds=(listener.fileno(),),
                                    start_new_session=True, env=self._env, timeout=30).returncode
            except OSError as e:
                raise Unavailable(f"cannot run the reaper of a private qdpd with this "
                                  f"interpreter, {sys.executable!r}: {e.strerror}",
                                  hint="") from None
            if rc != 0:
                raise Unavailable(f"the reaper of a private qdpd ({sys.executable} "
                                  f"{_reaper.__file__}) exited with status {rc}; "
                                  f"{_log_tail(info['log'])}", hint="")
        except BaseException:
            conn.close()
            _reaper.clear(folder, keep_log=True)
            raise
        finally:
            listener.close()
            os.close(log)
        return conn, info

    def _wait(self, conn: socket.socket, info: Dict[str, Any], deadline: float) -> _Hold:
        """Reads the reaper's line: the pids once qdpd serves, or why it failed."""
        try:
            said = _read_line(conn, deadline)
        except BaseException:
            conn.close()
            raise
        if said is None:
            raise DeadlineExceeded(f"qdpd did not answer on unix:{info['socket']} within "
                                   f"{self._timeout:g} s (start_timeout): it stops once no "
                                   f"process waits for it; {_log_tail(info['log'])}", hint="")
        if "error" in said:
            raise Unavailable(f"the private qdpd ({self._qdpd}) did not start: {said['error']}; "
                              f"{_log_tail(info['log'])}", hint="")
        return _Hold(conn, dict(info, **said))


def _read_line(conn: socket.socket, deadline: float) -> Optional[Dict[str, Any]]:
    """The reaper's line on ``conn``, which then stays open; None past ``deadline``. A failure's
    line comes before the reaper stops, removes the daemon's files and exits, which closes
    ``conn``: that is waited for too, so that nothing runs when the caller raises."""
    line = b""
    try:
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout
            conn.settimeout(left)
            got = conn.recv(4096)
            if not got:
                break
            line += got
    except socket.timeout:
        conn.close()
        return None
    except OSError:
        pass  # reset: the reaper is gone
    said = json.loads(line) if line.endswith(b"\n") else {"error": "its reaper exited"}
    if "error" in said:
        conn.settimeout(_reaper.STOP_TIMEOUT + 5)
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        conn.close()
    else:
        conn.settimeout(None)
    return said


def _exited(pid: int, within: float) -> bool:
    """Whether process ``pid`` has exited (or is a zombie) within ``within`` seconds: a client
    sees the socket close while the process is still ending."""
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] in "ZX":
                    return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _printed(text: str) -> List[Tuple[str, str, str]]:
    """(name, value, source) of each line of ``qdpd --print-config``."""
    out = []
    for line in text.splitlines():
        name, sep, rest = line.partition(" = ")
        value, hash_, source = rest.rpartition("# ")
        if sep and hash_:
            out.append((name, value.rstrip(), source))
    return out


def _options_text(options: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(options.items()))


def implicit() -> LocalDaemon:
    """The private daemon ``qdp.Client()`` uses: whatever this process holds, else the one of
    this user that runs, else a new one with the default options; held until the process
    exits."""
    with _process.lock:
        d = _process.implicit
        if d is None or not d.running:
            d = LocalDaemon()
            d._any = True
            d.start()
            _process.implicit = d
        return d
