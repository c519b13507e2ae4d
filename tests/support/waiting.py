"""Waiting on a condition instead of sleeping a fixed time: the one polling loop the end-to-end
tests share."""
from __future__ import annotations

import time


def wait_for(check, timeout: float, what: str, interval: float = 0.5):
    """`check()`'s first truthy result, asked every `interval` seconds; fails naming `what` after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
