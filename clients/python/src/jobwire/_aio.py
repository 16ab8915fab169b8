"""Timeouts that never swallow a cancellation.

``asyncio.wait_for`` before Python 3.12 can lose a ``cancel()`` that arrives while its inner
future completes (CPython gh-86296), which leaves a task that was told to stop running on;
these helpers wait with ``asyncio.wait`` instead and cancel the inner task themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout: float) -> T:
    """The result of ``aw``; raises ``TimeoutError`` (and cancels ``aw``) after ``timeout`` s."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise TimeoutError(f"not done within {timeout} s")
    return task.result()


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Waits up to ``timeout`` seconds for ``event``; returns whether it is set."""
    if event.is_set():
        return True
    try:
        await within(event.wait(), timeout)
    except TimeoutError:
        return False
    return True
