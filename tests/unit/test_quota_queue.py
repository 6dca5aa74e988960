"""QuotaTracker.admit: a tenant's calls past max_concurrent wait in its own bounded FIFO
queue; a wait that ends (cancelled, timed out) takes nothing and frees nothing twice."""

from __future__ import annotations

import asyncio

import pytest

from runtime.errors import QuotaExceeded
from runtime.policy.model import Quotas
from runtime.policy.quota import QuotaSlot, QuotaTracker

Q = Quotas(max_concurrent=1, queue_depth=2)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_bounded_then_refused_with_retry_after() -> None:
    tracker = QuotaTracker()
    running = await tracker.admit("a", Q)
    waiters = [asyncio.create_task(tracker.admit("a", Q)) for _ in range(2)]
    await settle()
    assert tracker.waiting("a") == 2
    with pytest.raises(QuotaExceeded) as info:
        await tracker.admit("a", Q)
    assert info.value.retry_after == 1 and getattr(info.value, "quota", "") == "queue_depth"
    assert tracker.waiting("a") == 2 and tracker.active("a") == 1
    other = await tracker.admit("b", Q)  # another tenant: its own limit, no queue in the way
    other.release()
    running.release()
    for w in waiters:
        (await w).release()
    assert tracker.active("a") == 0 and tracker.waiting("a") == 0


async def test_queue_depth_zero_refuses_at_the_maximum() -> None:
    tracker = QuotaTracker()
    slot = await tracker.admit("a", Quotas(max_concurrent=1, queue_depth=0))
    with pytest.raises(QuotaExceeded) as info:
        await tracker.admit("a", Quotas(max_concurrent=1, queue_depth=0))
    assert getattr(info.value, "quota", "") == "max_concurrent"
    slot.release()


async def test_first_come_first_served() -> None:
    tracker = QuotaTracker()
    quotas = Quotas(max_concurrent=1, queue_depth=5)
    first = await tracker.admit("a", quotas)
    order: list[int] = []

    async def wait(i: int) -> QuotaSlot:
        slot = await tracker.admit("a", quotas)
        order.append(i)
        return slot

    tasks = []
    for i in range(5):
        tasks.append(asyncio.create_task(wait(i)))
        await settle()  # queued in this order
    slot = first
    for i in range(5):
        slot.release()
        await settle()
        assert order == list(range(i + 1))
        assert tracker.active("a") == 1  # exactly one runs at a time
        slot = await tasks[i]
    slot.release()
    assert tracker.active("a") == 0 and tracker.waiting("a") == 0


async def test_a_new_call_does_not_overtake_the_queue() -> None:
    tracker = QuotaTracker()
    first = await tracker.admit("a", Q)
    waiter = asyncio.create_task(tracker.admit("a", Q))
    await settle()
    first.release()  # the waiter is woken, not yet running: a newcomer queues behind it
    late = asyncio.create_task(tracker.admit("a", Q))
    await settle()
    assert waiter.done() and not late.done()
    (await waiter).release()
    (await late).release()
    assert tracker.active("a") == 0


async def test_cancelled_while_queued_releases_nothing() -> None:
    tracker = QuotaTracker()
    running = await tracker.admit("a", Q)
    cancelled = asyncio.create_task(tracker.admit("a", Q))
    behind = asyncio.create_task(tracker.admit("a", Q))
    await settle()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert tracker.waiting("a") == 1 and tracker.active("a") == 1  # nothing freed or taken
    running.release()
    running.release()  # idempotent: frees one slot only
    slot = await behind
    assert tracker.active("a") == 1
    slot.release()
    assert tracker.active("a") == 0 and tracker.waiting("a") == 0


async def test_woken_then_cancelled_passes_the_turn_on() -> None:
    tracker = QuotaTracker()
    running = await tracker.admit("a", Q)
    woken = asyncio.create_task(tracker.admit("a", Q))
    behind = asyncio.create_task(tracker.admit("a", Q))
    await settle()
    running.release()  # wakes `woken`; it is cancelled before it runs again
    woken.cancel()
    with pytest.raises(asyncio.CancelledError):
        await woken
    slot = await asyncio.wait_for(behind, 1)  # not stuck behind a lost wake-up
    assert tracker.active("a") == 1
    slot.release()
    assert tracker.active("a") == 0 and tracker.waiting("a") == 0


async def test_a_wait_too_long_is_a_429() -> None:
    tracker = QuotaTracker()
    running = await tracker.admit("a", Q)
    with pytest.raises(QuotaExceeded) as info:
        await tracker.admit("a", Q, max_wait_s=0.05)
    assert info.value.retry_after == 1
    assert tracker.waiting("a") == 0 and tracker.active("a") == 1
    running.release()
    assert tracker.active("a") == 0
