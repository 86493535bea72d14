"""Waiting for the daemon's periodic work (sweeps, lease ends) in the tests."""

from __future__ import annotations

import gc
import time
from typing import Callable


def wait_for(read: Callable[[], int], want: int, seconds: float = 10) -> int:
    """Reads ``read()`` every 50 ms (collecting garbage between reads, so that finalizers run)
    until it gives ``want`` or ``seconds`` pass; returns the last value read."""
    deadline = time.monotonic() + seconds
    n = read()
    while n != want and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
        n = read()
    return n
