"""`StartGate`: a step runs once, on the thread that opens the gate, and never before."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime.sandbox.backend import StartGate


def test_the_step_runs_once_when_the_gate_opens_on_the_opening_thread() -> None:
    gate = StartGate()
    ran: list[str] = []
    assert gate.when_open(lambda: ran.append(threading.current_thread().name))
    assert ran == []
    opener = threading.Thread(target=gate.open, name="audit-writer")
    opener.start()
    opener.join()
    gate.open()  # a second opening runs nothing more
    assert ran == ["audit-writer"]


def test_a_gate_open_already_leaves_the_work_to_the_caller() -> None:
    gate = StartGate()
    gate.open()
    ran: list[int] = []
    assert not gate.when_open(lambda: ran.append(1))
    assert ran == []


def test_a_withdrawn_step_never_runs_and_a_failing_one_does_not_raise() -> None:
    gate = StartGate()
    ran: list[int] = []
    gate.when_open(lambda: ran.append(1))
    gate.withdraw()  # its caller gave up (cancelled, or what it follows failed)
    gate.open()
    assert ran == []

    def broken() -> None:
        raise OSError("the attach socket is gone")

    failing = StartGate()
    failing.when_open(broken)
    failing.open()  # logged; the audit writer that opens it goes on


async def test_awaiting_the_gate_awaits_what_it_follows() -> None:
    gate = StartGate()
    with pytest.raises(RuntimeError):
        await gate
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    gate.follows(done)
    waiter = asyncio.ensure_future(_wait(gate))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    done.set_result("durable")
    assert await waiter == "durable"


async def _wait(gate: StartGate) -> object:
    return await gate
