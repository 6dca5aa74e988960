"""Sub-agents in the background (`spawn_agent {background: true}`): listed as processes.

The sub-agent's turn runs as a task of its own; the parent's turn goes on (and may end) while
it works. It is one of the session's background processes with `kind: "agent"` and an id
`a_...`: `process_list`/`GET .../processes` list it, `process_output` reads its transcript so
far, `process_stop` cancels it, `process_wait` waits for its answer (or a line matching a
pattern). At most `limits.processes.max_agents_per_session` run at once per session. Kept in
memory: a server restart ends them with the turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from dataclasses import dataclass, field

from runtime.agent.loop import Turn
from runtime.agent.subagent import EphemeralHistory, SubAgents, run_nested
from runtime.errors import NotFound, QuotaExceeded
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.processes.models import ProcessInfo, ProcessOutput, WaitResult

log = get_logger(__name__)

PREFIX = "a_"
MAX_PATTERN = 1000
WAIT_MAX_S = 600.0


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
        turn, history = await self.subagents.build(parent, task, profile, parent_turn,
                                                   parent_call)
        agent_id = PREFIX + secrets.token_hex(8)
        item = Running(ProcessInfo(id=agent_id, name=f"agent {turn.s.profile.name}",
                                   command=task[:200], cwd="/workspace", state="running",
                                   started_at=time.time(), kind="agent"),
                       parent.tenant, parent.session, history)
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
            reason, code = "stopped", 130
        except Exception as exc:  # a bug must not leave the record running
            log.error("background_agent_failed", agent=item.info.id, exc_info=exc)
            code = 1
        item.info = item.info.model_copy(update={
            "state": "exited", "exit_code": code, "reason": reason, "ended_at": time.time()})
        item.done.set()

    def _find(self, subject: Subject, process_id: str) -> Running:
        item = self._items.get(process_id)
        if item is None or item.tenant != subject.tenant or item.session != subject.session:
            raise NotFound(f"no process {process_id!r} in this session")
        return item

    async def list(self, subject: Subject) -> list[ProcessInfo]:
        return [i.info for i in self._items.values()
                if i.tenant == subject.tenant and i.session == subject.session]

    async def get(self, subject: Subject, process_id: str) -> ProcessInfo:
        return self._find(subject, process_id).info

    async def output(self, subject: Subject, process_id: str, since: int) -> ProcessOutput:
        item = self._find(subject, process_id)
        data = item.transcript().encode()
        start = min(max(0, since), len(data))
        return ProcessOutput(output=data[start:].decode(errors="replace"), next=len(data),
                             first=0, state=item.info.state, exit_code=item.info.exit_code)

    async def stop(self, subject: Subject, process_id: str) -> ProcessInfo:
        item = self._find(subject, process_id)
        if item.task is not None and not item.task.done():
            item.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await item.task
        return item.info

    async def wait(self, subject: Subject, process_id: str, pattern: str | None,
                   timeout_s: float | None) -> WaitResult:
        item = self._find(subject, process_id)
        regex = re.compile(pattern[:MAX_PATTERN]) if pattern else None
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
        for item in self._items.values():
            if item.task is not None and not item.task.done():
                item.task.cancel()
