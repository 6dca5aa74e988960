"""Checkpoints of agent turns: a snapshot of the session before a turn's first file change.

Why: agents make mistakes with files, and a user wants to rewind what one turn did. Before
the first call of a turn that may change the session's files, the turn snapshots the session
as ``turn-<turn id>`` (the snapshot service: audited ``snapshot.create``, counted in the
tenant's quota); restoring that snapshot undoes the turn's file changes. The last
``KEEP`` turn snapshots of a session are kept, older ones deleted (``snapshot.delete``).

Which calls may change files (decided from the tool, before it runs, so the snapshot is
never late): anything that runs code with the session's files mounted (``group:exec``:
``code_exec``, ``terminal``; user tools; MCP tools; the CAD tools, which write models and
renders), ``edit_file``, ``filesystem`` with ``write``/``delete``/``move``, and
``spawn_agent`` (its sub-agent may do any of these; sub-agents take no snapshots of their
own, so the user's turn holds one). Reading tools, web, ssh (no session files), memory and
notes (not files) do not count. Nor does a call the policy denies outright (asked first,
as the tool list is: it would change nothing, and would leave an audited snapshot behind);
a call that needs an approval counts.

A snapshot that fails (quota, a busy session) does not stop the turn: it goes on without a
checkpoint and says so in a ``notice`` event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runtime.agent.deps import AgentDeps
from runtime.errors import NaviError
from runtime.events import Notice
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.tools import ToolContext
from runtime.workspace.snapshots import Snapshot

log = get_logger(__name__)

KEEP = 10
PREFIX = "turn-"
CHANGING_GROUPS = frozenset({"group:exec", "group:cad", "group:user_tools", "group:mcp"})
CHANGING_TOOLS = frozenset({"edit_file", "spawn_agent"})
CHANGING_FS_ACTIONS = frozenset({"write", "delete", "move"})


class SnapshotService(Protocol):
    """What the turn needs of the audited snapshot service (``runtime.sessions.snapshots``)."""

    async def create(self, subject: Subject, name: str) -> Snapshot: ...

    async def list(self, subject: Subject) -> Sequence[Snapshot]: ...

    async def delete(self, subject: Subject, snapshot_id: str) -> None: ...


def changes_files(tool: str, group: str | None, args: Any) -> bool:
    """May this call change the session's files (see the module docstring)?"""
    if tool in CHANGING_TOOLS or group in CHANGING_GROUPS:
        return True
    if tool == "filesystem":
        action = args.get("action") if isinstance(args, dict) else None
        return action in CHANGING_FS_ACTIONS
    return False


def snapshot_name(turn_id: str) -> str:
    return PREFIX + turn_id


async def denied_outright(services: AgentDeps, subject: Subject, tool: str, args: Any) -> bool:
    """Would the policy deny this call whatever happens (so it changes nothing)? When that
    cannot be told here (an unknown tool, arguments the tool cannot describe), no."""
    if not isinstance(args, dict):
        return False
    try:
        found = await services.tools.registry.lookup(tool, subject)
        action = found.action(args, ToolContext(subject=subject))
    except (NaviError, ValueError, TypeError, KeyError):
        return False
    return services.policy.decide(subject, action).verdict == "deny"


class TurnSnapshots:
    """One turn's checkpoint: taken once, before the first call that may change files."""

    def __init__(self, service: SnapshotService, services: AgentDeps,
                 subject: Callable[[], Subject], turn_id: str, emit: Callable[[Notice], None],
                 *, keep: int = KEEP) -> None:
        self.service = service
        self.services = services
        self.subject = subject  # the turn's current subject (a profile switch changes it)
        self.turn_id = turn_id
        self.emit = emit
        self.keep = keep
        self.attempted = False
        self.taken = False

    async def before_call(self, tool: str, group: str | None, args: Any) -> None:
        if self.attempted or not changes_files(tool, group, args):
            return
        subject = self.subject()
        if await denied_outright(self.services, subject, tool, args):
            return
        self.attempted = True
        try:
            await self.service.create(subject, snapshot_name(self.turn_id))
            self.taken = True
            await self._prune(subject)
        except NaviError as exc:
            log.warning("turn_snapshot_failed", turn=self.turn_id, code=exc.code,
                        message=exc.message)
            self.emit(Notice(turn_id=self.turn_id, message=(
                f"No checkpoint of this turn's file changes ({exc.code}): they cannot be "
                "undone from a snapshot.")))

    async def _prune(self, subject: Subject) -> None:
        """Delete the session's turn snapshots beyond the newest ``keep``."""
        turns = [s for s in await self.service.list(subject)
                 if (s.name or "").startswith(PREFIX)]
        turns.sort(key=lambda s: (s.created_at, s.id))
        for old in turns[:max(0, len(turns) - self.keep)]:
            await self.service.delete(subject, old.id)
