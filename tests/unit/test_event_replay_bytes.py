"""Event replay bounded in bytes: per session, across the server, idle sessions emptied;
events carry at most 64 KiB of arguments; metric labels come from a closed set."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from runtime.events import (
    Event,
    EventHub,
    ExecOutput,
    SessionEventBus,
    ToolCallEvent,
    ToolResultEvent,
)
from runtime.events.replay import EVENT_OVERHEAD, ReplayLimits, event_cost
from runtime.metrics import Metrics, tool_label
from runtime.policy.decision import Action, Decision
from runtime.tools.event_args import ARGS_EVENT_BYTES, TruncatedArgs, args_bytes, event_args
from tests.fakes.agent_harness import AgentHarness

KiB = 1024
BLOB = "x" * (10 * KiB)


def out(data: str) -> ExecOutput:
    return ExecOutput(exec_id="e1", stream="stdout", data=data)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hub(session: int = 64 * KiB, total: int = 1024 * KiB, idle: float = 600.0,
        clock: Clock | None = None) -> EventHub:
    limits = ReplayLimits(session_bytes=session, total_bytes=total, idle_s=idle)
    return EventHub(limits, clock=clock or Clock())


def kept(bus: SessionEventBus) -> list[int]:
    return [e.id for e in bus.replay]


async def collect(bus: SessionEventBus, last_id: int | None) -> list[Event]:
    """What a client resuming after `last_id` receives before anything new happens."""
    out: list[Event] = []
    events = bus.subscribe(last_id)
    try:
        while True:
            out.append(await asyncio.wait_for(anext(events), 0.05))
    except TimeoutError:
        return out
    finally:
        await events.aclose()


def test_a_session_keeps_at_most_its_bytes_oldest_dropped_first() -> None:
    h = hub(session=64 * KiB)
    bus = h.bus("s1")
    for _i in range(40):
        bus.publish(out(BLOB))
    assert bus.replay.bytes <= 64 * KiB
    assert bus.replay.bytes == sum(event_cost(e) for e in bus.replay) == h.budget.bytes
    ids = kept(bus)
    assert ids == list(range(ids[0], 41)) and len(ids) == 6  # the newest, unbroken
    assert bus.since(0) == (list(bus.replay), ids[0] - 1)


async def test_a_client_away_too_long_gets_resync_then_what_is_kept() -> None:
    bus = hub(session=64 * KiB).bus("s1")
    for _i in range(40):
        bus.publish(out(BLOB))
    got = await collect(bus, 3)
    first_kept = kept(bus)[0]
    assert got[0].type == "resync" and got[0].data == {"missed": first_kept - 4}
    assert [e.id for e in got[1:]] == list(range(first_kept, 41))
    assert [e.id for e in await collect(bus, 39)] == [40]  # still in the buffer: no resync


def test_the_server_total_drops_the_oldest_event_of_any_session() -> None:
    event = Event.make(1, out(BLOB))
    h = hub(session=64 * KiB, total=8 * event_cost(event) + 100)
    a, b, c = h.bus("a"), h.bus("b"), h.bus("c")
    for _i in range(5):
        a.publish(out(BLOB))
    for _i in range(5):
        b.publish(out(BLOB))
    assert h.budget.bytes <= h.limits.total_bytes
    assert kept(a) == [3, 4, 5] and kept(b) == [1, 2, 3, 4, 5]  # a's were the oldest
    for _i in range(4):
        c.publish(out(BLOB))
    assert kept(a) == [] and kept(b) == [2, 3, 4, 5] and kept(c) == [1, 2, 3, 4]
    assert h.budget.bytes == sum(x.replay.bytes for x in (a, b, c)) <= h.limits.total_bytes
    a.publish(out(BLOB))  # a empty buffer takes part again
    assert kept(a) == [6] and kept(b) == [3, 4, 5]


def test_per_session_trimming_keeps_the_total_order_right() -> None:
    event = Event.make(1, out(BLOB))
    cost = event_cost(event)
    h = hub(session=3 * cost + 60, total=5 * cost + 100)  # (ts varies by a few bytes)
    a, b = h.bus("a"), h.bus("b")
    for _i in range(6):  # a trims itself to its last three: its heap entry is stale
        a.publish(out(BLOB))
    assert kept(a) == [4, 5, 6]
    for _i in range(3):
        b.publish(out(BLOB))
    assert kept(a) == [5, 6] and kept(b) == [1, 2, 3]  # a's 4 was the server's oldest
    b.publish(out(BLOB))
    assert kept(a) == [5, 6] and kept(b) == [2, 3, 4]  # b's own limit first
    assert h.budget.bytes == a.replay.bytes + b.replay.bytes <= h.limits.total_bytes


async def test_an_event_larger_than_a_session_is_sent_live_but_not_kept() -> None:
    bus = hub(session=64 * KiB).bus("s1")
    bus.publish(out("small"))
    events = bus.subscribe(None)
    pending = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    big = bus.publish(ToolResultEvent(tool="t", success=True, output="y" * (100 * KiB),
                                           exec_id="e1"))
    assert (await asyncio.wait_for(pending, 1)).id == big.id  # the live reader has it
    await events.aclose()
    assert kept(bus) == [] and bus.replay.bytes == 0
    bus.publish(out("after"))
    got = await collect(bus, 0)
    assert got[0].type == "resync" and got[0].data == {"missed": 2}
    assert [e.id for e in got[1:]] == [3]


async def test_idle_sessions_give_their_buffer_back_and_ids_keep_counting() -> None:
    clock = Clock()
    h = hub(idle=600.0, clock=clock)
    idle, watched, busy = h.bus("idle"), h.bus("watched"), h.bus("busy")
    for bus in (idle, watched, busy):
        bus.publish(out(BLOB))
    watcher = watched.subscribe(None)
    pending = asyncio.ensure_future(anext(watcher))
    await asyncio.sleep(0)
    clock.now += 590
    busy.publish(out(BLOB))
    assert h.sweep() == 0
    clock.now += 20  # idle and watched: 610 s without an event; busy: 20 s
    assert h.sweep() == 1
    assert kept(idle) == [] and kept(watched) == [1] and kept(busy) == [1, 2]
    assert h.budget.bytes == watched.replay.bytes + busy.replay.bytes
    pending.cancel()
    await asyncio.sleep(0)
    await watcher.aclose()
    idle.publish(out("back"))
    assert kept(idle) == [2]
    got = await collect(idle, 0)
    assert got[0].type == "resync" and got[0].data == {"missed": 1}


async def test_the_sweeper_runs_in_the_background() -> None:
    h = EventHub(ReplayLimits(idle_s=0.2))
    h.bus("s").publish(out(BLOB))
    task = h.start_sweeper()
    try:
        for _ in range(100):
            if not len(h.bus("s").replay):
                break
            await asyncio.sleep(0.02)
        assert h.budget.bytes == 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_a_deleted_session_gives_its_bytes_back() -> None:
    h = hub()
    for name in ("a", "b"):
        h.bus(name).publish(out(BLOB))
    h.drop("a")
    assert h.budget.bytes == h.bus("b").replay.bytes > 0
    for i in range(200):  # many short-lived sessions leave no heap entries behind
        h.bus(f"t{i}").publish(out("x"))
        h.drop(f"t{i}")
    assert len(h.budget._heads) <= 2 * 1 + 64 + 1


async def test_a_reader_that_does_not_read_is_cut_off_by_bytes() -> None:
    bus = hub(session=64 * KiB).bus("s1")
    events = bus.subscribe(None)
    first = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    for _i in range(20):
        bus.publish(out(BLOB))
    assert not bus.subscribers  # more than 64 KiB unread: cut off, resumes by Last-Event-ID
    with pytest.raises(StopAsyncIteration):
        await first
    got = await collect(bus, 0)  # resuming works from the replay as usual
    assert got[0].type == "resync" and got[-1].id == 20


def test_an_event_is_encoded_once_and_counted_with_its_overhead() -> None:
    bus = hub().bus("s1")
    event = bus.publish(ToolCallEvent(tool="t", args={"a": "é"}, exec_id="e1"))
    assert event.exec_id == "e1"
    wire = json.loads(event.wire)
    assert wire["id"] == event.id == 1 and wire["type"] == "tool_call"
    assert event.data == {"tool": "t", "args": {"a": "é"}, "exec_id": "e1"}
    with pytest.raises(ValueError):  # typed: no event carries an `id` of its own
        ToolCallEvent(tool="t", args={}, exec_id="e1", id=99)  # type: ignore[call-arg]
    assert event_cost(event) == len(event.wire) + EVENT_OVERHEAD
    assert event.wire.isascii()


def test_small_arguments_travel_as_they_are() -> None:
    args = {"code": "print(1)", "language": "python"}
    assert event_args(args) is args
    exact = {"code": "z" * (ARGS_EVENT_BYTES - len(args_bytes({"code": ""})))}
    assert len(args_bytes(exact)) == ARGS_EVENT_BYTES and event_args(exact) is exact


def test_large_arguments_become_their_size_and_sha256() -> None:
    args: dict[str, Any] = {"code": "ü" * ARGS_EVENT_BYTES, "b": [1, 2.5, None]}
    shown = event_args(args)
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False).encode()
    assert shown == {"truncated": True, "size": len(canonical),
                     "sha256": hashlib.sha256(canonical).hexdigest()}
    TruncatedArgs.model_validate(shown)
    assert len(json.dumps(shown)) < 200


def test_metric_tool_labels_come_from_a_closed_set() -> None:
    builtins = frozenset({"code_exec", "terminal"})
    assert tool_label("code_exec", builtins, found=True) == "code_exec"
    assert tool_label("my_tool", builtins, found=True) == "user_tool"
    assert tool_label("t_abc123", builtins, found=False) == "unknown"
    metrics = Metrics()
    for i in range(50):
        name = metrics.tool_label(f"random{i}", builtins, found=i % 2 == 0)
        metrics.executions.labels("t_one", name, "not_found").inc()
    text = metrics.render().decode()
    series = [line for line in text.splitlines() if line.startswith("navi_executions_total{")]
    assert len(series) == 2


async def test_an_approval_event_carries_at_most_64_kib_of_arguments(tmp_path: Path) -> None:
    async with AgentHarness(tmp_path, approval_timeout_s=0.2) as h:
        bus = h.bus
        approve = h.services.approver_for(bus)
        big = {"command": "x" * (2 * ARGS_EVENT_BYTES)}
        await approve(h.subject, Action(tool="terminal", args=big),
                      Decision(verdict="ask", rule="r", reason="why"))
        (event,) = [e for e in bus.replay if e.type == "approval_required"]
        assert event.data["args"]["truncated"] is True
        assert event.data["args"]["size"] == len(args_bytes(big))
        assert len(event.wire) < 2048


@pytest.mark.parametrize("data", ["x", "y" * 4000])
def test_what_is_counted_bounds_what_is_held(data: str) -> None:
    """Tiny or large events: the memory the buffers hold stays near the bytes they count."""
    import tracemalloc

    h = hub(session=256 * KiB, total=1024 * KiB)
    buses = [h.bus(f"s{i}") for i in range(8)]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i in range(20000):
            buses[i % 8].publish(ExecOutput(exec_id="ex_0123456789abcdef01234567",
                                            stream="stdout", data=data))
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert h.budget.bytes <= 1024 * KiB
    assert held < 1.15 * 1024 * KiB, held
