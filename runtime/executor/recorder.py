"""The run itself, written ahead: intent (fsync'd) -> backend.run -> outcome.

The backend prepares (resolves the image, creates or takes a container) while the intent is
being fsync'd, and starts the job only once it is durable (``before_start``, a `StartGate`
the audit writer opens on its own thread). The outcome is committed with the next intent's
fsync or within 50 ms. A run cancelled or killed, or whose cluster node was lost under it,
is closed by an ``interrupted`` record; another backend failure by an outcome naming the
error; an intent that could not be written means nothing ran (``AuditUnavailable``, nothing
to close).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from runtime.audit.records import AuditEntry, sha256_hex
from runtime.audit.store import AuditLog
from runtime.errors import NaviError
from runtime.executor.outcome import ExecOutcome, Invocation
from runtime.logging import after_this_step, get_logger
from runtime.policy.decision import Action, Decision, Subject
from runtime.sandbox.backend import OutputCallback, SandboxBackend, StartGate
from runtime.sandbox.models import ExecRequest, ExecResult

log = get_logger("runtime.executor")

Deny = Callable[[dict[str, Any], str, str], Awaitable[None]]
"""`Admission.deny`: audit a refusal, then raise `PolicyDenied`."""


class SecretSource(Protocol):
    async def values(self, tenant_id: str, names: list[str]) -> dict[str, str]: ...


REDACTED = b"[secret]"
NODE_LOST = "node_unavailable"  # the code of runtime.errors.NodeUnavailable


def redact(result: ExecResult, values: list[str]) -> ExecResult:
    """The result with every secret value in its output replaced (live output already
    streamed is the tool's own: see README, "Secrets for tools")."""
    out, err = result.stdout, result.stderr
    for value in sorted(values, key=len, reverse=True):
        raw = value.encode("utf-8")
        if raw:
            out, err = out.replace(raw, REDACTED), err.replace(raw, REDACTED)
    return result.model_copy(update={"stdout": out, "stderr": err})


class Recorder:
    """Runs admitted calls on the backend, each between its intent and its outcome."""

    def __init__(self, *, backend: SandboxBackend, audit: AuditLog,
                 resolve_image: Callable[[str], str], secrets: SecretSource | None) -> None:
        self.backend = backend
        self.audit = audit
        self.resolve_image = resolve_image
        self.secrets = secrets
        self.running: dict[str, str] = {}  # exec_id -> session
        # the session's running ports, listened on in the call's container (runtime.ports)
        self.for_call: Callable[[str, Invocation], Invocation] | None = None
        self.killed: dict[str, str] = {}  # exec_id -> why

    async def run(
        self, subject: Subject, action: Action, invocation: Invocation, decision: Decision,
        base: dict[str, Any], on_output: OutputCallback | None, deny: Deny,
    ) -> ExecOutcome:
        exec_id = base["exec_id"]
        if decision.image is None:
            await deny(base, f"images[{action.tool}]",
                       f"the policy names no sandbox image for {action.tool!r}")
        assert decision.image is not None
        image = self.resolve_image(decision.image)
        secret_env = await self._secret_env(subject, decision)
        held = list(secret_env.values())
        stdin = invocation.stdin
        if decision.stdin_secret is not None:  # ssh_exec's key: `<length>\n<value>` + stdin
            value = (await self._values(subject, [decision.stdin_secret])).get(
                decision.stdin_secret, "")
            raw = value.encode("utf-8")
            stdin = b"%d\n" % len(raw) + raw + stdin
            held += [value] if value else []
        if self.for_call is not None and subject.node == "local":
            invocation = self.for_call(subject.session, invocation)
        request = ExecRequest(
            **{**{name: getattr(invocation, name) for name in Invocation.model_fields},
               "env": {**invocation.env, **secret_env}, "stdin": stdin},
            image=image, limits=decision.limits,
            network="egress" if decision.egress_allowlist else "none",
            egress_allowlist=decision.egress_allowlist, exec_id=exec_id,
            tenant=subject.tenant, session=subject.session, node=subject.node,
            uid=subject.sandbox_uid,
        )
        limits = {**decision.limits.model_dump(), "network": decision.network,
                  "egress": decision.egress_allowlist}
        common = {**base, "decision": decision.verdict, "rule": decision.rule, "image": image,
                  "limits": limits}
        # The intent's fsync overlaps the backend's preparation (image, container); the
        # backend awaits it before anything runs in the container (``before_start``), or
        # has the gate start the job on the writer thread as soon as it is durable.
        given = sorted({decision.secrets[env] for env in secret_env}  # names, never values
                       | ({decision.stdin_secret} if decision.stdin_secret else set()))
        gate = StartGate()
        intent_write = asyncio.ensure_future(self.audit.append(AuditEntry(
            kind="intent", reason=decision.reason, tool_hash=action.tool_hash,
            secrets=given or None,
            stdin_sha256=sha256_hex(invocation.stdin), stdin_size=len(invocation.stdin),
            **common), then=gate.open))
        gate.follows(intent_write)
        self.running[exec_id] = subject.session
        # the backend's after-call work (warm container removal and relaunch) waits for the
        # outcome record, so that write is not slowed by engine calls
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            # a call holding secrets streams nothing live: its output is passed on once,
            # redacted (a value split across two chunks could not be caught)
            live = None if held else on_output
            outcome = await self._recorded(request, live, intent_write, gate, settled,
                                           exec_id, common, action, decision)
            if held:  # what a tool printed of its secrets is not passed on
                outcome = outcome.model_copy(update={"result": redact(outcome.result, held)})
            return outcome
        finally:
            if not settled.done():
                settled.set_result(None)

    async def _recorded(
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
            if detail == NODE_LOST:  # the node died under the call: it did not end, it stopped
                await self.audit.append(AuditEntry(kind="interrupted", detail=f"{exc}",
                                                   **common))
                raise
            await self.audit.append(AuditEntry(kind="outcome", detail=f"error: {detail}",
                                               **common), durable=False)
            raise
        finally:
            self.running.pop(exec_id, None)
        intent = await intent_write  # the backend awaited it before the container ran
        why = self.killed.pop(exec_id, None)
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
                           timeout_s=decision.limits.timeout_s, node=common["node"])

    async def _secret_env(self, subject: Subject, decision: Decision) -> dict[str, str]:
        """ENV_VAR -> value of the secrets the decision grants that the tenant has."""
        if not decision.secrets:
            return {}
        values = await self._values(subject, sorted(set(decision.secrets.values())))
        return {env: values[name] for env, name in decision.secrets.items() if name in values}

    async def _values(self, subject: Subject, names: list[str]) -> dict[str, str]:
        if self.secrets is None:
            return {}
        return await self.secrets.values(subject.tenant, names)

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
        self.killed.pop(exec_id, None)
        await self.audit.append(AuditEntry(kind="interrupted", detail=why, **common))

    async def kill(self, exec_id: str, reason: str) -> bool:
        """Kill a running execution; False when it is not running (here)."""
        if exec_id not in self.running:
            return False
        self.killed[exec_id] = reason
        await self.backend.kill(exec_id)
        return True


def _outcome_detail(killed: str | None, result: ExecResult) -> str | None:
    parts = [f"killed: {killed}"] if killed else []
    if result.egress is not None:
        parts.append(result.egress.summary())
    return "; ".join(parts) or None


async def _failure_of(write: asyncio.Future[Any]) -> BaseException | None:
    """Wait for an audit write; its exception, or None once it is durable."""
    try:
        await asyncio.shield(write)
    except Exception as exc:
        return exc
    return None
