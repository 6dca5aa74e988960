"""Threads and processes in a sandbox, under each runtime tier: they work, and stay bounded.

Under gVisor two things differ from runc (``spec.py`` and ``seccomp.py`` say why): the pids
cgroup also holds runsc's own host tasks, so it gets room above ``limits.pids`` and the
program is bounded by ``RLIMIT_NPROC`` instead (a sandboxed thread is a goroutine the cgroup
does not see); and the seccomp profile lets clone3 through to the Sentry, which answers it
with ENOSYS itself. Red checks (see the report of this change): at the parent commit the
threads and processes checks fail under gVisor (``can't start new thread``; exit 2, runsc
unable to start its threads in a 64-task cgroup); without the room, the processes check;
without ``RLIMIT_NPROC``, the thread bomb check (3000 threads under gVisor); a runc
container given the gVisor profile fails the clone3 check (clone3 makes a user namespace).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

import pytest

from runtime.sandbox.models import Limits
from tests.conformance.harness import CONFINE, Sandbox, adapter_params
from tests.docker.sandbox_fixtures import RunFn, py

COLD = ("runc-cold", "gvisor-cold")
each_tier = pytest.mark.parametrize(
    "adapter", [p for p in adapter_params(CONFINE) if p.id in (*COLD, "gvisor-warm")])
each_tier_cold = pytest.mark.parametrize(
    "adapter", [p for p in adapter_params(CONFINE) if p.id in COLD])

LOW_PIDS = 64  # what `navi doctor`'s probe runs with


@pytest.fixture
def run(sandbox: Sandbox) -> RunFn:
    return sandbox.run


@pytest.fixture
def tier(sandbox: Sandbox) -> str:
    assert sandbox.caps.runtime is not None
    return sandbox.caps.runtime


async def report(run: RunFn, code: str, **limits: Any) -> Any:
    """Run ``code`` (it prints one JSON document) with a low pids limit; its report."""
    result = await run(py(code), limits=Limits(timeout_s=30, pids=LOW_PIDS, **limits))
    assert result.exit_code == 0, (result.exit_code, result.stderr.decode(errors="replace"))
    return json.loads(result.stdout)


@each_tier
async def test_threads_start_and_join(run: RunFn) -> None:
    """Red under gVisor at the parent commit: clone3's EPERM broke pthread_create."""
    code = (
        "import json, threading\nseen = []\n"
        "threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(8)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(json.dumps(sorted(seen)))"
    )
    assert await report(run, code) == list(range(8))


@each_tier
async def test_processes_and_threads_under_a_low_pids_limit(run: RunFn) -> None:
    """40 processes at once and 8 threads within 64 tasks. Red under gVisor without the
    room for runsc's own tasks and stubs (exit 2: runsc cannot start its threads)."""
    code = (
        "import json, subprocess, threading\n"
        "procs = [subprocess.Popen(['sleep', '1']) for _ in range(40)]\n"
        "threads = [threading.Thread(target=lambda: None) for _ in range(8)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(json.dumps([p.wait() for p in procs]))"
    )
    assert await report(run, code) == [0] * 40


@each_tier
async def test_cant_make_namespaces_with_clone3(run: RunFn) -> None:
    """clone3 (and clone) asking for new user, mount, pid and net namespaces fail on both
    tiers: runc's profile answers clone3 with ENOSYS, gVisor's Sentry does (its profile lets
    clone3 through). Red: a runc container given the gVisor profile makes them."""
    code = (
        "import ctypes, json, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "flags = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000\n"
        "args = ctypes.create_string_buffer(struct.pack('8Q', flags, 0, 0, 0, 0, 0, 0, 0))\n"
        "out = []\n"
        "for call in (lambda: libc.syscall(435, args, 64), lambda: libc.syscall(56, flags, 0, 0, 0, 0)):\n"  # noqa: E501
        "    r = call()\n"
        "    if r == 0: os._exit(0)  # a child: it must not report\n"
        "    out.append([r, ctypes.get_errno()])\n"
        "print(json.dumps(out))"
    )
    clone3, clone = await report(run, code)
    assert clone3 == [-1, 38], "clone3 must fail with ENOSYS"
    assert clone == [-1, 1], "clone with namespace flags must fail with EPERM"


@each_tier
async def test_a_thread_bomb_stays_within_the_pids_limit(run: RunFn) -> None:
    """Blocked threads until refused: at most ``limits.pids`` tasks. Red under gVisor without
    ``RLIMIT_NPROC`` (the cgroup does not see the Sentry's goroutines: 3000 threads)."""
    code = (
        "import json, threading\nthreading.stack_size(64 * 1024)\n"
        "stop = threading.Event(); started = 0\n"
        "try:\n"
        "    for _ in range(3000):\n"
        "        threading.Thread(target=stop.wait, daemon=True).start(); started += 1\n"
        "except RuntimeError:\n"
        "    pass\n"
        "stop.set()\nprint(json.dumps(started))"
    )
    started = await report(run, code)
    assert 8 <= started < LOW_PIDS


@each_tier_cold
async def test_a_fork_bomb_is_contained(run: RunFn, tier: str) -> None:
    """The bomb ends by its deadline and the host answers meanwhile. Under runc the pids
    cgroup refuses it (EAGAIN); under gVisor ``RLIMIT_NPROC`` does, slower (forks are
    costly there: the deadline often comes first, which kills it), or the pids cgroup
    stops the sandbox itself first (the Sentry cannot start a host thread: runsc ends the
    call with exit 2 and no output; seen once in a fresh-clone run)."""
    started = time.monotonic()
    bomb = asyncio.ensure_future(
        run(["bash", "-c", "f(){ f | f & }; f; sleep 2"], limits=Limits(timeout_s=5, pids=64)))
    await asyncio.sleep(2)
    probe_started = time.monotonic()
    host = await asyncio.to_thread(subprocess.run, ["sh", "-c", "echo alive"], capture_output=True)
    assert host.stdout == b"alive\n" and time.monotonic() - probe_started < 2
    result = await bomb
    assert time.monotonic() - started <= 5 + 8  # the deadline, plus the kill under load
    refused = b"fork" in result.stderr and b"Resource temporarily unavailable" in result.stderr
    sandbox_stopped = result.exit_code == 2 and not result.stdout and not result.stderr
    assert refused or (tier == "gvisor" and (result.timed_out or sandbox_stopped)), result
    after = await run(["echo", "next call fine"])
    assert after.stdout == b"next call fine\n"
