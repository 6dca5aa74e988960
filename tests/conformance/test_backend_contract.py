"""The behaviour every SandboxBackend promises, on every adapter of the harness (``harness.py``:
fake, runc and gVisor, cold and warm). What a program does is checked where a backend runs
programs (``needs(EXECUTE)``); the protocol -- results, streaming, kill, cancellation, the
start gate -- everywhere."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.sandbox.fake import FakeResponse
from runtime.sandbox.models import Limits, OutputChunk
from tests.conformance.harness import EXECUTE, PROTOCOL, Sandbox, adapter_params

pytestmark = pytest.mark.parametrize("adapter", adapter_params(PROTOCOL))


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def py(code: str) -> list[str]:
    return ["python3", "-c", code]


async def test_result_names_the_call_and_ok_follows_the_exit(sandbox: Sandbox) -> None:
    done = await sandbox.run(sh("echo hi"), exec_id="c-named", fake=FakeResponse(stdout=b"hi\n"))
    assert (done.exec_id, done.exit_code, done.stdout, done.ok) == ("c-named", 0, b"hi\n", True)
    assert done.duration_ms >= 0 and not (done.timed_out or done.oom_killed or done.truncated)
    failed = await sandbox.run(sh("exit 3"), fake=FakeResponse(exit_code=3))
    assert (failed.exit_code, failed.ok) == (3, False)


async def test_stdout_stderr_and_exit_code_are_separate(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    done = await sandbox.run(sh("echo out; echo err >&2; exit 7"))
    assert (done.stdout, done.stderr, done.exit_code) == (b"out\n", b"err\n", 7)


async def test_stdin_is_delivered_then_closed(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    done = await sandbox.run(["cat"], stdin=b"line 1\nline 2\n")
    assert done.stdout == b"line 1\nline 2\n" and done.exit_code == 0


async def test_binary_output_is_kept_byte_for_byte(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    done = await sandbox.run(py("import sys; sys.stdout.buffer.write(bytes(range(256)))"))
    assert done.stdout == bytes(range(256))


async def test_output_streams_while_the_program_runs(sandbox: Sandbox) -> None:
    seen: list[tuple[float, OutputChunk]] = []

    async def on_output(chunk: OutputChunk) -> None:
        seen.append((time.monotonic(), chunk))

    fake = FakeResponse(stdout=b"first\nsecond\n", chunks=(
        OutputChunk(stream="stdout", data=b"first\n"),
        OutputChunk(stream="stdout", data=b"second\n")), delay_s=0.5)
    done = await sandbox.run(
        py("import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')"),
        on_output=on_output, fake=fake)
    ended = time.monotonic()
    assert b"".join(c.data for _, c in seen if c.stream == "stdout") == done.stdout
    assert done.stdout == b"first\nsecond\n"
    assert ended - seen[0][0] >= 0.4, "the first line must arrive before the program ends"


async def test_timeout_ends_the_call_near_its_deadline(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    started = time.monotonic()
    done = await sandbox.run(sh("sleep 60"), limits=Limits(timeout_s=2))
    assert done.timed_out and not done.ok
    assert time.monotonic() - started < 2 + 8


async def test_memory_exhaustion_is_reported_as_oom(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    done = await sandbox.run(py("b = []\nwhile True: b.append(bytearray(16 << 20))"),
                             limits=Limits(timeout_s=30, memory_mb=64))
    assert not done.ok and done.exit_code != 0
    assert done.oom_killed or done.exit_code == 137, done


async def test_long_writes_arrive_whole(sandbox: Sandbox) -> None:
    """One write far past a pipe buffer, then exit at once: every byte arrives (gVisor's host
    pipes answer such writes short; red there without the navi-stdio relay)."""
    sandbox.needs(EXECUTE)
    done = await sandbox.run(py(
        "import sys\nsys.stdout.write('o' * 300000)\nsys.stderr.write('e' * 200000)"))
    assert (done.stdout_size, done.stderr_size) == (300000, 200000)
    assert done.stdout == b"o" * 300000 and not done.truncated


async def test_large_output_is_truncated_head_and_tail(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    done = await sandbox.run(
        py("import sys\nsys.stdout.write('HEAD' + 'x' * 200000 + 'TAIL')"),
        limits=Limits(timeout_s=30, output_bytes=4096))
    assert done.truncated and done.stdout_size == 200008
    assert done.stdout.startswith(b"HEAD") and done.stdout.endswith(b"TAIL")
    assert len(done.stdout) <= 4096 + 200  # the cap, plus the marker between head and tail


async def test_workspace_persists_and_tmp_does_not(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    await sandbox.run(sh("echo kept > w.txt; echo gone > /tmp/t.txt"))
    done = await sandbox.run(sh("cat w.txt; cat /tmp/t.txt 2>/dev/null || echo none"))
    assert done.stdout == b"kept\nnone\n"


async def test_each_call_gets_a_fresh_container(sandbox: Sandbox) -> None:
    sandbox.needs(EXECUTE)
    first = await sandbox.run(py("import os; print(os.uname().nodename, os.getpid())"))
    second = await sandbox.run(sh("ps -e -o pid= | wc -l; ls /tmp | wc -l"))
    assert first.exit_code == 0 and second.exit_code == 0
    processes, tmp_entries = (int(x) for x in second.stdout.split())
    assert tmp_entries == 0 and processes <= 4  # init, sh, ps, wc: nothing left behind


async def test_kill_ends_a_running_call_promptly(sandbox: Sandbox) -> None:
    exec_id = "c-kill-me"
    call = asyncio.ensure_future(
        sandbox.run(sh("sleep 60"), exec_id=exec_id, fake=FakeResponse(delay_s=60)))
    await asyncio.sleep(3 if sandbox.executes else 0.1)
    started = time.monotonic()
    await sandbox.backend.kill(exec_id)
    done = await asyncio.wait_for(call, timeout=15)
    assert not done.ok and done.exit_code != 0
    assert time.monotonic() - started < 12


async def test_cancelling_the_caller_ends_the_call(sandbox: Sandbox) -> None:
    call = asyncio.ensure_future(sandbox.run(sh("sleep 60"), fake=FakeResponse(delay_s=60)))
    await asyncio.sleep(3 if sandbox.executes else 0.1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, timeout=15)
    await asyncio.sleep(0)
    assert getattr(sandbox.backend, "running", []) == []


async def test_nothing_runs_before_the_start_gate_opens(sandbox: Sandbox) -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    call = asyncio.ensure_future(sandbox.run(sh("echo ran > gate.txt; echo ran"), before_start=gate,
                                             fake=FakeResponse(stdout=b"ran\n")))
    await asyncio.sleep(1.0 if sandbox.executes else 0.05)
    assert not call.done()
    if sandbox.workspace is not None:
        assert not (sandbox.workspace / "gate.txt").exists()
    gate.set_result(None)
    assert (await asyncio.wait_for(call, timeout=30)).stdout == b"ran\n"


async def test_a_failed_start_gate_runs_nothing(sandbox: Sandbox) -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    gate.set_exception(OSError("the audit intent could not be written"))
    with pytest.raises(OSError):
        await sandbox.run(sh("echo ran > gate.txt"), before_start=gate)
    if sandbox.workspace is not None:
        assert not (sandbox.workspace / "gate.txt").exists()
