"""Executor: quota, decide, approve, audit intent, run, audit outcome (real audit file)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from runtime.audit import AuditLog, verify_store
from runtime.errors import AuditUnavailable, PolicyDenied, QuotaExceeded, SandboxError
from runtime.executor import Executor, Invocation
from runtime.policy import Action, PolicyEngine, Subject, TenantOverlay, parse_policy
from runtime.policy.quota import QuotaTracker
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sandbox.models import ExecRequest, OutputChunk

ROOT = Path(__file__).resolve().parents[2]
PY = Action(tool="code_exec", args={"language": "python", "code": "print(1)"})
RUN = Invocation(argv=["python3", "-c", "print(1)"])
USER = Subject(tenant="acme", user="tok_1", session="s1")


def engine(name: str = "default.yaml") -> PolicyEngine:
    return PolicyEngine.from_file(ROOT / "policies" / name)


def make(audit: AuditLog, backend: FakeBackend | None = None, eng: PolicyEngine | None = None,
         **kw) -> Executor:
    return Executor(engine=eng or engine(), backend=backend or FakeBackend(), audit=audit,
                    resolve_image=lambda name: f"navi/{name}:latest", **kw)


async def kinds(audit: AuditLog) -> list[tuple[str, str | None]]:
    return [(r.kind, r.rule) for r in await audit.records()]


async def test_allowed_call_runs_and_is_audited_around_the_run(audit: AuditLog) -> None:
    seen_intent: list[bool] = []

    def script(request: ExecRequest) -> FakeResponse:
        # write-ahead: the intent is durable in the file before the backend is called
        with sqlite3.connect(audit.db_path) as conn:
            rows = conn.execute("SELECT kind FROM audit WHERE exec_id = ?",
                                (request.exec_id,)).fetchall()
        seen_intent.append(rows == [("intent",)])
        return FakeResponse(stdout=b"1\n")

    backend = FakeBackend(default=script)
    out = await make(audit, backend).execute(USER, PY, RUN)
    assert seen_intent == [True]
    assert out.ok and out.result.stdout == b"1\n"
    assert out.intent_seq < out.audit_seq
    req = backend.requests[0]
    assert req.image == "navi/python:latest" and req.argv == RUN.argv
    assert (req.tenant, req.session, req.exec_id) == ("acme", "s1", out.exec_id)
    assert req.network == "none" and req.limits.timeout_s == 30
    records = await audit.records(exec_id=out.exec_id)
    assert [r.kind for r in records] == ["intent", "outcome"]
    intent, outcome = records
    assert intent.exit_code is None and outcome.exit_code == 0
    assert outcome.seq == out.audit_seq and intent.seq == out.intent_seq
    assert intent.rule == "profiles.developer.allow[group:exec]" and intent.decision == "allow"
    assert intent.user == "tok_1" and intent.args_size and len(intent.args_sha256 or "") == 64
    assert outcome.stdout_size == 2 and outcome.image_digest == "sha256:" + "f" * 64
    assert intent.limits and intent.limits["memory_mb"] == 512
    pub = out.public()
    assert set(pub) >= {"ok", "exit_code", "stdout", "stderr", "timed_out", "oom_killed",
                        "truncated", "duration_ms", "exec_id", "audit_seq"}
    assert pub["stdout"] == "1\n" and pub["audit_seq"] == out.audit_seq
    assert (await asyncio.to_thread(verify_store, audit.data_dir)).ok


async def test_denied_call_never_reaches_the_backend(audit: AuditLog) -> None:
    backend = FakeBackend()
    with pytest.raises(PolicyDenied) as info:
        await make(audit, backend).execute(USER, Action(tool="http_request"), RUN)
    assert info.value.rule == "profiles.developer.deny[group:web]"
    assert backend.requests == []
    assert await kinds(audit) == [("denied", "profiles.developer.deny[group:web]")]


async def test_unknown_tool_denied_by_default(audit: AuditLog) -> None:
    backend = FakeBackend()
    with pytest.raises(PolicyDenied) as info:
        await make(audit, backend).execute(USER, Action(tool="rootkit"), RUN)
    assert info.value.rule == "default.deny" and backend.requests == []


async def test_ask_without_approver_is_a_denial(audit: AuditLog) -> None:
    backend = FakeBackend()
    ex = make(audit, backend, eng=engine("strict.yaml"))
    with pytest.raises(PolicyDenied) as info:
        await ex.execute(USER, Action(tool="my_tool", group="user_tools"), RUN)
    assert info.value.rule == "profiles.developer.approvals[0]"
    assert backend.requests == []
    assert (await audit.records())[-1].kind == "denied"


async def test_ask_with_approver(audit: AuditLog) -> None:
    asked: list[str] = []

    async def approve(subject, action, decision) -> bool:
        asked.append(decision.rule)
        return action.args.get("ok", False)

    backend = FakeBackend()
    ex = make(audit, backend, eng=engine("strict.yaml"), approver=approve)
    tool = Action(tool="my_tool", group="user_tools", args={"ok": True})
    out = await ex.execute(USER, tool, RUN)
    assert out.ok and out.decision.verdict == "allow"
    with pytest.raises(PolicyDenied, match="approval refused"):
        await ex.execute(USER, tool.model_copy(update={"args": {"ok": False}}), RUN)
    assert len(backend.requests) == 1 and len(asked) == 2
    assert [r.kind for r in await audit.records()] == [
        "approval", "intent", "outcome", "approval"]
    assert [r.decision for r in await audit.records(kind="approval")] == ["approved", "refused"]


async def test_first_use_and_hash_change_memory(audit: AuditLog) -> None:
    asked: list[str] = []

    async def approve(subject, action, decision) -> bool:
        asked.append(action.tool_hash or "-")
        return True

    ex = make(audit, eng=engine("lab.yaml"), approver=approve)
    physics = Subject(tenant="physics", profile="developer")
    tool = Action(tool="t1", group="user_tools")
    await ex.execute(physics, tool, RUN)
    await ex.execute(physics, tool, RUN)
    assert asked == ["-"]  # first use only
    student = Subject(tenant="stranger", profile="student")
    for h in ("h1", "h1", "h2", "h2", "h1"):
        await ex.execute(student, Action(tool="t2", group="user_tools", tool_hash=h), RUN)
    assert asked == ["-", "h1", "h2", "h1"]


async def test_timeout_is_clamped_and_reported(audit: AuditLog) -> None:
    backend = FakeBackend()
    out = await make(audit, backend).execute(USER, PY.model_copy(update={"timeout_s": 999}), RUN)
    assert backend.requests[0].limits.timeout_s == 300 and out.timeout_s == 300
    assert out.public()["timeout_s"] == 300


async def test_concurrency_quota(audit: AuditLog) -> None:
    eng = engine().with_overlay("acme", TenantOverlay(quotas={"max_concurrent": 1,
                                                              "queue_depth": 0}))
    backend = FakeBackend(default=FakeResponse(delay_s=5))
    ex = make(audit, backend, eng=eng)
    first = asyncio.create_task(ex.execute(USER, PY, RUN))
    while not backend.running:
        await asyncio.sleep(0.01)
    with pytest.raises(QuotaExceeded) as info:
        await ex.execute(USER, PY, RUN)
    assert info.value.retry_after == 1
    # another tenant is not affected
    other = Subject(tenant="other")
    backend.push(FakeResponse())
    assert (await ex.execute(other, PY, RUN)).ok
    await ex.kill(backend.running[0])
    assert (await first).result.exit_code == 137
    denied = await audit.records(kind="denied")
    assert [d.rule for d in denied] == ["quotas.max_concurrent"]
    backend.push(FakeResponse())
    assert (await ex.execute(USER, PY, RUN)).ok  # the slot was released


async def test_calls_past_the_maximum_wait_in_their_tenants_queue(audit: AuditLog) -> None:
    """max_concurrent 1, queue_depth 2: two calls wait their turn (first come, first served),
    the next is refused at once; another tenant is not held up by the queue."""
    eng = engine().with_overlay("acme", TenantOverlay(quotas={"max_concurrent": 1,
                                                              "queue_depth": 2}))
    backend = FakeBackend(default=FakeResponse(delay_s=5))
    ex = make(audit, backend, eng=eng)
    first = asyncio.create_task(ex.execute(USER, PY, RUN))
    while not backend.running:
        await asyncio.sleep(0.01)
    waiting = [asyncio.create_task(ex.execute(USER, PY, RUN)) for _ in range(2)]
    while ex.quotas.waiting(USER.tenant) < 2:
        await asyncio.sleep(0.01)
    with pytest.raises(QuotaExceeded) as info:
        await ex.execute(USER, PY, RUN)
    assert info.value.retry_after == 1
    backend.push(FakeResponse())
    assert (await ex.execute(Subject(tenant="other"), PY, RUN)).ok
    order = []
    for _ in range(3):  # end the running one each time: the next in the queue starts
        while not [r for r in backend.running if r not in order]:
            await asyncio.sleep(0.01)
        [now] = [r for r in backend.running if r not in order]
        order.append(now)
        await ex.kill(now)
    await asyncio.gather(first, *waiting)
    assert ex.quotas.waiting(USER.tenant) == 0 and ex.quotas.active(USER.tenant) == 0
    assert [d.rule for d in await audit.records(kind="denied")] == ["quotas.queue_depth"]
    assert len(set(order)) == 3


async def test_a_cancelled_wait_leaves_the_queue(audit: AuditLog) -> None:
    eng = engine().with_overlay("acme", TenantOverlay(quotas={"max_concurrent": 1,
                                                              "queue_depth": 1}))
    backend = FakeBackend(default=FakeResponse(delay_s=5))
    ex = make(audit, backend, eng=eng)
    first = asyncio.create_task(ex.execute(USER, PY, RUN))
    while not backend.running:
        await asyncio.sleep(0.01)
    waiter = asyncio.create_task(ex.execute(USER, PY, RUN))
    while ex.quotas.waiting(USER.tenant) < 1:
        await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert ex.quotas.waiting(USER.tenant) == 0
    await ex.kill(backend.running[0])
    await first
    assert ex.quotas.active(USER.tenant) == 0


async def test_rate_quota_with_retry_after(audit: AuditLog) -> None:
    now = [1000.0]
    eng = engine().with_overlay("acme", TenantOverlay(quotas={"execs_per_minute": 2}))
    ex = make(audit, eng=eng, quotas=QuotaTracker(clock=lambda: now[0]))
    await ex.execute(USER, PY, RUN)
    now[0] += 10
    await ex.execute(USER, PY, RUN)
    now[0] += 5
    with pytest.raises(QuotaExceeded) as info:
        await ex.execute(USER, PY, RUN)
    assert info.value.retry_after == 45
    assert (await audit.records())[-1].rule == "quotas.execs_per_minute"
    now[0] += 45
    assert (await ex.execute(USER, PY, RUN)).ok


async def test_audit_unavailable_means_nothing_runs(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "data")  # never opened
    backend = FakeBackend()
    with pytest.raises(AuditUnavailable):
        await make(log, backend).execute(USER, PY, RUN)
    assert backend.requests == []
    await log.open()
    await log.close()  # closed again: still nothing runs
    with pytest.raises(AuditUnavailable):
        await make(log, backend).execute(USER, PY, RUN)
    assert backend.requests == []


async def test_sandbox_error_is_audited_as_outcome(audit: AuditLog) -> None:
    backend = FakeBackend([FakeResponse(raises=SandboxError("engine fell over"))])
    with pytest.raises(SandboxError):
        await make(audit, backend).execute(USER, PY, RUN)
    last = (await audit.records())[-1]
    assert (last.kind, last.detail, last.exit_code) == ("outcome", "error: sandbox_error", None)


async def test_cancelling_the_caller_kills_and_closes_the_intent(audit: AuditLog) -> None:
    backend = FakeBackend(default=FakeResponse(delay_s=30))
    ex = make(audit, backend)
    task = asyncio.create_task(ex.execute(USER, PY, RUN))
    while not backend.running:
        await asyncio.sleep(0.01)
    exec_id = backend.running[0]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert exec_id in backend.killed
    records = await audit.records(exec_id=exec_id)
    assert [r.kind for r in records] == ["intent", "interrupted"]
    assert records[-1].detail == "cancelled" and ex.running() == []


async def test_kill_and_cancel_session(audit: AuditLog) -> None:
    backend = FakeBackend(default=FakeResponse(delay_s=30))
    ex = make(audit, backend)
    tasks = [asyncio.create_task(ex.execute(USER, PY, RUN)),
             asyncio.create_task(ex.execute(USER.model_copy(update={"session": "s2"}), PY, RUN))]
    while len(backend.running) < 2:
        await asyncio.sleep(0.01)
    await ex.cancel_session("s1")
    first = await tasks[0]
    assert first.result.exit_code == 137 and not first.ok
    assert (await audit.records(exec_id=first.exec_id))[-1].detail == "killed: session closed"
    assert not tasks[1].done()
    await ex.kill_all("shutdown")
    assert (await tasks[1]).result.exit_code == 137
    assert await ex.kill("ex_nope") is False


async def test_output_is_streamed_through(audit: AuditLog) -> None:
    got: list[OutputChunk] = []

    async def on_output(chunk: OutputChunk) -> None:
        got.append(chunk)

    backend = FakeBackend([FakeResponse(stdout=b"a", stderr=b"b")])
    await make(audit, backend).execute(USER, PY, RUN, on_output=on_output)
    assert [(c.stream, c.data) for c in got] == [("stdout", b"a"), ("stderr", b"b")]


async def test_tool_without_image_does_not_run(audit: AuditLog) -> None:
    backend = FakeBackend()
    with pytest.raises(PolicyDenied) as info:
        await make(audit, backend).execute(USER, Action(tool="memory"), RUN)
    assert info.value.rule == "images[memory]" and backend.requests == []


async def test_authorize_for_tools_that_run_no_code(audit: AuditLog) -> None:
    ex = make(audit)
    assert (await ex.authorize(USER, Action(tool="memory"))).verdict == "allow"
    with pytest.raises(PolicyDenied):
        await ex.authorize(USER, Action(tool="web_view"))
    assert await kinds(audit) == [("denied", "profiles.developer.deny[group:web]")]


async def test_exec_id_validation(audit: AuditLog) -> None:
    ex = make(audit)
    with pytest.raises(ValueError):
        await ex.execute(USER, PY, RUN, exec_id="../../etc")
    out = await ex.execute(USER, PY, RUN, exec_id="ex_given")
    assert out.exec_id == "ex_given"


async def test_role_without_run_permission(audit: AuditLog) -> None:
    policy = parse_policy(
        "version: 1\nprofiles:\n  developer: {allow: [group:exec]}\n"
        "tenants:\n  '*': {profiles: [developer]}\n")
    backend = FakeBackend()
    with pytest.raises(PolicyDenied) as info:
        await make(audit, backend, eng=PolicyEngine(policy)).execute(
            USER.model_copy(update={"role": "auditor"}), PY, RUN)
    assert info.value.rule == "roles.auditor.run_tools" and backend.requests == []
