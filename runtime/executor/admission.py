"""Admission: whether a call may run, decided and recorded before anything starts.

A tenant's quota slot (`QuotaTracker`), the policy's decision with an `ask` resolved by an
approver (and the first-use / approved-hash memory the policy's `ask` rules read), and an
invocation built after admission (a user tool's copy, which may hit the disk quota). Every
refusal is audited before it is raised, unless its tenant is past its refusal rate
(`RefusalLimiter`: then that 429 is raised instead, and nothing is written).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from runtime.audit.records import AuditEntry, digest_json
from runtime.audit.refusals import RefusalLimiter
from runtime.audit.store import AuditLog
from runtime.errors import DiskQuotaBusy, DiskQuotaExceeded, PolicyDenied, QuotaExceeded
from runtime.executor.outcome import Approver, Invocation, InvocationFor
from runtime.policy.decision import Action, Decision, Subject
from runtime.policy.engine import PolicyEngine
from runtime.policy.quota import QuotaExceededFor, QuotaSlot, QuotaTracker


@dataclass
class Admission:
    """Admits one call at a time for an `Executor` (whose engine, audit log and default
    approver these are), remembering per tenant and tool what was used and approved."""

    engine: PolicyEngine
    audit: AuditLog
    approver: Approver | None
    quotas: QuotaTracker
    refusals: RefusalLimiter
    _used: set[tuple[str, str]] = field(default_factory=set)
    _approved_hash: dict[tuple[str, str], str] = field(default_factory=dict)

    def base(self, subject: Subject, action: Action, exec_id: str | None) -> dict[str, Any]:
        """The fields every audit record of this call carries."""
        args_sha, args_size = digest_json(action.args)
        return {"tenant": subject.tenant, "user": subject.user, "session": subject.session,
                "exec_id": exec_id, "tool": action.tool, "args_sha256": args_sha,
                "args_size": args_size, "parent_turn": subject.parent_turn,
                "node": subject.node}

    def with_memory(self, subject: Subject, action: Action) -> Action:
        """`action` with `first_use` and `approved_hash` filled from what this process has
        seen and approved, unless the caller set them."""
        update: dict[str, Any] = {}
        key = (subject.tenant, action.tool)
        if "first_use" not in action.model_fields_set:
            update["first_use"] = key not in self._used
        if "approved_hash" not in action.model_fields_set:
            update["approved_hash"] = self._approved_hash.get(key)
        return action.model_copy(update=update) if update else action

    async def admit(self, subject: Subject, base: dict[str, Any]) -> QuotaSlot:
        """A quota slot for one run; `QuotaExceeded` (audited, rule `quotas.<quota>`)."""
        try:
            return await self.quotas.admit(subject.tenant,
                                           self.engine.quotas(subject.policy_tenant))
        except QuotaExceeded as exc:
            quota = exc.quota if isinstance(exc, QuotaExceededFor) else "quota"
            await self.refused(AuditEntry(
                kind="denied", decision="deny", rule=f"quotas.{quota}", reason=exc.message,
                **base))
            raise

    async def decide(
        self, subject: Subject, action: Action, base: dict[str, Any], approver: Approver | None
    ) -> Decision:
        decision = self.engine.decide(subject, action)
        if decision.verdict == "deny":
            await self.deny(base, decision.rule, decision.reason)
        if decision.verdict == "ask":
            approve = approver or self.approver
            if approve is None:
                await self.deny(base, decision.rule,
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

    async def deny(self, base: dict[str, Any], rule: str, reason: str) -> None:
        await self.refused(AuditEntry(kind="denied", decision="deny", rule=rule,
                                      reason=reason, **base))
        raise PolicyDenied(reason, rule=rule)

    async def refused(self, entry: AuditEntry) -> None:
        """Record a refusal, unless its tenant is past its refusal rate: then that 429 is
        raised instead, before anything is written."""
        self.refusals.take(entry.tenant)
        await self.audit.append(entry)

    async def build(self, build: InvocationFor, decision: Decision, base: dict[str, Any]
                    ) -> Invocation:
        """The invocation made once the call is admitted (a user tool's copy is made here);
        a tenant disk quota it runs into is a refusal like the admission's."""
        try:
            built = build(decision)
            return await built if inspect.isawaitable(built) else built
        except (DiskQuotaExceeded, DiskQuotaBusy) as exc:
            await self.refused(AuditEntry(kind="denied", decision="deny",
                                          rule="quotas.tenant_disk_mb", reason=exc.message,
                                          **base))
            raise
