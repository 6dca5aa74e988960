"""Whether a process may start: arguments, the policy's decision, counts, ports.

Refusals are audited like a call's (rule named) before they are raised; counts are checked
and a place held in one step on the event loop, so two starts racing for the last place
cannot both get it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime.audit.records import AuditEntry, digest_json
from runtime.errors import InvalidInput, PolicyDenied, PortInUse, QuotaExceeded
from runtime.policy.decision import Action, Decision, Subject
from runtime.policy.session_limits import SessionLimits
from runtime.processes.models import StartSpec

if TYPE_CHECKING:
    from runtime.executor import Approver
    from runtime.processes.deps import ProcessDeps

WORKDIR = "/workspace"
RETRY_AFTER_S = 5


def check_cwd(cwd: str | None) -> str:
    """``/workspace`` or a directory below it or below ``/tmp``; relative: below /workspace."""
    if cwd is None or cwd.strip() in ("", ".", "/workspace", "/workspace/"):
        return WORKDIR
    if "\x00" in cwd:
        raise InvalidInput("cwd contains a NUL byte")
    path = cwd if cwd.startswith("/") else f"{WORKDIR}/{cwd}"
    normal = posixpath.normpath(path)
    if ".." in path.split("/") or not (normal == "/tmp" or normal.startswith(("/tmp/",
                                                                            WORKDIR + "/"))):
        raise InvalidInput(f"cwd {cwd[:200]!r} must be /workspace, /tmp or a directory below "
                           "them")
    return normal


def check_ports(ports: list[int]) -> list[int]:
    for port in ports:
        if not 1024 <= port <= 65535:
            raise InvalidInput(f"port {port} is outside 1024-65535")
    if len(set(ports)) != len(ports):
        raise InvalidInput("a port is declared twice")
    return sorted(ports)


@dataclass
class Places:
    """Processes starting or running, per session and per tenant (held in memory: a
    restarted server counts again from its records)."""

    sessions: dict[str, set[str]] = field(default_factory=dict)
    tenants: dict[str, set[str]] = field(default_factory=dict)
    ports: dict[str, dict[int, str]] = field(default_factory=dict)  # session -> port -> id

    def hold(self, tenant: str, session: str, process_id: str, ports: list[int]) -> None:
        self.sessions.setdefault(session, set()).add(process_id)
        self.tenants.setdefault(tenant, set()).add(process_id)
        taken = self.ports.setdefault(session, {})
        for port in ports:
            taken[port] = process_id

    def free(self, tenant: str, session: str, process_id: str) -> None:
        self.sessions.get(session, set()).discard(process_id)
        self.tenants.get(tenant, set()).discard(process_id)
        taken = self.ports.get(session, {})
        for port in [p for p, owner in taken.items() if owner == process_id]:
            del taken[port]


class Admission:
    def __init__(self, services: ProcessDeps) -> None:
        self.services = services
        self.places = Places()

    async def decide(self, subject: Subject, spec: StartSpec, approver: Approver | None
                     ) -> tuple[Decision, SessionLimits]:
        """The policy's decision for ``spec.tool`` (denials audited, asks resolved) and the
        session's limits; ``ports`` need ``limits.ports``."""
        executor = self.services.executor
        args = {"command": spec.command, "cwd": spec.cwd, "ports": spec.ports,
                "name": spec.name}
        decision = await executor.authorize(
            subject, Action(tool=spec.tool, args=args, group="group:exec"), approver=approver)
        limits = self.services.policy.session_limits(subject)
        if spec.ports and not limits.ports:
            await self.refuse(subject, spec, limits.ports_rule,
                              "the policy does not let this session's processes declare "
                              "ports", PolicyDenied)
        return decision, limits

    async def hold(self, subject: Subject, spec: StartSpec, limits: SessionLimits,
                   process_id: str) -> None:
        """Hold a place for the process (``free`` it when it ends), or refuse."""
        places = self.places
        quotas = self.services.policy.quotas(subject.policy_tenant)
        in_session = len(places.sessions.get(subject.session, ()))
        if in_session >= limits.processes.max_per_session:
            await self.refuse(subject, spec, "limits.processes.max_per_session",
                              f"the session runs {in_session} processes, its limit "
                              "(limits.processes.max_per_session)", QuotaExceeded,
                              quota="max_per_session")
        in_tenant = len(places.tenants.get(subject.tenant, ()))
        if in_tenant >= quotas.processes_per_tenant:
            await self.refuse(subject, spec, "quotas.processes_per_tenant",
                              f"the tenant runs {in_tenant} processes, its quota "
                              "(quotas.processes_per_tenant)", QuotaExceeded,
                              quota="processes_per_tenant")
        taken = places.ports.get(subject.session, {})
        clash = sorted(p for p in spec.ports if p in taken)
        if clash:
            raise PortInUse(f"port {clash[0]} is declared by running process "
                            f"{taken[clash[0]]} of this session", port=clash[0],
                            process_id=taken[clash[0]])
        places.hold(subject.tenant, subject.session, process_id, spec.ports)

    async def refuse(self, subject: Subject, spec: StartSpec, rule: str, reason: str,
                     error: type[PolicyDenied] | type[QuotaExceeded], **details: str
                     ) -> None:
        """Audit the refusal (unless its tenant is past its refusal rate), then raise."""
        sha, size = digest_json({"command": spec.command})
        await self.services.executor.admission.refused(AuditEntry(
            kind="denied", decision="deny", rule=rule, reason=reason, tenant=subject.tenant,
            user=subject.user, session=subject.session, tool=spec.tool, args_sha256=sha,
            args_size=size, node=subject.node))
        if error is QuotaExceeded:
            raise QuotaExceeded(reason, retry_after=RETRY_AFTER_S, **details)
        raise PolicyDenied(reason, rule=rule)
