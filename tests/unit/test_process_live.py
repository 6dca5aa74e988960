"""A process's live output on the session's bus: coalesced into few events, each at most
EVENT_MAX bytes, with offsets that say where its text sits in the log; a character split
between two reads is never cut in an event."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from runtime.events import EventHub
from runtime.processes.live import COALESCE_S, EVENT_MAX, LiveProcess
from runtime.processes.models import ProcessRecord
from runtime.processes.outlog import OutputLog


def live_process(tmp_path: Path, hub: EventHub) -> LiveProcess:
    record = ProcessRecord(id="p_1", name=None, command="x", cwd="/workspace",
                           state="running", started_at=time.time(), tenant_id="t",
                           session_id="s")
    return LiveProcess(record, "container", None, OutputLog(tmp_path / "p_1.log"),
                       hub.bus("s"))


async def test_a_flood_is_coalesced_and_capped(tmp_path: Path) -> None:
    hub = EventHub()
    live = live_process(tmp_path, hub)
    for _ in range(1000):  # 1000 reads of 1 KiB within one window
        data = b"y" * 1023 + b"\n"
        live._arrived(live.outlog.append(data), data, "stdout")
    await asyncio.sleep(COALESCE_S * 4)
    events = [e.as_json() for e in hub.bus("s").replay]
    assert len(events) == 1, "one event per window, not one per read"
    [event] = events
    assert event["type"] == "process_output" and event["next"] == 1000 * 1024
    assert len(event["data"].encode()) == EVENT_MAX == event["next"] - event["offset"]


async def test_a_split_character_waits_for_its_rest(tmp_path: Path) -> None:
    hub = EventHub()
    live = live_process(tmp_path, hub)
    text = "héllo".encode()
    first, rest = text[:2], text[2:]  # 'h' and half of 'é'
    live._arrived(live.outlog.append(first), first, "stdout")
    await asyncio.sleep(COALESCE_S * 3)
    live._arrived(live.outlog.append(rest), rest, "stdout")
    await asyncio.sleep(COALESCE_S * 3)
    events = [e.as_json() for e in hub.bus("s").replay]
    assert "".join(e["data"] for e in events) == "héllo"
    assert [(e["offset"], e["next"]) for e in events] == [(0, 1), (1, len(text))]
    live.finish()
    assert live.done.done()
