"""Encodes through the installed package `qdp` against the qdpd at $QDP_TARGET and checks the
states with the NumPy reference (tests/reference/qdpref.py, on PYTHONPATH):

    QDP_TARGET=unix:/path/qdpd.sock python encode.py

a batch of angle states (sent inline) and an amplitude state whose 2 MiB of input go through a
shared-memory region the client hands over, in both precisions. Prints one line per check;
exits 1 at the first state that differs."""

from __future__ import annotations

import sys

import numpy as np
import qdpref as ref

import qdp


def main() -> int:
    rng = np.random.default_rng(7)
    X = rng.uniform(0, np.pi, size=(16, 6))
    x = rng.normal(size=1 << 18)  # float64: 2 MiB, past the 1 MiB of an inline request
    with qdp.Client() as c:  # $QDP_TARGET
        for dtype in ("complex64", "complex128"):
            for encoding, n, values, want in (("angle", 6, X, ref.batch("angle", X, 6)),
                                              ("amplitude", 18, x, ref.state("amplitude", x, 18))):
                with c.encode(values, encoding, n, dtype=dtype) as s:
                    got = s.numpy()
                if got.dtype != np.dtype(dtype):
                    raise AssertionError(f"{encoding}: dtype {got.dtype}, asked for {dtype}")
                ref.assert_close(got, want, dtype, f"{encoding} {dtype}")
            print(f"ok: angle (16 x 6 qubits) and amplitude (18 qubits) {dtype} agree with qdpref")
    return 0


if __name__ == "__main__":
    sys.exit(main())
