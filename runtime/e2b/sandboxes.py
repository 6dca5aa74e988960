"""E2B sandboxes as Navi sessions: create, connect, show, list, set the timeout, kill, and
the timeout reaper.

A sandbox is a session of the key's tenant made through `/e2b` (opened by the one session
path, so quotas, profiles and the `session.create` audit record apply as for `/v1`); the
template picks what it offers (`base`: commands and files; `code-interpreter-v1`: the same
plus a Python kernel). Only sessions made here are sandboxes: `/v1` sessions are never
listed, killed or timed out through `/e2b`. When its deadline passes the reaper deletes it
like `kill()` does, audited `session.delete` with detail `reason timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.e2b.bounds import MAX_ENVS, MAX_METADATA, check_map
from runtime.e2b.home import add_home_hook
from runtime.e2b.store import SandboxRecord, SandboxStore
from runtime.errors import NotFound
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.sessions.lifecycle import end_session, open_session
from runtime.sessions.principal import Principal, subject_for
from runtime.store.ids import TenantId

if TYPE_CHECKING:
    from runtime.e2b.deps import BridgeDeps

log = get_logger(__name__)

ENVD_VERSION = "0.5.7"  # the envd features Navi implements (see docs/e2b.md)
TEMPLATES = ("base", "code-interpreter-v1")
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600
REAP_EVERY_S = 1.0


class NewSandbox(BaseModel):
    """`POST /v2/sandboxes`; what Navi does not use (autoPause, network, mcp...) is ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    templateID: str = Field(max_length=128)
    timeout: int = Field(DEFAULT_TIMEOUT_S, ge=0, le=MAX_TIMEOUT_S)
    metadata: dict[str, str] | None = None
    envVars: dict[str, str] | None = None
    allow_internet_access: bool | None = Field(None, alias="allowInternetAccess")


class TimeoutBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int = Field(DEFAULT_TIMEOUT_S, ge=0, le=MAX_TIMEOUT_S)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class Sandboxes:
    """The control side's operations (the routes only parse and answer)."""

    def __init__(self, services: BridgeDeps) -> None:
        self.services = services
        self.store = SandboxStore(services.store)

    async def create(self, principal: Principal, body: NewSandbox) -> dict[str, Any]:
        if body.templateID not in TEMPLATES:
            raise NotFound(f"template {body.templateID!r} not found: Navi offers "
                           f"{', '.join(TEMPLATES)}")
        metadata = check_map("metadata", body.metadata, MAX_METADATA)
        envs = check_map("envVars", body.envVars, MAX_ENVS)
        await self._meter(principal, None, "e2b.create")
        session = await open_session(self.services, principal,
                                     title=f"E2B sandbox ({body.templateID})")
        started = time.time()
        record = SandboxRecord(session_id=session.id, tenant_id=principal.tenant_id,
                               template=body.templateID, metadata=metadata, envs=envs,
                               started_at=started, end_at=started + body.timeout)
        try:
            await self.store.create(record)
        except BaseException:
            with contextlib.suppress(Exception):
                await end_session(self.services, session)
            raise
        return await self._handout(principal, record)

    async def _meter(self, principal: Principal, sandbox_id: str | None, what: str) -> None:
        """What arrives through /e2b is held to the tenant's change rate (429 past it)."""
        session = None if sandbox_id is None else await self.services.store.get_session(
            principal.tenant_id, sandbox_id)
        subject = await subject_for(self.services, principal, session)
        await self.services.executor.meter_change(subject, what)

    async def _handout(self, principal: Principal, record: SandboxRecord) -> dict[str, Any]:
        """The create/connect answer: fresh access tokens bound to this key."""
        envd = await self.store.issue(record.session_id, principal.token_id, "envd")
        traffic = await self.store.issue(record.session_id, principal.token_id, "traffic")
        return {"templateID": record.template, "sandboxID": record.session_id,
                "alias": record.template, "clientID": "navi", "envdVersion": ENVD_VERSION,
                "envdAccessToken": envd, "trafficAccessToken": traffic, "domain": None}

    async def get(self, principal: Principal, sandbox_id: str) -> SandboxRecord:
        record = await self.store.get(principal.tenant_id, sandbox_id)
        if record is None:
            raise NotFound(f"sandbox {sandbox_id} not found")
        return record

    async def connect(self, principal: Principal, sandbox_id: str, timeout: int
                      ) -> dict[str, Any]:
        record = await self.get(principal, sandbox_id)
        await self._meter(principal, sandbox_id, "e2b.connect")
        end_at = max(record.end_at, time.time() + timeout)
        await self.store.set_end(sandbox_id, end_at)
        return await self._handout(principal, record.model_copy(update={"end_at": end_at}))

    async def set_timeout(self, principal: Principal, sandbox_id: str, timeout: int) -> None:
        await self.get(principal, sandbox_id)
        await self._meter(principal, sandbox_id, "e2b.timeout")
        await self.store.set_end(sandbox_id, time.time() + timeout)

    async def kill(self, principal: Principal, sandbox_id: str) -> None:
        await self.get(principal, sandbox_id)
        session = await self.services.store.get_session(principal.tenant_id, sandbox_id)
        if session is None:
            raise NotFound(f"sandbox {sandbox_id} not found")
        subject = await subject_for(self.services, principal, session)
        await self.services.executor.meter_change(subject, "e2b.kill")
        await self.services.executor.record_action(subject, "session.delete", sandbox_id,
                                                   rule=f"roles.{principal.role}",
                                                   detail="e2b kill")
        await end_session(self.services, session)

    async def detail(self, principal: Principal, sandbox_id: str) -> dict[str, Any]:
        record = await self.get(principal, sandbox_id)
        return await self.listed(record)

    async def listed(self, record: SandboxRecord) -> dict[str, Any]:
        session = await self.services.store.get_session(record.tenant_id, record.session_id)
        profile = session.profile if session is not None else "developer"
        limits = self.services.policy.policy.profiles.get(profile)
        spec = limits.limits if limits is not None else None
        tenant = TenantId(record.tenant_id)
        quotas = self.services.policy.quotas(await self.services.tenants.name(tenant))
        return {"templateID": record.template, "alias": record.template,
                "sandboxID": record.session_id, "clientID": "navi",
                "startedAt": iso(record.started_at), "endAt": iso(record.end_at),
                "envdVersion": ENVD_VERSION,
                "cpuCount": max(1, int(spec.cpus if spec and spec.cpus else 1)),
                "memoryMB": (spec.memory_mb if spec and spec.memory_mb else 512),
                "diskSizeMB": quotas.session_disk_mb, "state": "running",
                "metadata": record.metadata}

    async def list(self, principal: Principal) -> list[SandboxRecord]:
        return await self.store.of_tenant(principal.tenant_id)

    # -- the timeout ---------------------------------------------------------------------

    async def reap_once(self) -> int:
        """Delete every sandbox past its deadline (audited as the timeout's doing)."""
        ended = 0
        for record in await self.store.expired(time.time()):
            session = await self.services.store.get_session(record.tenant_id, record.session_id)
            if session is None:
                continue
            tenant = TenantId(record.tenant_id)
            subject = Subject(tenant=tenant, tenant_name=await self.services.tenants.name(tenant),
                              role="user", user="system:e2b-timeout", profile=session.profile,
                              session=session.id, node=session.node)
            try:
                await self.services.executor.record_action(
                    subject, "session.delete", session.id, rule="e2b.timeout",
                    detail="reason timeout")
                await end_session(self.services, session)
                ended += 1
            except Exception as exc:  # the next round tries again
                log.warning("e2b_timeout_failed", session=session.id, error=str(exc))
        await self.store.forget_orphans(time.time())
        return ended

    async def reap_forever(self, every_s: float = REAP_EVERY_S) -> None:
        """The timeout reaper (a background task of the app); it also hooks the process
        service once, so sandboxes' commands see /home/user."""
        add_home_hook(self.services)
        while True:
            try:
                await self.reap_once()
            except Exception as exc:
                log.warning("e2b_reaper_failed", error=str(exc))
            await asyncio.sleep(every_s)
