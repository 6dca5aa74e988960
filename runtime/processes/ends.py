"""How a process ends, whatever ends it, and what happens then (once).

A process ends by itself (``exited``, or ``oom`` when the kernel killed it for memory) or is
ended: ``stopped`` (a caller), ``lifetime`` (``limits.processes.max_lifetime_s``),
``session_ended``, ``revoked`` (the token that started it was revoked or expired),
``interrupted`` (the server shut down). Ending sends TERM (or the asked signal), then KILL
after the grace. Then, in this order: the record is closed (exit code, reason, output
bytes), the last output is published, ``process.exit`` is audited (exit code, reason,
bytes of output, duration), ``process_exited`` is published, the container is removed,
the egress proxy closed and the session's lease given back, the end hooks run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.audit.records import AuditEntry
from runtime.events import ProcessExited
from runtime.logging import get_logger
from runtime.processes.container import ProcessContainers
from runtime.processes.deps import TokenRef
from runtime.processes.live import LiveProcess
from runtime.processes.models import ProcessRecord
from runtime.processes.outlog import OutputLog
from runtime.sandbox.docker.backend import DockerBackend

if TYPE_CHECKING:
    from runtime.processes.table import ProcessTable

log = get_logger(__name__)

KILL_AFTER_S = 5.0


class Ends:
    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self._containers: ProcessContainers | None = None

    @property
    def containers(self) -> ProcessContainers:
        if self._containers is None:
            self._containers = ProcessContainers(self.table.docker())
        return self._containers

    def containers_for(self, backend: DockerBackend) -> ProcessContainers:
        if self._containers is None or self._containers.backend is not backend:
            self._containers = ProcessContainers(backend)
        return self._containers

    def _engine(self) -> ProcessContainers:
        return self.containers

    async def signal(self, live: LiveProcess, signal: str) -> None:
        """``SIG<signal>`` to its container, on this machine or on its node."""
        await live.send_signal(self._engine, signal)

    def log_path(self, record: ProcessRecord) -> Path:
        return self.table.logs_dir / record.tenant_id / record.session_id / \
            f"{record.id}.log"

    def log_of(self, record: ProcessRecord) -> OutputLog:
        """The process's log (the live one's, else opened; blocking)."""
        live = self.table.live.get(record.id)
        if live is not None:
            return live.outlog
        return OutputLog(self.log_path(record))

    # -- watching -----------------------------------------------------------------------------

    def watch(self, live: LiveProcess, lifetime_s: float) -> None:
        """Follow ``live`` to its end: its output, its lifetime, its token."""
        self.table.live[live.id] = live
        pump = live.start_pump()
        live.tasks.append(asyncio.ensure_future(self._after(live, pump)))
        left = max(0.0, lifetime_s - live.age_s())
        live.tasks.append(asyncio.ensure_future(self._limit(live, left)))
        record = live.record
        if record.token_id and record.token_id != "local":
            principal = TokenRef(token_id=record.token_id, tenant_id=record.tenant_id,
                                 expires_at=record.token_expires_at)
            live.tasks.append(asyncio.ensure_future(self._token(live, principal)))

    async def _limit(self, live: LiveProcess, after_s: float) -> None:
        await asyncio.sleep(after_s)
        await self.stop(live, "lifetime", "TERM")

    async def _token(self, live: LiveProcess, principal: TokenRef) -> None:
        await self.table.services.token_watch.ended(principal)
        await self.stop(live, "revoked", "TERM")

    async def _after(self, live: LiveProcess, pump: asyncio.Future[None]) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(pump)
        await asyncio.shield(self._ended(live))

    # -- ending -------------------------------------------------------------------------------

    async def stop(self, live: LiveProcess, reason: str, signal: str,
                   grace_s: float = KILL_AFTER_S) -> None:
        """End ``live`` (the first reason given is the one recorded); returns once ended."""
        if live.done.done():
            await asyncio.shield(live.gone)
            return
        if live.ending is None:
            live.ending = reason
        with contextlib.suppress(Exception):
            await self.signal(live, signal)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(live.done), grace_s)
            await asyncio.shield(live.gone)
            return
        with contextlib.suppress(Exception):
            await self.signal(live, "KILL")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(live.done), KILL_AFTER_S)
            await asyncio.shield(live.gone)
            return
        live.close_stream()  # an engine that does not answer: end our side
        await asyncio.shield(live.gone)

    async def detach(self, live: LiveProcess) -> None:
        """Leave it running for the next server (shutdown with keep): stop reading."""
        live.detached = True
        live.close_stream()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(live.gone), 5.0)

    def _release(self, live: LiveProcess) -> None:
        record = live.record
        self.table.live.pop(record.id, None)
        self.table.places.free(record.tenant_id, record.session_id, record.id)

    async def _ended(self, live: LiveProcess) -> None:
        table = self.table
        record = live.record
        try:
            if live.detached:
                return
            state = await live.exit_state(self._engine) or {}
            code = state.get("ExitCode")
            reason = live.ending or ("oom" if state.get("OOMKilled") else "exited")
            closed = await table.records.close(record.id, exit_code=code, reason=reason,
                                                 output_bytes=live.outlog.end)
            live.record = closed or record
            self._release(live)  # its place is free once its record says it ended
            live.finish()  # the last output goes out before the exit event
            with contextlib.suppress(Exception):
                await table.services.audit.append(AuditEntry(
                    kind="action", action="process.exit", object=record.id,
                    tenant=record.tenant_id, user=record.token_id,
                    session=record.session_id, exec_id=record.id, exit_code=code,
                    oom_killed=bool(state.get("OOMKilled")), stdout_size=live.outlog.end,
                    duration_ms=int((time.time() - record.started_at) * 1000),
                    decision="allow", detail=f"reason {reason}", node=record.node))
            table.services.hub.bus(record.session_id).publish(ProcessExited(
                process_id=record.id, exit_code=code, reason=reason))
            await live.remove_container(self._engine)
        except Exception as exc:
            log.error("process_end_failed", process=record.id, error=str(exc))
        finally:
            self._release(live)
            live.finish()
            for close in reversed(live.closers):
                with contextlib.suppress(Exception):
                    await close()
            await asyncio.to_thread(live.outlog.close)
            if not live.gone.done():
                live.gone.set_result(None)
        if live.detached:
            return
        for hook in table.on_end:
            with contextlib.suppress(Exception):
                await hook(live.record.public())
