"""`runtime.streaming`: what a running task hands out, streamed without a race (the helper
under `stream_run`, the node agent's `run` and the exec route's SSE). Real tasks on the
running loop; a reader that would hang is a failure after `LIMIT_S`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from runtime.streaming import Feed, until_failed

LIMIT_S = 2.0


async def producing(feed: Feed[int], items: list[int], *, pause_s: float = 0.0,
                    fail: bool = False) -> str:
    for item in items:
        await feed.put(item)
        if pause_s:
            await asyncio.sleep(pause_s)
    if fail:
        raise RuntimeError("broke")
    return "done"


async def test_a_feed_ends_after_the_last_item_of_its_task() -> None:
    """Items put right before the task ends (nothing awaited in between, the race the old
    loops had to drain for) all arrive, then the feed ends by itself."""
    feed: Feed[int] = Feed()
    task = feed.follow(asyncio.create_task(producing(feed, [1, 2, 3])))
    got = await asyncio.wait_for(_all(feed), LIMIT_S)
    assert got == [1, 2, 3] and task.result() == "done"


async def test_a_feed_ends_when_its_task_fails_and_keeps_what_came_first() -> None:
    feed: Feed[int] = Feed()
    task = feed.follow(asyncio.create_task(producing(feed, [7], fail=True)))
    assert await asyncio.wait_for(_all(feed), LIMIT_S) == [7]
    with pytest.raises(RuntimeError, match="broke"):
        task.result()


async def test_a_feed_carries_none_as_an_item() -> None:
    feed: Feed[int | None] = Feed()
    feed.follow(asyncio.create_task(_put_then_end(feed, [None, 0])))
    assert await asyncio.wait_for(_all(feed), LIMIT_S) == [None, 0]


async def test_batches_join_a_quick_task_s_items_and_its_end() -> None:
    feed: Feed[int] = Feed()
    feed.follow(asyncio.create_task(producing(feed, [1, 2, 3])))
    batches = await asyncio.wait_for(_batches(feed, 0.5), LIMIT_S)
    assert batches == [([1, 2, 3], True)]


async def test_batches_split_items_that_come_apart() -> None:
    feed: Feed[int] = Feed()
    feed.follow(asyncio.create_task(producing(feed, [1, 2], pause_s=0.2)))
    batches = await asyncio.wait_for(_batches(feed, 0.01), LIMIT_S)
    assert [items for items, _ in batches if items] == [[1], [2]]
    assert batches[-1][1] is True and [last for _, last in batches].count(True) == 1


async def test_until_failed_stops_when_the_task_fails() -> None:
    """The source never ends (a subscription); the task's failure ends the reading."""
    source = _forever()
    task = asyncio.create_task(_fail_after(0.05))
    got = await asyncio.wait_for(_all(until_failed(source, task)), LIMIT_S)
    assert got == [] and isinstance(task.exception(), RuntimeError)


async def test_until_failed_reads_on_after_the_task_succeeded() -> None:
    """A task that succeeded has put the reader's last item; it is read after the task ended."""
    queue: asyncio.Queue[str] = asyncio.Queue()

    async def run() -> None:
        queue.put_nowait("started")
        queue.put_nowait("result")  # in-band end, read after the task is done

    async def stop_at_result() -> list[str]:
        seen = []
        async for item in until_failed(_drain(queue), asyncio.create_task(run())):
            seen.append(item)
            if item == "result":
                break
        return seen

    assert await asyncio.wait_for(stop_at_result(), LIMIT_S) == ["started", "result"]


async def test_until_failed_stops_when_the_source_ends() -> None:
    async def three() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    never = asyncio.create_task(asyncio.sleep(3600))
    try:
        assert await asyncio.wait_for(_all(until_failed(three(), never)), LIMIT_S) == [0, 1, 2]
    finally:
        never.cancel()


async def _all(items: AsyncIterator[object]) -> list[object]:
    return [item async for item in items]


async def _batches(feed: Feed[int], linger_s: float) -> list[tuple[list[int], bool]]:
    return [(items, last) async for items, last in feed.batches(linger_s)]


async def _put_then_end(feed: Feed[int | None], items: list[int | None]) -> None:
    for item in items:
        feed.put_nowait(item)


async def _forever() -> AsyncIterator[int]:
    await asyncio.Event().wait()
    yield 0


async def _fail_after(seconds: float) -> None:
    await asyncio.sleep(seconds)
    raise RuntimeError("failed")


async def _drain(queue: asyncio.Queue[str]) -> AsyncIterator[str]:
    while True:
        yield await queue.get()
