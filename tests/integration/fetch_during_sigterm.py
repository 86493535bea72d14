"""Streams a whole state slowly enough to be in flight when qdpd gets SIGTERM:
    fetch_during_sigterm.py HANDLE:TOKEN STARTED_FILE SIGNALLED_FILE
creates STARTED_FILE after the first chunk, reads the rest (a millisecond per chunk, so the
stream lasts seconds), checks the values against the phase reference (the state is phase-encoded
with x_k = 0.1 (k + 1)), and exits 0 only for a complete, correct stream of which chunks still
arrived after SIGNALLED_FILE (made by the test right after it sent SIGTERM) appeared."""

import os
import sys
import time

import numpy as np

import qdpc
import qdpref


def main():
    ref, started, signalled = sys.argv[1], sys.argv[2], sys.argv[3]
    handle, token = ref.split(":", 1)
    c = qdpc.Client()
    req = c.pb.FetchRequest(offset=0, count=0, chunk_bytes=64 << 10)
    req.state.handle = handle
    req.state.token = token
    got, n, after = [], 0, 0
    for ch in c._Fetch(req, timeout=120):
        if n == 0:
            open(started, "w").close()
        got.append(np.frombuffer(ch.data, np.complex128))
        n += 1
        if os.path.exists(signalled):
            after += 1
        time.sleep(0.001)
    assert after > 0, "the stream had ended before SIGTERM was sent"
    a = np.concatenate(got)
    q = 24
    assert a.size == 1 << q, a.size
    x = 0.1 * np.arange(1, q + 1)
    idx = np.array([0, 1, 2, 12345, (1 << q) - 1, 1 << 23, 7777777])
    want = qdpref.phase(x, q, idx)
    err = np.max(np.abs(a[idx] - want))
    assert err < 1e-12, err
    print(f"fetched {a.size} amplitudes in {n} chunks ({after} after SIGTERM), "
          f"max error {err:.1e}")


if __name__ == "__main__":
    main()
