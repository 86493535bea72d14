"""qdpd's systemd protocol without systemd: a datagram socket stands in for NOTIFY_SOCKET, and the
test reads what the daemon sends: READY=1 once it listens, WATCHDOG=1 at least twice within
WATCHDOG_USEC's period, STOPPING=1 on SIGTERM, then exit 0.

Usage: test_notify.py QDPD
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def main():
    qdpd = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(10)
        env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="200000")
        env.pop("WATCHDOG_PID", None)  # unset: the watchdog is meant for whoever reads it
        p = subprocess.Popen([qdpd, "--socket", os.path.join(d, "qdpd.sock"), "--devices", "cpu:1"],
                             env=env, stderr=subprocess.PIPE, text=True)
        got = []
        try:
            deadline = time.time() + 10
            watchdogs = 0
            while time.time() < deadline and watchdogs < 2:
                msg = sock.recv(4096).decode()
                got.append(msg)
                watchdogs += "WATCHDOG=1" in msg.split("\n")
            ready = [m for m in got if "READY=1" in m.split("\n")]
            assert ready, f"no READY=1 among {got!r}"
            assert any(line.startswith("STATUS=") for line in ready[0].split("\n")), ready[0]
            assert watchdogs >= 2, f"fewer than 2 WATCHDOG=1 in 10 s: {got!r}"
            assert got.index(ready[0]) < next(i for i, m in enumerate(got) if "WATCHDOG=1" in m)
            p.send_signal(signal.SIGTERM)
            stopping = False
            while not stopping:
                msg = sock.recv(4096).decode()
                stopping = "STOPPING=1" in msg.split("\n")
            rc = p.wait(timeout=30)
            assert rc == 0, f"qdpd exited {rc}: {p.stderr.read()}"
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    print("notify: READY, WATCHDOG x2, STOPPING, exit 0")


if __name__ == "__main__":
    main()
