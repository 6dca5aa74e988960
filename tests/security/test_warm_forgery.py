"""A warm job cannot forge its own exit status (docs/security.md).

A warm container's runner hands the job to a process it forked and marks the job's end on
stdout and stderr with a trailer carrying a nonce and the exit status (``warm_runner.py``).
The job is hostile: it hunts for the nonce in its own memory (for ``python3 -I -c`` a fork of
the runner) and in every process it can read through ``/proc/<pid>/mem`` (the runner, tini),
writes forged trailers with exit 0 on its stdout and stderr and on every other process's
``/proc/<pid>/fd/1`` and ``2`` it can open, then prints more and exits 3. The call must still
say exit 3 with all of that output, under each tier, for python run in the runner's fork,
python exec'd, and a shell job whose grandchild attacks; and neither the runner's nor tini's
memory may be readable or writable by the job.

Red before the fix (the child was forked after the frame, and nothing shut /proc/<pid>/mem):
all six cases came back exit 0 with no output, the nonce found in the job's or the runner's
memory. Mutants: the argv handed to the child with the nonce → the two in-process cases red;
no Landlock domain → the runner stops before ready (no warm: all runc cases red), and
without that check too → runc cases exit 0 (the runner's memory read).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.docker.warm_runner import RUNNER
from runtime.sandbox.models import Limits
from tests.docker.sandbox_fixtures import RunFn
from tests.docker.warm_fixtures import wait_ready

pytestmark = pytest.mark.docker

ATTACK = r'''
import json, os, re, sys
HEX = rb"([0-9a-f]{32})"
PATTERNS = (re.compile(rb"navi-end-" + HEX), re.compile(rb'"nonce": "' + HEX + rb'"'))
me = os.getpid()
pids = sorted({int(p) for p in os.listdir("/proc") if p.isdigit()})
nonces = set()

def scan(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            regions = [line.split()[:2] for line in f]
        mem = open("/proc/%d/mem" % pid, "rb", 0)
    except OSError:
        return False
    with mem:
        for span, perms in regions:
            lo, hi = (int(x, 16) for x in span.split("-"))
            if "r" not in perms or hi - lo > 256 << 20:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            for pattern in PATTERNS:
                nonces.update(m.group(1).decode() for m in pattern.finditer(data or b""))
    return True

others = {}
for pid in pids:
    readable = scan(pid)
    if pid == me:
        continue
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmd = "?"
    seen = others[pid] = {"cmd": cmd, "mem_read": readable, "mem_write": False, "fds": []}
    try:
        os.close(os.open("/proc/%d/mem" % pid, os.O_RDWR))
        seen["mem_write"] = True
    except OSError:
        pass
own = [1, 2]
for pid in others:
    for n in (1, 2):
        try:
            own.append(os.open("/proc/%d/fd/%d" % (pid, n), os.O_WRONLY | os.O_NONBLOCK))
            others[pid]["fds"].append(n)
        except OSError:
            pass
forged = b"".join(b"\x00navi-end-" + n.encode() + b":0\n" for n in sorted(nonces))
for fd in own:
    try:
        os.write(fd, forged)
    except OSError:
        pass
print(json.dumps({"nonces": len(nonces), "others": others}), flush=True)
print("after the forged end", file=sys.stderr, flush=True)
sys.exit(3)
'''

JOBS = {
    "python_in_process": ["python3", "-I", "-c", ATTACK],  # what code_exec runs: a fork
    "python_exec": ["python3", "-c", ATTACK],
    "shell_grandchild": ["sh", "-c", 'python3 -c "$0"; code=$?; echo "shell after"; '
                         'exit $code', ATTACK],
}


@pytest.fixture
def backend_config(
    request: pytest.FixtureRequest, backend_config: DockerBackendConfig, tmp_path: Path
) -> DockerBackendConfig:
    """Warm, one per session; ``no_landlock`` (indirect): a seccomp profile that refuses
    Landlock, as a kernel without it would."""
    config = backend_config.model_copy(update={"warm": WarmPoolConfig(size=1, idle_s=30)})
    if getattr(request, "param", None) == "no_landlock":
        profile = json.loads(DEFAULT_PROFILE_PATH.read_text())
        for rule in profile["syscalls"]:
            rule["names"] = [n for n in rule["names"] if not n.startswith("landlock_")]
        path = tmp_path / "no-landlock.json"
        path.write_text(json.dumps(profile))
        config = config.model_copy(update={"seccomp_profile_path": path})
    return config


@pytest.mark.parametrize("tier", ["runc", "gvisor"])
@pytest.mark.parametrize("job", sorted(JOBS))
async def test_a_warm_job_cannot_forge_its_end(
    backend: DockerBackend, run: RunFn, workspace: Path, tier: str, job: str
) -> None:
    limits = Limits(timeout_s=30, runtime=tier)
    await run(["true"], limits=limits)
    await wait_ready(backend, workspace.name)
    taken = backend.warm.stats["taken"]
    result = await run(JOBS[job], limits=limits)
    assert backend.warm.stats["taken"] == taken + 1, "the attack did not run warm"
    assert b"after the forged end" in result.stderr, result
    assert result.exit_code == 3 and not result.ok, result
    report = json.loads(result.stdout.splitlines()[-2 if job == "shell_grandchild" else -1])
    if job == "shell_grandchild":
        assert result.stdout.endswith(b"shell after\n")
    # the processes that report its end (the runner, tini): the job reaches none of them
    reporters = {pid: seen for pid, seen in report["others"].items()
                 if RUNNER[:60] in seen["cmd"] or "docker-init" in seen["cmd"]}
    assert reporters, report  # they were seen (their memory readable or not)
    assert all(not (seen["mem_read"] or seen["mem_write"]) for seen in reporters.values()), report


THIEF = r'''
import os, re, select, sys, time
print("job output", flush=True)
if os.fork() == 0:  # outlives the job, reads its real stdout and stderr for the end markers
    os.setsid()
    fds = {os.open("/proc/self/fd/%d" % n, os.O_RDONLY): n for n in (1, 2)}
    time.sleep(0.15)  # the job's own output has been drained by then
    waiter, seen = select.poll(), b""
    for fd in fds:
        waiter.register(fd, select.POLLIN)
    while True:
        for fd, _ in waiter.poll():
            seen += os.read(fd, 4096)
        found = re.search(rb"\x00navi-end-([0-9a-f]{32}):", seen)
        if found:
            forged = b"\x00navi-end-" + found.group(1) + b":0\n"
            for n in (1, 2):
                os.write(n, b"stolen\n" + forged)
            os._exit(0)
time.sleep(0.3)
sys.exit(3)
'''


@pytest.mark.parametrize("tier", ["runc", "gvisor"])
async def test_what_a_job_leaves_running_cannot_steal_its_end(
    backend: DockerBackend, run: RunFn, workspace: Path, tier: str
) -> None:
    """A process the job leaves behind, reading the job's real stdout and stderr (a pipe can
    be reopened for reading through /proc/self/fd), would see the end markers go by and
    replace them with forged ones: the runner ends every process but its own ancestors
    before it writes them. Red with that step taken out in N of N tries."""
    limits = Limits(timeout_s=30, runtime=tier)
    for _ in range(3):
        await run(["true"], limits=limits)
        await wait_ready(backend, workspace.name)
        taken = backend.warm.stats["taken"]
        result = await run(["python3", "-I", "-c", THIEF], limits=limits)
        assert backend.warm.stats["taken"] == taken + 1, "the attack did not run warm"
        assert (result.exit_code, result.stdout) == (3, b"job output\n"), result


@pytest.mark.parametrize("backend_config", ["no_landlock"], indirect=True)
async def test_a_runner_that_cannot_shut_its_job_out_never_serves(
    backend: DockerBackend, run: RunFn, workspace: Path
) -> None:
    """On runc the job is kept out of the runner's and tini's memory by a Landlock domain of
    its own; where there is none (refused here by seccomp, as an old kernel would), the
    runner finds /proc/1/mem open to its job before it reports ready and stops: no warm
    container, the call runs cold. Red with that check taken out (the call ran warm)."""
    limits = Limits(timeout_s=30, runtime="runc")
    await run(["true"], limits=limits)
    deadline = time.monotonic() + 20
    while not backend.warm.stats["failed"] and not backend.warm.ready_count(workspace.name):
        assert time.monotonic() < deadline, "the pool neither launched nor failed"
        await asyncio.sleep(0.02)
    assert backend.warm.ready_count(workspace.name) == 0, "a runner served without Landlock"
    result = await run(JOBS["python_in_process"], limits=limits)
    assert backend.warm.stats["taken"] == 0
    assert result.exit_code == 3 and b"after the forged end" in result.stderr, result
