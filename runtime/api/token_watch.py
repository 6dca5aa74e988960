"""Streams opened with a token end when the token stops working.

A request is authenticated once, when it starts; an SSE stream, a WebSocket or an MCP
stream then lives on. "A revoked token gets 401 from then on" must hold for them too, so each
long-lived stream waits on `TokenWatch.ended(principal)` beside its work: it returns at once
when the API revokes the token (`revoked`), when the token expires, and, for a revocation
made elsewhere (the CLI on the same data dir), at the next re-check of the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from runtime.sessions.principal import Principal
    from runtime.store import Store

T = TypeVar("T")
RECHECK_S = 10.0


class TokenWatch:
    def __init__(self, store: Store, recheck_s: float = RECHECK_S) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self._waiting: dict[str, set[asyncio.Event]] = {}

    def revoked(self, token_id: str) -> None:
        """The API revoked `token_id`: wake every stream opened with it."""
        for event in self._waiting.get(token_id, ()):
            event.set()

    async def ended(self, principal: Principal) -> None:
        """Returns when `principal`'s token is revoked or expired (never otherwise)."""
        event = asyncio.Event()
        self._waiting.setdefault(principal.token_id, set()).add(event)
        try:
            while True:
                wait = self.recheck_s
                if principal.expires_at is not None:
                    wait = min(wait, principal.expires_at - time.time())
                if wait <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), wait)
                if event.is_set():
                    return
                record = await self.store.get_token(principal.token_id)
                if record is None or record.revoked_at is not None or (
                        record.expires_at is not None and record.expires_at <= time.time()):
                    return
        finally:
            waiting = self._waiting.get(principal.token_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiting[principal.token_id]


async def until(source: AsyncIterator[T], stop: Awaitable[None]) -> AsyncIterator[T]:
    """`source`'s items until it ends or `stop` completes (then `source` is closed)."""
    stopping = asyncio.ensure_future(stop)
    step: asyncio.Future[T] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(source))
            await asyncio.wait({step, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                return
            try:
                item = step.result()
            except StopAsyncIteration:
                return
            step = None
            yield item
    finally:
        for task in (step, stopping):
            if task is None:
                continue
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            elif not task.cancelled():
                task.exception()  # retrieved (a failed re-check also ends the stream)
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
