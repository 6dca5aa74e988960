"""A process's live output never pushes an approval, a question or a turn's events out of a
session's replay buffer: output gives way first."""

from __future__ import annotations

from runtime.events import (
    ApprovalRequired,
    EventHub,
    Notice,
    ProcessOutputEvent,
    ReplayLimits,
)


def _approval() -> ApprovalRequired:
    return ApprovalRequired(approval_id="ap_1", session="s", tool="terminal", args={},
                            rule="r", reason="why", status="pending", created_at=0.0)


def test_output_floods_do_not_evict_an_approval() -> None:
    hub = EventHub(ReplayLimits(session_bytes=64 * 1024))
    bus = hub.bus("s")
    approval = bus.publish(_approval())
    for i in range(500):
        bus.publish(ProcessOutputEvent(process_id="p_1", data="x" * 1000, offset=i * 1000,
                                       next=(i + 1) * 1000))
    kept = [e.id for e in bus.replay]
    assert approval.id in kept, "process output pushed the approval out"
    assert bus.replay.bytes <= 64 * 1024
    assert kept[-1] == 501, "the newest output is kept, older output gave way"


def test_other_events_take_the_room_of_output_first() -> None:
    hub = EventHub(ReplayLimits(session_bytes=32 * 1024))
    bus = hub.bus("s")
    approval = bus.publish(_approval())
    for i in range(100):
        bus.publish(ProcessOutputEvent(process_id="p_1", data="y" * 1000, offset=i, next=i))
    for _ in range(20):
        bus.publish(Notice(message="n" * 500))
    kept = list(bus.replay)
    assert kept[0].id == approval.id
    assert sum(1 for e in kept if e.type == "notice") == 20


def test_an_output_event_larger_than_the_session_allowance_clears_nothing() -> None:
    hub = EventHub(ReplayLimits(session_bytes=8 * 1024))
    bus = hub.bus("s")
    approval = bus.publish(_approval())
    bus.publish(ProcessOutputEvent(process_id="p_1", data="z" * 20_000, offset=0, next=1))
    assert [e.id for e in bus.replay] == [approval.id]
