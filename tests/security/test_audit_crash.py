"""`kill -9` in the middle of a burst of audited executions leaves a chain that verifies.

A child process runs concurrent executions through the real Executor and AuditLog (with the
FakeBackend: nothing runs on the host) until it is SIGKILLed at a random moment: inside a
transaction, between commit and mirror write, or mid-line. After the next start-up (which
closes the orphaned intents as `interrupted`) the chain verifies and every intent is closed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from runtime.audit import AuditLog, verify_store

ROOT = Path(__file__).resolve().parents[2]
MAX_ROUNDS = 16
CHILD = """
import asyncio, random, sys
from pathlib import Path
from runtime.audit import AuditLog
from runtime.executor import Executor, Invocation
from runtime.logging import configure_logging
from runtime.policy import Action, PolicyEngine, Subject
from runtime.sandbox.fake import FakeBackend, FakeResponse

async def main():
    data, policy = Path(sys.argv[1]), Path(sys.argv[2])
    engine = PolicyEngine.from_file(policy)
    backend = FakeBackend(default=lambda r: FakeResponse(delay_s=random.random() / 50,
                                                         stdout=b"x" * random.randint(0, 99)))
    async with AuditLog(data, checkpoint_every=20) as audit:
        ex = Executor(engine=engine, backend=backend, audit=audit, resolve_image=str)
        subject = Subject(tenant="burst", session="s")
        act = Action(tool="code_exec", args={"language": "python", "code": "1"})
        deny = Action(tool="web_view")
        print("ready", flush=True)
        while True:
            calls = [ex.execute(subject, act, Invocation(argv=["python3", "-c", "1"]))
                     for _ in range(3)]
            calls.append(ex.execute(subject, deny, Invocation(argv=["true"])))
            await asyncio.gather(*calls, return_exceptions=True)

configure_logging()  # logs to stderr; stdout only says "ready"
asyncio.run(main())
"""


def _count(data: Path) -> int:
    try:
        with sqlite3.connect(f"{(data / 'audit.sqlite3').as_uri()}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT count(*) FROM audit").fetchone()[0]
    except sqlite3.Error:
        return 0


def _burst_and_kill(data: Path, after_records: int, extra_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), str(ROOT / "policies" / "default.yaml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        while _count(data) < after_records:
            assert child.poll() is None, "the burst process died on its own"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        time.sleep(extra_s)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()


async def test_kill_9_mid_burst_leaves_a_verifiable_chain(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(int.from_bytes(os.urandom(4)))
    target, rounds, records = 0, 0, []
    # at least 4 kills; more until one lands with a call in flight (about 2 in 3 do)
    while rounds < 4 or not any(r.kind == "interrupted" for r in records):
        assert rounds < MAX_ROUNDS, f"no kill of {rounds} landed with a call in flight"
        rounds += 1
        target = _count(data) + rng.randint(20, 120)
        _burst_and_kill(data, target, rng.random() / 20)
        async with AuditLog(data) as audit:  # start-up: close what the dead process left open
            records = await audit.records(limit=1_000_000)
        report = await asyncio.to_thread(verify_store, data)
        assert report.ok, report
        assert report.records == len(records) >= target
        intents = {r.exec_id for r in records if r.kind == "intent"}
        closed = {r.exec_id for r in records if r.kind in ("outcome", "interrupted")}
        assert intents == closed
        seqs = [r.seq for r in records]
        assert seqs == list(range(1, len(seqs) + 1))
