"""`ProcessService`: a session's background processes, the one path for the API, the tools
and the E2B bridge.

Start, in order: the policy decides (`admit.py`; denials audited) -> a place is held
(limits, quotas, ports) -> the record is written -> ``process.start`` is audited (command's
SHA-256, cwd, ports, rule) -> the session's lease is taken (its disk stays mounted and the
session counts as in use: never released idle, no restore under it) -> the egress proxy,
if the policy grants egress -> the container is created, attached and started
(`container.py`) -> `process_started`. The end (`ends.py`) closes the record, audits
``process.exit``, publishes `process_exited`, removes the container and gives the lease back.

Other kinds of background work (sub-agents: ``kind: "agent"``) register a `ProcessKind`
and are listed, read, waited for and stopped through the same calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

from runtime.audit.records import AuditEntry, sha256_hex
from runtime.errors import Conflict, InvalidInput, NotFound
from runtime.events import ProcessStarted
from runtime.nodes.base import LOCAL
from runtime.policy.decision import Decision, Subject
from runtime.policy.session_limits import SessionLimits
from runtime.processes.admit import Admission, check_cwd, check_ports
from runtime.processes.adopt import adopt_all
from runtime.processes.adopt_node import adopt_on_nodes
from runtime.processes.ends import Ends
from runtime.processes.kinds import ProcessKind
from runtime.processes.launch import launch
from runtime.processes.live import LiveProcess
from runtime.processes.models import (
    MAX_ANSWER,
    OutputPiece,
    ProcessInfo,
    ProcessOutput,
    ProcessRecord,
    SignalName,
    StartSpec,
    Stream,
    WaitResult,
)
from runtime.processes.monitor import wait_for
from runtime.processes.on_node import launch_on_node
from runtime.processes.records import ProcessStore
from runtime.processes.table import EndHook, LaunchHook, ProcessTable

if TYPE_CHECKING:
    from runtime.executor import Approver
    from runtime.processes.deps import ProcessDeps

PREFIX = "p_"


class ProcessService:
    def __init__(self, services: ProcessDeps) -> None:
        self.services = services
        self.records = ProcessStore(services.store)
        self.admission = Admission(services)
        self.logs_dir = services.settings.data_dir / "processes"
        self.table = ProcessTable(services=services, records=self.records,
                                  places=self.admission.places, logs_dir=self.logs_dir)
        self.live: dict[str, LiveProcess] = self.table.live  # the same objects, shared
        self.launch_hooks: list[LaunchHook] = self.table.launch_hooks
        self.on_end: list[EndHook] = self.table.on_end
        self.kinds: dict[str, ProcessKind] = {}
        self.ends = Ends(self.table)

    # -- other kinds --------------------------------------------------------------------------

    def register_kind(self, kind: str, provider: ProcessKind) -> None:
        self.kinds[kind] = provider

    def _kind_of(self, process_id: str) -> ProcessKind | None:
        if process_id.startswith(PREFIX):
            return None
        for provider in self.kinds.values():
            if process_id.startswith(provider.prefix):
                return provider
        raise NotFound("no such process")

    # -- start --------------------------------------------------------------------------------

    async def start(self, subject: Subject, spec: StartSpec, *,
                    token_expires_at: float | None = None,
                    approver: Approver | None = None) -> ProcessInfo:
        if subject.node == LOCAL:
            self.table.docker()  # before anything is decided or recorded
        else:
            self.services.nodes.get(subject.node)  # a node not reached: 503, nothing kept
        cwd, ports = check_cwd(spec.cwd), check_ports(spec.ports)
        if "\x00" in spec.command:
            raise InvalidInput("command contains a NUL byte")
        spec = spec.model_copy(update={"cwd": cwd, "ports": ports})
        decision, limits = await self.admission.decide(subject, spec, approver)
        process_id = PREFIX + secrets.token_hex(8)
        await self.admission.hold(subject, spec, limits, process_id)
        try:
            return await self._start(subject, spec, decision, limits, process_id,
                                     token_expires_at)
        except BaseException:
            if process_id not in self.live:
                self.admission.places.free(subject.tenant, subject.session, process_id)
            raise

    async def _start(self, subject: Subject, spec: StartSpec, decision: Decision,
                     limits: SessionLimits, process_id: str, token_expires_at: float | None
                     ) -> ProcessInfo:
        if decision.image is None:
            raise InvalidInput(f"the policy names no sandbox image for {spec.tool!r}")
        if token_expires_at is None:
            token = await self.services.store.get_token(subject.user)
            token_expires_at = token.expires_at if token is not None else None
        record = ProcessRecord(
            id=process_id, name=spec.name, command=spec.command, cwd=spec.cwd or "/workspace",
            state="running", started_at=time.time(), ports=spec.ports, node=subject.node,
            runtime=decision.limits.runtime, tenant_id=subject.tenant,
            session_id=subject.session, token_id=subject.user,
            token_expires_at=token_expires_at)
        await self.services.executor.meter_change(subject, "process.start")  # change rate
        egress = bool(decision.egress_allowlist)
        await self.records.insert(record, egress=egress)
        try:
            await self._audit_start(subject, spec, decision, record, limits.processes
                                    .max_lifetime_s)
            how = launch if subject.node == LOCAL else launch_on_node
            live = await how(self.table, self.ends, subject, spec, decision, record,
                             lifetime_s=limits.processes.max_lifetime_s)
        except BaseException as exc:
            await self.records.close(process_id, exit_code=None, reason="interrupted",
                                     output_bytes=0)
            with contextlib.suppress(Exception):  # its start was recorded: so is its end
                await self.services.audit.append(AuditEntry(
                    kind="action", action="process.exit", object=process_id,
                    tenant=subject.tenant, user=subject.user, session=subject.session,
                    exec_id=process_id, decision="allow", node=subject.node,
                    detail=f"reason interrupted (it did not start: {type(exc).__name__})"))
            raise
        self.services.hub.bus(subject.session).publish(
            ProcessStarted(process=live.record.public().model_dump(mode="json")))
        return live.record.public()

    async def _audit_start(self, subject: Subject, spec: StartSpec, decision: Decision,
                           record: ProcessRecord, lifetime_s: float) -> None:
        raw = spec.command.encode("utf-8", "surrogatepass")
        await self.services.audit.append(AuditEntry(
            kind="action", action="process.start", object=record.id, tenant=subject.tenant,
            user=subject.user, session=subject.session, exec_id=record.id, tool=spec.tool,
            args_sha256=sha256_hex(raw), args_size=len(raw), decision="allow",
            rule=decision.rule, image=decision.image,
            limits={**decision.limits.model_dump(), "network": decision.network,
                    "egress": decision.egress_allowlist, "max_lifetime_s": lifetime_s},
            detail=f"cwd {record.cwd}; ports {record.ports}", node=subject.node))

    # -- reading ------------------------------------------------------------------------------

    async def list(self, subject: Subject) -> list[ProcessInfo]:
        """Every process of the session, oldest first, every kind."""
        rows = await self.records.for_session(subject.tenant, subject.session)
        found = [r.public() for r in rows]
        for provider in self.kinds.values():
            found += await provider.list(subject)
        return sorted(found, key=lambda p: (p.started_at, p.id))

    async def record(self, subject: Subject, process_id: str) -> ProcessRecord:
        if not process_id.startswith(PREFIX) or len(process_id) > 64:
            raise NotFound("no such process")
        found = await self.records.get(subject.tenant, subject.session, process_id)
        if found is None:
            raise NotFound("no such process")
        return found

    async def get(self, subject: Subject, process_id: str) -> ProcessInfo:
        provider = self._kind_of(process_id)
        if provider is not None:
            return await provider.get(subject, process_id)
        return (await self.record(subject, process_id)).public()

    async def output(self, subject: Subject, process_id: str, since: int = 0,
                     max_bytes: int = MAX_ANSWER) -> ProcessOutput:
        provider = self._kind_of(process_id)
        if provider is not None:
            return await provider.output(subject, process_id, since)
        record = await self.record(subject, process_id)
        outlog = self.ends.log_of(record)
        data, after, first = await asyncio.to_thread(
            outlog.read, max(0, since), min(max_bytes, MAX_ANSWER),
            complete=record.state != "running")
        if process_id not in self.live:
            outlog.close()
        return ProcessOutput(output=data.decode("utf-8", "replace"), next=after, first=first,
                             state=record.state, exit_code=record.exit_code)

    async def follow(self, subject: Subject, process_id: str, since: int = 0
                     ) -> AsyncIterator[OutputPiece]:
        """Output from ``since`` as it comes, until the process has ended."""
        record = await self.record(subject, process_id)
        live = self.live.get(record.id)
        if live is not None:
            async for piece in live.follow(since):
                yield piece
            return
        outlog = self.ends.log_of(record)  # an ended process: its log as it is
        try:
            reached = max(0, since)
            while parts := await asyncio.to_thread(outlog.pieces, reached, MAX_ANSWER,
                                                   complete=True):
                for offset, data, stream in parts:
                    yield OutputPiece(offset=offset, data=data, stream=cast(Stream, stream))
                    reached = offset + len(data)
        finally:
            if record.id not in self.live:
                outlog.close()

    async def wait(self, subject: Subject, process_id: str, pattern: str | None = None,
                   timeout_s: float | None = None, since: int = 0) -> WaitResult:
        provider = self._kind_of(process_id)
        if provider is not None:
            return await provider.wait(subject, process_id, pattern, timeout_s)
        record = await self.record(subject, process_id)
        return await wait_for(self.ends, self.record, subject, record, pattern, timeout_s,
                              since)

    def running_ports(self, session_id: str) -> dict[int, str]:
        """port -> process id of the session's running processes (C: the ports proxy)."""
        return dict(self.admission.places.ports.get(session_id, {}))

    def active(self, session_id: str) -> bool:
        return bool(self.admission.places.sessions.get(session_id))

    # -- acting on one ------------------------------------------------------------------------

    def _running(self, record: ProcessRecord) -> LiveProcess:
        live = self.live.get(record.id)
        if live is None or record.state != "running":
            raise Conflict(f"process {record.id} is not running")
        return live

    async def input(self, subject: Subject, process_id: str, data: bytes) -> None:
        record = await self.record(subject, process_id)
        live = self._running(record)
        await self.services.executor.meter_change(subject, "process.input")
        await self.services.audit.append(AuditEntry(
            kind="action", action="process.input", object=record.id, tenant=subject.tenant,
            user=subject.user, session=subject.session, exec_id=record.id,
            stdin_sha256=sha256_hex(data), stdin_size=len(data), decision="allow",
            rule=f"roles.{subject.role}", node=record.node))
        try:
            await asyncio.to_thread(live.write_input, data)
        except OSError as exc:
            raise Conflict(f"process {record.id} does not take input now ({exc}); its stdin "
                           "closes when the server that started it stops") from None

    async def close_stdin(self, subject: Subject, process_id: str) -> None:
        """End the process's input: it reads EOF (E2B's ``stdin=False`` and ``close_stdin``)."""
        record = await self.record(subject, process_id)
        await asyncio.to_thread(self._running(record).close_input)

    async def signal(self, subject: Subject, process_id: str, signal: SignalName) -> None:
        record = await self.record(subject, process_id)
        live = self._running(record)
        await self._audit_signal(subject, record, signal)
        await self.ends.signal(live, signal)

    async def _audit_signal(self, subject: Subject, record: ProcessRecord, signal: str
                            ) -> None:
        await self.services.executor.meter_change(subject, "process.signal")
        await self.services.audit.append(AuditEntry(
            kind="action", action="process.signal", object=record.id, tenant=subject.tenant,
            user=subject.user, session=subject.session, exec_id=record.id,
            decision="allow", rule=f"roles.{subject.role}", detail=f"SIG{signal}",
            node=record.node))

    async def stop(self, subject: Subject, process_id: str,
                   signal: SignalName | None = None) -> ProcessInfo:
        """TERM (or ``signal``), KILL after 5 s; returns once it has ended."""
        provider = self._kind_of(process_id)
        if provider is not None:
            return await provider.stop(subject, process_id)
        record = await self.record(subject, process_id)
        live = self.live.get(record.id)
        if live is not None and record.state == "running":
            await self._audit_signal(subject, record, signal or "TERM")
            await self.ends.stop(live, "stopped", signal or "TERM")
        return (await self.record(subject, process_id)).public()

    # -- sessions and the server ----------------------------------------------------------------

    async def end_session(self, session_id: str) -> None:
        """Stop the session's processes (``session_ended``) and wait for their ends."""
        ending = [live for live in self.live.values() if live.record.session_id == session_id]
        await asyncio.gather(*(self.ends.stop(live, "session_ended", "TERM")
                               for live in ending), return_exceptions=True)
        for provider in self.kinds.values():
            with contextlib.suppress(Exception):
                await provider.end_session(session_id)

    async def adopt(self) -> frozenset[str]:
        """At start-up: adopt or end what the last server left running (see ``adopt.py``);
        the containers kept."""
        return await adopt_all(self.table, self.ends)

    async def adopt_on_nodes(self) -> int:
        """Once the cluster is joined: adopt (or end) what runs on its nodes
        (``adopt_node.py``); how many were adopted."""
        return await adopt_on_nodes(self.table, self.ends)

    async def close(self) -> None:
        """Server shutdown: keep them for the next start (``keep``), else end them
        ``interrupted``."""
        if self.services.settings.process_keep_on_shutdown:
            for live in list(self.live.values()):
                await self.ends.detach(live)
            return
        await asyncio.gather(*(self.ends.stop(live, "interrupted", "TERM", grace_s=2.0)
                               for live in list(self.live.values())), return_exceptions=True)
