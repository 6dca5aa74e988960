"""Sub-agents in the background (`spawn_agent {background: true}`): listed as processes.

The sub-agent's turn runs as a task of its own; the parent's turn goes on (and may end) while
it works. It is one of the session's background processes with `kind: "agent"` and an id
`a_...`: `process_list`/`GET .../processes` list it, `process_output` reads its transcript so
far, `process_stop` cancels it, `process_wait` waits for its answer (or a line matching a
pattern). At most `limits.processes.max_agents_per_session` run at once per session.

Its record is a row of the `processes` table (kind `agent`), written when it starts and
closed when it ends, so it stays listed after a restart: a server that stops ends its
running sub-agents `interrupted`, and one that starts after a crash closes the rows the last
one left running `interrupted` (`recover`). Its transcript is in memory: after a restart its
output says it was lost. Its own todo and notes (`runtime.agent.subagent`) go when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field

from runtime.agent.loop import Turn
from runtime.agent.subagent import EphemeralHistory, SubAgents, run_nested
from runtime.errors import NotFound, QuotaExceeded
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.processes.models import ProcessInfo, ProcessOutput, ProcessRecord, WaitResult
from runtime.processes.monitor import compile_pattern
from runtime.processes.records import KEEP_ENDED, ProcessStore
from runtime.tools.notes_store import NotesStore

log = get_logger(__name__)

PREFIX = "a_"
KIND = "agent"
WAIT_MAX_S = 600.0
LOST = "[its transcript was lost: the server restarted while it ran]\n"


@dataclass
class Running:
    info: ProcessInfo
    tenant: str
    session: str
    history: EphemeralHistory
    task: asyncio.Task[None] | None = None
    answer: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def transcript(self) -> str:
        lines: list[str] = []
        for row in self.history.rows:
            if row.role == "assistant":
                calls = " ".join(f"[called {c.get('name')}]" for c in row.tool_calls)
                lines.append(f"assistant: {row.content} {calls}".rstrip())
            elif row.role in ("user", "tool"):
                lines.append(f"{row.role}: {row.content}")
        if self.info.state == "exited":
            lines.append(f"[ended: {self.info.reason}] {self.answer}".rstrip())
        return "\n".join(lines) + ("\n" if lines else "")


class BackgroundAgents:
    """A `runtime.processes.kinds.ProcessKind` for sub-agents."""

    prefix = PREFIX

    def __init__(self, subagents: SubAgents) -> None:
        self.subagents = subagents
        self._items: dict[str, Running] = {}
        self._closing = False
        services = subagents.services
        self.records = ProcessStore(services.store) if services is not None else None
        if services is not None and services.agent is not None:
            services.agent.closers.append(self.close)

    def _store(self) -> ProcessStore:
        if self.records is None:
            raise NotFound("background sub-agents are not available here")
        return self.records

    async def recover(self) -> int:
        """At start-up: what the last server left running ended with it (`interrupted`)."""
        records = self._store()
        rows = await records.running(KIND)
        for record, _egress in rows:
            await records.close(record.id, exit_code=None, reason="interrupted",
                                output_bytes=0)
            notes = self._notes()
            if notes is not None:
                with contextlib.suppress(Exception):
                    await notes.drop_agent(record.tenant_id, record.session_id, record.id)
        if rows:
            log.info("background_agents_interrupted", count=len(rows))
        return len(rows)

    def _notes(self) -> NotesStore | None:
        services = self.subagents.services
        return getattr(getattr(services, "tools", None), "notes", None)

    def _forget_ended(self) -> None:
        """Keep the transcripts of the newest `KEEP_ENDED` ended sub-agents in memory."""
        ended = sorted((i for i in self._items.values() if i.done.is_set()),
                       key=lambda i: i.info.ended_at or 0)
        for item in ended[:max(0, len(ended) - KEEP_ENDED)]:
            self._items.pop(item.info.id, None)

    async def start(self, parent: Subject, task: str, profile: str | None,
                    parent_turn: str | None, parent_call: str | None) -> str:
        services = self.subagents.services
        limit = (services.policy.session_limits(parent).processes.max_agents_per_session
                 if services is not None else 0)
        running = [r for r in self._items.values()
                   if r.info.state == "running" and r.tenant == parent.tenant
                   and r.session == parent.session]
        if len(running) >= limit:
            raise QuotaExceeded(f"at most {limit} background sub-agents per session "
                                "(limits.processes.max_agents_per_session)", retry_after=5,
                                quota="max_agents_per_session")
        agent_id = PREFIX + secrets.token_hex(8)
        turn, history = await self.subagents.build(parent, task, profile, parent_turn,
                                                   parent_call, agent_id=agent_id)
        record = ProcessRecord(
            id=agent_id, name=f"agent {turn.s.profile.name}", command=task[:200],
            cwd="/workspace", state="running", started_at=time.time(), kind=KIND,
            node=parent.node, tenant_id=parent.tenant, session_id=parent.session,
            token_id=parent.user)
        await self._store().insert(record, egress=False)
        item = Running(record.public(), parent.tenant, parent.session, history)
        self._items[agent_id] = item
        item.task = asyncio.create_task(self._run(item, turn, parent_call),
                                        name=f"background agent {agent_id}")
        return agent_id

    async def _run(self, item: Running, turn: Turn, parent_call: str | None) -> None:
        reason = "exited"
        try:
            stop, answer, _turn_id = await run_nested(turn, parent_call)
            item.answer = answer
            code = 0 if stop in ("stop", "max_iterations", "too_long") else 1
        except asyncio.CancelledError:
            reason, code = ("interrupted" if self._closing else "stopped"), 130
        except Exception as exc:  # a bug must not leave the record running
            log.error("background_agent_failed", agent=item.info.id, exc_info=exc)
            code = 1
        item.info = item.info.model_copy(update={
            "state": "exited", "exit_code": code, "reason": reason, "ended_at": time.time()})
        with contextlib.suppress(Exception):
            await asyncio.shield(self._store().close(
                item.info.id, exit_code=code, reason=reason,
                output_bytes=len(item.transcript().encode())))
        item.done.set()
        self._forget_ended()

    async def _record(self, subject: Subject, process_id: str) -> ProcessRecord:
        found = (await self._store().get(subject.tenant, subject.session, process_id)
                 if len(process_id) <= 64 else None)
        if found is None or found.kind != KIND:
            raise NotFound(f"no process {process_id!r} in this session")
        return found

    def _live(self, subject: Subject, process_id: str) -> Running | None:
        item = self._items.get(process_id)
        if item is None or item.tenant != subject.tenant or item.session != subject.session:
            return None
        return item

    async def list(self, subject: Subject) -> list[ProcessInfo]:
        rows = await self._store().for_session(subject.tenant, subject.session, KIND)
        return [self._items[r.id].info if r.id in self._items else r.public() for r in rows]

    async def get(self, subject: Subject, process_id: str) -> ProcessInfo:
        item = self._live(subject, process_id)
        return item.info if item is not None else (await self._record(subject, process_id)
                                                   ).public()

    async def output(self, subject: Subject, process_id: str, since: int) -> ProcessOutput:
        item = self._live(subject, process_id)
        if item is None:  # a sub-agent of a server before this one
            info = (await self._record(subject, process_id)).public()
            text = LOST + f"[ended: {info.reason}]\n"
        else:
            info, text = item.info, item.transcript()
        data = text.encode()
        start = min(max(0, since), len(data))
        return ProcessOutput(output=data[start:].decode(errors="replace"), next=len(data),
                             first=0, state=info.state, exit_code=info.exit_code)

    async def stop(self, subject: Subject, process_id: str) -> ProcessInfo:
        item = self._live(subject, process_id)
        if item is None:
            return (await self._record(subject, process_id)).public()
        if item.task is not None and not item.task.done():
            item.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await item.task
        return item.info

    async def wait(self, subject: Subject, process_id: str, pattern: str | None,
                   timeout_s: float | None) -> WaitResult:
        item = self._live(subject, process_id)
        if item is None:
            info = (await self._record(subject, process_id)).public()
            return WaitResult(matched=False, exited=True, timed_out=False, process=info,
                              recent=LOST)
        regex = compile_pattern(pattern) if pattern else None  # RE2: linear time
        deadline = time.monotonic() + min(timeout_s or WAIT_MAX_S, WAIT_MAX_S)
        while True:
            text = item.transcript()
            if regex is not None:
                for line in text.splitlines():
                    if regex.search(line[:4096]):
                        return WaitResult(matched=True, line=line[:4096], exited=False,
                                          timed_out=False, process=item.info,
                                          recent=text[-4096:])
            if item.done.is_set():
                return WaitResult(matched=False, exited=True, timed_out=False,
                                  process=item.info, recent=text[-4096:])
            left = deadline - time.monotonic()
            if left <= 0:
                return WaitResult(matched=False, exited=False, timed_out=True,
                                  process=item.info, recent=text[-4096:])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(item.done.wait(), min(left, 0.2))

    async def end_session(self, session_id: str) -> None:
        for item in list(self._items.values()):
            if item.session == session_id and item.task is not None:
                item.task.cancel()

    async def close(self) -> None:
        """Server shutdown: running sub-agents end `interrupted` (recorded)."""
        self._closing = True
        tasks = [i.task for i in self._items.values() if i.task is not None
                 and not i.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
