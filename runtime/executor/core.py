"""`Executor`: one call from admission to its recorded outcome, and cancellation.

Admission (quota, policy, approvals, the build of an invocation after admission) is
`runtime.executor.admission`; the write-ahead run (intent, backend, outcome, interruption)
is `runtime.executor.recorder`. This module puts them in order and keeps the public surface
(`execute`, `authorize`, `record_action`, `kill`, `cancel_session`, `kill_all`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import structlog

from runtime import tracing
from runtime.audit.changes import ChangeLimiter
from runtime.audit.records import AuditEntry, StateChange
from runtime.audit.refusals import RefusalLimiter
from runtime.audit.store import AuditLog
from runtime.errors import ChangeRateExceeded, RefusalRateExceeded
from runtime.executor.admission import Admission
from runtime.executor.outcome import (
    Approver,
    ExecOutcome,
    Invocation,
    InvocationFor,
    new_exec_id,
    valid_exec_id,
)
from runtime.executor.recorder import Recorder, SecretSource
from runtime.logging import get_logger
from runtime.policy.decision import Action, Decision, Subject
from runtime.policy.engine import PolicyEngine
from runtime.policy.quota import QuotaTracker
from runtime.sandbox.backend import OutputCallback, SandboxBackend

log = get_logger("runtime.executor")

# state changes a tenant makes at will, each an fsync'd record: held to its change rate
METERED: frozenset[str] = frozenset({
    "file.write", "file.delete", "file.move", "file.share", "file.publish", "share.revoke",
    "snapshot.create", "snapshot.restore", "snapshot.delete", "session.fork",
    "process.start", "process.signal", "process.input"})


class Executor:
    def __init__(
        self, *, engine: PolicyEngine, backend: SandboxBackend, audit: AuditLog,
        resolve_image: Callable[[str], str], approver: Approver | None = None,
        quotas: QuotaTracker | None = None, secrets: SecretSource | None = None,
        refusals: RefusalLimiter | None = None, changes: ChangeLimiter | None = None,
    ) -> None:
        self.engine = engine
        self.backend = backend
        self.audit = audit
        self.resolve_image = resolve_image
        self.quotas = quotas or QuotaTracker()
        self.changes = changes or ChangeLimiter()
        self.admission = Admission(engine=engine, audit=audit, approver=approver,
                                   quotas=self.quotas, refusals=refusals or RefusalLimiter())
        self.recorder = Recorder(backend=backend, audit=audit, resolve_image=resolve_image,
                                 secrets=secrets)

    # -- the one path -------------------------------------------------------------------------

    async def execute(
        self, subject: Subject, action: Action, invocation: Invocation | InvocationFor, *,
        on_output: OutputCallback | None = None, exec_id: str | None = None,
        approver: Approver | None = None,
    ) -> ExecOutcome:
        """Admit, decide, audit the intent, run, audit the outcome. ``invocation`` may be a
        function of the decision (a job that carries its grant: the web fetcher's allowlist)."""
        exec_id = exec_id or new_exec_id()
        if not valid_exec_id(exec_id) or exec_id in self.recorder.running:
            raise ValueError(f"bad or duplicate exec_id {exec_id!r}")
        gate = self.admission
        action = gate.with_memory(subject, action)
        base = gate.base(subject, action, exec_id)
        with structlog.contextvars.bound_contextvars(
            tenant=subject.tenant, session=subject.session, exec_id=exec_id
        ), tracing.span(f"navi.exec {action.tool}", {
            "navi.tenant": subject.tenant, "navi.session": subject.session,
            "navi.tool": action.tool, "navi.exec_id": exec_id, "navi.profile": subject.profile,
            "navi.tool_hash": action.tool_hash,
        }) as span:
            outcome = await self._execute(subject, action, invocation, base, on_output,
                                          approver)
            if span is None:  # tracing off
                return outcome
            result = outcome.result
            tracing.annotate(span, {
                "navi.runtime": outcome.decision.limits.runtime,
                "navi.image": outcome.decision.image, "navi.rule": outcome.decision.rule,
                "navi.exit_code": result.exit_code, "navi.timed_out": result.timed_out,
                "navi.duration_ms": result.duration_ms, "navi.audit_seq": outcome.audit_seq,
                "navi.intent_seq": outcome.intent_seq,
                "navi.stdout_size": result.stdout_size or len(result.stdout),
                "navi.stderr_size": result.stderr_size or len(result.stderr)})
            return outcome

    async def _execute(
        self, subject: Subject, action: Action, invocation: Invocation | InvocationFor,
        base: dict[str, Any], on_output: OutputCallback | None, approver: Approver | None,
    ) -> ExecOutcome:
        gate = self.admission
        slot = await gate.admit(subject, base)
        try:
            try:
                decision = await gate.decide(subject, action, base, approver)
                if not isinstance(invocation, Invocation):
                    invocation = await gate.build(invocation, decision, base)
            except BaseException:  # refused (or failed) before it started: a refused
                slot.refund()      # call spends no execs_per_minute of its tenant
                raise
            return await self.recorder.run(subject, action, invocation, decision, base,
                                           on_output, gate.deny)
        finally:
            slot.release()

    async def authorize(
        self, subject: Subject, action: Action, *, approver: Approver | None = None
    ) -> Decision:
        """Decide (and resolve an `ask`) for a tool that runs no code; denials are audited."""
        action = self.admission.with_memory(subject, action)
        base = self.admission.base(subject, action, None)
        return await self.admission.decide(subject, action, base, approver)

    async def record_action(
        self, subject: Subject, action: StateChange, obj: str, *, rule: str,
        detail: str | None = None, tool: str | None = None, tool_hash: str | None = None,
    ) -> int:
        """Audit a state change that is not an execution, BEFORE applying it; returns its seq.

        The one way to record ``session.create|delete``, ``file.write|delete|move``,
        ``tool.write|delete|reload``, ``token.create|revoke``, ``tenant.create`` and
        ``approval.decide``. Like an execution's intent: the caller has already decided
        (role check or ``engine.decide``; ``rule`` names what decided), calls this, and only
        once it returns (the record is fsync'd in the log and its mirror) applies the change.
        If it raises ``AuditUnavailable`` the change must not happen (fail closed): let the
        error propagate (the API answers 503). No second record follows; if applying then
        fails, the log keeps the decision (as with an intent whose container never ran).

        ``subject.tenant`` is the tenant whose state changes (for a token: the token's
        tenant; for ``tenant.create``: the new tenant's id), ``subject.user`` the acting token
        id, ``subject.session`` the session concerned (``"none"`` outside one). ``obj`` is
        what is touched: a path, a token id, a session id, a tool name (pass its content
        hash as ``tool_hash``), an approval id. ``detail`` is a short free-text note (the
        tenant's name, the decision taken, a move's target).
        A tenant's changes of the kinds in ``METERED`` are first held to its change rate
        (``meter_change``).
        """
        if action in METERED:
            await self.meter_change(subject, action)
        record = await self.audit.append(AuditEntry(
            kind="action", action=action, object=obj, tenant=subject.tenant,
            user=subject.user, session=subject.session, tool=tool, tool_hash=tool_hash,
            decision="allow", rule=rule, detail=detail))
        log.info("action_recorded", action=action, object=obj, audit_seq=record.seq)
        return record.seq

    async def meter_change(self, subject: Subject, what: str) -> None:
        """Hold an allowed state change (``what``: e.g. ``file.write``, ``kernel.exec``) to
        the tenant's change rate: past it, a refusal is recorded (rule
        ``limits.change_rate``; itself under the refusal rate) and ``ChangeRateExceeded``
        raised (429 ``change_rate``). Call before recording or applying the change."""
        try:
            self.changes.take(subject.tenant)
        except ChangeRateExceeded as exc:
            with contextlib.suppress(RefusalRateExceeded):  # then the 429 goes unrecorded
                await self.admission.refused(AuditEntry(
                    kind="denied", decision="deny", rule="limits.change_rate",
                    reason=exc.message, tenant=subject.tenant, user=subject.user,
                    session=subject.session, tool=what, node=subject.node))
            raise

    # -- cancellation -------------------------------------------------------------------------

    def running(self, session: str | None = None) -> list[str]:
        return [e for e, s in self.recorder.running.items() if session is None or s == session]

    async def kill(self, exec_id: str, reason: str = "killed by request") -> bool:
        """Kill a running execution; False when it is not running (here)."""
        return await self.recorder.kill(exec_id, reason)

    async def cancel_session(self, session: str) -> None:
        for exec_id in self.running(session):
            await self.kill(exec_id, "session closed")

    async def kill_all(self, reason: str) -> None:
        for exec_id in self.running():
            await self.kill(exec_id, reason)
