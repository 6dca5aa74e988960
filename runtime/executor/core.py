"""The Executor: the only path by which anything runs in a sandbox.

Nothing else may call ``SandboxBackend.run``. One call::

    quota check -> policy decide -> (ask: approver) -> audit intent (fsync) -> backend.run
    -> audit outcome (committed; fsync'd with the next intent or within 50 ms)

(The backend prepares — resolves the image, creates or takes a container — while the
intent is being fsync'd, and starts the job only once it is durable: ``before_start``, a
``StartGate`` the audit writer opens on its own thread, where a warm job is started at once.)

Use (API routes, tools, the CLI)::

    executor = Executor(engine=..., backend=..., audit=..., resolve_image=lambda n: ref,
                        approver=None)
    outcome = await executor.execute(
        subject,                    # Subject(tenant, role, user, profile, session)
        action,                     # Action(tool, args, group, timeout_s, tool_hash, ...)
        Invocation(argv=[...], stdin=b"", env={}, workspace=Path|None, mounts=[...]),
        on_output=callback,         # async (OutputChunk) -> None, live output (optional)
        exec_id=None,               # generated ("ex_" + 24 hex) unless given
        approver=None,              # per-call approver, overrides the default
    )
    outcome.result                  # ExecResult;  outcome.public() -> DESIGN's exec fields
    outcome.audit_seq               # seq of the *outcome* record (intent_seq: of the intent)

    await executor.kill(exec_id)    # cancellation: the run returns, the outcome is audited
    await executor.cancel_session(session); await executor.kill_all(reason)
    decision = await executor.authorize(subject, action)  # tools that run no code
    seq = await executor.record_action(subject, "token.create", token_id, rule=...)
                                    # a state change that is not an execution: audited
                                    # (fsync) BEFORE it is applied; see its docstring

Errors (all audited before they are raised, except ``AuditUnavailable`` itself and
``RefusalRateExceeded``: a tenant past its rate of refused calls, ``runtime.audit.refusals``,
gets that 429 instead of its refusal and no record; calls that run are never limited):
``QuotaExceeded(retry_after)`` (audited ``denied``, rule ``quotas.<quota>``),
``DiskQuotaExceeded`` from an invocation built after admission (a user tool's copy; audited
``denied``, rule ``quotas.tenant_disk_mb``),
``PolicyDenied(rule)`` (audited ``denied``; an ``ask`` without an approver, or refused, is a
denial too), ``AuditUnavailable`` (the intent could not be written: nothing ran; fail closed),
``SandboxError`` from the backend (audited as the outcome, ``detail`` = error code).
If the task running ``execute`` is cancelled, the container is killed and an
``interrupted`` record closes the intent.

Approvals: an approver is ``async (subject, action, decision) -> bool``. Unless the caller
set them, the Executor fills ``Action.first_use`` and ``Action.approved_hash`` from what
this process has seen and approved (per tenant and tool), so `ask: first_use` and
`ask: hash_change` work without the caller keeping state. Approvals are recorded as
``approval`` records; the memory is not persisted (after a restart, the policy asks again).

Network: a sandbox's network mode is always ``none``. When the decision grants egress (a
non-empty ``egress_allowlist``), the request says ``network="egress"`` with that list and the
backend runs the call with its own allowlisting proxy (``runtime/egress``) reached over a
unix socket mounted into the container: the only way out, for those names only. The grant is
in the intent's ``limits``; what was allowed and refused is in ``ExecResult.egress`` and, one
line, in the outcome's ``detail`` (``egress: allowed pypi.org:443 x2; refused …``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import structlog
from pydantic import BaseModel, ConfigDict, Field

from runtime.audit.records import AuditEntry, StateChange, digest_json, sha256_hex
from runtime.audit.refusals import RefusalLimiter
from runtime.audit.store import AuditLog
from runtime.errors import DiskQuotaExceeded, NaviError, PolicyDenied, QuotaExceeded
from runtime.logging import after_this_step, get_logger
from runtime.policy.decision import Action, Decision, Subject
from runtime.policy.engine import PolicyEngine
from runtime.policy.quota import QuotaExceededFor, QuotaTracker
from runtime.sandbox.backend import OutputCallback, SandboxBackend, StartGate
from runtime.sandbox.models import ExecRequest, ExecResult, Execution, Mount

log = get_logger(__name__)
# An approver answers truthy to approve; its answer may carry `decided_by` for the audit.
Approver = Callable[[Subject, Action, Decision], Awaitable[Any]]
EXEC_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def new_exec_id() -> str:
    return "ex_" + secrets.token_hex(12)


class Invocation(BaseModel):
    """What to run; where (image), how long and with which limits is the policy's call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str] = Field(min_length=1)
    stdin: bytes = b""
    env: dict[str, str] = Field(default_factory=dict)
    workspace: Path | None = None
    workdir: str = "/workspace"
    mounts: list[Mount] = Field(default_factory=list)


InvocationFor = Callable[[Decision], Invocation | Awaitable[Invocation]]
"""An invocation built from the decision (after admission, before the intent)."""


class SecretSource(Protocol):
    async def values(self, tenant_id: str, names: list[str]) -> dict[str, str]: ...


REDACTED = b"[secret]"


def redact(result: ExecResult, values: list[str]) -> ExecResult:
    """The result with every secret value in its output replaced (live output already
    streamed is the tool's own: see README, "Secrets for tools")."""
    out, err = result.stdout, result.stderr
    for value in sorted(values, key=len, reverse=True):
        raw = value.encode("utf-8")
        if raw:
            out, err = out.replace(raw, REDACTED), err.replace(raw, REDACTED)
    return result.model_copy(update={"stdout": out, "stderr": err})


class ExecOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    result: ExecResult
    decision: Decision
    exec_id: str
    audit_seq: int = Field(description="seq of the outcome record")
    intent_seq: int
    timeout_s: float

    @property
    def ok(self) -> bool:
        return self.result.ok

    @functools.cached_property
    def execution(self) -> Execution:
        """The exec result of DESIGN (`POST /v1/sessions/{id}/exec`, `navi exec --json`)."""
        r = self.result
        return Execution(
            ok=r.ok, exit_code=r.exit_code,
            stdout=r.stdout.decode("utf-8", errors="replace"),
            stderr=r.stderr.decode("utf-8", errors="replace"),
            timed_out=r.timed_out, oom_killed=r.oom_killed, truncated=r.truncated,
            duration_ms=r.duration_ms, exec_id=self.exec_id, audit_seq=self.audit_seq,
            timeout_s=self.timeout_s, runtime=self.decision.limits.runtime)

    def public(self) -> dict[str, Any]:
        """`execution()` as JSON (tools' metadata, `navi exec --json`)."""
        return self.execution.model_dump()


def _outcome_detail(killed: str | None, result: ExecResult) -> str | None:
    parts = [f"killed: {killed}"] if killed else []
    if result.egress is not None:
        parts.append(result.egress.summary())
    return "; ".join(parts) or None


class Executor:
    def __init__(
        self, *, engine: PolicyEngine, backend: SandboxBackend, audit: AuditLog,
        resolve_image: Callable[[str], str], approver: Approver | None = None,
        quotas: QuotaTracker | None = None, secrets: SecretSource | None = None,
        refusals: RefusalLimiter | None = None,
    ) -> None:
        self.engine = engine
        self.secrets = secrets
        self.backend = backend
        self.audit = audit
        self.resolve_image = resolve_image
        self.approver = approver
        self.quotas = quotas or QuotaTracker()
        self.refusals = refusals or RefusalLimiter()
        self._running: dict[str, str] = {}  # exec_id -> session
        self._killed: dict[str, str] = {}  # exec_id -> why
        self._used: set[tuple[str, str]] = set()
        self._approved_hash: dict[tuple[str, str], str] = {}

    # -- the one path -------------------------------------------------------------------------

    async def execute(
        self, subject: Subject, action: Action, invocation: Invocation | InvocationFor, *,
        on_output: OutputCallback | None = None, exec_id: str | None = None,
        approver: Approver | None = None,
    ) -> ExecOutcome:
        """Admit, decide, audit the intent, run, audit the outcome. ``invocation`` may be a
        function of the decision (a job that carries its grant: the web fetcher's allowlist)."""
        exec_id = exec_id or new_exec_id()
        if not EXEC_ID.fullmatch(exec_id) or exec_id in self._running:
            raise ValueError(f"bad or duplicate exec_id {exec_id!r}")
        action = self._with_memory(subject, action)
        args_sha, args_size = digest_json(action.args)
        base = {"tenant": subject.tenant, "user": subject.user, "session": subject.session,
                "exec_id": exec_id, "tool": action.tool, "args_sha256": args_sha,
                "args_size": args_size, "parent_turn": subject.parent_turn}
        with structlog.contextvars.bound_contextvars(
            tenant=subject.tenant, session=subject.session, exec_id=exec_id
        ):
            try:
                slot = await self.quotas.admit(subject.tenant,
                                               self.engine.quotas(subject.policy_tenant))
            except QuotaExceeded as exc:
                quota = exc.quota if isinstance(exc, QuotaExceededFor) else "quota"
                await self._refused(AuditEntry(
                    kind="denied", decision="deny", rule=f"quotas.{quota}", reason=exc.message,
                    **base))
                raise
            try:
                try:
                    decision = await self._decide(subject, action, base, approver)
                    if not isinstance(invocation, Invocation):
                        invocation = await self._build(invocation, decision, base)
                except BaseException:  # refused (or failed) before it started: a refused
                    slot.refund()      # call spends no execs_per_minute of its tenant
                    raise
                return await self._run(subject, action, invocation, decision, base, on_output)
            finally:
                slot.release()

    async def authorize(
        self, subject: Subject, action: Action, *, approver: Approver | None = None
    ) -> Decision:
        """Decide (and resolve an `ask`) for a tool that runs no code; denials are audited."""
        action = self._with_memory(subject, action)
        args_sha, args_size = digest_json(action.args)
        base = {"tenant": subject.tenant, "user": subject.user, "session": subject.session,
                "exec_id": None, "tool": action.tool, "args_sha256": args_sha,
                "args_size": args_size, "parent_turn": subject.parent_turn}
        return await self._decide(subject, action, base, approver)

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
        """
        record = await self.audit.append(AuditEntry(
            kind="action", action=action, object=obj, tenant=subject.tenant,
            user=subject.user, session=subject.session, tool=tool, tool_hash=tool_hash,
            decision="allow", rule=rule, detail=detail))
        log.info("action_recorded", action=action, object=obj, audit_seq=record.seq)
        return record.seq

    async def _decide(
        self, subject: Subject, action: Action, base: dict[str, Any], approver: Approver | None
    ) -> Decision:
        decision = self.engine.decide(subject, action)
        if decision.verdict == "deny":
            await self._deny(base, decision.rule, decision.reason)
        if decision.verdict == "ask":
            approve = approver or self.approver
            if approve is None:
                await self._deny(base, decision.rule,
                                 f"{decision.reason}; approval required but no approver")
            assert approve is not None
            granted = await approve(subject, action, decision)
            by = getattr(granted, "decided_by", None)  # approvers may say who decided
            await self.audit.append(AuditEntry(
                kind="approval", decision="approved" if granted else "refused",
                rule=decision.rule, reason=decision.reason, tool_hash=action.tool_hash,
                detail=f"decided_by: {by}" if by else None, **base))
            if not granted:
                raise PolicyDenied(f"{decision.reason}; approval refused", rule=decision.rule)
            key = (subject.tenant, action.tool)
            if action.tool_hash is not None:
                self._approved_hash[key] = action.tool_hash
            decision = decision.model_copy(update={"verdict": "allow"})
        self._used.add((subject.tenant, action.tool))
        return decision

    async def _deny(self, base: dict[str, Any], rule: str, reason: str) -> None:
        await self._refused(AuditEntry(kind="denied", decision="deny", rule=rule,
                                       reason=reason, **base))
        raise PolicyDenied(reason, rule=rule)

    async def _refused(self, entry: AuditEntry) -> None:
        """Record a refusal, unless its tenant is past its refusal rate: then that 429 is
        raised instead, before anything is written."""
        self.refusals.take(entry.tenant)
        await self.audit.append(entry)

    async def _build(self, build: InvocationFor, decision: Decision, base: dict[str, Any]
                     ) -> Invocation:
        """The invocation made once the call is admitted (a user tool's copy is made here);
        a tenant disk quota it runs into is a refusal like the admission's."""
        try:
            built = build(decision)
            return await built if inspect.isawaitable(built) else built
        except DiskQuotaExceeded as exc:
            await self._refused(AuditEntry(kind="denied", decision="deny",
                                           rule="quotas.tenant_disk_mb", reason=exc.message,
                                           **base))
            raise

    async def _run(
        self, subject: Subject, action: Action, invocation: Invocation, decision: Decision,
        base: dict[str, Any], on_output: OutputCallback | None,
    ) -> ExecOutcome:
        exec_id = base["exec_id"]
        if decision.image is None:
            await self._deny(base, f"images[{action.tool}]",
                             f"the policy names no sandbox image for {action.tool!r}")
        assert decision.image is not None
        image = self.resolve_image(decision.image)
        secret_env = await self._secret_env(subject, decision)
        request = ExecRequest(
            image=image, argv=invocation.argv, stdin=invocation.stdin,
            env={**invocation.env, **secret_env},
            workspace=invocation.workspace, workdir=invocation.workdir,
            mounts=invocation.mounts, limits=decision.limits,
            network="egress" if decision.egress_allowlist else "none",
            egress_allowlist=decision.egress_allowlist, exec_id=exec_id,
            tenant=subject.tenant, session=subject.session, uid=subject.sandbox_uid,
        )
        limits = {**decision.limits.model_dump(), "network": decision.network,
                  "egress": decision.egress_allowlist}
        common = {**base, "decision": decision.verdict, "rule": decision.rule, "image": image,
                  "limits": limits}
        # The intent's fsync overlaps the backend's preparation (image, container); the
        # backend awaits it before anything runs in the container (``before_start``), or
        # has the gate start the job on the writer thread as soon as it is durable.
        given = sorted({decision.secrets[env] for env in secret_env})  # names, never values
        gate = StartGate()
        intent_write = asyncio.ensure_future(self.audit.append(AuditEntry(
            kind="intent", reason=decision.reason, tool_hash=action.tool_hash,
            secrets=given or None,
            stdin_sha256=sha256_hex(invocation.stdin), stdin_size=len(invocation.stdin),
            **common), then=gate.open))
        gate.follows(intent_write)
        self._running[exec_id] = subject.session
        # the backend's after-call work (warm container removal and relaunch) waits for the
        # outcome record, so that write is not slowed by engine calls
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            # a call holding secrets streams nothing live: its output is passed on once,
            # redacted (a value split across two chunks could not be caught)
            live = None if secret_env else on_output
            outcome = await self._run_recorded(request, live, intent_write, gate, settled,
                                               exec_id, common, action, decision)
            if secret_env:  # what a tool printed of its secrets is not passed on
                outcome = outcome.model_copy(update={
                    "result": redact(outcome.result, list(secret_env.values()))})
            return outcome
        finally:
            if not settled.done():
                settled.set_result(None)

    async def _run_recorded(
        self, request: ExecRequest, on_output: OutputCallback | None,
        intent_write: asyncio.Future[Any], gate: StartGate, settled: asyncio.Future[None],
        exec_id: str, common: dict[str, Any], action: Action, decision: Decision,
    ) -> ExecOutcome:
        try:
            # hand the intent to the writer thread now, not when the backend first waits:
            # the thread wakes up (≈ 0.3-0.5 ms on a VM) while the backend prepares
            await asyncio.sleep(0)
            result = await self.backend.run(request, on_output, before_start=gate,
                                            settled=settled)
        except asyncio.CancelledError:
            await asyncio.shield(self._cancelled(exec_id, common, intent_write))
            raise
        except Exception as exc:
            if (failed := await _failure_of(intent_write)) is not None:
                raise failed from None  # no intent: nothing ran, nothing to close
            detail = exc.code if isinstance(exc, NaviError) else type(exc).__name__
            await self.audit.append(AuditEntry(kind="outcome", detail=f"error: {detail}",
                                               **common), durable=False)
            raise
        finally:
            self._running.pop(exec_id, None)
        intent = await intent_write  # the backend awaited it before the container ran
        why = self._killed.pop(exec_id, None)
        record = await self.audit.append(AuditEntry(
            kind="outcome", image_digest=result.image_digest, exit_code=result.exit_code,
            timed_out=result.timed_out, oom_killed=result.oom_killed,
            truncated=result.truncated, stdout_sha256=sha256_hex(result.stdout),
            stdout_size=result.stdout_size or len(result.stdout),
            stderr_sha256=sha256_hex(result.stderr),
            stderr_size=result.stderr_size or len(result.stderr),
            duration_ms=result.duration_ms, detail=_outcome_detail(why, result), **common),
            durable=False)  # group commit: fsync'd with the next intent, or within 50 ms
        after_this_step(log.info, "exec_done", tool=action.tool, exit_code=result.exit_code,
                        duration_ms=result.duration_ms, audit_seq=record.seq)
        return ExecOutcome(result=result, decision=decision, exec_id=exec_id,
                           audit_seq=record.seq, intent_seq=intent.seq,
                           timeout_s=decision.limits.timeout_s)

    async def _secret_env(self, subject: Subject, decision: Decision) -> dict[str, str]:
        """ENV_VAR -> value of the secrets the decision grants that the tenant has."""
        if not decision.secrets or self.secrets is None:
            return {}
        values = await self.secrets.values(subject.tenant, sorted(set(decision.secrets.values())))
        return {env: values[name] for env, name in decision.secrets.items() if name in values}

    async def _cancelled(
        self, exec_id: str, common: dict[str, Any], intent_write: asyncio.Future[Any]
    ) -> None:
        if await _failure_of(intent_write) is None:
            await self._interrupted(exec_id, common, "cancelled")
            return
        try:  # no intent, so nothing ran and there is nothing to close; just make sure
            await self.backend.kill(exec_id)
        except Exception as exc:  # the reaper removes what a failed kill leaves
            log.warning("exec_kill_failed", error=str(exc))

    async def _interrupted(self, exec_id: str, common: dict[str, Any], why: str) -> None:
        try:
            await self.backend.kill(exec_id)
        except Exception as exc:  # the reaper removes what a failed kill leaves
            log.warning("exec_kill_failed", error=str(exc))
        self._killed.pop(exec_id, None)
        await self.audit.append(AuditEntry(kind="interrupted", detail=why, **common))

    def _with_memory(self, subject: Subject, action: Action) -> Action:
        update: dict[str, Any] = {}
        key = (subject.tenant, action.tool)
        if "first_use" not in action.model_fields_set:
            update["first_use"] = key not in self._used
        if "approved_hash" not in action.model_fields_set:
            update["approved_hash"] = self._approved_hash.get(key)
        return action.model_copy(update=update) if update else action

    # -- cancellation -------------------------------------------------------------------------

    def running(self, session: str | None = None) -> list[str]:
        return [e for e, s in self._running.items() if session is None or s == session]

    async def kill(self, exec_id: str, reason: str = "killed by request") -> bool:
        """Kill a running execution; False when it is not running (here)."""
        if exec_id not in self._running:
            return False
        self._killed[exec_id] = reason
        await self.backend.kill(exec_id)
        return True

    async def cancel_session(self, session: str) -> None:
        for exec_id in self.running(session):
            await self.kill(exec_id, "session closed")

    async def kill_all(self, reason: str) -> None:
        for exec_id in self.running():
            await self.kill(exec_id, reason)


async def _failure_of(write: asyncio.Future[Any]) -> BaseException | None:
    """Wait for an audit write; its exception, or None once it is durable."""
    try:
        await asyncio.shield(write)
    except Exception as exc:
        return exc
    return None
