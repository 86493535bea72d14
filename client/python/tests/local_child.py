"""A user's process of a private daemon, for test_local_daemon.py: ``python local_child.py WHAT
[ARG]`` runs ``qdp.Client()`` with no target in the environment the test made (HOME,
XDG_RUNTIME_DIR and TMPDIR in its tmp_path) and prints one JSON line of what it found.

The default socket must be one the test controls: for root it is /run/qdp/qdpd.sock whatever the
environment, so this process (and a worker spawned from it, which imports this file again) looks
for the default daemon at $XDG_RUNTIME_DIR/qdp/qdpd.sock when QDP_TARGET and QDP_SOCKET are
unset, as any other user's does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Dict

import qdp
import qdp.client

if os.geteuid() == 0:
    _named = qdp.client.default_target
    qdp.client.default_target = lambda: (
        _named() if os.environ.get("QDP_TARGET") or os.environ.get("QDP_SOCKET")
        else f"unix:{os.environ['XDG_RUNTIME_DIR']}/qdp/qdpd.sock")


def found(c: qdp.Client) -> Dict[str, Any]:
    """What a client talks to: its target, and its private daemon's pid and log."""
    d = getattr(c, "daemon", None)
    return {"target": c.target, "pid": d.pid if d else None, "log": d.log_path if d else None}


def encode() -> Dict[str, Any]:
    """A client's first encode; the state's amplitudes as (re, im) pairs."""
    with qdp.Client() as c:
        psi = c.encode([1, 2, 3, 4], "amplitude", 2).numpy()
        return dict(found(c), state=[[z.real, z.imag] for z in psi.tolist()])


def many_files() -> Dict[str, Any]:
    """encode() in a process with more than 1024 descriptors open: its sockets are numbered past
    what select() takes."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        return {"skip": f"RLIMIT_NOFILE's hard limit is {hard}"}
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        return encode()
    finally:
        for fd in held:
            os.close(fd)


def hold(seconds: str) -> None:
    """Prints what the client found, then keeps it for ``seconds`` (or until killed)."""
    c = qdp.Client()
    c.status()
    print(json.dumps(found(c)), flush=True)
    time.sleep(float(seconds))


def status() -> Dict[str, Any]:
    """A Status call; a failure as its class and text."""
    try:
        c = qdp.Client(timeout=5)
        c.status()
        return found(c)
    except qdp.Error as e:
        return {"error": type(e).__name__, "message": str(e)}


def killed() -> Dict[str, Any]:
    """A call after the daemon was killed under the client: its error."""
    c = qdp.Client(timeout=5)
    c.status()
    os.kill(c.daemon.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            c.status()
        except qdp.Unavailable as e:
            return dict(found(c), error=type(e).__name__, message=str(e))
        time.sleep(0.05)
    return {"error": "none"}


def forked() -> Dict[str, Any]:
    """A LocalDaemon started here, then a forked child: the child holds nothing of it, stops
    nothing, and its own client joins the same daemon."""
    d = qdp.LocalDaemon().start()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child = {"running": d.running, "held": qdp._local._process.hold is not None}
        d.stop()
        with qdp.Client() as c:
            c.status()
            child.update(found(c))
        os.write(w, json.dumps(child).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        child = json.loads(f.read() or "{}")
    os.waitpid(pid, 0)
    with d.client() as c:
        c.status()
        return {"parent": d.pid, "parent_running": d.running, "child": child}


class Pids:
    """A data set whose every item is the pid of the daemon its process's client talks to."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        with qdp.Client() as c:
            c.status()
            return c.daemon.pid if c.daemon else -1


def loader() -> Dict[str, Any]:
    """The pids of a spawned DataLoader worker's daemon and of this process's."""
    import torch.utils.data

    with qdp.Client() as c:
        c.status()
        mine = c.daemon.pid
        dl = torch.utils.data.DataLoader(Pids(), batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn")
        return {"pid": mine, "workers": [int(p) for p in dl]}


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    out = {"encode": encode, "many_files": many_files, "hold": hold, "status": status,
           "killed": killed, "forked": forked, "loader": loader}[what](*args)
    if out is not None:
        print(json.dumps(out), flush=True)
