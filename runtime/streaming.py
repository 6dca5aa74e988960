"""Streaming what a running task hands out as it goes, without racing a queue against it.

Why: "a queue of output chunks raced against the task" (`asyncio.wait(FIRST_COMPLETED)` on a
`queue.get()` future and the task, cancel the getter, drain the queue when the task is done)
was written again by every caller that streams a call: the sandbox's `stream_run`, the node
agent's `run`, the exec and kernel routes. Each copy had to get the same corners right: no item
lost when the task ends between two reads, no getter left pending, no hang after a failure.
Two shapes cover them, below every caller (this module imports nothing of the runtime):

- `Feed`: items a callback produces (a call's output chunks, progress notices), in order,
  ending when the task that produces them ends. The task's end closes the feed after its last
  item (a done callback), so reading is a plain `async for`:

      feed: Feed[OutputChunk] = Feed()
      call = feed.follow(asyncio.create_task(backend.run(request, feed.put)))
      async for chunk in feed:               # or: async for batch, last in feed.batches(s)
          ...
      result = call.result()

- `until_failed(source, task)`: items of a source that does not end with the task (a
  session's event subscription, whose last item for the reader is in-band, e.g. its
  `tool_result`) while the task runs and after it succeeded; it stops early when the task
  fails, which then never publishes that last item.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound="asyncio.Future[Any]")  # a Task stays a Task


class Feed(Generic[T]):
    """Items in the order they were put, ending once the followed task has ended."""

    def __init__(self) -> None:
        # (item,) so that None can be an item; None itself is the end
        self._items: asyncio.Queue[tuple[T] | None] = asyncio.Queue()
        self._task: asyncio.Future[Any] | None = None

    async def put(self, item: T) -> None:
        """An async callback (e.g. an `OutputCallback`): never blocks."""
        self._items.put_nowait((item,))

    def put_nowait(self, item: T) -> None:
        self._items.put_nowait((item,))

    def follow(self, task: F) -> F:
        """End this feed when ``task`` ends: after every item it put, however it ends."""
        self._task = task
        task.add_done_callback(lambda _: self._items.put_nowait(None))
        return task

    async def __aiter__(self) -> AsyncIterator[T]:
        while (got := await self._items.get()) is not None:
            yield got[0]

    async def batches(self, linger_s: float) -> AsyncIterator[tuple[list[T], bool]]:
        """Items in batches, each what arrived within ``linger_s`` of its first item (less
        when the task ends first); ``True`` marks the last batch, after the task ended (it
        may be empty). So a quick task's items and its end make one batch."""
        while True:
            got = await self._items.get()
            if got is None:
                yield [], True
                return
            batch = [got[0]]
            if self._task is not None and linger_s > 0:
                await asyncio.wait({self._task}, timeout=linger_s)
            ended = False
            while not self._items.empty():
                more = self._items.get_nowait()
                if more is None:
                    ended = True
                    break
                batch.append(more[0])
            yield batch, ended
            if ended:
                return


async def until_failed(source: AsyncIterator[T], task: asyncio.Future[Any], *,
                       reading: asyncio.Future[T] | None = None) -> AsyncGenerator[T, None]:
    """Items of ``source`` as they come, while ``task`` runs and after it has succeeded (the
    reader stops at the item that ends its stream, which the task put there); stops when
    ``source`` ends, or as soon as ``task`` has failed or was cancelled. ``reading``: a read
    of ``source`` started before the task was (``asyncio.ensure_future(anext(source))``), so
    that a subscription is in place before the task publishes anything."""
    pending = reading if reading is not None else asyncio.ensure_future(anext(source))
    try:
        while True:
            await asyncio.wait({pending, task}, return_when=asyncio.FIRST_COMPLETED)
            if pending.done():
                try:
                    item = pending.result()
                except StopAsyncIteration:
                    return
                yield item
                pending = asyncio.ensure_future(anext(source))
            elif task.cancelled() or task.exception() is not None:
                return
            else:
                await asyncio.wait({pending})  # succeeded: what it put comes next
    finally:
        pending.cancel()
