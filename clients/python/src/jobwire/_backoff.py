"""Full-jitter exponential backoff and the retry of idempotent calls on UNAVAILABLE.

The delay before retry ``n`` (0-based) is drawn uniformly from ``[0, min(cap, base * 2**n)]``:
"full jitter" from the AWS Architecture Blog's "Exponential Backoff and Jitter" (Marc Brooker,
2015), which spreads reconnecting clients out instead of having them return in waves.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import grpc.aio

T = TypeVar("T")


class Backoff:
    """Full-jitter exponential backoff: ``base`` seconds doubling up to ``cap`` seconds."""

    def __init__(self, base: float = 0.5, cap: float = 30.0) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0

    def next_delay(self) -> float:
        """The delay before the next try, in seconds; each call doubles the bound."""
        bound = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt = min(self.attempt + 1, 62)
        return random.uniform(0.0, bound)

    def reset(self) -> None:
        """After a success: the next delay starts from ``base`` again."""
        self.attempt = 0


DEFAULT_TRIES = 5
"""Tries in all (the first included) of a call safe to repeat that fails with UNAVAILABLE."""


async def retry_unavailable(call: Callable[[], Awaitable[T]], tries: int = DEFAULT_TRIES) -> T:
    """Runs ``call``; while it fails with UNAVAILABLE (Redis down, a server restarting) retries it
    with full jitter (0.1 s doubling, capped at 2 s), ``tries`` times in all (1: no retry), then
    raises the last error; with the default 5 a server that cannot be reached is reported within
    about 1.5 s (at most 0.1 + 0.2 + 0.4 + 0.8 s of waiting). Only for calls that are safe to
    repeat."""
    backoff = Backoff(base=0.1, cap=2.0)
    for _ in range(max(1, tries) - 1):
        try:
            return await call()
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        await asyncio.sleep(backoff.next_delay())
    return await call()
